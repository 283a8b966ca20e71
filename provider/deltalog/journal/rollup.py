"""The history in aggregate: per day, table and operation, what the fleet view and reports read.

A page about a thousand tables and a year of history must not walk every row. Rows are
summed up once into a *rollup*: one row per (``run_date``, ``table_uri``, ``operation``)
holding counts per status, sums of the work columns, the range of each state column,
and the newest row's facts (its status, when, an excerpt of its reason, where to find it
in full). Every measure is mergeable: the rollup of two sets of rows is the rollup of
their rollups (sums add, ranges widen, the newest of two newest is the newest), so a day
is rolled up a file at a time, a file a batch at a time, and a window of days is the
merge of its days (:func:`merge_rollups` with ``by`` the keys to keep).

What a rollup holds is declared once, in :data:`MEASURES`: each measure's SQL over raw
rows and its SQL over rollups. Adding a per-day figure (a count of breached objectives,
say) is one entry there; the rollup's :data:`ROLLUP_FORMAT` (which stored rollups carry) is
a digest of these declarations, so rollups of an older declaration are never reused.
The aggregation runs in DuckDB over Arrow batches (texts cut to excerpts in Arrow first,
so a megabyte message costs its excerpt, not its size, past the batch that read it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.journal.schema import FLEET_RUN, PARTITION_COLUMN, STATUSES, WORK_COLUMNS
from deltalog.maintenance.objectives import OBJECTIVE_NAMES, OBJECTIVES, objective_spec

#: Characters of ``reason`` kept in a rollup (the measurement's lines of what is due, a failure's start).
REASON_CHARS = 1000
#: Characters of ``summary`` kept; items and characters per item of ``due_operations``.
SUMMARY_CHARS = 300
DUE_ITEMS = 20
DUE_ITEM_CHARS = 64

#: The work columns summed per group (as doubles: a sum never overflows; exact below 2^53).
SUMMED = ("duration_s", "cpu_s", *WORK_COLUMNS)
#: The state columns whose range per group the charts draw as bands.
STATE = (
    "live_files_after",
    "small_files_after",
    "table_bytes_after",
    "versions_since_checkpoint_after",
    "dv_share_after",
    "log_files_after",
)
#: The service-level objectives' columns of a measure row (schema version 2), per objective.
OBJECTIVE_FIELDS = ("target", "value", "met", "source")
OBJECTIVE_RAW = (
    "objectives_at_risk",
    *(f"objective_{name}_{part}" for name in OBJECTIVE_NAMES for part in OBJECTIVE_FIELDS),
    *("finish_by", "finish_by_deadline", "finish_by_met"),
)
#: The writers' columns (schema version 3) a rollup sums (compaction and purge rows) and the newest measurement's.
WRITER_SUMMED = ("files_deferred_for_writers", "bins_deferred_for_writers", "bins_lost_to_writers", "writer_wait_s")
WRITER_MEASURED = ("writer_dml_commits", "writer_overlaps", "writer_dml_overlaps")
#: The columns the rollup reads of a history row (a projection: the rest is never read).
RAW_COLUMNS = (
    *("run_id", "row_id", PARTITION_COLUMN, "table_uri", "table_id", "operation", "engine", "status"),
    *("reason", "summary", "due_operations", "policy", "started_at", "ended_at", "version_before", "version_after"),
    *SUMMED,
    *STATE,
    *("airflow_dag_id", "airflow_task_id", "airflow_try_number"),
    *OBJECTIVE_RAW,
    *WRITER_SUMMED,
    *WRITER_MEASURED,
)
#: The grouping keys of a stored rollup (a day of it): day, table, operation.
KEYS = (PARTITION_COLUMN, "table_uri", "operation")
#: A key longer than this is cut (a table URI of megabytes, written by anyone, groups by its start).
KEY_CHARS = 4096


@dataclass(frozen=True)
class Measure:
    """One column of a rollup: its SQL over raw rows and over rollups (``{name}`` is the column)."""

    name: str
    raw: str
    merge: str

    def summary_line(self) -> str:
        """One line: the measure and how raw rows make it."""
        return f"{self.name} = {self.raw}"

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "raw": self.raw, "merge": self.merge}


def _finite(column: str) -> str:
    """The column as a double, null unless finite (a NaN or infinity written by anyone adds nothing)."""
    return f"(CASE WHEN isfinite(CAST({column} AS DOUBLE)) THEN CAST({column} AS DOUBLE) END)"


def count_where(name: str, condition: str = "true") -> Measure:
    """Rows for which ``condition`` holds (SQL over a history row)."""
    return Measure(name, f"count(*) FILTER (WHERE {condition})", f"CAST(sum({name}) AS BIGINT)")


def total(name: str, column: str, condition: str = "true") -> Measure:
    """The sum of ``column`` over the rows for which ``condition`` holds (finite values only)."""
    return Measure(name, f"sum({_finite(column)}) FILTER (WHERE {condition})", f"sum({name})")


def smallest(name: str, column: str) -> Measure:
    return Measure(name, f"min({_finite(column)})", f"min({name})")


def largest(name: str, column: str) -> Measure:
    return Measure(name, f"max({_finite(column)})", f"max({name})")


def newest(name: str, fields: dict[str, str], order: str = "started_at", condition: str = "true") -> Measure:
    """The newest row's ``fields`` (name -> SQL) among the rows for which ``condition`` holds, by
    ``order`` then ``row_id`` (ties broken the same way everywhere: rollups are deterministic)."""
    packed = ", ".join(f"{k} := {v}" for k, v in {"at": order, "id": "row_id", **fields}.items())
    return Measure(
        name,
        f"arg_max(struct_pack({packed}), struct_pack(a := {order}, b := row_id)) FILTER (WHERE {condition})",
        f"arg_max({name}, struct_pack(a := {name}.at, b := {name}.id)) FILTER (WHERE {name} IS NOT NULL)",
    )


_LAST_FIELDS = {
    "day": PARTITION_COLUMN,
    "ended_at": "ended_at",
    "status": "status",
    "reason": "reason",
    "reason_chars": "reason_chars",
    "summary": "summary",
    "summary_chars": "summary_chars",
    "engine": "engine",
    "due_operations": f"due_operations[1:{DUE_ITEMS}]",  # items already cut (see _excerpts)
    "due_count": "len(due_operations)",
    "run_id": f"left(run_id, {SUMMARY_CHARS})",
    "version_before": "version_before",
    "version_after": "version_after",
    "duration_s": _finite("duration_s"),
    "cpu_s": _finite("cpu_s"),
    "airflow_dag_id": f"left(airflow_dag_id, {SUMMARY_CHARS})",
    "airflow_task_id": f"left(airflow_task_id, {SUMMARY_CHARS})",
    "airflow_try_number": "airflow_try_number",
}
_STATE_FIELDS = {
    "version_after": "version_after",
    **{column: _finite(column) for column in STATE},
}

# --- service-level objectives -------------------------------------------------------------------

#: The rows that judge objectives: the breached-since rule (:mod:`deltalog.journal.compliance`) reads only these.
JUDGED = "operation = 'measure' AND status = 'done'"
#: Characters of an objective's ``source`` and of a run's ``finish_by`` kept.
SOURCE_CHARS = 300


def _objective(name: str, part: str) -> str:
    return f"objective_{name}_{part}"


def _judged_state() -> str:
    """SQL: a judging row's verdict over its objectives: breached, at_risk, met, or none (no objective set)."""
    breached = " OR ".join(
        f"({_objective(n, 'met')} = false AND {_objective(n, 'target')} IS NOT NULL)" for n in OBJECTIVE_NAMES
    )
    any_set = " OR ".join(f"{_objective(n, 'target')} IS NOT NULL" for n in OBJECTIVE_NAMES)
    return (
        f"CASE WHEN {breached} THEN 'breached' WHEN NOT ({any_set}) THEN 'none' "
        "WHEN coalesce(len(objectives_at_risk), 0) > 0 THEN 'at_risk' ELSE 'met' END"
    )


