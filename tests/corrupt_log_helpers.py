"""Shared by the corrupt-log tests (test_commit_lines, test_action_checks): every command, run against one table.

Each helper names what a test needs to show that every entry point refuses a corrupt
log the same way and writes or deletes nothing.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.compaction import compact
from deltalog.errors import CorruptLogError
from deltalog.ingest import commit_request
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.log_maintenance.manifest import generate_manifest
from deltalog.storage.filesystem import Storage
from deltalog.vacuuming import vacuum
from helpers import append, make_table, rows


def fingerprint(root: str) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, root)] = hashlib.md5(fh.read()).hexdigest()
    return out


#: A data file waiting to be committed, in every test table: a commit request names it.
NEW_FILE = "part=a/new.parquet"


def two_appends(path: str) -> DeltaTable:
    """The tests' base table: v0 create (partitioned by ``part``), v1 appends to part=a, v2 to part=b."""
    table = make_table(path, partition_by=["part"])
    append(table, rows(3, part="a"), partition={"part": "a"})
    append(table, rows(3, start=3, part="b"), partition={"part": "b"})
    return DeltaTable(path)


def put_data_file(storage: Storage, rel: str = NEW_FILE) -> None:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array([99], pa.int64()), "value": ["x"]}), buf)
    storage.write_atomic(storage.join(rel), buf.getvalue())


def api_commands(uri: str, options: dict[str, Any] | None) -> dict[str, Callable[[], Any]]:
    """Every reading, writing and deleting entry point, as the library exposes it."""

    def t() -> DeltaTable:
        return DeltaTable(uri, options)

    def commit() -> Any:  # NEW_FILE was put in place before the damage (see put_data_file)
        return commit_request(t(), {"add": [{"path": NEW_FILE, "partitionValues": {"part": "a"}}]}, run_hooks=False)

    def append_txn() -> Any:
        txn = Transaction(t().storage, t().snapshot(), operation="WRITE", run_hooks=False)
        txn.set_app_transaction("app", 1)
        return txn.commit()

    return {
        "snapshot": lambda: t().snapshot(),
        "history": lambda: t().history(),
        "health": lambda: t().health(),
        "vacuum": lambda: vacuum(t(), retention_hours=0, allow_short_retention=True),
        "vacuum dry run": lambda: vacuum(t(), retention_hours=0, allow_short_retention=True, dry_run=True),
        "vacuum lite": lambda: vacuum(t(), retention_hours=0, allow_short_retention=True, mode="lite"),
        "checkpoint": lambda: create_checkpoint(t()),
        "cleanup-log": lambda: cleanup_log(t()),
        "manifest": lambda: generate_manifest(t(), full=True),
        "compact": lambda: compact(t(), target_size=1 << 20),
        "commit": commit,
        "idempotent commit": lambda: commit_request(
            t(),
            {"add": [{"path": NEW_FILE, "partitionValues": {"part": "a"}}]},
            app_id="app",
            txn_version=99,
            run_hooks=False,
        ),
        "transaction": append_txn,
    }


def refusals(uri: str, options: dict[str, Any] | None = None) -> dict[str, str]:
    """Each command's CorruptLogError message (anything else propagates and fails the test)."""
    out = {}
    for name, run in api_commands(uri, options).items():
        with pytest.raises(CorruptLogError) as info:
            run()
        out[name] = str(info.value)
    return out


CLI_COMMANDS = [
    ["snapshot", "{t}", "--json"],
    ["snapshot", "{t}"],
    ["history", "{t}", "--json"],
    ["health", "{t}"],
    ["vacuum", "{t}", "--retention-hours", "0", "--allow-short-retention"],
    ["vacuum", "{t}", "--retention-hours", "0", "--allow-short-retention", "--dry-run", "--mode", "lite"],
    ["checkpoint", "{t}"],
    ["cleanup-log", "{t}"],
    ["manifest", "{t}", "--full"],
    ["compact", "{t}", "--plan-only"],
    ["compact", "{t}"],
    ["commit", "{t}", "--request", "{request}"],
]


def s3_fingerprint(fs, uri: str) -> dict[str, str]:
    root = uri.removeprefix("s3://")
    return {p: hashlib.md5(fs.cat_file(p)).hexdigest() for p in fs.find(root)}


def cli_refusals(table: str, request: str, capsys: Any) -> set[str]:
    """Run every CLI command on ``table``: each must exit 2 with one ``error:`` line; the set of those lines."""
    from deltalog.cli import main

    lines = set()
    for argv in CLI_COMMANDS:
        args = [a.format(t=table, request=request) for a in argv]
        assert main(args) == 2, args
        captured = capsys.readouterr()
        assert captured.out == "", args
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in captured.err, (args, captured.err)
        lines.add(err[0])
    return lines


def write_request(path: str) -> str:
    """A commit request adding NEW_FILE, written to ``path``."""
    import json

    with open(path, "w") as fh:
        json.dump({"add": [{"path": NEW_FILE, "partitionValues": {"part": "a"}}]}, fh)
    return path


def copy_to_s3(local: str, uri: str, options: dict[str, Any]) -> Any:
    """Upload the table folder ``local`` to ``uri``; returns the filesystem."""
    fs = Storage(uri, options).fs
    fs.put(local + "/", uri.removeprefix("s3://") + "/", recursive=True)
    return fs
