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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltalog.journal.read import reason_lines, still_due
from deltalog.journal.rollup import STATE, duckdb_connection

#: Operations whose ``files_read``/``bytes_read`` are files rewritten (compacted).
REWRITING = ("compaction", "purge")
#: Characters of each line of "why" kept per table.
WHY_CHARS = 300
#: A table's status, worst first (the fleet's sort order by status).
TABLE_STATUSES = ("failed", "refused", "deferred", "due", "ok")


@dataclass(frozen=True)
class Figure:
    """An aggregate over rollup rows (SQL), named: a column per table and per day."""

    name: str
    sql: str

    def summary_line(self) -> str:
        """One line: the figure's name and SQL."""
        return f"{self.name} = {self.sql}"

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "sql": self.sql}


def _rewriting(column: str) -> str:
    ops = ", ".join(f"'{op}'" for op in REWRITING)
    return f"sum({column}) FILTER (WHERE operation IN ({ops}))"


FIGURES: tuple[Figure, ...] = (
    Figure("rows", "CAST(sum(rows) AS BIGINT)"),
    Figure("failures", "CAST(sum(n_failed) AS BIGINT)"),
    Figure("refusals", "CAST(sum(n_refused) AS BIGINT)"),
    Figure("deferrals", "CAST(sum(n_deferred) AS BIGINT)"),
    Figure("duration_s", "sum(duration_s)"),
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
)

#: Per table only: its id, the newest row of each operation, the newest settings (policy) row.
_TABLE_ONLY = (
    "arg_max(table_id.value, struct_pack(a := table_id.at, b := table_id.id)) "
    "FILTER (WHERE table_id IS NOT NULL) AS table_id",
    "arg_max(policy, struct_pack(a := policy.at, b := policy.id)) FILTER (WHERE policy IS NOT NULL) AS policy",
    "list(struct_pack(operation := operation, at := last.at, id := last.id, day := last.day, "
    "status := last.status, reason := last.reason, reason_chars := last.reason_chars, "
    "due_operations := last.due_operations, due_count := last.due_count) ORDER BY operation) AS lasts",
)


def _group(rollup: pa.Table, key: str, extra: Sequence[str] = ()) -> pa.Table:
    rows = rollup  # noqa: F841 - read by DuckDB by name
    select = ", ".join([*(f"{f.sql} AS {f.name}" for f in FIGURES), *extra])
    with duckdb_connection() as con:
        return con.sql(f"SELECT {key}, {select} FROM rows GROUP BY {key} ORDER BY {key}").to_arrow_table()


def day_figures(rollup: pa.Table) -> pa.Table:
    """One row per ``run_date`` of ``rollup`` (merged by day and operation, or finer) with every figure."""
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


def table_summaries(rollup: pa.Table) -> pa.Table:
    """One row per table of ``rollup`` (merged by table and operation, or finer): every figure,
    the latest state flattened, what is still due and why, the open problems and the status."""
    grouped = _group(rollup, "table_uri", _TABLE_ONLY)
    rows = grouped.to_pylist()
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
    }
    out = grouped.drop_columns(["state"])
    for name, values in extra.items():
        out = out.append_column(name, pa.array(values, types[name]))
    return out


__all__ = ["FIGURES", "REWRITING", "TABLE_STATUSES", "Figure", "day_figures", "table_summaries"]