_JUDGED_FIELDS = {
    "day": PARTITION_COLUMN,
    "state": _judged_state(),
    "at_risk": f"objectives_at_risk[1:{DUE_ITEMS}]",
    **{
        field: sql
        for n in OBJECTIVE_NAMES
        for field, sql in (
            (f"{n}_set", f"{_objective(n, 'target')} IS NOT NULL"),
            (f"{n}_target", _finite(_objective(n, "target"))),
            (f"{n}_value", _finite(_objective(n, "value"))),
            (f"{n}_met", _objective(n, "met")),
            (f"{n}_source", _objective(n, "source")),  # already cut (see _excerpts)
        )
    },
}

_TSZ = "TIMESTAMP WITH TIME ZONE"
_STEP = f"STRUCT(ts {_TSZ}, v DOUBLE, nxt {_TSZ})"


def _value(name: str) -> str:
    """SQL: the objective's value a row carries: ``objective_<name>_value`` (schema version 2), else the
    state column every version has (``ObjectiveSpec.history_column``); null unless finite."""
    column = objective_spec(name).history_column
    return f"coalesce({_finite(_objective(name, 'value'))}, {_finite(str(column))})"


#: The breached-since rule (:mod:`deltalog.journal.compliance`, judged against a target only known when the
#: rollups are read: today's) as a fold over judging rows in time order. A *run* summarises a stretch of time
#: for one objective of one table: ``first`` its first row, ``obs`` its oldest measured value's time; ``steps``
#: its measured values (``v`` at ``ts``) lower than every newer one, newest first, each with ``nxt`` the time of the
#: next newer measurement (null for the newest: the following stretch's ``obs``), so the breach against any
#: target T starts at the ``nxt`` of the first step at most T (or at ``obs`` if none is); ``id`` the newest
#: table id, ``id_at`` its newest row's time, ``id_after`` the oldest measurement after that row. Where the
#: table id changes (the table was re-created under its URI) the older stretch's steps from that row back
#: give way to one step of value -inf: no breach reaches past it. Two runs of consecutive stretches combine
#: into the run of both (associative), so rows, files, days and windows fold the same way (runs are ordered
#: by ``first``: stretches that interleave in time, two writers measuring one table at once, fold as if one
#: came after the other).
_BROKEN = "(a.id IS NOT NULL AND b.id IS NOT NULL AND a.id <> b.id)"
_B_MIN = "coalesce(b.steps[-1].v, 'inf'::DOUBLE)"
_FOLD = (
    "lambda a, b: struct_pack("
    "first := least(a.first, b.first), "
    "obs := coalesce(a.obs, b.obs), "
    "id := coalesce(b.id, a.id), "
    "id_at := CASE WHEN b.id IS NOT NULL THEN b.id_at ELSE a.id_at END, "
    "id_after := CASE WHEN b.id IS NOT NULL THEN b.id_after ELSE coalesce(a.id_after, b.obs) END, "
    "steps := list_concat("
    "b.steps, "
    "list_filter("
    f"list_transform(a.steps, lambda s: struct_pack(ts := s.ts, v := s.v, nxt := coalesce(s.nxt, b.obs))), "
    f"lambda s: s.v < {_B_MIN} AND (NOT {_BROKEN} OR s.ts > a.id_at)), "
    f"CASE WHEN {_BROKEN} AND {_B_MIN} > '-inf'::DOUBLE "
    f"THEN [struct_pack(ts := a.id_at, v := '-inf'::DOUBLE, nxt := coalesce(a.id_after, b.obs))] "
    f"ELSE []::{_STEP}[] END)"
    ")"
)


