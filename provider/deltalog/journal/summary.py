"""Figures of tables and days, from rollups: what the fleet view lists, sorts, filters and charts.

A *figure* is one aggregate SQL expression over rollup rows (:mod:`deltalog.journal.rollup`),
declared once in :data:`FIGURES` and computed by whatever key a reader groups by: per table
(:func:`table_summaries`: one row per table, the fleet's listing) or per day
(:func:`day_figures`: one row per day, the charts). Adding a figure (the number of
measurements that breached an objective, say) is one entry here; it then exists as a
column of both, in the JSON and for sorting.

Per table there is more than figures: the newest row of each operation, the latest
measurement's verdict (what is still due, why) and the open problems (an operation whose
newest row deferred, refused or failed). These are decided per table (at most a few
thousand), never per history row.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.journal.read import reason_lines, still_due
from deltalog.journal.rollup import BREACH_RUNS, MEASURED_OBJECTIVES, STATE, breach_run, duckdb_connection
from deltalog.journal.schema import FLEET_RUN
from deltalog.maintenance.objectives import OBJECTIVE_NAMES, objective_spec

#: Operations whose ``files_read``/``bytes_read`` are files rewritten (compacted).
REWRITING = ("compaction", "purge")
#: Characters of each line of "why" kept per table.
WHY_CHARS = 300
#: A table's status, worst first (the fleet's sort order by status).
TABLE_STATUSES = ("failed", "refused", "deferred", "due", "ok")
#: A table's compliance with its service-level objectives at its newest measurement, worst first:
#: an objective breached, all met but one predicted to breach before the next run, all met, none set.
COMPLIANCE_STATES = ("breached", "at_risk", "met", "none")


@dataclass(frozen=True)
class Figure:
    """An aggregate over rollup rows (SQL), named: a column per table and per day."""

    name: str
    sql: str
    #: Rollup columns beyond the measures the SQL reads (a count of tables needs ``table_uri``): without
    #: them the figure is null.
    needs: tuple[str, ...] = ()

    def summary_line(self) -> str:
        """One line: the figure's name and SQL."""
        return f"{self.name} = {self.sql}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sql": self.sql, "needs": list(self.needs)}


def _rewriting(column: str) -> str:
    ops = ", ".join(f"'{op}'" for op in REWRITING)
    return f"sum({column}) FILTER (WHERE operation IN ({ops}))"


FIGURES: tuple[Figure, ...] = (
    Figure("rows", "CAST(sum(rows) AS BIGINT)"),
    Figure("failures", "CAST(sum(n_failed) AS BIGINT)"),
    Figure("refusals", "CAST(sum(n_refused) AS BIGINT)"),
    Figure("deferrals", "CAST(sum(n_deferred) AS BIGINT)"),
    # A fleet run's own row spans the operations it ran: its wall time is not maintenance time of its own.
    Figure("duration_s", f"sum(duration_s) FILTER (WHERE operation <> '{FLEET_RUN}')"),
    Figure("cpu_s", "sum(cpu_s)"),
    Figure("cpu_rows", "CAST(sum(cpu_rows) AS BIGINT)"),
    Figure("files_compacted", _rewriting("files_read")),
    Figure("bytes_compacted", _rewriting("bytes_read")),
    Figure("files_written", "sum(files_written)"),
    Figure("bytes_written", "sum(bytes_written)"),
    Figure("files_vacuumed", "sum(files_removed) FILTER (WHERE operation = 'vacuum')"),
    Figure("bytes_reclaimed", "sum(bytes_reclaimed)"),
    Figure("log_files_removed", "sum(log_files_removed)"),
    # What compaction took off the live table (replaced bytes minus rewritten): storage saved once vacuum runs.
    Figure("bytes_compaction_saved", f"{_rewriting('bytes_removed')} - {_rewriting('bytes_written')}"),
    Figure("state", "arg_max(state, struct_pack(a := state.at, b := state.id)) FILTER (WHERE state IS NOT NULL)"),
    *(Figure(f"{c}_min", f"min({c}_min)") for c in STATE),
    *(Figure(f"{c}_max", f"max({c}_max)") for c in STATE),
    # Service-level objectives: the newest judgement (per day: the day's), each objective's values' range,
    # tables per verdict (per day: by the day's newest judgement of each table; tables counted, not rows),
    # and the fleet runs that met or missed their finishing time.
    Figure("judged", "arg_max(judged, struct_pack(a := judged.at, b := judged.id)) FILTER (WHERE judged IS NOT NULL)"),
    *(Figure(f"objective_{n}_min", f"min(objective_{n}_min)") for n in OBJECTIVE_NAMES),
    *(Figure(f"objective_{n}_max", f"max(objective_{n}_max)") for n in OBJECTIVE_NAMES),
    *(
        Figure(f"tables_{state}", f"count(DISTINCT table_uri) FILTER (WHERE judged.state = '{state}')", ("table_uri",))
        for state in COMPLIANCE_STATES[:3]
    ),
    Figure("finish_by_missed", "CAST(sum(finish_by_missed) AS BIGINT)"),
    Figure("finish_by_kept", "CAST(sum(finish_by_kept) AS BIGINT)"),
    Figure("missed", "arg_max(missed, struct_pack(a := missed.at, b := missed.id)) FILTER (WHERE missed IS NOT NULL)"),
    # The writers beside maintenance (schema version 3): files compaction left them (each run counted), bins it
    # deferred for want of a quiet moment and lost to their commits, seconds it waited; the newest measurement's
    # view of the recent log (its DML commits, and the writer commits that overlapped deltalog's rewrites).
    *(Figure(c, f"sum({c})") for c in ("files_deferred_for_writers", "bins_deferred_for_writers")),
    Figure("bins_lost_to_writers", "sum(bins_lost_to_writers)"),
    Figure("writer_wait_s", "sum(writer_wait_s)"),
    Figure(
        "writers", "arg_max(writers, struct_pack(a := writers.at, b := writers.id)) FILTER (WHERE writers IS NOT NULL)"
    ),
)

