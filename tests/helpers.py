"""Test helpers: build real Delta tables with deltalog's own transaction layer.

Kept free of pytest so benchmarks and subprocess workers can import it too.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog import DeltaTable
from deltalog.commit.result import CommitResult
from deltalog.commit.transaction import Transaction
from deltalog.log.actions import Metadata
from deltalog.protocol.schema import arrow_schema_to_schema_string
from deltalog.protocol.table_protocol import Protocol
from deltalog.storage.filesystem import Storage

DEFAULT_SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string()), ("part", pa.string())])


def make_table(
    path: str,
    schema: pa.Schema = DEFAULT_SCHEMA,
    partition_by: list[str] | None = None,
    configuration: dict[str, str] | None = None,
    protocol: Protocol | None = None,
) -> DeltaTable:
    """Create an empty table at ``path`` (version 0: protocol + metaData)."""
    storage = Storage(path)
    txn = Transaction(storage, None, operation="CREATE TABLE", run_hooks=False)
    txn.update_protocol(protocol or Protocol(1, 2))
    txn.update_metadata(
        Metadata(
            id=str(uuid.uuid4()),
            schema_string=arrow_schema_to_schema_string(schema),
            partition_columns=list(partition_by or []),
            configuration=dict(configuration or {}),
            created_time=0,
        )
    )
    txn.commit()
    return DeltaTable(path)


def write_data_file(table_path: str, data: pa.Table, partition: dict[str, str] | None = None) -> dict[str, Any]:
    """Write one Parquet data file (hive-style partition dirs) and return its add action."""
    rel_dir = "/".join(f"{k}={v}" for k, v in (partition or {}).items())
    name = f"part-{uuid.uuid4().hex}.parquet"
    rel = f"{rel_dir}/{name}" if rel_dir else name
    full = os.path.join(table_path, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    if partition:
        data = data.drop_columns([c for c in partition if c in data.column_names])
    pq.write_table(data, full)
    st = os.stat(full)
    return {
        "path": rel,
        "partitionValues": dict(partition or {}),
        "size": st.st_size,
        "modificationTime": int(st.st_mtime * 1000),
        "dataChange": True,
        "stats": f'{{"numRecords":{data.num_rows}}}',
    }


def append(table: DeltaTable, data: pa.Table, partition: dict[str, str] | None = None, **kw: Any) -> CommitResult:
    """Append one data file in one commit."""
    add = write_data_file(table.storage.root, data, partition)
    txn = Transaction(table.storage, table.snapshot(), operation="WRITE", operation_parameters={"mode": "Append"}, **kw)
    txn.add([add])
    return txn.commit()


def rows(n: int, start: int = 0, part: str = "a") -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "value": pa.array([f"v{i}" for i in range(start, start + n)]),
            "part": pa.array([part] * n),
        }
    )


def table_with_a_removed_file(path: str) -> tuple[DeltaTable, str]:
    """Two rows appended, then their file removed with a deletionTimestamp of 0 (long expired): the table and
    the removed file's table-relative path, which a zero-retention vacuum deletes."""
    table = make_table(path)
    append(table, rows(2))
    snap = table.snapshot()
    old = snap.file_paths()[0]
    txn = Transaction(table.storage, snap, operation="DELETE")
    txn.remove([{"path": old, "dataChange": True, "deletionTimestamp": 0}])
    txn.commit()
    return table, old
