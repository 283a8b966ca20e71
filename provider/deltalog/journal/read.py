"""Reading the maintenance history: rows over time, the last run per operation, the fleet now.

Reads go through our own snapshot: the live files are pruned by the ``run_date``
partition before any Parquet is opened, so a page about the last weeks reads only those
days however long the history is. Deletion vectors (a user may have deleted rows with
another engine) are applied; a table with column mapping, or without the history's
marker, is refused with one clear error.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.errors import DeltaLogError, InvalidArgumentError, OperationRefusedError, UnreadableHistoryFileError
from deltalog.journal.schema import (
    COLUMN_NAMES,
    FLEET_RUN,
    HISTORY_SCHEMA,
    OBJECTIVE_COLUMNS,
    PARTITION_COLUMN,
    WRITER_COLUMNS,
)
from deltalog.journal.write import check_history_table
from deltalog.log import Snapshot, snapshot_at
from deltalog.protocol.deletion_vectors import read_deletion_vector
from deltalog.storage import Storage
from deltalog.storage.filesystem import canonical_uri

log = logging.getLogger(__name__)


def _as_date(value: dt.date | dt.datetime | str | None) -> dt.date | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).date() if value.tzinfo else value.date()
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value)[:10])
    except ValueError:
        raise InvalidArgumentError(f"not a date: {value!r} (use YYYY-MM-DD)") from None


def history_table_uri(table_uri: str) -> str:
    """A table's URI as the history spells it (a local path as its absolute ``file://`` URI); opens nothing."""
    try:
        return canonical_uri(table_uri)
    except ValueError:  # not a URI at all: compared as given
        return table_uri


def rows_for_table(rows: pa.Table, table_uri: str) -> pa.Table:
    """The rows of one table (its URI as given by a user: a local path matches its ``file://`` URI)."""
    return rows.filter(pc.equal(rows.column("table_uri"), history_table_uri(table_uri)))


def files_in_range(snapshot: Snapshot, since: dt.date | None, until: dt.date | None) -> pa.Table:
    """The history's live files whose ``run_date`` lies in ``[since, until]`` (partition pruning, no Parquet read)."""
    files = snapshot.files
    if not files.num_rows or (since is None and until is None):
        return files
    days = file_days(files)
    mask = None
    if since is not None:
        mask = pc.greater_equal(days, pa.scalar(since, pa.date32()))
    if until is not None:
        upper = pc.less_equal(days, pa.scalar(until, pa.date32()))
        mask = upper if mask is None else pc.and_(mask, upper)
    return files.filter(pc.fill_null(mask, True))


def file_days(files: pa.Table) -> pa.Array:
    """Each live file's ``run_date`` partition value as a date (null when unreadable)."""
    days = pc.map_lookup(files.column("partitionValues"), PARTITION_COLUMN, "first")
    return pc.cast(days, pa.date32(), safe=False) if len(days) else pa.array([], pa.date32())


#: Rows per batch when a file is read in batches (what one step of a reader holds at most).
BATCH_ROWS = 16_384


def read_file_batches(
    snapshot: Snapshot, add: dict[str, Any], columns: Sequence[str] | None = None, *, batch_rows: int = BATCH_ROWS
) -> Iterator[pa.Table]:
    """The rows of one live file, a batch at a time: only ``columns`` read (all: None), the deletion
    vector applied, the partition column filled in, a column the file lacks (a later schema
    version's) as nulls, each column in the history's type.

    Raises :class:`UnreadableHistoryFileError` naming the file when it cannot be read so (a value of an
    objective's column, :data:`LENIENT_COLUMNS`, that is not of its type is read as null instead).
    """
    wanted = list(COLUMN_NAMES if columns is None else columns)
    storage = snapshot.storage
    path = str(add["path"])
    day = dict(add.get("partitionValues") or []).get(PARTITION_COLUMN)
    try:
        value = dt.date.fromisoformat(day) if day else None
    except ValueError:
        value = None
    dv = add.get("deletionVector")
    try:
        deleted = pa.array(read_deletion_vector(storage, dv), pa.int64()) if dv else None
        with storage.open_input(storage.join(path)) as f:
            parquet = pq.ParquetFile(f)
            present = set(parquet.schema_arrow.names)
            stored = [c for c in wanted if c in present and c != PARTITION_COLUMN]
            offset = 0
            for batch in parquet.iter_batches(batch_size=batch_rows, columns=stored):
                n = batch.num_rows
                data = pa.Table.from_batches([batch])
                if deleted is not None and len(deleted):
                    positions = pa.array(range(offset, offset + n), pa.int64())
                    data = data.filter(pc.invert(pc.is_in(positions, value_set=deleted)))
                offset += n
                yield _in_history_types(data, wanted, value)
    except UnreadableHistoryFileError:
        raise
    except (OSError, DeltaLogError, pa.ArrowException, ValueError) as exc:
        raise UnreadableHistoryFileError(f"history file {path} cannot be read: {exc}") from None


