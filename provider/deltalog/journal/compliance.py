"""Compliance over time, from the maintenance history's measure rows: since when, which trend, what changed.

Measure rows (schema version 2) carry each objective's target, value, met and source
(``objective_<name>_*``). From them:

* :func:`breached_since`: per table and objective, when it became continuously breached
  (the rule below), as an Arrow table: what ``deltalog objectives``, the alerts and the
  fleet view use, on raw rows or on any aggregate with the same columns.
* :class:`ComplianceHistory`: one table's view for a measurement: the breach start of an
  objective breached now, the trend of each value (to predict a breach before the next
  run), when the next run is expected, and the last successful vacuum.
* :func:`compliance_changes`: what an alert says after a run: new breaches, still-open
  ones and resolved ones, from the history alone (no state kept anywhere else).

**The breached-since rule.** For one table and objective, take its rows that judged the
objective (``objective_<name>_met`` not null; with ``operation``/``status`` columns only
``measure`` rows with status ``done``), oldest first by ``started_at``. If the newest of
them is met, the objective is not breached (``breached_since`` null). If it is breached,
walk back while the rows are breached: ``breached_since`` is the ``started_at`` of the
oldest row of that unbroken run. The run is broken by a met row and by a row where the
objective was not set (``objective_<name>_target`` null, when that column is given: an
objective set again later starts a new breach); rows whose value was unknown (target set,
``met`` null) neither break nor extend it. A run that reaches the oldest row given starts
there: the answer is only as old as the rows passed in.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
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
    "breached_since",
    "compliance_changes",
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


def _runs(rows: pa.Table, name: str) -> Iterator[tuple[str, list[tuple[dt.datetime, bool | None, bool]]]]:
    """Per table: ``(started_at, met, target set)`` of the rows that mention the objective, oldest first."""
    met_col = f"objective_{name}_met"
    if met_col not in rows.column_names:
        return
    target_col = f"objective_{name}_target"
    has_target = target_col in rows.column_names
    columns = ["table_uri", "started_at", met_col] + ([target_col] if has_target else [])
    data = rows.select(columns).to_pydict()
    by_table: dict[str, list[tuple[dt.datetime, bool | None, bool]]] = {}
    for i, uri in enumerate(data["table_uri"]):
        met = data[met_col][i]
        target_set = data[target_col][i] is not None if has_target else met is not None
        if met is None and not target_set:
            # not judged and (as far as the columns tell) not set: a break only where the target says so
            if has_target:
                by_table.setdefault(uri, []).append((_utc(data["started_at"][i]), None, False))
            continue
        by_table.setdefault(uri, []).append((_utc(data["started_at"][i]), met, True))
    for uri, seq in by_table.items():
        seq.sort(key=lambda r: r[0])
        yield uri, seq


def _since(seq: Sequence[tuple[dt.datetime, bool | None, bool]]) -> tuple[bool | None, dt.datetime | None, dt.datetime]:
    """(latest known met, breached_since, when that was measured) of one table's rows for one objective."""
    known = [r for r in seq if r[1] is not None]
    if not known:
        return None, None, seq[-1][0]
    latest_at, latest_met, _ = known[-1]
    if latest_met:
        return True, None, latest_at
    start = latest_at
    for when, met, target_set in reversed(seq):
        if when > latest_at:
            continue
        if not target_set or met is True:
            break
        if met is False:
            start = when
    return False, start, latest_at


def breached_since(rows: pa.Table) -> pa.Table:
    """Per table and objective judged in ``rows``: the latest known state and when its breach began.

    ``rows``: the history's rows (or any table with ``table_uri``, ``started_at`` and
    ``objective_<name>_met`` columns, ``objective_<name>_target`` optional), in any order.
    Returns :data:`BREACHED_SINCE_SCHEMA`: ``table_uri``, ``objective``, ``met`` (the newest
    known state, null when never known), ``breached_since`` (null unless breached; the rule of
    the module docstring) and ``measured_at`` (the newest row's ``started_at``).
    """
    judged = _judged(rows)
    out: dict[str, list[Any]] = {f.name: [] for f in BREACHED_SINCE_SCHEMA}
    for name in OBJECTIVE_NAMES:
        for uri, seq in _runs(judged, name):
            if not any(target_set for _, _, target_set in seq):
                continue
            met, since, at = _since(seq)
            out["table_uri"].append(uri)
            out["objective"].append(name)
            out["met"].append(met)
            out["breached_since"].append(since)
            out["measured_at"].append(at)
    return pa.table(out, schema=BREACHED_SINCE_SCHEMA).sort_by([("table_uri", "ascending"), ("objective", "ascending")])


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


@dataclass(frozen=True)
class ComplianceHistory:
    """What the history knows about one table's objectives, for a measurement taken now."""

    table_uri: str
    #: Per objective: ``(started_at, value, met, target set)`` of the judged rows, oldest first.
    series: Mapping[str, tuple[tuple[dt.datetime, float | None, bool | None, bool], ...]] = field(default_factory=dict)
    #: The newest successful ``vacuum`` row's end (``done`` or ``nothing_due``).
    last_vacuum: dt.datetime | None = None
    next_run_hours: float = DEFAULT_RUN_INTERVAL_HOURS

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
        data = rows.to_pylist() if rows.num_rows else []
        data.sort(key=lambda r: (r["started_at"], r["row_id"]))
        series: dict[str, dict[str, list[tuple[dt.datetime, float | None, bool | None, bool]]]] = {}
        vacuums: dict[str, dt.datetime] = {}
        for r in data:
            uri = r["table_uri"]
            if r["operation"] == "vacuum" and r["status"] in _VACUUMED:
                vacuums[uri] = max(vacuums.get(uri, _utc(r["ended_at"])), _utc(r["ended_at"]))
            if r["operation"] != "measure" or r["status"] != "done":
                continue
            for name in OBJECTIVE_NAMES:
                target = r.get(f"objective_{name}_target")
                met = r.get(f"objective_{name}_met")
                value = r.get(f"objective_{name}_value")
                series.setdefault(uri, {}).setdefault(name, []).append(
                    (_utc(r["started_at"]), value, met, target is not None)
                )
        uris = set(series) | set(vacuums) | (wanted or set())
        return {
            uri: cls(
                uri,
                {name: tuple(seq) for name, seq in series.get(uri, {}).items()},
                vacuums.get(uri),
                hours,
            )
            for uri in uris
        }

    def since(self, name: str) -> dt.datetime | None:
        """When the objective became continuously breached, by the history (None: not breached at its
        newest judgement, or never judged)."""
        seq = self.series.get(name)
        if not seq or not any(s[3] for s in seq):
            return None
        met, since, _ = _since([(when, met, target_set) for when, _, met, target_set in seq])
        return since if met is False else None

    def slope_per_day(self, name: str, now: dt.datetime, value: float | None) -> float | None:
        """How fast the value grew over the trend window: (now's value - the oldest value in the window)
        per day; None without an older value at least an hour back."""
        if value is None:
            return None
        seq = [(when, v) for when, v, _, _ in self.series.get(name, ()) if v is not None]
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
                history_since = self.since(s.name)
                out.append(replace(s, breached_since=history_since))
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
                since = s.breached_since or (view.since(s.name) if view else None)
                change = BreachChange(uri, s.name, s.describe(), since)
                (still if was_breached else new).append(change)
            elif s.met and (was_breached or this_run.get(key)):
                since = view.since(s.name) if view else None
                resolved.append(BreachChange(uri, s.name, s.describe() + " (resolved)", since))
    return BreachReport(tuple(new), tuple(still), tuple(resolved), tuple(unreadable))
