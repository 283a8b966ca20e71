"""Reading the maintenance history: rows over time, the last run per operation, the fleet now.

Reads go through our own snapshot: the live files are pruned by the ``run_date``
partition before any Parquet is opened, so a page about the last weeks reads only those
days however long the history is. Deletion vectors (a user may have deleted rows with
another engine) are applied; a table with column mapping, or without the history's
marker, is refused with one clear error.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.errors import InvalidArgumentError, OperationRefusedError
from deltalog.journal.schema import COLUMN_NAMES, HISTORY_SCHEMA, PARTITION_COLUMN
from deltalog.journal.write import check_history_table
from deltalog.log import Snapshot, snapshot_at
from deltalog.protocol.deletion_vectors import read_deletion_vector
from deltalog.storage import Storage
from deltalog.storage.filesystem import canonical_uri


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


def rows_for_table(rows: pa.Table, table_uri: str) -> pa.Table:
    """The rows of one table (its URI as given by a user: a local path matches its ``file://`` URI)."""
    return rows.filter(pc.equal(rows.column("table_uri"), canonical_uri(table_uri)))


def _files_in_range(snapshot: Snapshot, since: dt.date | None, until: dt.date | None) -> pa.Table:
    files = snapshot.files
    if not files.num_rows or (since is None and until is None):
        return files
    days = pc.map_lookup(files.column("partitionValues"), PARTITION_COLUMN, "first")
    days = pc.cast(days, pa.date32())
    mask = None
    if since is not None:
        mask = pc.greater_equal(days, pa.scalar(since, pa.date32()))
    if until is not None:
        upper = pc.less_equal(days, pa.scalar(until, pa.date32()))
        mask = upper if mask is None else pc.and_(mask, upper)
    return files.filter(pc.fill_null(mask, True))


def _read_file(snapshot: Snapshot, add: dict[str, Any]) -> pa.Table:
    storage = snapshot.storage
    with storage.open_input(storage.join(add["path"])) as f:
        data = pq.read_table(f)
    dv = add.get("deletionVector")
    if dv:
        deleted = read_deletion_vector(storage, dv)
        if len(deleted):
            keep = pc.invert(pc.is_in(pa.array(range(data.num_rows), pa.int64()), value_set=pa.array(deleted)))
            data = data.filter(keep)
    day = dict(add.get("partitionValues") or []).get(PARTITION_COLUMN)
    value = dt.date.fromisoformat(day) if day else None
    columns = {}
    for f in HISTORY_SCHEMA:
        if f.name == PARTITION_COLUMN:
            columns[f.name] = pa.array([value] * data.num_rows, pa.date32())
        elif f.name in data.column_names:
            columns[f.name] = data.column(f.name).cast(f.type)
        else:  # a column added by a later schema version than the file's
            columns[f.name] = pa.nulls(data.num_rows, f.type)
    return pa.table(columns)


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
    files = _files_in_range(snapshot, _as_date(since), _as_date(until))
    parts = [_read_file(snapshot, add) for add in files.to_pylist()]
    data = pa.concat_tables(parts) if parts else HISTORY_SCHEMA.empty_table()
    if table_uri is not None:
        data = rows_for_table(data, table_uri)
    if since is not None and isinstance(since, dt.datetime):
        data = data.filter(
            pc.greater_equal(data.column("started_at"), pa.scalar(since, data.column("started_at").type))
        )
    return data.sort_by([("started_at", "ascending"), ("row_id", "ascending")]).select(list(COLUMN_NAMES))


def last_runs(rows: pa.Table) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest row per (table URI, operation)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows.sort_by([("started_at", "ascending")]).to_pylist():
        out[(row["table_uri"], row["operation"])] = row
    return out


#: Statuses after which an operation is no longer due (it ran, or found nothing to do).
SETTLED = ("done", "nothing_due")


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
        since = self.measured["started_at"]
        out = []
        for op in self.measured.get("due_operations") or []:
            last = self.last.get(op)
            if last is not None and last["started_at"] >= since and last["status"] in SETTLED:
                continue
            out.append(op)
        return out

    @property
    def why(self) -> list[str]:
        """The measurement's reasons for what is still due (one line each)."""
        due = self.due
        lines = str((self.measured or {}).get("reason") or "").splitlines()
        return [line for line in lines if line.split(":", 1)[0] in due]

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
    operations whose last row was deferred, refused or failed (still open: no later row settled them)."""
    by_table: dict[str, list[dict[str, Any]]] = {}
    for row in rows.sort_by([("started_at", "ascending")]).to_pylist():
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


__all__ = ["TableOverview", "fleet_overview", "last_runs", "read_history", "rows_for_table"]