#: Columns whose values another writer may give in another type without making a file unreadable: the
#: service-level objectives' (schema version 2) and the writers' (3); a value that does not cast is
#: unknown (null) and the row's other columns still count.
LENIENT_COLUMNS = frozenset(name for name, *_ in (*OBJECTIVE_COLUMNS, *WRITER_COLUMNS))


def _in_history_types(data: pa.Table, wanted: list[str], day: dt.date | None) -> pa.Table:
    columns = {}
    for name in wanted:
        field = HISTORY_SCHEMA.field(name)
        if name == PARTITION_COLUMN:
            columns[name] = pa.array([day] * data.num_rows, pa.date32())
        elif name in data.column_names:
            try:
                columns[name] = data.column(name).cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
                if name in LENIENT_COLUMNS:
                    log.warning(
                        "maintenance history: column %s (%s) is not %s: read as unknown",
                        name,
                        data.column(name).type,
                        field.type,
                    )
                    columns[name] = pa.nulls(data.num_rows, field.type)
                    continue
                raise UnreadableHistoryFileError(
                    f"its column {name} ({data.column(name).type}) is not the history's {field.type}: {exc}"
                ) from None
        else:  # a column added by a later schema version than the file's
            columns[name] = pa.nulls(data.num_rows, field.type)
    return pa.table(columns, schema=pa.schema([pa.field(n, HISTORY_SCHEMA.field(n).type) for n in wanted]))


def _read_file(snapshot: Snapshot, add: dict[str, Any]) -> pa.Table:
    parts = list(read_file_batches(snapshot, add))
    return pa.concat_tables(parts) if parts else _nullable_schema().empty_table()


def _nullable_schema() -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type) for f in HISTORY_SCHEMA])


def read_history(
    uri: str,
    *,
    storage_options: dict[str, Any] | None = None,
    table_uri: str | None = None,
    since: dt.date | dt.datetime | str | None = None,
    until: dt.date | dt.datetime | str | None = None,
    snapshot: Snapshot | None = None,
) -> pa.Table:
    """The history's rows (every column of schema version 1), oldest first.

    ``since``/``until`` bound ``run_date`` (inclusive; they prune files before reading),
    ``table_uri`` keeps one table's rows.
    """
    snapshot = snapshot or snapshot_at(Storage(uri, storage_options))
    check_history_table(snapshot, uri)
    if snapshot.metadata.column_mapping_mode != "none":
        raise OperationRefusedError(f"the maintenance history {uri} uses column mapping, which its reader refuses")
    files = files_in_range(snapshot, _as_date(since), _as_date(until))
    parts = [_read_file(snapshot, add) for add in files.to_pylist()]
    data = pa.concat_tables(parts) if parts else _nullable_schema().empty_table()
    if table_uri is not None:
        data = rows_for_table(data, table_uri)
    if since is not None and isinstance(since, dt.datetime):
        data = data.filter(
            pc.greater_equal(data.column("started_at"), pa.scalar(since, data.column("started_at").type))
        )
    return data.sort_by([("started_at", "ascending"), ("row_id", "ascending")]).select(list(COLUMN_NAMES))


#: Items of a list column, and characters per item, a page shows of a row.
LIST_ITEMS = 50
LIST_ITEM_CHARS = 200
#: The long texts of a row (what was due or went wrong, the summary, the settings); the others are
#: names and ids, cut at :data:`SHORT_TEXT_CHARS` whatever the reader allows the long ones.
LONG_TEXTS = ("reason", "summary", "policy")
SHORT_TEXT_CHARS = 4096


def _cut_texts(data: pa.Table, text_chars: int) -> pa.Table:
    """Every text column cut (:data:`LONG_TEXTS` to ``text_chars`` characters, the others to at most
    :data:`SHORT_TEXT_CHARS`) with its length beside (``<name>_chars``), lists to :data:`LIST_ITEMS`
    items of :data:`LIST_ITEM_CHARS`: what a reader keeps of rows it shows."""
    out = data
    for name in data.column_names:
        column = out.column(name)
        if pa.types.is_string(column.type):
            index = out.column_names.index(name)
            keep = text_chars if name in LONG_TEXTS else min(text_chars, SHORT_TEXT_CHARS)
            out = out.set_column(index, name, pc.utf8_slice_codeunits(column, 0, keep))
            out = out.append_column(f"{name}_chars", pc.cast(pc.utf8_length(column), pa.int64()))
        elif pa.types.is_list(column.type) and pa.types.is_string(column.type.value_type):
            items = column.to_pylist()
            cut = [
                None if v is None else [None if x is None else x[:LIST_ITEM_CHARS] for x in v[:LIST_ITEMS]]
                for v in items
            ]
            out = out.set_column(out.column_names.index(name), name, pa.array(cut, column.type))
            out = out.append_column(f"{name}_count", pc.cast(pc.list_value_length(column), pa.int64()))
    return out


