"""An action a later commit supersedes makes only the versions it governs unreadable (issue 30, item 3).

A real table written by a managed pipeline service starts with a ``metaData`` whose
``schemaString`` is null, a placeholder the next commit replaces with the full one.
Every command used to refuse the whole table; Delta Spark and deltalake read its latest
version. Now the latest version reads and is maintained, while time travel to the
placeholder's version is one clear error. The same holds for a protocol, a txn of one
application and a domainMetadata of one domain that a newer one replaces; the versions
being read are checked as before, and vacuum still refuses a malformed file action in a
commit of its retention window, which it must read.
"""

from __future__ import annotations

import json
import os
import uuid

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corrupt_log_helpers import api_commands, base_table, edit_action, fingerprint
from deltalog import DeltaTable
from deltalog.errors import CorruptLogError
from deltalog.log_maintenance import create_checkpoint
from handmade_logs import add_action, field, metadata_action, write_commit

FIELDS = [field("id", "long"), field("s", "string")]


def _data_file(path: str, start: int) -> dict:
    name = f"part-{uuid.uuid4().hex}.parquet"
    pq.write_table(
        pa.table({"id": pa.array(range(start, start + 3), pa.int64()), "s": ["x", "y", "z"]}), f"{path}/{name}"
    )
    stats = {"numRecords": 3, "minValues": {"id": start, "s": "x"}, "maxValues": {"id": start + 2, "s": "z"}}
    return add_action(path, name, {**stats, "nullCount": {"id": 0, "s": 0}})


def placeholder_table(path: str) -> None:
    """v0: protocol + a metaData with a null schemaString; v1: the full metaData; v2, v3: appends."""
    table_id = str(uuid.uuid4())
    info = {"commitInfo": {"timestamp": 1, "operation": "CREATE TABLE"}}
    protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
    write_commit(path, 0, [info, protocol, metadata_action(None, table_id=table_id)])
    change = {"commitInfo": {"timestamp": 2, "operation": "CHANGE COLUMN"}}
    write_commit(path, 1, [change, metadata_action(FIELDS, table_id=table_id)])
    write_commit(path, 2, [{"commitInfo": {"timestamp": 3, "operation": "WRITE"}}, _data_file(path, 0)])
    write_commit(path, 3, [{"commitInfo": {"timestamp": 4, "operation": "WRITE"}}, _data_file(path, 3)])


def ids(path: str, version: int | None = None) -> list[int]:
    dt = deltalake.DeltaTable(path, version=version)
    return sorted(dt.to_pyarrow_table().column("id").to_pylist())


