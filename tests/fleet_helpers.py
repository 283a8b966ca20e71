"""Builders of small tables with one maintenance need each (fleet tests, benchmark, demo).

Free of pytest so the fleet benchmark and ``scripts/demo.py`` can import them.
Old histories are made by setting file modification times (and deletion
timestamps) in the past, as the log cleanup and vacuum tests do.
"""

from __future__ import annotations

import json
import os
import time
import uuid

from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.log_maintenance import create_checkpoint
from deltalog.protocol.table_protocol import Protocol
from helpers import DEFAULT_SCHEMA, append, make_table, rows, write_data_file

DAY_MS = 86_400_000


def now_ms() -> int:
    return int(time.time() * 1000)


def _commit_path(path: str, version: int) -> str:
    return os.path.join(path, "_delta_log", f"{version:020d}.json")


def healthy_table(path: str) -> DeltaTable:
    """One data file, three commits: nothing to do."""
    t = make_table(path)
    append(t, rows(5))
    return t


def small_files_table(path: str, n: int = 6) -> DeltaTable:
    """``n`` one-file appends to one partition: compaction finds one bin."""
    t = make_table(path)
    for i in range(n):
        append(t, rows(3, start=i * 3))
    return t


def one_small_file_per_partition(path: str, partitions: int = 4) -> DeltaTable:
    """A partitioned table with one small file per partition: a high small-file share, but no bin."""
    t = make_table(path, partition_by=["part"])
    for i in range(partitions):
        append(t, rows(3, start=i * 3, part=f"p{i}"), partition={"part": f"p{i}"})
    return t


def long_log_table(path: str, commits: int = 12) -> DeltaTable:
    """``commits`` appends to distinct partitions with no checkpoint: a checkpoint is due, compaction is not."""
    t = make_table(path, partition_by=["part"])
    for i in range(commits):
        append(t, rows(2, start=i * 2, part=f"p{i}"), partition={"part": f"p{i}"})
    return t


def expired_log_table(path: str, days: int = 40) -> DeltaTable:
    """Commits and a checkpoint older than the 30-day log retention, then one fresh commit."""
    t = make_table(path, partition_by=["part"])
    append(t, rows(2, part="p0"), partition={"part": "p0"})
    append(t, rows(2, start=2, part="p1"), partition={"part": "p1"})
    create_checkpoint(t, version=2)
    base = now_ms() - days * DAY_MS
    for v in range(3):
        os.utime(_commit_path(path, v), ((base + v * 1000) / 1000,) * 2)
    cp = os.path.join(path, "_delta_log", f"{2:020d}.checkpoint.parquet")
    os.utime(cp, ((base + 2000) / 1000,) * 2)
    append(t, rows(2, start=4, part="p2"), partition={"part": "p2"})
    return t


def reclaimable_table(path: str, days: int = 10) -> DeltaTable:
    """A file removed (by a commit) ``days`` ago, still on disk: past the 7-day retention, vacuum reclaims it."""
    t = make_table(path)
    add = write_data_file(path, rows(4))
    txn = Transaction(t.storage, t.snapshot(), operation="WRITE", run_hooks=False)
    txn.add([add])
    txn.commit()
    gone = now_ms() - days * DAY_MS
    txn = Transaction(t.storage, t.snapshot(), operation="DELETE", run_hooks=False)
    txn.remove(
        [
            {
                "path": add["path"],
                "dataChange": True,
                "partitionValues": {},
                "size": add["size"],
                "deletionTimestamp": gone,
                "extendedFileMetadata": True,
            }
        ]
    )
    txn.commit()
    os.utime(os.path.join(path, add["path"]), (gone / 1000 - 1,) * 2)
    for v in range(3):  # the whole history is as old as the removal: no retained version needs the file
        os.utime(_commit_path(path, v), ((gone + v - 3) / 1000,) * 2)
    return t


def refused_protocol_table(path: str) -> DeltaTable:
    """A catalog-managed table: deltalog reads it but refuses every maintenance operation (the catalog owns them)."""
    os.makedirs(os.path.join(path, "_delta_log"), exist_ok=True)
    from deltalog.protocol.schema import arrow_schema_to_schema_string

    protocol = Protocol(3, 7, ("catalogManaged",), ("catalogManaged", "inCommitTimestamp"))
    lines = [
        {"protocol": protocol.to_dict()},
        {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": arrow_schema_to_schema_string(DEFAULT_SCHEMA),
                "partitionColumns": [],
                "configuration": {"io.unitycatalog.tableId": "t-123"},
                "createdTime": now_ms(),
            }
        },
    ]
    for i in range(3):
        add = write_data_file(path, rows(2, start=i * 2))
        lines.append({"add": add})
    with open(_commit_path(path, 0), "w") as fh:
        fh.write("\n".join(json.dumps(x) for x in lines) + "\n")
    return DeltaTable(path)


#: name -> builder: the demo fleet (one table per need).
FLEET = {
    "healthy": healthy_table,
    "small_files": small_files_table,
    "expired_log": expired_log_table,
    "refused_protocol": refused_protocol_table,
}
