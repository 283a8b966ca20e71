"""Appending rows to the maintenance history table, committed with our own transaction.

The table is created on first use (schema of :mod:`deltalog.journal.schema`, partitioned by
``run_date``). Each append writes one Parquet file per day its rows fall on and commits
them as a blind append: concurrent appends from many tasks never conflict, they only
race for the next version, and :class:`deltalog.commit.Transaction` retries the
loser at the next free one, so no row is lost. An app transaction (``txn`` action) makes
an append idempotent: the same (app id, version) lands at most once, and the files of an
append that turned out to be a repeat are deleted again (nothing references them).

A location that holds some other Delta table is refused: the history never writes
rows into a user's data table because of a typo.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.commit import CommitResult, Transaction
from deltalog.create import create_table
from deltalog.errors import InvalidArgumentError, NotADeltaTableError, OperationRefusedError, TableAlreadyExistsError
from deltalog.journal.row import JournalRow, rows_to_arrow
from deltalog.journal.schema import (
    DATA_SCHEMA,
    HISTORY_SCHEMA,
    KIND,
    KIND_PROPERTY,
    OPERATIONS,
    PARTITION_COLUMN,
    SCHEMA_VERSION,
    SCHEMA_VERSION_PROPERTY,
    STATUSES,
    TABLE_PROPERTIES,
)
from deltalog.log import Snapshot, snapshot_at
from deltalog.protocol.file_stats import stats_from_parquet_metadata, stats_json
from deltalog.storage import Storage

log = logging.getLogger(__name__)

TABLE_NAME = "deltalog_maintenance_history"


@dataclass(frozen=True)
class AppendResult:
    """What an append did: the version it committed (or found), rows and files written."""

    uri: str
    version: int
    rows: int
    files: list[str] = field(default_factory=list)
    created: bool = False
    #: True when the app transaction was already recorded: nothing was committed.
    noop: bool = False
    app_id: str | None = None
    app_version: int | None = None
    attempts: int = 1

    def summary_line(self) -> str:
        """One line for logs: rows appended at which version (or why none)."""
        if self.noop:
            return f"history {self.uri}: append {self.app_id} v{self.app_version} already recorded, nothing written"
        return f"history {self.uri}: {self.rows} rows in {len(self.files)} files at version {self.version}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_history_table(snapshot: Snapshot, uri: str) -> int:
    """The table's schema version; refuses a table that is not a deltalog maintenance history."""
    conf = snapshot.metadata.configuration
    if conf.get(KIND_PROPERTY) != KIND:
        raise OperationRefusedError(
            f"refusing to use {uri} as the maintenance history: it is a Delta table without "
            f"{KIND_PROPERTY}={KIND} (give a location of its own, e.g. <lake>/_deltalog/history)"
        )
    try:
        version = int(conf.get(SCHEMA_VERSION_PROPERTY, ""))
    except ValueError:
        raise OperationRefusedError(
            f"the maintenance history {uri} has no readable {SCHEMA_VERSION_PROPERTY}"
        ) from None
    return version


def _open_or_create(uri: str, storage_options: dict[str, Any] | None) -> tuple[Storage, Snapshot, bool]:
    storage = Storage(uri, storage_options)
    created = False
    try:
        snapshot = snapshot_at(storage)
    except NotADeltaTableError:
        try:
            create_table(
                uri,
                HISTORY_SCHEMA,
                partition_by=[PARTITION_COLUMN],
                configuration=TABLE_PROPERTIES,
                storage_options=storage_options,
                name=TABLE_NAME,
                description=f"deltalog maintenance history, schema version {SCHEMA_VERSION}",
            )
            created = True
            log.info("created the maintenance history table at %s (schema version %d)", storage.uri, SCHEMA_VERSION)
        except TableAlreadyExistsError:
            pass  # another writer created it first: append to theirs
        snapshot = snapshot_at(storage)
    version = check_history_table(snapshot, storage.uri)
    if version > SCHEMA_VERSION:
        raise OperationRefusedError(
            f"the maintenance history {storage.uri} has schema version {version}, newer than this deltalog's "
            f"{SCHEMA_VERSION}: upgrade deltalog to append to it"
        )
    return storage, snapshot, created


def prepare_history(uri: str, storage_options: dict[str, Any] | None = None) -> int:
    """Create the history at ``uri`` if it does not exist, check it is one a writer may append to; its version.

    What a command checks before it starts work: a typo in the location, a table that is
    not a history or a history too new for this deltalog is refused before anything runs.
    """
    _, snapshot, _ = _open_or_create(uri, storage_options)
    return snapshot.version