def breach_run(name: str) -> Measure:
    """``run_<name>``: the breached-since rule's fold of one objective over the judging rows (see :data:`_FOLD`),
    for an objective whose value the history measures (``ObjectiveSpec.history_column``); its start against a
    target: :func:`deltalog.journal.summary.run_breached_since`."""
    value = _value(name)
    row = (
        f"struct_pack(first := started_at, obs := CASE WHEN {value} IS NOT NULL THEN started_at END, "
        f"id := left(table_id, {SUMMARY_CHARS}), "
        f"id_at := CASE WHEN table_id IS NOT NULL THEN started_at END, id_after := NULL::{_TSZ}, "
        f"steps := CASE WHEN {value} IS NOT NULL "
        f"THEN [struct_pack(ts := started_at, v := {value}, nxt := NULL::{_TSZ})] ELSE []::{_STEP}[] END)"
    )
    column = f"run_{name}"
    return Measure(
        column,
        f"list_reduce(list({row} ORDER BY started_at, row_id) FILTER (WHERE {JUDGED}), {_FOLD})",
        f"list_reduce(list({column} ORDER BY {column}.first, {column}.obs) FILTER (WHERE {column} IS NOT NULL), "
        f"{_FOLD})",
    )


def _judged_range(name: str, value: str, how: str) -> Measure:
    return Measure(name, f"{how}({_finite(value)}) FILTER (WHERE {JUDGED})", f"{how}({name})")


#: The objectives whose breach start the rollups fold (their value is measured; days since a vacuum are not:
#: their start is the newest judgement's vacuum plus the target).
MEASURED_OBJECTIVES = tuple(o.name for o in OBJECTIVES if o.history_column is not None)
#: The rollup's columns of each measured objective's breach (:func:`breach_run`), in objective order.
BREACH_RUNS = tuple(f"run_{name}" for name in MEASURED_OBJECTIVES)