#: Per table only: its id, the newest row of each operation, the newest settings (policy) row.
_TABLE_ONLY = (
    "arg_max(table_id.value, struct_pack(a := table_id.at, b := table_id.id)) "
    "FILTER (WHERE table_id IS NOT NULL) AS table_id",
    "arg_max(policy, struct_pack(a := policy.at, b := policy.id)) FILTER (WHERE policy IS NOT NULL) AS policy",
    "list(struct_pack(operation := operation, at := last.at, id := last.id, day := last.day, "
    "status := last.status, reason := last.reason, reason_chars := last.reason_chars, "
    "due_operations := last.due_operations, due_count := last.due_count) ORDER BY operation) AS lasts",
    *(f"{breach_run(n).merge} AS run_{n}" for n in MEASURED_OBJECTIVES),
)
#: Figures of no use per table (their per-day sense only), left out of :func:`table_summaries`.
_PER_DAY_ONLY = ("missed", "finish_by_missed", "finish_by_kept", *(f"tables_{s}" for s in COMPLIANCE_STATES[:3]))

_TS = pa.timestamp("us", tz="UTC")
#: One objective of a table in :func:`table_summaries` (``objectives``): its newest judgement and breach start.
OBJECTIVE_TYPE = pa.struct(
    [
        pa.field("name", pa.string()),
        pa.field("target", pa.float64()),
        pa.field("value", pa.float64()),
        pa.field("met", pa.bool_()),
        pa.field("at_risk", pa.bool_()),
        pa.field("breached_since", _TS),
        pa.field("source", pa.string()),
    ]
)


def _group(rollup: pa.Table, key: str, extra: Sequence[str] = ()) -> pa.Table:
    rows = rollup  # noqa: F841 - read by DuckDB by name
    have = set(rollup.column_names)
    figures = [f.sql if set(f.needs) <= have else "NULL" for f in FIGURES]
    select = ", ".join([*(f"{sql} AS {f.name}" for f, sql in zip(FIGURES, figures, strict=True)), *extra])
    with duckdb_connection() as con:
        return con.sql(f"SELECT {key}, {select} FROM rows GROUP BY {key} ORDER BY {key}").to_arrow_table()


def day_figures(rollup: pa.Table) -> pa.Table:
    """One row per ``run_date`` of ``rollup`` (merged by day and operation, or finer) with every figure
    (tables counted per verdict only from a rollup by day, table and operation)."""
    return _group(rollup, "run_date")


def _state(row: dict[str, Any], name: str) -> Any:
    state = row.get("state") or {}
    return state.get(name)


