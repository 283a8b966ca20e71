"""Symlink-format manifests: contents equal the snapshot's files, incremental equals full, stale ones go."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import deltalake
import pyarrow as pa
import pytest

from deltalog import DeltaTable
from deltalog.cli import main
from deltalog.commit.transaction import Transaction
from deltalog.errors import OperationRefusedError
from deltalog.log_maintenance.manifest import MANIFEST_DIR, MARKER_NAME, generate_manifest, partition_dir
from deltalog.protocol.table_protocol import Protocol
from helpers import append, make_table, rows, write_data_file

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA2 = pa.schema([("id", pa.int64()), ("value", pa.string()), ("part", pa.string()), ("n", pa.int32())])


def manifest_tree(path: str) -> dict[str, list[str]]:
    """{partition dir: manifest lines} of everything under _symlink_format_manifest (the marker excluded)."""
    root = os.path.join(path, MANIFEST_DIR)
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name == MARKER_NAME:
                continue
            assert name == "manifest", name
            rel = os.path.relpath(dirpath, root)
            out["" if rel == "." else rel] = open(os.path.join(dirpath, name)).read().splitlines()
    return out


def expected_tree(path: str) -> dict[str, list[str]]:
    """What the manifests must say, computed independently from the snapshot."""
    snap = DeltaTable(path).snapshot()
    out: dict[str, list[str]] = {}
    for p, pv in zip(snap.file_paths(), snap.files.column("partitionValues").to_pylist()):
        d = partition_dir(snap.partition_columns, dict(pv or []))
        out.setdefault(d, []).append("file://" + os.path.join(os.path.abspath(path), p))
    return {d: sorted(v) for d, v in out.items()}


def deltalake_uris(path: str) -> set[str]:
    return {"file://" + u for u in deltalake.DeltaTable(path).file_uris()}


def remove_partition(t: DeltaTable, values: dict[str, str], with_values: bool = False) -> None:
    """Remove every file of a partition (``partitionValues`` in the removes only if ``with_values``: it is optional)."""
    snap = t.snapshot()
    doomed = [
        {
            "path": p,
            "deletionTimestamp": 1,
            "dataChange": True,
            **({"partitionValues": dict(pv)} if with_values else {}),
        }
        for p, pv in zip(snap.file_paths(), snap.files.column("partitionValues").to_pylist())
        if all(dict(pv).get(k) == v for k, v in values.items())
    ]
    txn = Transaction(t.storage, snap, operation="DELETE")
    txn.remove(doomed)
    txn.commit()


def add_file(t: DeltaTable, part: str | None, n: str | None) -> None:
    data = pa.table({"id": pa.array([1], pa.int64()), "value": ["x"]})
    add = write_data_file(t.storage.root, data, {"part": part or "null", "n": n or "null"})
    add["partitionValues"] = {"part": part, "n": n}
    txn = Transaction(t.storage, t.snapshot(), operation="WRITE")
    txn.add([add])
    txn.commit()


def test_unpartitioned_manifest_lists_every_live_file(table_path):
    t = make_table(table_path)
    for i in range(3):
        append(t, rows(2, i * 2))
    snap = t.snapshot()
    txn = Transaction(t.storage, snap, operation="DELETE")
    txn.remove([{"path": snap.file_paths()[0], "deletionTimestamp": 1, "dataChange": True}])
    txn.commit()
    result = generate_manifest(t)
    assert result.mode == "full" and result.manifests_written == [f"{MANIFEST_DIR}/manifest"]
    tree = manifest_tree(table_path)
    assert list(tree) == [""] and len(tree[""]) == 2 == result.num_files
    assert set(tree[""]) == deltalake_uris(table_path)
    assert all(os.path.exists(u.removeprefix("file://")) for u in tree[""])
    marker = json.load(open(os.path.join(table_path, MANIFEST_DIR, MARKER_NAME)))
    assert marker["version"] == 4 and marker["tableId"] == snap.metadata.id
    assert MARKER_NAME.startswith("_")  # hidden from Hive/Presto/Trino/Athena listings


def test_partitioned_manifests_one_per_partition_with_hive_escaping(table_path):
    t = make_table(table_path, SCHEMA2, partition_by=["part", "n"])
    for part, n in [("a", "1"), ("a", "2"), ("b/c:d", "1"), (None, "1"), ("a", "1")]:
        add_file(t, part, n)
    generate_manifest(t)
    tree = manifest_tree(table_path)
    assert set(tree) == {"part=a/n=1", "part=a/n=2", "part=b%2Fc%3Ad/n=1", "part=__HIVE_DEFAULT_PARTITION__/n=1"}
    assert len(tree["part=a/n=1"]) == 2
    assert tree == expected_tree(table_path)
    assert {u for lines in tree.values() for u in lines} == deltalake_uris(table_path)


def test_incremental_refreshes_equal_a_full_generation(table_path):
    t = make_table(table_path, partition_by=["part"])
    for i in range(3):
        append(t, rows(1, i, part=f"p{i}"), partition={"part": f"p{i}"})
    assert generate_manifest(t).mode == "full"
    steps = [
        lambda: append(t, rows(1, 10, part="p0"), partition={"part": "p0"}),
        lambda: append(t, rows(1, 11, part="p9"), partition={"part": "p9"}),
        lambda: remove_partition(t, {"part": "p1"}),  # p1 becomes empty
        lambda: (
            append(t, rows(1, 12, part="p2"), partition={"part": "p2"}),
            remove_partition(t, {"part": "p9"}, with_values=True),
        ),
    ]
    for step in steps:
        step()
        result = generate_manifest(t)
        assert result.mode == "incremental" and result.full_reason is None
        assert manifest_tree(table_path) == expected_tree(table_path)
    assert not os.path.exists(os.path.join(table_path, MANIFEST_DIR, "part=p1"))  # the empty dir went too
    before = manifest_tree(table_path)
    full = generate_manifest(t, full=True)
    assert full.mode == "full" and manifest_tree(table_path) == before
    assert full.manifests_deleted == []


def test_incremental_only_rewrites_touched_partitions(table_path):
    t = make_table(table_path, partition_by=["part"])
    for i in range(3):
        append(t, rows(1, i, part=f"p{i}"), partition={"part": f"p{i}"})
    generate_manifest(t)
    append(t, rows(1, 5, part="p1"), partition={"part": "p1"})
    result = generate_manifest(t)
    assert result.since_version == 3 and result.manifests_written == [f"{MANIFEST_DIR}/part=p1/manifest"]
    assert generate_manifest(t).manifests_written == []  # nothing changed since


def test_full_generation_deletes_stale_partition_manifests(table_path):
    t = make_table(table_path, partition_by=["part"])
    append(t, rows(1, 0, part="a"), partition={"part": "a"})
    stale = os.path.join(table_path, MANIFEST_DIR, "part=gone")
    os.makedirs(stale)
    with open(os.path.join(stale, "manifest"), "w") as fh:
        fh.write("file:///nowhere/x.parquet\n")
    result = generate_manifest(t, full=True)
    assert result.manifests_deleted == [f"{MANIFEST_DIR}/part=gone/manifest"]
    assert not os.path.exists(stale)
    assert manifest_tree(table_path) == expected_tree(table_path)


@pytest.mark.parametrize("damage", ["no-marker", "other-table", "commits-gone"])
def test_an_untrustworthy_marker_means_a_full_generation(table_path, damage):
    t = make_table(table_path, partition_by=["part"])
    append(t, rows(1, 0, part="a"), partition={"part": "a"})
    generate_manifest(t)
    append(t, rows(1, 1, part="b"), partition={"part": "b"})
    marker = os.path.join(table_path, MANIFEST_DIR, MARKER_NAME)
    if damage == "no-marker":
        os.unlink(marker)
    elif damage == "other-table":
        doc = json.load(open(marker))
        doc["tableId"] = "someone-else"
        json.dump(doc, open(marker, "w"))
    else:
        from deltalog.log_maintenance import create_checkpoint

        create_checkpoint(t)
        os.unlink(os.path.join(table_path, "_delta_log", f"{2:020d}.json"))
    result = generate_manifest(t)
    assert result.mode == "full" and result.full_reason
    assert manifest_tree(table_path) == expected_tree(table_path)


def test_deletion_vectors_in_live_files_are_refused(table_path):
    t = make_table(table_path, protocol=Protocol(3, 7, ("deletionVectors",), ("deletionVectors",)))
    add = write_data_file(table_path, rows(3))
    add["deletionVector"] = {
        "storageType": "i",
        "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
        "sizeInBytes": 40,
        "cardinality": 1,
    }
    txn = Transaction(t.storage, t.snapshot(), operation="DELETE")
    txn.add([add])
    txn.commit()
    with pytest.raises(OperationRefusedError, match="deletion vectors"):
        generate_manifest(t)
    assert not os.path.exists(os.path.join(table_path, MANIFEST_DIR))


def test_column_mapping_is_refused(table_path):
    schema = pa.schema(
        [pa.field("id", pa.int64(), metadata={"delta.columnMapping.id": "1", "delta.columnMapping.physicalName": "c1"})]
    )
    t = make_table(
        table_path,
        schema,
        configuration={"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "1"},
        protocol=Protocol(2, 5),
    )
    with pytest.raises(OperationRefusedError, match="column mapping"):
        generate_manifest(t)
    assert not os.path.exists(os.path.join(table_path, MANIFEST_DIR))


CRASH_SCRIPT = """
import os, sys
sys.path.insert(0, {here!r})
import deltalog.storage.filesystem as storage_mod
from deltalog.log_maintenance.manifest import generate_manifest
real = storage_mod.Storage.write_atomic
written = []
def write_atomic(self, path, data):
    if path.endswith("/manifest"):
        written.append(path)
        if len(written) == 2:
            os._exit(9)
    return real(self, path, data)
