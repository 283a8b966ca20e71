"""Compliance over time, from the maintenance history's measure rows: since when, which trend, what changed.

Measure rows carry each objective's value: rows of schema version 2 in ``objective_<name>_value``
(beside the target, met and source they were judged with), rows of every version in the table's
state columns (``small_files_after``, ``versions_since_checkpoint_after``, ``dv_share_after``:
``ObjectiveSpec.history_column``). From them:

* :func:`breach_start`: the breached-since rule (below) over one table's measurements of one
  objective, judged against a target; :func:`breached_since`: the rule per table and objective of
  any rows, as an Arrow table (each table's newest judgement gives today's target, or the caller's
  ``targets`` do, for a history written before objectives existed).
* :class:`ComplianceHistory`: one table's view for a measurement taken now: the breach start of an
  objective breached now, the trend of each value (to predict a breach before the next run), when
  the next run is expected, and the last successful vacuum; :meth:`ComplianceHistory.incarnation`
  keeps only what the history says of the table the URI holds now (its ``metaData`` id).
* :func:`compliance_changes`: what an alert says after a run: new breaches, still-open ones and
  resolved ones, from the history alone (no state kept anywhere else).

**The breached-since rule.** It is judged against **today's target**, whatever targets the rows
were judged with then (an objective set today, on months of measurements, is breached since the
value first stayed over it; a target changed later counts as it is now). For a count or a share:
take the table's measurements of the value (``measure`` rows with status ``done``), oldest first by
``started_at``. If the newest known value is at most the target, it is not breached. Otherwise walk
back while the values are over the target: ``breached_since`` is the ``started_at`` of the oldest
measurement of that unbroken run. A value at most the target breaks the run; so does a row of
another table id (the table was re-created under the same URI: what was measured before was another
table); rows whose value is unknown neither break nor extend it. A run that reaches the oldest row
given starts there: the answer is only as old as the rows passed in. For ``max_days_since_vacuum``
the answer is a definition: the target's length after the last successful vacuum (or the table's
creation when it was never vacuumed): :func:`deltalog.maintenance.objectives.vacuum_breached_since`.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.maintenance.objectives import OBJECTIVE_NAMES, ObjectiveState, TableCompliance, objective_spec
from deltalog.storage.filesystem import canonical_uri

__all__ = [
    "BREACHED_SINCE_SCHEMA",
    "COMPLIANCE_HISTORY_DAYS",
    "DEFAULT_RUN_INTERVAL_HOURS",
    "TREND_WINDOW_DAYS",
    "BreachChange",
    "BreachReport",
    "ComplianceHistory",
    "Observation",
    "SeriesPoint",
    "breach_start",
    "breached_since",
    "compliance_changes",
    "measured_value",
    "next_run_hours",
]

_TS = pa.timestamp("us", tz="UTC")
#: What :func:`breached_since` returns, one row per table and objective judged in the rows.
BREACHED_SINCE_SCHEMA = pa.schema(
    [
        pa.field("table_uri", pa.string(), False),
        pa.field("objective", pa.string(), False),
        pa.field("met", pa.bool_(), True),
        pa.field("breached_since", _TS, True),
        pa.field("measured_at", _TS, False),
    ]
)
#: How much of the history a judgement reads for its breach starts (``deltalog objectives``, a fleet run, the
#: alert, the fleet view's compliance column): a breach older than this shows as starting this many days ago.
COMPLIANCE_HISTORY_DAYS = 90
#: How far back the trend of a value is read (days before the newest measurement).
TREND_WINDOW_DAYS = 7.0
#: When the history cannot tell how often the fleet runs: daily.
DEFAULT_RUN_INTERVAL_HOURS = 24.0
#: Statuses of a ``vacuum`` row that count as a successful vacuum (it ran, or found nothing to delete).
_VACUUMED = ("done", "nothing_due")


def _utc(value: Any) -> dt.datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def _judged(rows: pa.Table) -> pa.Table:
    """The measure rows that judged objectives (``done``), when the rows say which they are."""
    mask = None
    if "operation" in rows.column_names:
        mask = pc.equal(rows.column("operation"), "measure")
    if "status" in rows.column_names:
        done = pc.equal(rows.column("status"), "done")
        mask = done if mask is None else pc.and_(mask, done)
    return rows if mask is None else rows.filter(pc.fill_null(mask, False))


#: One measurement of an objective's value: ``(started_at, value, table_id)``; the value None when unknown.
Observation = tuple[dt.datetime, float | None, str | None]


def _number(value: Any) -> float | None:
    """A measured value as a number, None unless finite (a NaN written by anyone is an unknown value)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def measured_value(row: Mapping[str, Any], name: str) -> float | None:
    """The value of objective ``name`` a history row carries: ``objective_<name>_value`` (schema version 2),
    else the state column that holds it in rows of every version (``ObjectiveSpec.history_column``)."""
    value = _number(row.get(f"objective_{name}_value"))
    column = objective_spec(name).history_column
    if value is None and column is not None:
        value = _number(row.get(column))
    return value