def _pick_rows(
    snapshot: Snapshot,
    files: pa.Table,
    key_columns: Sequence[str],
    keep: Any,
    offset: int,
    limit: int,
    columns: Sequence[str],
    text_chars: int,
) -> pa.Table:
    """Rows of ``files`` for which ``keep(batch) -> mask`` holds, newest first (``started_at``, ``row_id``),
    ``limit`` of them from ``offset``: a first pass reads ``key_columns`` only, a second the chosen rows'
    ``columns`` (texts cut as they are read), so a large file costs one batch of it at a time."""
    adds = files.to_pylist()
    found = []
    for number, add in enumerate(adds):
        position = 0
        for batch in read_file_batches(snapshot, add, [*key_columns, "started_at", "row_id"]):
            mask = pc.fill_null(keep(batch), False)
            positions = pc.filter(pa.array(range(position, position + batch.num_rows), pa.int64()), mask)
            chosen = batch.filter(mask)
            found.append(
                pa.table(
                    {
                        "file": pa.array([number] * chosen.num_rows, pa.int64()),
                        "position": positions,
                        "started_at": chosen.column("started_at"),
                        "row_id": chosen.column("row_id"),
                    }
                )
            )
            position += batch.num_rows
    if not found:
        return pa.table({})
    index = pa.concat_tables(found).sort_by([("started_at", "descending"), ("row_id", "descending")])
    index = index.slice(offset, limit)
    parts = []
    for number in sorted(set(index.column("file").to_pylist())):
        wanted = pc.filter(index.column("position"), pc.equal(index.column("file"), number))
        position = 0
        for batch in read_file_batches(snapshot, adds[number], columns):
            here = pa.array(range(position, position + batch.num_rows), pa.int64())
            mask = pc.is_in(here, value_set=wanted.combine_chunks() if hasattr(wanted, "combine_chunks") else wanted)
            if pc.any(mask).as_py():
                parts.append(_cut_texts(batch.filter(mask), text_chars))
            position += batch.num_rows
    if not parts:
        return pa.table({})
    rows = pa.concat_tables(parts)
    return rows.sort_by([("started_at", "descending"), ("row_id", "descending")])


#: The columns a page shows of a history row (all but ``policy``, which the settings read on their own).
SHOWN_COLUMNS = tuple(c for c in COLUMN_NAMES if c != "policy")


def table_rows(
    snapshot: Snapshot,
    table_uri: str,
    day_counts: Sequence[tuple[dt.date, int]],
    *,
    offset: int,
    limit: int,
    text_chars: int = 2000,
    columns: Sequence[str] = SHOWN_COLUMNS,
) -> pa.Table:
    """A page of one table's history rows, newest first: ``limit`` rows from ``offset``.

    ``day_counts`` (the table's rows per ``run_date``, from a rollup) says which days hold
    the page: only their files are read (the rest pruned by partition), each in two
    passes (see :func:`_pick_rows`); texts are cut to ``text_chars`` with their lengths in
    ``<column>_chars``.
    """
    if offset < 0 or limit < 1:
        raise InvalidArgumentError("a page of rows needs offset >= 0 and limit >= 1")
    needed: list[tuple[dt.date, int, int]] = []
    seen = 0
    for day, n in sorted(day_counts, key=lambda d: d[0], reverse=True):
        if seen + n > offset and seen < offset + limit:
            skip = max(0, offset - seen)
            needed.append((day, skip, min(n - skip, offset + limit - seen - skip)))
        seen += n
    parts = []
    for day, skip, take in needed:
        files = files_in_range(snapshot, day, day)
        rows = _pick_rows(
            snapshot,
            files,
            ["table_uri"],
            lambda b: pc.equal(b.column("table_uri"), table_uri),
            skip,
            take,
            columns,
            text_chars,
        )
        if rows.num_rows:
            parts.append(rows)
    return pa.concat_tables(parts, promote_options="permissive") if parts else pa.table({})


def history_row(snapshot: Snapshot, day: dt.date, row_id: str, *, text_chars: int, most: int = 5) -> pa.Table:
    """The rows of ``day`` whose ``row_id`` is ``row_id`` (one, unless another writer reused the id; at most
    ``most``), every column, texts cut to ``text_chars``: the day's files only, the row's alone read whole."""
    files = files_in_range(snapshot, day, day)
    return _pick_rows(
        snapshot,
        files,
        [],
        lambda b: pc.equal(b.column("row_id"), row_id),
        0,
        most,
        COLUMN_NAMES,
        text_chars,
    )