def test_the_latest_version_reads_and_the_placeholder_version_is_one_clear_error(tmp_path, capsys):
    from deltalog.cli import main

    path = str(tmp_path / "t")
    placeholder_table(path)
    snap = DeltaTable(path).snapshot()
    assert snap.version == 3 and snap.schema.names == ["id", "s"] and snap.num_files == 2
    with pytest.raises(CorruptLogError) as info:
        DeltaTable(path).snapshot(version=0)
    message = str(info.value)
    assert (
        "00000000000000000000.json: line 3: the metaData action is invalid: 'schemaString' must be a string" in message
    )
    assert DeltaTable(path).snapshot(version=1).num_files == 0
    assert main(["snapshot", path, "--version", "0"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and "'schemaString'" in line
    assert main(["snapshot", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 3
    # deltalake 1.6 decodes every commit's metaData strictly and refuses the null placeholder; from our
    # checkpoint of the latest version (which no longer holds it) it reads the table.
    create_checkpoint(DeltaTable(path))
    assert ids(path) == list(range(6))


def test_every_command_works_on_the_latest_version(tmp_path):
    from deltalog.ingest import commit_request

    path = str(tmp_path / "t")
    placeholder_table(path)
    pq.write_table(pa.table({"id": pa.array([99], pa.int64()), "s": ["n"]}), os.path.join(path, "new.parquet"))
    commands = api_commands(path, None)
    commit_request(path, {"add": [{"path": "new.parquet"}]}, run_hooks=False)
    for name in ["transaction", "snapshot", "history", "health", "checkpoint", "compact", "manifest", "cleanup-log"]:
        commands[name]()  # none refuses the table
    for name in ["vacuum dry run", "vacuum", "vacuum lite"]:
        commands[name]()
    snap = DeltaTable(path).snapshot()
    assert snap.num_files == 1 and snap.app_transaction_version("app") == 1  # compacted; the txn committed
    assert ids(path) == sorted([*range(6), 99])  # compacted, vacuumed, and deltalake reads it


def test_maintenance_keeps_the_table_readable_by_deltalake(tmp_path):
    from deltalog.compaction import compact
    from deltalog.vacuuming import vacuum

    path = str(tmp_path / "t")
    placeholder_table(path)
    create_checkpoint(DeltaTable(path))
    compact(path, target_size=1 << 20)
    vacuum(path, retention_hours=0, allow_short_retention=True)
    assert ids(path) == list(range(6))


def _two_txns(path: str) -> None:
    base_table(path)  # v3 records ("app", 7)
    t = DeltaTable(path)
    from deltalog.commit.transaction import Transaction

    txn = Transaction(t.storage, t.snapshot(), operation="WRITE", run_hooks=False)
    txn.set_app_transaction("app", 8)
    txn.commit()  # v4


@pytest.mark.parametrize(
    ("kind", "edit", "governed"),
    [
        ("txn", lambda b: b.update(version="7"), 3),
        ("protocol", lambda b: b.update(minWriterVersion="2"), 3),
        ("metaData", lambda b: b.update(configuration={"k": 1}), 3),
    ],
)
def test_a_superseded_action_makes_only_the_versions_it_governs_unreadable(tmp_path, kind, edit, governed):
    path = str(tmp_path / "t")
    _two_txns(path)
    t = DeltaTable(path)
    from deltalog.commit.transaction import Transaction

    snap = t.snapshot()
    txn = Transaction(t.storage, snap, operation="SET TBLPROPERTIES", run_hooks=False)
    txn.update_protocol(snap.protocol)
    txn.update_metadata(snap.metadata)
    txn.commit()  # v5: a newer protocol and metaData replace the older ones
    log = os.path.join(path, "_delta_log")
    target = f"{governed:020d}.json" if kind == "txn" else f"{0:020d}.json"
    lines = open(os.path.join(log, target)).read().splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f'{{"{kind}"'):
            action = json.loads(line)
            edit(action[kind])
            lines[i] = json.dumps(action)
    open(os.path.join(log, target), "w").write("\n".join(lines) + "\n")
    latest = DeltaTable(path).snapshot()
    assert latest.version == 5 and latest.app_transaction_version("app") == 8
    with pytest.raises(CorruptLogError, match=f"{target}: line \\d+: the {kind} action is invalid"):
        DeltaTable(path).snapshot(version=governed)
    before = fingerprint(path)
    from deltalog.vacuuming import vacuum

    vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True)
    assert fingerprint(path) == before


def test_the_version_read_is_still_checked_in_full(tmp_path):
    path = str(tmp_path / "t")
    _two_txns(path)
    edit_action(path, "txn", lambda b: b.update(version="8"))  # the newest txn of "app"
    with pytest.raises(CorruptLogError, match="the txn action is invalid"):
        DeltaTable(path).snapshot()


def test_vacuum_still_refuses_a_malformed_file_action_in_a_commit_it_must_read(tmp_path):
    """Commits before the checkpoint are not replayed by the snapshot, but vacuum reads those of its window."""
    from deltalog.vacuuming import vacuum

    path = str(tmp_path / "t")
    base_table(path)
    create_checkpoint(DeltaTable(path))
    bad = {"storageType": "z", "pathOrInlineDv": "x", "sizeInBytes": 1, "cardinality": 1}
    log = os.path.join(path, "_delta_log")
    name = f"{1:020d}.json"
    lines = open(os.path.join(log, name)).read().splitlines()
    lineno = next(i for i, line in enumerate(lines) if line.startswith('{"add"'))
    action = json.loads(lines[lineno])
    action["add"]["deletionVector"] = bad
    lines[lineno] = json.dumps(action)
    open(os.path.join(log, name), "w").write("\n".join(lines) + "\n")
    assert DeltaTable(path).snapshot().version == 3  # the checkpoint stands for commit 1
    before = fingerprint(path)
    with pytest.raises(CorruptLogError, match=f"{name}: line {lineno + 1}: the add action is invalid"):
        vacuum(path, dry_run=True)  # a week's retention: commit 1 is in the window
    assert fingerprint(path) == before


@pytest.mark.slow
@pytest.mark.spark
def test_delta_spark_reads_the_same_latest_version_before_and_after_our_maintenance(tmp_path, delta_spark):
    from deltalog.compaction import compact

    path = str(tmp_path / "t")
    placeholder_table(path)
    read = lambda: sorted(r.id for r in delta_spark.read.format("delta").load(path).collect())  # noqa: E731
    assert read() == list(range(6))  # Delta Spark reads the latest version (deltalake 1.6 refuses the placeholder)
    create_checkpoint(DeltaTable(path))
    compact(path, target_size=1 << 20)
    assert read() == ids(path) == list(range(6))