def breach_start(observations: Sequence[Observation], target: float) -> tuple[bool | None, dt.datetime | None]:
    """``(met, breached_since)`` of one objective of one table, judged against ``target`` (today's), over its
    measurements oldest first (the rule of the module docstring; the table is the one of the newest row
    with a table id).

    ``met``: the newest known value is at most the target (None: no value is known). ``breached_since``:
    None unless ``met`` is False.
    """
    current = next((tid for _, _, tid in reversed(observations) if tid is not None), None)
    met: bool | None = None
    since: dt.datetime | None = None
    for at, value, tid in reversed(observations):
        if tid is not None and tid != current:
            break  # measured before the table was re-created under this URI
        if value is None:
            continue
        if met is None:  # the newest known value decides the state
            met = value <= target
        if value <= target:
            break
        since = at
    return met, since if met is False else None


def _vacuum_since(at: dt.datetime, days: float | None, target: float) -> dt.datetime | None:
    """A measurement's days since the last vacuum, ``days`` at ``at``: breached since the target's length
    after that vacuum (None when the value is unknown or within the target)."""
    if days is None or days <= target:
        return None
    return at - dt.timedelta(days=days) + dt.timedelta(days=target)


def _sorted_rows(rows: pa.Table) -> list[dict[str, Any]]:
    data = rows.to_pylist() if rows.num_rows else []
    data.sort(key=lambda r: (_utc(r["started_at"]), str(r.get("row_id") or "")))
    return data


def breached_since(rows: pa.Table, targets: Mapping[str, float] | None = None) -> pa.Table:
    """Per table and objective of ``rows``: the state judged against today's target, and when its breach began.

    ``rows``: the history's rows (or any table with ``table_uri`` and ``started_at`` columns and the
    value columns: ``objective_<name>_value``/``_target`` of schema version 2, the state columns of
    every version (``small_files_after``, ...), ``table_id``, ``operation``, ``status``), in any order.
    Today's target of an objective is ``targets[name]`` when given (for a history written before
    objectives existed), else the target of the table's newest judging row (``measure``, ``done``); an
    objective without one is not in the result. ``max_days_since_vacuum`` is judged on the newest
    judging row's value, or, when that row has none (schema version 1), on the newest successful
    ``vacuum`` row before it (of the same table id). Returns :data:`BREACHED_SINCE_SCHEMA`: ``table_uri``, ``objective``, ``met``
    (null when no value is known), ``breached_since`` (null unless breached; the rule of the module
    docstring) and ``measured_at`` (the newest judging row's ``started_at``).
    """
    for name in targets or {}:
        objective_spec(name)  # an unknown objective is refused, naming the known ones
    judged = _judged(rows)
    vacuums: dict[str, list[tuple[dt.datetime, dt.datetime, str | None]]] = {}
    if "operation" in rows.column_names and rows.num_rows:
        mask = pc.and_(
            pc.equal(rows.column("operation"), "vacuum"), pc.is_in(rows.column("status"), pa.array(_VACUUMED))
        )
        for r in rows.filter(pc.fill_null(mask, False)).to_pylist():
            ended = r.get("ended_at") or r["started_at"]
            vacuums.setdefault(r["table_uri"], []).append((_utc(r["started_at"]), _utc(ended), r.get("table_id")))
    by_table: dict[str, list[dict[str, Any]]] = {}
    for r in _sorted_rows(judged):
        by_table.setdefault(r["table_uri"], []).append(r)
    out: dict[str, list[Any]] = {f.name: [] for f in BREACHED_SINCE_SCHEMA}
    for uri, seq in by_table.items():
        newest = seq[-1]
        measured_at = _utc(newest["started_at"])
        for name in OBJECTIVE_NAMES:
            given = targets is not None and name in targets
            target = _number(targets[name]) if targets is not None and given else None
            if not given:
                target = _number(newest.get(f"objective_{name}_target"))
            if target is None:
                continue
            if objective_spec(name).history_column is None:
                met, since = _vacuum_state(newest, vacuums.get(uri, []), name, target)
            else:
                observations = [(_utc(r["started_at"]), measured_value(r, name), r.get("table_id")) for r in seq]
                met, since = breach_start(observations, target)
            out["table_uri"].append(uri)
            out["objective"].append(name)
            out["met"].append(met)
            out["breached_since"].append(since)
            out["measured_at"].append(measured_at)
    return pa.table(out, schema=BREACHED_SINCE_SCHEMA).sort_by([("table_uri", "ascending"), ("objective", "ascending")])