def last_runs(rows: pa.Table) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest row per (table URI, operation)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows.sort_by([("started_at", "ascending")]).to_pylist():
        out[(row["table_uri"], row["operation"])] = row
    return out


#: Statuses after which an operation is no longer due (it ran, or found nothing to do).
SETTLED = ("done", "nothing_due")


def still_due(due_operations: Sequence[Any] | None, measured_at: Any, last: dict[str, tuple[Any, Any]]) -> list[str]:
    """The operations a measurement (at ``measured_at``) found due that no later run settled;
    ``last`` maps an operation to its newest row's (started_at, status). Values of any shape
    (a history others write) count as not settled rather than raise."""
    out = []
    for op in due_operations or []:
        op = str(op)
        started, status = last.get(op, (None, None))
        try:
            settled = started is not None and measured_at is not None and started >= measured_at
        except TypeError:
            settled = False
        if settled and status in SETTLED:
            continue
        out.append(op)
    return out


def reason_lines(reason: Any, due: Sequence[str]) -> list[str]:
    """The lines of a measurement's reason that say why an operation of ``due`` is due."""
    return [line for line in str(reason or "").splitlines() if line.split(":", 1)[0] in due]


@dataclass(frozen=True)
class TableOverview:
    """One table on the fleet page: its latest measurement and state, and the last run of each operation."""

    table_uri: str
    table_id: str | None
    #: The newest ``measure`` row (what was due then, and why).
    measured: dict[str, Any] | None
    #: The newest row carrying the table's state (``*_after`` columns): a measurement or a later operation.
    latest: dict[str, Any] | None = None
    last: dict[str, dict[str, Any]] = field(default_factory=dict)
    deferred: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)

    @property
    def due(self) -> list[str]:
        """The operations the latest measurement found due that no later run has settled."""
        if not self.measured:
            return []
        last = {op: (row["started_at"], row["status"]) for op, row in self.last.items()}
        return still_due(self.measured.get("due_operations"), self.measured["started_at"], last)

    @property
    def why(self) -> list[str]:
        """The measurement's reasons for what is still due (one line each)."""
        return reason_lines((self.measured or {}).get("reason"), self.due)

    def summary_line(self) -> str:
        """One line: the table and what is due."""
        return f"{self.table_uri}: due {', '.join(self.due) or 'nothing'}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "table_uri": self.table_uri,
            "table_id": self.table_id,
            "measured": self.measured,
            "latest": self.latest,
            "last": self.last,
            "deferred": self.deferred,
            "refused": self.refused,
            "failed": self.failed,
            "due": self.due,
            "why": self.why,
        }


def fleet_overview(rows: pa.Table) -> list[TableOverview]:
    """Per table (by URI, sorted): the latest measure row and state, the last row per operation, and the
    operations whose last row was deferred, refused or failed (still open: no later row settled them).
    The fleet run's own rows (``fleet_run``: its finishing time) are no table's."""
    by_table: dict[str, list[dict[str, Any]]] = {}
    for row in rows.sort_by([("started_at", "ascending")]).to_pylist():
        if row["operation"] != FLEET_RUN:
            by_table.setdefault(row["table_uri"], []).append(row)
    out = []
    for uri in sorted(by_table):
        last: dict[str, dict[str, Any]] = {}
        for row in by_table[uri]:
            last[row["operation"]] = row
        measured = last.pop("measure", None)
        open_rows = list(last.values())
        with_state = [r for r in by_table[uri] if r["live_files_after"] is not None]
        out.append(
            TableOverview(
                table_uri=uri,
                table_id=next((r["table_id"] for r in reversed(by_table[uri]) if r["table_id"]), None),
                measured=measured,
                latest=max(with_state, key=lambda r: r["ended_at"]) if with_state else None,
                last=last,
                deferred=[r for r in open_rows if r["status"] == "deferred"],
                refused=[r for r in open_rows if r["status"] == "refused"]
                + ([measured] if measured and measured["status"] == "refused" else []),
                failed=[r for r in open_rows if r["status"] == "failed"]
                + ([measured] if measured and measured["status"] == "failed" else []),
            )
        )
    return out


__all__ = [
    "BATCH_ROWS",
    "LENIENT_COLUMNS",
    "SHOWN_COLUMNS",
    "TableOverview",
    "file_days",
    "files_in_range",
    "fleet_overview",
    "history_row",
    "history_table_uri",
    "last_runs",
    "read_file_batches",
    "read_history",
    "reason_lines",
    "rows_for_table",
    "still_due",
    "table_rows",
]