#: The fleet run's own rows (``fleet_run``) with a finishing time: met or missed.
_FLEET_RUN = f"operation = '{FLEET_RUN}'"

#: What a rollup holds per group, in column order (after :data:`KEYS`).
MEASURES: tuple[Measure, ...] = (
    count_where("rows"),
    *(count_where(f"n_{status}", f"status = '{status}'") for status in STATUSES),
    *(total(column, column) for column in SUMMED),
    count_where("cpu_rows", "cpu_s IS NOT NULL"),
    *(m for column in STATE for m in (smallest(f"{column}_min", column), largest(f"{column}_max", column))),
    newest("last", _LAST_FIELDS),
    newest("state", _STATE_FIELDS, order="ended_at", condition="live_files_after IS NOT NULL"),
    newest("table_id", {"value": f"left(table_id, {SUMMARY_CHARS})"}, condition="table_id IS NOT NULL"),
    newest("policy", {"day": PARTITION_COLUMN, "chars": "policy_chars"}, condition="policy_chars IS NOT NULL"),
    # Service-level objectives: the newest judgement, each objective's breach as a fold, its values' range.
    newest("judged", _JUDGED_FIELDS, condition=JUDGED),
    *(breach_run(name) for name in MEASURED_OBJECTIVES),
    *(
        m
        for name in OBJECTIVE_NAMES
        for m in (
            _judged_range(f"objective_{name}_min", _objective(name, "value"), "min"),
            _judged_range(f"objective_{name}_max", _objective(name, "value"), "max"),
        )
    ),
    # The writers beside maintenance: what compaction left them, lost to them, waited for; what the log showed.
    *(total(column, column) for column in WRITER_SUMMED),
    newest(
        "writers",
        {"dml_commits": "writer_dml_commits", "overlaps": "writer_overlaps", "dml_overlaps": "writer_dml_overlaps"},
        condition="operation = 'measure' AND writer_dml_commits IS NOT NULL",
    ),
    count_where("finish_by_missed", f"{_FLEET_RUN} AND finish_by_met = false"),
    count_where("finish_by_kept", f"{_FLEET_RUN} AND finish_by_met = true"),
    newest(
        "missed",
        {
            "day": PARTITION_COLUMN,
            "finish_by": "finish_by",
            "deadline": "finish_by_deadline",
            "ended_at": "ended_at",
            "fleet": f"left(table_uri, {SUMMARY_CHARS})",
        },
        condition=f"{_FLEET_RUN} AND finish_by_met = false",
    ),
)

#: Names stored rollups by what they hold: a rollup made under other declarations is not reused.
ROLLUP_FORMAT = hashlib.sha256(
    repr(
        (
            KEYS,
            KEY_CHARS,
            RAW_COLUMNS,
            [m.to_dict() for m in MEASURES],
            REASON_CHARS,
            SUMMARY_CHARS,
            DUE_ITEM_CHARS,
            SOURCE_CHARS,
        )
    ).encode()
).hexdigest()[:16]


def _excerpts(batch: pa.Table) -> pa.Table:
    """The batch with long texts cut to their excerpts and their full lengths beside (``*_chars``),
    and ``policy`` replaced by its length: what the rollup keeps of them."""
    out = batch
    for column in ("due_operations", "objectives_at_risk"):
        items = out.column(column).combine_chunks()
        cut = pa.ListArray.from_arrays(
            items.offsets,
            pc.utf8_slice_codeunits(items.values, 0, DUE_ITEM_CHARS),
            type=items.type,
            mask=items.is_null(),
        )
        out = out.set_column(out.column_names.index(column), column, cut)
    for column in (*(_objective(n, "source") for n in OBJECTIVE_NAMES), "finish_by"):
        index = out.column_names.index(column)
        out = out.set_column(index, column, pc.utf8_slice_codeunits(out.column(column), 0, SOURCE_CHARS))
    for column, keep in (("reason", REASON_CHARS), ("summary", SUMMARY_CHARS), ("policy", 0)):
        values = out.column(column)
        chars = pc.utf8_length(values)
        index = out.column_names.index(column)
        if keep:
            out = out.set_column(index, column, pc.utf8_slice_codeunits(values, 0, keep))
        else:
            out = out.remove_column(index)
        out = out.append_column(f"{column}_chars", pc.cast(chars, pa.int64()))
    return out


#: What one aggregation's DuckDB may use: the API server that runs it is shared by the whole deployment.
DUCKDB_CONFIG: dict[str, str | int] = {"threads": 1, "memory_limit": "256MB"}