def _vacuum_state(
    newest: Mapping[str, Any],
    vacuums: Sequence[tuple[dt.datetime, dt.datetime, str | None]],
    name: str,
    target: float,
) -> tuple[bool | None, dt.datetime | None]:
    """``max_days_since_vacuum`` at the newest judging row: from its value, or (a row without it: schema
    version 1) from the newest successful vacuum row of the same table before it."""
    at = _utc(newest["started_at"])
    days = _number(newest.get(f"objective_{name}_value"))
    if days is None:
        tid = newest.get("table_id")
        ends = [end for start, end, vid in vacuums if start <= at and (tid is None or vid in (None, tid))]
        if ends:
            days = max(0.0, (at - max(ends)).total_seconds() / 86_400)
    if days is None:
        return None, None
    return days <= target, _vacuum_since(at, days, target)


def next_run_hours(rows: pa.Table, default: float = DEFAULT_RUN_INTERVAL_HOURS) -> float:
    """Hours until the next run is expected: the median gap between the starts of the last eleven runs
    that measured tables (each run's first ``measure`` row), once there are at least three; else
    ``default`` (a day)."""
    measured = rows.filter(pc.equal(rows.column("operation"), "measure")) if "operation" in rows.column_names else rows
    if measured.num_rows == 0 or "run_id" not in measured.column_names:
        return default
    starts: dict[str, dt.datetime] = {}
    for run_id, when in zip(measured.column("run_id").to_pylist(), measured.column("started_at").to_pylist()):
        when = _utc(when)
        if run_id not in starts or when < starts[run_id]:
            starts[run_id] = when
    ordered = sorted(starts.values())[-11:]
    gaps = [(b - a).total_seconds() / 3600 for a, b in zip(ordered, ordered[1:]) if b > a]
    return statistics.median(gaps) if len(gaps) >= 2 else default


#: One judging row's view of an objective in :attr:`ComplianceHistory.series`: ``(started_at, value, met,
#: target set, table_id)``; the value is :func:`measured_value` (rows of any schema version), met and the
#: target as the row was judged then (null in rows written before objectives existed).
SeriesPoint = tuple[dt.datetime, float | None, bool | None, bool, str | None]


