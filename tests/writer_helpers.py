"""Tables with DML writers beside them (issue 43), for the writer-aware tests: free of pytest.

The writers' commits are real commits (deltalog's transaction: the table stays valid) shaped as
Delta Spark writes them: an UPDATE pinned to a partition (``(part#1 = b)``) or reading the whole
table, with ``executionTimeMs``; their commit times are set on the files, which is what a
commit's timestamp is read from without in-commit timestamps.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from deltalog.commit.transaction import Transaction
from deltalog.log.load import snapshot_at
from deltalog.storage.filesystem import Storage
from handmade_logs import set_commit_time
from helpers import append, make_table, rows, write_data_file


def writer_commit(path: str, part: str | None, ran_ms: int, *, predicate: str | None = None) -> int:
    """An UPDATE that rewrote rows into one new file of ``part`` (None: an unpartitioned table); its version."""
    storage = Storage(path)
    snap = snapshot_at(storage)
    add = write_data_file(path, rows(2, start=900, part=part or "x"), {"part": part} if part else None)
    pred = predicate or (f"(part#1 = {part})" if part else "(id#1L = 5)")
    txn = Transaction(storage, snap, operation="UPDATE", operation_parameters={"predicate": json.dumps([pred])})
    txn.add([add])
    return txn.commit({"executionTimeMs": ran_ms, "numUpdatedRows": 2}).version


def partitioned(
    folder: Path, *, cycle_ms: int, ran_ms: int, last_ago_ms: int, commits: int = 5, pins: tuple[str, ...] = ("b",)
) -> str:
    """Three small files in ``part=a`` (no writer there) and three in each partition of ``pins`` (``b``),
    then ``commits`` UPDATEs ``cycle_ms`` apart, each pinning the next partition of ``pins`` in turn and
    running ``ran_ms``, the last ``last_ago_ms`` ago; the table's path."""
    path = str(folder / "t")
    table = make_table(path, partition_by=["part"])
    for part in ("a", *pins):
        for i in range(3):
            append(table, rows(3, start=10 * i, part=part), {"part": part})
    now = int(time.time() * 1000)
    for v in range(3 * (1 + len(pins)) + 1):  # the table's own history: an hour old (commit times only ever grow)
        set_commit_time(path, v, now - 3_600_000 + v)
    for i in range(commits):
        v = writer_commit(path, pins[i % len(pins)], ran_ms)
        set_commit_time(path, v, now - last_ago_ms - (commits - 1 - i) * cycle_ms)
    return path


def rewrite_partition(path: str, part: str, ran_ms: int) -> int:
    """An UPDATE of every row of ``part`` (copy-on-write): every live file there removed, one new one added; its version."""
    storage = Storage(path)
    snap = snapshot_at(storage)
    mine = [
        p
        for p, pv in zip(snap.files.column("path").to_pylist(), snap.files.column("partitionValues").to_pylist())
        if dict(pv or []).get("part") == part
    ]
    txn = Transaction(
        storage, snap, operation="UPDATE", operation_parameters={"predicate": json.dumps([f"(part#1 = {part})"])}
    )
    txn.remove([{"path": p, "dataChange": True, "partitionValues": {"part": part}} for p in mine])
    txn.add([write_data_file(path, rows(4, start=700, part=part), {"part": part})])
    txn.add([write_data_file(path, rows(4, start=800, part=part), {"part": part})])
    return txn.commit({"executionTimeMs": ran_ms, "numUpdatedRows": 8}).version