@contextmanager
def duckdb_connection(con: duckdb.DuckDBPyConnection | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """``con``, or a DuckDB of its own (:data:`DUCKDB_CONFIG`) closed afterwards."""
    if con is not None:
        yield con
        return
    own = duckdb.connect(config=dict(DUCKDB_CONFIG))  # type: ignore[arg-type]
    try:
        yield own
    finally:
        own.close()


_KEYS_SQL = ", ".join(f"left(coalesce({k}, ''), {KEY_CHARS})" if k != PARTITION_COLUMN else k for k in KEYS)
_NAMED_KEYS_SQL = ", ".join(
    f"left(coalesce({k}, ''), {KEY_CHARS}) AS {k}" if k != PARTITION_COLUMN else k for k in KEYS
)


def rollup_rows(batches: Iterable[pa.Table], con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    """The rollup of history rows (batches of :data:`RAW_COLUMNS`) by :data:`KEYS`."""
    select = ", ".join(f"{m.raw} AS {m.name}" for m in MEASURES)
    parts = []
    with duckdb_connection(con) as db:
        for batch in batches:
            if not batch.num_rows:
                continue
            rows = _excerpts(batch)  # noqa: F841 - read by DuckDB by name
            parts.append(db.sql(f"SELECT {_NAMED_KEYS_SQL}, {select} FROM rows GROUP BY {_KEYS_SQL}").to_arrow_table())
        if not parts:
            return empty_rollup()
        return parts[0] if len(parts) == 1 else merge_rollups(parts, con=db)


_EMPTY: pa.Schema | None = None


def empty_rollup() -> pa.Table:
    """A rollup of no rows (its schema is that of every rollup)."""
    global _EMPTY
    if _EMPTY is None:
        from deltalog.journal.schema import HISTORY_SCHEMA

        fields = [pa.field(n, HISTORY_SCHEMA.field(n).type) for n in RAW_COLUMNS]
        with duckdb_connection() as db:
            rows = _excerpts(pa.schema(fields).empty_table())  # noqa: F841 - read by DuckDB by name
            select = ", ".join(f"{m.raw} AS {m.name}" for m in MEASURES)
            sql = f"SELECT {_NAMED_KEYS_SQL}, {select} FROM rows GROUP BY {_KEYS_SQL}"
            _EMPTY = db.sql(sql).to_arrow_table().schema
    return _EMPTY.empty_table()


def merge_rollups(
    parts: Sequence[pa.Table],
    by: Sequence[str] = KEYS,
    con: duckdb.DuckDBPyConnection | None = None,
    *,
    measures: Sequence[str] | None = None,
) -> pa.Table:
    """Rollups merged, grouped by ``by`` (a subset of :data:`KEYS`; a key left out is merged over),
    ordered by ``by``; only the ``measures`` named (default: all; the parts need only those and ``by``)."""
    unknown = [k for k in by if k not in KEYS]
    if unknown:
        raise ValueError(f"rollups merge by {', '.join(KEYS)}, not {', '.join(unknown)}")
    chosen = list(MEASURES) if measures is None else [m for m in MEASURES if m.name in set(measures)]
    if measures is not None and len(chosen) != len(set(measures)):
        raise ValueError(f"no such measures: {sorted(set(measures) - {m.name for m in chosen})}")
    present = [p for p in parts if p.num_rows]
    if not present:
        empty = empty_rollup()
        return empty.select([*by, *(m.name for m in chosen)])
    rows = present[0] if len(present) == 1 else pa.concat_tables(present, promote_options="permissive")  # noqa: F841
    select = ", ".join(f"{m.merge} AS {m.name}" for m in chosen)
    keys = ", ".join(by)
    sql = f"SELECT {keys}{', ' if keys else ''}{select} FROM rows"
    if keys:
        sql += f" GROUP BY {keys} ORDER BY {keys}"
    with duckdb_connection(con) as db:
        return db.sql(sql).to_arrow_table()


__all__ = [
    "BREACH_RUNS",
    "JUDGED",
    "KEYS",
    "MEASURED_OBJECTIVES",
    "MEASURES",
    "RAW_COLUMNS",
    "REASON_CHARS",
    "ROLLUP_FORMAT",
    "STATE",
    "SUMMED",
    "Measure",
    "DUCKDB_CONFIG",
    "breach_run",
    "count_where",
    "duckdb_connection",
    "empty_rollup",
    "merge_rollups",
    "newest",
    "rollup_rows",
    "total",
]