@dataclass(frozen=True)
class ComplianceHistory:
    """What the history knows about one table's objectives, for a measurement taken now."""

    table_uri: str
    #: Per objective: its :data:`SeriesPoint` per judging row, oldest first.
    series: Mapping[str, tuple[tuple[Any, ...], ...]] = field(default_factory=dict)
    #: The newest successful ``vacuum`` row's end (``done`` or ``nothing_due``).
    last_vacuum: dt.datetime | None = None
    next_run_hours: float = DEFAULT_RUN_INTERVAL_HOURS
    #: ``(started_at, table_id)`` of every row of the table with a table id, oldest first: where a table
    #: re-created under the same URI begins (:meth:`incarnation`).
    table_ids: tuple[tuple[dt.datetime, str], ...] = ()
    #: ``(started_at, ended_at, table_id)`` of every successful ``vacuum`` row, oldest first.
    vacuums: tuple[tuple[dt.datetime, dt.datetime, str | None], ...] = ()

    @classmethod
    def for_tables(
        cls, rows: pa.Table, tables: Iterable[str] | None = None, *, next_run: float | None = None
    ) -> dict[str, ComplianceHistory]:
        """Each table's view (by canonical URI) from the history's rows; ``next_run``: hours until the
        next run when the caller knows them, else :func:`next_run_hours` of the rows."""
        hours = next_run if next_run is not None else next_run_hours(rows)
        wanted = None if tables is None else {canonical_uri(t) for t in tables}
        if wanted is not None and rows.num_rows:
            rows = rows.filter(pc.is_in(rows.column("table_uri"), value_set=pa.array(sorted(wanted), pa.string())))
        series: dict[str, dict[str, list[SeriesPoint]]] = {}
        ids: dict[str, list[tuple[dt.datetime, str]]] = {}
        vacuums: dict[str, list[tuple[dt.datetime, dt.datetime, str | None]]] = {}
        for r in _sorted_rows(rows):
            uri, at, tid = r["table_uri"], _utc(r["started_at"]), r.get("table_id")
            if tid is not None:
                ids.setdefault(uri, []).append((at, tid))
            if r["operation"] == "vacuum" and r["status"] in _VACUUMED:
                vacuums.setdefault(uri, []).append((at, _utc(r.get("ended_at") or r["started_at"]), tid))
            if r["operation"] != "measure" or r["status"] != "done":
                continue
            for name in OBJECTIVE_NAMES:
                target = r.get(f"objective_{name}_target")
                met = r.get(f"objective_{name}_met")
                series.setdefault(uri, {}).setdefault(name, []).append(
                    (at, measured_value(r, name), met, target is not None, tid)
                )
        uris = set(series) | set(vacuums) | (wanted or set())
        return {
            uri: cls(
                uri,
                {name: tuple(seq) for name, seq in series.get(uri, {}).items()},
                max((end for _, end, _ in vacuums.get(uri, [])), default=None),
                hours,
                tuple(ids.get(uri, ())),
                tuple(vacuums.get(uri, ())),
            )
            for uri in uris
        }

    def incarnation(self, table_id: str | None) -> ComplianceHistory:
        """This view without what the history says of another table at the same URI: rows up to the newest
        one with another table id (the table was re-created after it) are left out, and a vacuum of another
        table is no vacuum of this one. ``table_id``: the table's ``metaData`` id now (None: all rows)."""
        if table_id is None:
            return self
        boundary = max((at for at, tid in self.table_ids if tid != table_id), default=None)
        if boundary is None:
            return self
        vacuums = tuple(v for v in self.vacuums if v[0] > boundary and v[2] in (None, table_id))
        return replace(
            self,
            series={name: tuple(p for p in seq if p[0] > boundary) for name, seq in self.series.items()},
            last_vacuum=max((end for _, end, _ in vacuums), default=None) if self.vacuums else self.last_vacuum,
            table_ids=tuple(x for x in self.table_ids if x[0] > boundary),
            vacuums=vacuums,
        )

    def observations(self, name: str) -> list[Observation]:
        """The objective's measurements, oldest first: ``(started_at, value, table_id)``."""
        return [(p[0], p[1], p[4] if len(p) > 4 else None) for p in self.series.get(name, ())]

    def since(self, name: str, target: float) -> dt.datetime | None:
        """When the objective became continuously breached against ``target`` (today's), by the history's
        measurements (None: within the target at the newest measurement, or never measured). Days since
        the last vacuum: the target's length after the vacuum the newest measurement counted from."""
        observations = self.observations(name)
        if objective_spec(name).history_column is None:
            newest = next(((at, v) for at, v, _ in reversed(observations) if v is not None), None)
            return None if newest is None else _vacuum_since(newest[0], newest[1], target)
        return breach_start(observations, target)[1]

    def slope_per_day(self, name: str, now: dt.datetime, value: float | None) -> float | None:
        """How fast the value grew over the trend window: (now's value - the oldest value in the window)
        per day; None without an older value at least an hour back."""
        if value is None:
            return None
        seq = [(when, v) for when, v, _ in self.observations(name) if v is not None]
        window = [(when, v) for when, v in seq if (now - when).total_seconds() <= TREND_WINDOW_DAYS * 86_400]
        if not window:
            return None
        when, old = window[0]
        days = (now - when).total_seconds() / 86_400
        if days < 1 / 24:
            return None
        return (float(value) - float(old)) / days

    def annotate(self, states: Sequence[ObjectiveState], now: dt.datetime) -> tuple[ObjectiveState, ...]:
        """``states`` measured now, with their breach start from the history (breached ones) and their
        prediction for the next run (met ones): ``at_risk`` when the value expected then passes the target.

        The value expected at the next run (``next_run_hours`` from now) follows the trend of
        :meth:`slope_per_day`; days since the last vacuum grow by one a day whatever the history says.
        """
        out = []
        ahead_days = self.next_run_hours / 24
        for s in states:
            if s.breached:
                # A start the measurement knew itself (days since a vacuum: by definition) stays.
                out.append(replace(s, breached_since=s.breached_since or self.since(s.name, s.target)))
                continue
            if s.met is not True or s.value is None:
                out.append(s)
                continue
            if s.name == "max_days_since_vacuum":
                predicted: float | None = float(s.value) + ahead_days
            else:
                slope = self.slope_per_day(s.name, now, s.value)
                predicted = None if slope is None or slope <= 0 else float(s.value) + slope * ahead_days
            if objective_spec(s.name).kind == "share" and predicted is not None:
                predicted = min(predicted, 1.0)
            at_risk = predicted is not None and predicted > s.target
            out.append(replace(s, at_risk=at_risk, predicted=None if predicted is None else round(predicted, 4)))
        return tuple(out)


