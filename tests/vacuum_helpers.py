"""Helpers for the vacuum tests: commits placed at chosen times, and what is on disk.

Vacuum decides by time (commit times, deletion timestamps, file modification
times), so the tests build histories in the past: each commit's file and the
data files it adds get their modification time set with ``os.utime``, and
remove actions carry the same ``deletionTimestamp``. Free of pytest so the
property test can use it inside hypothesis examples.
"""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from helpers import write_data_file

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def now_ms() -> int:
    return int(time.time() * 1000)


def set_mtime(path: str, ms: int) -> None:
    os.utime(path, (ms / 1000, ms / 1000))


def commit_path(table_path: str, version: int) -> str:
    return os.path.join(table_path, "_delta_log", f"{version:020d}.json")


def commit_at(
    table: DeltaTable,
    at_ms: int,
    adds: list[dict[str, Any]] | None = None,
    removes: list[dict[str, Any]] | None = None,
    operation: str = "WRITE",
) -> int:
    """Commit ``adds``/``removes`` as if at ``at_ms``: commit file and new data files dated then."""
    txn = Transaction(table.storage, table.snapshot(), operation=operation, run_hooks=False)
    if adds:
        txn.add(adds)
    if removes:
        txn.remove([dict(r, deletionTimestamp=at_ms) for r in removes])
    version = txn.commit().version
    set_mtime(commit_path(table.storage.root, version), at_ms)
    for a in adds or []:
        set_mtime(os.path.join(table.storage.root, unquote(a["path"])), at_ms)
    return version


def new_file(
    table: DeltaTable, data: pa.Table, partition: dict[str, str] | None = None, data_change: bool = True
) -> dict[str, Any]:
    add = write_data_file(table.storage.root, data, partition)
    add["dataChange"] = data_change
    return add


def remove_of(add: dict[str, Any], data_change: bool = True) -> dict[str, Any]:
    return {
        "path": add["path"],
        "dataChange": data_change,
        "partitionValues": add.get("partitionValues", {}),
        "size": add["size"],
        "extendedFileMetadata": True,
    }


def files_on_disk(table_path: str) -> set[str]:
    """Every file under the table root outside ``_delta_log``, relative."""
    out = set()
    for dirpath, _dirs, files in os.walk(table_path):
        if os.path.relpath(dirpath, table_path).split(os.sep)[0] == "_delta_log":
            continue
        for name in files:
            out.add(os.path.relpath(os.path.join(dirpath, name), table_path).replace(os.sep, "/"))
    return out


def log_files(table_path: str) -> set[str]:
    return set(os.listdir(os.path.join(table_path, "_delta_log")))


def deltalake_ids(table_path: str, version: int | None = None) -> list[int]:
    """The ``id`` column as deltalake (delta-rs) reads the table at ``version``, sorted."""
    import deltalake

    dt = deltalake.DeltaTable(table_path, version=version)
    return sorted(pa.table(dt.scan(columns=["id"])).column("id").to_pylist())


def make_table_at(path: str, at_ms: int, **kw: Any) -> DeltaTable:
    """``make_table`` with version 0 dated ``at_ms`` (commit times must not go backwards)."""
    from helpers import make_table

    table = make_table(path, **kw)
    set_mtime(commit_path(path, 0), at_ms)
    return table


def z85_encode(data: bytes) -> str:
    """Z85 encoding (4 bytes -> 5 characters), the inverse of the decoder under test."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        out.append("".join(alphabet[(value // 85**k) % 85] for k in range(4, -1, -1)))
    return "".join(out)