def _data_file(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(rows.select(DATA_SCHEMA.names).cast(DATA_SCHEMA), sink, compression="snappy")
    return sink.getvalue().to_pybytes()


def _write_files(storage: Storage, snapshot: Snapshot, data: pa.Table) -> list[dict[str, Any]]:
    """One Parquet file per day of ``data``; their add actions (stats from the footers)."""
    adds = []
    days = sorted(set(data.column(PARTITION_COLUMN).to_pylist()))
    for day in days:
        part = data.filter(pc.equal(data.column(PARTITION_COLUMN), pa.scalar(day, pa.date32())))
        part = part.sort_by("started_at")
        body = _data_file(part)
        rel = f"{PARTITION_COLUMN}={day.isoformat()}/part-00000-{uuid.uuid4()}.c000.snappy.parquet"
        full = storage.join(rel)
        storage.makedirs(full.rsplit("/", 1)[0])
        storage.write_atomic(full, body)
        stats = stats_from_parquet_metadata(
            pq.read_metadata(pa.BufferReader(body)),
            HISTORY_SCHEMA,
            [PARTITION_COLUMN],
            configuration=snapshot.metadata.configuration,
        )
        adds.append(
            {
                "path": rel,
                "size": len(body),
                "partitionValues": {PARTITION_COLUMN: day.isoformat()},
                "modificationTime": int(time.time() * 1000),
                "dataChange": True,
                "stats": stats_json(stats),
            }
        )
    return adds


def append_rows(
    uri: str,
    rows: Sequence[JournalRow],
    *,
    storage_options: dict[str, Any] | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
) -> AppendResult:
    """Append ``rows`` to the history at ``uri`` (created on first use) in one commit.

    With ``app_id``/``app_version`` the append lands at most once per pair (see the module
    docstring); a repeat returns ``noop=True`` and leaves nothing behind.
    """
    rows = list(rows)
    if not rows or not all(isinstance(r, JournalRow) for r in rows):
        raise InvalidArgumentError("append_rows needs a non-empty list of JournalRow")
    return append_arrow(
        uri, rows_to_arrow(rows), storage_options=storage_options, app_id=app_id, app_version=app_version
    )


def _checked_arrow(data: pa.Table) -> pa.Table:
    """``data`` in the history's schema, or one clear error (a missing column, a null where none may be,
    a type that does not cast, an unknown operation or status)."""
    missing = [f.name for f in HISTORY_SCHEMA if f.name not in data.column_names]
    if missing:
        raise InvalidArgumentError(f"history rows lack the column(s) {', '.join(missing)}")
    columns = []
    for f in HISTORY_SCHEMA:
        column = data.column(f.name)
        if not f.nullable and column.null_count:
            raise InvalidArgumentError(f"history rows have nulls in {f.name}, which may not be null")
        try:
            columns.append(column.cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise InvalidArgumentError(f"history rows' {f.name} is not {f.type}: {exc}") from None
    data = pa.table(columns, schema=HISTORY_SCHEMA)
    for name, allowed in (("operation", OPERATIONS), ("status", STATUSES)):
        unknown = pc.unique(data.column(name).filter(pc.invert(pc.is_in(data.column(name), pa.array(allowed)))))
        if len(unknown):
            raise InvalidArgumentError(
                f"unknown history {name} {unknown[0].as_py()!r}: use one of {', '.join(allowed)}"
            )
    return data


def append_arrow(
    uri: str,
    data: pa.Table,
    *,
    storage_options: dict[str, Any] | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
) -> AppendResult:
    """Append an Arrow table of history rows (every column of the schema) in one commit.

    What :func:`append_rows` does for rows built in Python, for rows made in bulk (an import of
    another system's log, a synthetic fleet's history): one Parquet file per day, one commit.
    """
    if not isinstance(data, pa.Table) or not data.num_rows:
        raise InvalidArgumentError("append_arrow needs a non-empty Arrow table of history rows")
    if (app_id is None) != (app_version is None):
        raise InvalidArgumentError("give app_id and app_version together")
    data = _checked_arrow(data)
    storage, snapshot, created = _open_or_create(uri, storage_options)
    if app_id is not None:
        assert app_version is not None
        done = snapshot.app_transaction_version(app_id)
        if done is not None and done >= app_version:
            log.info("history %s: app transaction %s is at version %d: nothing appended", storage.uri, app_id, done)
            return AppendResult(
                storage.uri, snapshot.version, 0, created=created, noop=True, app_id=app_id, app_version=app_version
            )
    adds = _write_files(storage, snapshot, data)
    txn = Transaction(
        storage,
        snapshot,
        operation="WRITE",
        operation_parameters={"mode": "Append", "partitionBy": json.dumps([PARTITION_COLUMN])},
    )
    txn.add(adds)
    if app_id is not None:
        assert app_version is not None
        txn.set_app_transaction(app_id, app_version)
    result: CommitResult = txn.commit(
        operation_metrics={
            "numFiles": len(adds),
            "numOutputRows": data.num_rows,
            "numOutputBytes": sum(a["size"] for a in adds),
        }
    )
    if result.noop:
        # A concurrent writer recorded the same app transaction first: our files are referenced
        # by no commit, so they go again.
        for a in adds:
            storage.delete(storage.join(a["path"]))
        return AppendResult(
            storage.uri,
            result.version,
            0,
            created=created,
            noop=True,
            app_id=app_id,
            app_version=app_version,
            attempts=result.attempts,
        )
    out = AppendResult(
        storage.uri,
        result.version,
        data.num_rows,
        files=[a["path"] for a in adds],
        created=created,
        app_id=app_id,
        app_version=app_version,
        attempts=result.attempts,
    )
    log.info("%s", out.summary_line())
    return out


__all__ = ["AppendResult", "append_arrow", "append_rows", "check_history_table", "prepare_history"]