# --- what an alert says ----------------------------------------------------------------------


@dataclass(frozen=True)
class BreachChange:
    """One objective of one table in an alert: its state now and since when it is breached."""

    table_uri: str
    objective: str
    describe: str
    breached_since: dt.datetime | None = None

    def summary_line(self) -> str:
        """``table: objective description``."""
        return f"{self.table_uri}: {self.describe}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "table_uri": self.table_uri,
            "objective": self.objective,
            "describe": self.describe,
            "breached_since": None if self.breached_since is None else self.breached_since.isoformat(),
        }


@dataclass(frozen=True)
class BreachReport:
    """What one run's alert lists: objectives newly breached, still breached, and resolved since the last run."""

    new: tuple[BreachChange, ...] = ()
    still_open: tuple[BreachChange, ...] = ()
    resolved: tuple[BreachChange, ...] = ()
    #: Tables that could not be judged (unreadable): ``(uri, error)``.
    unreadable: tuple[tuple[str, str], ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.new or self.still_open or self.resolved or self.unreadable)

    def tables(self) -> list[str]:
        """Every table the report names, in order of first mention."""
        seen: dict[str, None] = {}
        for c in (*self.new, *self.still_open, *self.resolved):
            seen.setdefault(c.table_uri, None)
        for uri, _ in self.unreadable:
            seen.setdefault(uri, None)
        return list(seen)

    def summary_line(self) -> str:
        """``2 new breaches, 1 still open, 3 resolved``."""
        parts = [
            f"{len(self.new)} new breach{'es' if len(self.new) != 1 else ''}",
            f"{len(self.still_open)} still open",
            f"{len(self.resolved)} resolved",
        ]
        if self.unreadable:
            parts.append(f"{len(self.unreadable)} unreadable")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "new": [c.to_dict() for c in self.new],
            "still_open": [c.to_dict() for c in self.still_open],
            "resolved": [c.to_dict() for c in self.resolved],
            "unreadable": [{"table_uri": u, "error": e} for u, e in self.unreadable],
            "tables": self.tables(),
        }


def compliance_changes(rows: pa.Table, closing: Sequence[TableCompliance], run_id: str) -> BreachReport:
    """The alert of the run ``run_id``: its closing judgement (``closing``) against the history.

    ``rows``: the history's rows, this run's own ``measure`` rows (taken before its
    maintenance) included, ``closing`` not yet among them. Per table and objective, the
    state before is the one of its newest judging row from an earlier run:

    * **new**: breached now, not breached before (met, unknown, not set, or never measured);
    * **still open**: breached now and before;
    * **resolved**: met now, and breached before or at a measurement of this run (a breach this
      run found and fixed is reported resolved).

    Only the history is read: a run that alerts again with nothing changed says "still open"
    once per run, never per table or per objective, and never again "new".
    """
    judged = _judged(rows)
    before: dict[tuple[str, str], bool | None] = {}
    this_run: dict[tuple[str, str], bool] = {}
    if judged.num_rows:
        data = judged.to_pylist()
        data.sort(key=lambda r: (r["started_at"], r["row_id"]))
        for r in data:
            for name in OBJECTIVE_NAMES:
                met = r.get(f"objective_{name}_met")
                target = r.get(f"objective_{name}_target")
                key = (r["table_uri"], name)
                if r["run_id"] == run_id:
                    if met is False:
                        this_run[key] = True
                    continue
                if target is None:
                    before[key] = None
                elif met is not None:
                    before[key] = met
    history_rows = judged
    new: list[BreachChange] = []
    still: list[BreachChange] = []
    resolved: list[BreachChange] = []
    unreadable: list[tuple[str, str]] = []
    for table in closing:
        uri = canonical_uri(table.table_uri)
        if table.error is not None:
            unreadable.append((uri, table.error))
            continue
        view = ComplianceHistory.for_tables(history_rows, [uri]).get(uri) if history_rows.num_rows else None
        for s in table.objectives:
            key = (uri, s.name)
            was_breached = before.get(key) is False
            if s.breached:
                since = s.breached_since or (view.since(s.name, s.target) if view else None)
                change = BreachChange(uri, s.name, s.describe(), since)
                (still if was_breached else new).append(change)
            elif s.met and (was_breached or this_run.get(key)):
                since = view.since(s.name, s.target) if view else None
                resolved.append(BreachChange(uri, s.name, s.describe() + " (resolved)", since))
    return BreachReport(tuple(new), tuple(still), tuple(resolved), tuple(unreadable))