def _problems(lasts: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Operations whose newest row deferred, refused or failed (a measurement that failed: the table
    could not be read), by status."""
    out: dict[str, list[str]] = {"failed": [], "refused": [], "deferred": []}
    for last in lasts:
        if last.get("status") in out:
            out[str(last["status"])].append(str(last.get("operation")))
    return out


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def run_breached_since(run: dict[str, Any] | None, target: float) -> dt.datetime | None:
    """When the objective folded in ``run`` (a rollup's ``run_<name>``, :func:`deltalog.journal.rollup.breach_run`)
    became continuously breached against ``target``: the measurement after the newest one at most the target
    (or past a re-created table), else the oldest measurement; None when the newest is within the target or
    nothing was measured."""
    steps = [s for s in (run or {}).get("steps") or [] if s is not None]
    for step in steps:
        if step.get("v") is not None and step["v"] <= target:
            return step.get("nxt")
    return (run or {}).get("obs") if steps else None


def _judged_since(judged: dict[str, Any], runs: dict[str, Any], name: str) -> dt.datetime | None:
    """The start of a breach the newest judgement ``judged`` found, against its target (today's): from the
    measurements folded in ``runs``; days since a vacuum: the target's length after the vacuum the judgement
    counted from (its time less its value)."""
    target = judged.get(f"{name}_target")
    if target is None:
        return None
    if objective_spec(name).history_column is not None:
        return run_breached_since(runs.get(f"run_{name}"), float(target))
    value, at = judged.get(f"{name}_value"), judged.get("at")
    if value is None or at is None or value <= target:
        return None
    return at - dt.timedelta(days=float(value)) + dt.timedelta(days=float(target))


def compliance(
    judged: dict[str, Any] | None, runs: dict[str, Any]
) -> tuple[str, dt.datetime | None, list[dict[str, Any]]]:
    """A table's compliance at its newest judging row ``judged`` (the rollup's ``judged``), each breach's
    start against that row's target (the rule of :mod:`deltalog.journal.compliance`) from ``runs``
    (``run_<name>``: the measurements folded over the history read): (state, when the table became
    breached, each objective set). Should the measurements not show the breach the judgement found (its
    value unknown, rows of equal times), the breach is known since ``judged`` at least."""
    if not judged:
        return "none", None, []
    at_risk = {str(x) for x in judged.get("at_risk") or [] if x is not None}
    objectives: list[dict[str, Any]] = []
    starts: list[dt.datetime] = []
    for name in OBJECTIVE_NAMES:
        if judged.get(f"{name}_set") is not True:
            continue
        met = _bool(judged.get(f"{name}_met"))
        since: dt.datetime | None = None
        if met is False:
            since = _judged_since(judged, runs, name) or judged.get("at")
            if since is not None:
                starts.append(since)
        objectives.append(
            {
                "name": name,
                "target": judged.get(f"{name}_target"),
                "value": judged.get(f"{name}_value"),
                "met": met,
                "at_risk": met is True and name in at_risk,
                "breached_since": since,
                "source": judged.get(f"{name}_source"),
            }
        )
    state = str(judged.get("state") or "none")
    if state not in COMPLIANCE_STATES:
        state = "none"
    return state, (min(starts) if starts else None), objectives


def _compliance_order(state: str, since: dt.datetime | None) -> float | None:
    """The fleet's sort key by compliance: breached (the oldest breach first), at risk, met; none set: no key."""
    if state == "none":
        return None
    rank = COMPLIANCE_STATES.index(state)
    return rank * 1e11 + (since.timestamp() if since is not None and state == "breached" else 0.0)


def table_summaries(rollup: pa.Table, runs: pa.Table | None = None) -> pa.Table:
    """One row per table of ``rollup`` (merged by table and operation, or finer; the fleet run's own rows
    are no table): every figure,
    the latest state flattened, what is still due and why, the open problems and the status, and
    the compliance with its objectives (its newest judgement; each breach's start from ``runs``, one
    row per table with ``run_<objective>`` columns merged over a longer history, else from ``rollup``)."""
    if rollup.num_rows:  # the fleet run's own rows are no table (their table_uri names the fleet)
        rollup = rollup.filter(pc.fill_null(pc.not_equal(rollup.column("operation"), FLEET_RUN), True))
    grouped = _group(rollup, "table_uri", _TABLE_ONLY)
    rows = grouped.to_pylist()
    longer: dict[str, dict[str, Any]] = {}
    if runs is not None:
        longer = {str(r.get("table_uri")): r for r in runs.to_pylist()}
    extra: dict[str, list[Any]] = {
        name: []
        for name in (
            "version",
            *STATE,
            "state_at",
            "measured_at",
            "measured_status",
            "measured_day",
            "measured_id",
            "due",
            "due_count",
            "why",
            "open_failed",
            "open_refused",
            "open_deferred",
            "status",
            "status_rank",
            "compliance",
            "compliance_order",
            "breached_since",
            "judged_at",
            "judged_day",
            "judged_id",
            "objectives",
            "breached_objectives",
        )
    }
    for row in rows:
        lasts = [x for x in row.get("lasts") or [] if x is not None]
        by_op = {str(x.get("operation")): x for x in lasts}
        measured = by_op.get("measure")
        settled = {op: (x.get("at"), x.get("status")) for op, x in by_op.items()}
        due = (
            still_due(measured.get("due_operations"), measured.get("at"), settled)
            if measured and measured.get("status") == "done"
            else []
        )
        why = [line[:WHY_CHARS] for line in reason_lines(measured.get("reason") if measured else None, due)]
        problems = _problems(lasts)
        status = next((s for s in ("failed", "refused", "deferred") if problems[s]), "due" if due else "ok")
        extra["version"].append(_state(row, "version_after"))
        for column in STATE:
            extra[column].append(_state(row, column))
        extra["state_at"].append(_state(row, "at"))
        extra["measured_at"].append(measured.get("at") if measured else None)
        extra["measured_status"].append(measured.get("status") if measured else None)
        extra["measured_day"].append(measured.get("day") if measured else None)
        extra["measured_id"].append(measured.get("id") if measured else None)
        extra["due"].append(due)
        extra["due_count"].append(len(due))
        extra["why"].append(why)
        extra["open_failed"].append(problems["failed"])
        extra["open_refused"].append(problems["refused"])
        extra["open_deferred"].append(problems["deferred"])
        extra["status"].append(status)
        extra["status_rank"].append(TABLE_STATUSES.index(status))
        judged = row.get("judged")
        state, since, objectives = compliance(
            judged, longer.get(str(row.get("table_uri")), row) if runs is not None else row
        )
        extra["compliance"].append(state)
        extra["compliance_order"].append(_compliance_order(state, since))
        extra["breached_since"].append(since)
        extra["judged_at"].append((judged or {}).get("at"))
        extra["judged_day"].append((judged or {}).get("day"))
        extra["judged_id"].append((judged or {}).get("id"))
        extra["objectives"].append(objectives)
        extra["breached_objectives"].append([o["name"] for o in objectives if o["met"] is False])
    types = {
        "version": pa.int64(),
        **{c: pa.float64() for c in STATE},
        "state_at": pa.timestamp("us", tz="UTC"),
        "measured_at": pa.timestamp("us", tz="UTC"),
        "measured_status": pa.string(),
        "measured_day": pa.date32(),
        "measured_id": pa.string(),
        "due": pa.list_(pa.string()),
        "due_count": pa.int64(),
        "why": pa.list_(pa.string()),
        "open_failed": pa.list_(pa.string()),
        "open_refused": pa.list_(pa.string()),
        "open_deferred": pa.list_(pa.string()),
        "status": pa.string(),
        "status_rank": pa.int64(),
        "compliance": pa.string(),
        "compliance_order": pa.float64(),
        "breached_since": _TS,
        "judged_at": _TS,
        "judged_day": pa.date32(),
        "judged_id": pa.string(),
        "objectives": pa.list_(OBJECTIVE_TYPE),
        "breached_objectives": pa.list_(pa.string()),
    }
    dropped = ["state", "judged", *_PER_DAY_ONLY, *BREACH_RUNS]
    out = grouped.drop_columns([c for c in dropped if c in grouped.column_names])
    for name, values in extra.items():
        out = out.append_column(name, pa.array(values, types[name]))
    return out


__all__ = [
    "COMPLIANCE_STATES",
    "FIGURES",
    "OBJECTIVE_TYPE",
    "REWRITING",
    "TABLE_STATUSES",
    "Figure",
    "compliance",
    "day_figures",
    "run_breached_since",
    "table_summaries",
]
