"""Shared by the corrupt-log tests (test_commit_lines, test_action_checks): every command, run against one table.

Each helper names what a test needs to show that every entry point refuses a corrupt
log the same way and writes or deletes nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
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
    with open(path, "w") as fh:
        json.dump({"add": [{"path": NEW_FILE, "partitionValues": {"part": "a"}}]}, fh)
    return path


def copy_to_s3(local: str, uri: str, options: dict[str, Any]) -> Any:
    """Upload the table folder ``local`` to ``uri``; returns the filesystem."""
    fs = Storage(uri, options).fs
    fs.put(local + "/", uri.removeprefix("s3://") + "/", recursive=True)
    return fs


def base_table(path: str) -> None:
    """v0 create (partitioned by ``part``), v1 and v2 append, v3 records app transaction ("app", 7)."""
    t = two_appends(path)
    txn = Transaction(t.storage, t.snapshot(), operation="WRITE", run_hooks=False)
    txn.set_app_transaction("app", 7)
    txn.commit()
    put_data_file(Storage(path))


def edit_action(
    path: str, kind: str, edit: Callable[[dict[str, Any]], None], name: str | None = None
) -> tuple[str, int]:
    """Apply ``edit`` to the newest ``kind`` action in the commits (or in commit file ``name``); its file and line."""
    log = os.path.join(path, "_delta_log")
    names = (
        [name] if name else sorted((n for n in os.listdir(log) if n.endswith(".json") and len(n) == 25), reverse=True)
    )
    for commit in names:
        with open(os.path.join(log, commit), "rb") as fh:
            lines = fh.read().split(b"\n")
        for i, line in enumerate(lines):
            if line.startswith(b'{"' + kind.encode() + b'":'):
                action = json.loads(line)
                edit(action[kind])
                lines[i] = json.dumps(action).encode()
                with open(os.path.join(log, commit), "wb") as fh:
                    fh.write(b"\n".join(lines))
                return commit, i + 1
    raise AssertionError(f"no {kind} action in the log")


def assert_replay_paths_agree(path: str, monkeypatch: Any) -> str:
    """The Arrow replay and the exact per-line one refuse ``path`` with the same message; that message."""
    import deltalog.log.snapshot as snapshot_module

    with pytest.raises(CorruptLogError) as arrow:
        DeltaTable(path).snapshot()
    monkeypatch.setattr(snapshot_module, "_replay_commits_arrow", lambda contents: None)
    with pytest.raises(CorruptLogError) as per_line:
        DeltaTable(path).snapshot()
    assert str(arrow.value) == str(per_line.value)
    return str(arrow.value)


def assert_checkpoint_refused(path: str, cp_path: str, kind: str, needle: str) -> None:
    """Every command refuses ``path`` alike, naming the checkpoint and its invalid ``kind`` action; nothing written."""
    from deltalog.errors import CorruptCheckpointError

    before = fingerprint(path)
    messages = refusals(path)
    assert len(set(messages.values())) == 1, messages
    message = next(iter(messages.values()))
    assert message.startswith(f"checkpoint {os.path.basename(cp_path)}: the {kind} action is invalid"), message
    assert needle in message, message
    with pytest.raises(CorruptCheckpointError):
        DeltaTable(path).snapshot()
    assert fingerprint(path) == before


def checkpointed(path: str, drop_commits: bool) -> str:
    """``base_table`` plus a deltalog checkpoint at v3; with ``drop_commits`` the commits before it are gone."""
    base_table(path)
    create_checkpoint(DeltaTable(path))
    log = os.path.join(path, "_delta_log")
    (cp,) = [n for n in os.listdir(log) if ".checkpoint." in n]
    if drop_commits:
        for v in range(3):
            os.unlink(os.path.join(log, f"{v:020d}.json"))
    return os.path.join(log, cp)


def rewrite_checkpoint_field(cp_path: str, kind: str, field: str, value: Any) -> None:
    """Set ``kind.field`` to ``value`` in every checkpoint row that holds a ``kind`` action."""
    table = pq.read_table(cp_path)
    column = table.column(kind).combine_chunks()
    values = [value if valid else None for valid in column.is_valid().to_pylist()]
    children, names = [], []
    for i in range(column.type.num_fields):
        name = column.type.field(i).name
        names.append(name)
        children.append(pa.array(values) if name == field else column.field(i))
    if field not in names:
        names.append(field)
        children.append(pa.array(values))
    struct = pa.StructArray.from_arrays(children, names=names, mask=column.is_null())
    table = table.set_column(table.schema.get_field_index(kind), kind, struct)
    pq.write_table(table, cp_path)