storage_mod.Storage.write_atomic = write_atomic
generate_manifest({table!r})
"""


def test_crash_mid_generation_then_a_rerun_completes(table_path):
    t = make_table(table_path, partition_by=["part"])
    for i in range(3):
        append(t, rows(1, i, part=f"p{i}"), partition={"part": f"p{i}"})
    generate_manifest(t)
    for i in range(3):
        append(t, rows(1, 10 + i, part=f"p{i}"), partition={"part": f"p{i}"})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CRASH_SCRIPT.format(here=HERE, table=table_path))],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 9, proc.stderr
    half = manifest_tree(table_path)
    assert half != expected_tree(table_path)  # one partition new, the others still old
    assert json.load(open(os.path.join(table_path, MANIFEST_DIR, MARKER_NAME)))["version"] == 3
    assert len(DeltaTable(table_path).snapshot().file_paths()) == 6
    result = generate_manifest(t)
    assert result.mode == "incremental" and len(result.manifests_written) == 3
    assert manifest_tree(table_path) == expected_tree(table_path)


def test_hook_refreshes_manifests_when_the_property_is_on(table_path):
    t = make_table(
        table_path, partition_by=["part"], configuration={"delta.compatibility.symlinkFormatManifest.enabled": "true"}
    )
    r = append(t, rows(1, 0, part="a"), partition={"part": "a"})
    assert {h.name: h.ok for h in r.hooks}.get("symlink_manifest") is True
    append(t, rows(1, 1, part="b"), partition={"part": "b"})
    remove_partition(t, {"part": "a"})
    assert manifest_tree(table_path) == expected_tree(table_path) and set(manifest_tree(table_path)) == {"part=b"}
    other = os.path.join(os.path.dirname(table_path), "plain")
    t2 = make_table(other)
    assert "symlink_manifest" not in {h.name for h in append(t2, rows(1)).hooks}
    assert not os.path.exists(os.path.join(other, MANIFEST_DIR))


def test_cli_manifest(table_path, capsys):
    t = make_table(table_path, partition_by=["part"])
    append(t, rows(1, 0, part="a"), partition={"part": "a"})
    assert main(["manifest", table_path, "--full", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "full" and out["manifests_written"] == [f"{MANIFEST_DIR}/part=a/manifest"]
    assert main(["manifest", table_path]) == 0
    assert "incremental manifest generation of version 1" in capsys.readouterr().out


def _tree_bytes(path: str) -> dict[str, bytes]:
    root = os.path.join(path, MANIFEST_DIR)
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            out[os.path.relpath(full, root)] = open(full, "rb").read()
    return out


def test_full_generation_has_a_dry_run_that_deletes_and_writes_nothing(table_path, capsys):
    """Issue 13 item 12: ``manifest --full`` deleted stale manifests with no way to see it first."""
    t = make_table(table_path, partition_by=["part"])
    append(t, rows(1, 0, part="a"), partition={"part": "a"})
    generate_manifest(t, full=True)
    remove_partition(t, {"part": "a"})
    append(t, rows(1, 5, part="b"), partition={"part": "b"})
    stale = os.path.join(table_path, MANIFEST_DIR, "part=gone")
    os.makedirs(stale)
    with open(os.path.join(stale, "manifest"), "w") as fh:
        fh.write("file:///nowhere/x.parquet\n")
    before = _tree_bytes(table_path)

    plan = generate_manifest(t, full=True, dry_run=True)
    assert plan.dry_run and _tree_bytes(table_path) == before
    assert sorted(plan.manifests_deleted) == [f"{MANIFEST_DIR}/part=a/manifest", f"{MANIFEST_DIR}/part=gone/manifest"]
    assert plan.manifests_written == [f"{MANIFEST_DIR}/part=b/manifest"]
    incremental = generate_manifest(t, dry_run=True)
    assert incremental.mode == "incremental" and incremental.manifests_deleted == [f"{MANIFEST_DIR}/part=a/manifest"]
    assert _tree_bytes(table_path) == before

    assert main(["manifest", table_path, "--full", "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dry_run"] is True and len(out["manifests_deleted"]) == 2
    assert main(["manifest", table_path, "--full", "--dry-run"]) == 0
    assert "2 stale would be deleted" in capsys.readouterr().out
    assert _tree_bytes(table_path) == before

    real = generate_manifest(t, full=True)
    assert sorted(real.manifests_deleted) == sorted(plan.manifests_deleted)
    assert real.manifests_written == plan.manifests_written
    assert manifest_tree(table_path) == expected_tree(table_path)
