"""Compaction against concurrent writers: appends never conflict, deletes cost only the bins they touch."""

from __future__ import annotations

import dataclasses
import json
import os
import threading

import pytest

import deltalog.compaction.commit as commit_module
from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.compaction import compact, plan_compaction
from deltalog.compaction.commit import commit_bins
from deltalog.compaction.local import run_local
from deltalog.errors import OperationRefusedError
from deltalog.storage.filesystem import Storage
from helpers import append, make_table, rows
from test_compaction_support import make_rich_table, read_multiset, rich_rows


def _delete_file(path: str, victim: str) -> int:
    """A DELETE that drops one whole file (remove, dataChange=true); returns its version."""
    snap = DeltaTable(path).snapshot()
    row = next(r for r in snap.files.to_pylist() if r["path"] == victim)
    txn = Transaction(Storage(path), snap, operation="DELETE", operation_parameters={"predicate": "[]"})
    txn.remove([{"path": victim, "partitionValues": dict(row["partitionValues"]), "size": row["size"]}])
    return txn.commit().version


def _files_on_disk(path: str) -> set[str]:
    out = set()
    for d, dirs, names in os.walk(path):
        dirs[:] = [x for x in dirs if not x.startswith("_")]
        out.update(os.path.relpath(os.path.join(d, n), path) for n in names if n.endswith(".parquet"))
    return out


@pytest.fixture
def two_partitions(tmp_path):
    return make_rich_table(str(tmp_path / "t"), True, appends=4, rows_per_append=25)


def test_concurrent_appends_land_and_compaction_commits(two_partitions, monkeypatch):
    """An appender commits three versions between the compaction's read and its commit: both succeed."""
    path = two_partitions
    before = read_multiset(path)
    real_commit = Transaction.commit
    appended = []

    def racing_commit(self, *a, **kw):
        if self.operation == "OPTIMIZE" and not appended:
            t = DeltaTable(path)
            for i in range(3):
                appended.append(append(t, rich_rows(7, 90_000 + i * 7, "a").drop_columns(["part"]), {"part": "a"}))
        return real_commit(self, *a, **kw)

    monkeypatch.setattr(commit_module.Transaction, "commit", racing_commit)
    result = compact(path)
    assert result.ok and len(result.commits) == 1 and not result.skipped
    versions = [a.version for a in appended]
    assert result.commits[0].version == versions[-1] + 1  # it lost the race three times and still committed
    after = read_multiset(path)
    assert sum(after.values()) == sum(before.values()) + 21
    assert all(after[r] >= n for r, n in before.items())


def test_appender_thread_racing_a_compaction(tmp_path):
    """A real thread appending while compactions run: every append and every compaction lands."""
    path = make_rich_table(str(tmp_path / "t"), True, appends=6, rows_per_append=30)
    before = sum(read_multiset(path).values())
    stop = threading.Event()
    landed: list[int] = []
    errors: list[BaseException] = []

    def rich_appender() -> None:
        t = DeltaTable(path)
        for i in range(25):
            if stop.is_set():
                break
            try:
                data = rich_rows(3, 50_000 + i * 3, "b").drop_columns(["part"])
                landed.append(append(t, data, {"part": "b"}).version)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    thread = threading.Thread(target=rich_appender)
    thread.start()
    results = []
    try:
        for _ in range(3):
            results.append(compact(path))
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors
    assert all(r.ok for r in results)
    assert sum(len(r.commits) for r in results) >= 1
    after = sum(read_multiset(path).values())
    assert after == before + 3 * len(landed)
    log_versions = sorted(
        int(n.split(".")[0]) for n in os.listdir(os.path.join(path, "_delta_log")) if n.endswith(".json")
    )
    assert log_versions == list(range(log_versions[-1] + 1))  # contiguous: nobody overwrote a version


def test_delete_before_commit_drops_only_that_bin(two_partitions):
    """A DELETE lands after the rewrite, before the commit: its bin is skipped, the other bin commits."""
    path = two_partitions
    dtable = DeltaTable(path)
    plan = plan_compaction(dtable)
    outputs, failed = run_local(dtable.storage, plan)
    assert not failed and len(outputs) == 2
    bin_a = next(b for b in plan.bins if b.partition_values == {"part": "a"})
    victim = bin_a.files[0].path
    before_delete = read_multiset(path)
    _delete_file(path, victim)
    expected = read_multiset(path)
    assert sum(before_delete.values()) - sum(expected.values()) == 25

    record, skipped = commit_bins(dtable, plan, outputs)

    assert record is not None and record.bins == [b.id for b in plan.bins if b is not bin_a]
    assert [(s.bin_id, s.kind) for s in skipped] == [(bin_a.id, "conflict")]
    assert victim in skipped[0].paths
    assert read_multiset(path) == expected  # nothing resurrected, nothing lost
    bin_a_output = next(o for o in outputs if o.bin_id == bin_a.id)
    assert not os.path.exists(bin_a_output.storage_path)  # its never-committed file is gone
    assert _files_on_disk(path) >= set(DeltaTable(path).snapshot().file_paths())


def test_delete_racing_the_commit_gets_delete_delete_and_the_rest_commits(two_partitions, monkeypatch):
    """The DELETE wins the very version the compaction tries: the conflict checker names the file, only its bin goes."""
    path = two_partitions
    plan = plan_compaction(path)
    bin_b = next(b for b in plan.bins if b.partition_values == {"part": "b"})
    victim = bin_b.files[-1].path
    real_commit = Transaction.commit
    raced = []

    def racing_commit(self, *a, **kw):
        if self.operation == "OPTIMIZE" and not raced:
            raced.append(_delete_file(path, victim))
        return real_commit(self, *a, **kw)

    monkeypatch.setattr(commit_module.Transaction, "commit", racing_commit)

    result = compact(path, plan=plan)

    assert raced and len(result.commits) == 1
    (skipped,) = result.skipped
    assert skipped.bin_id == bin_b.id and skipped.kind == "conflict" and skipped.paths == [victim]
    assert f"version {raced[0]}" in skipped.reason
    assert result.commits[0].bins == [b.id for b in plan.bins if b is not bin_b]
    assert result.ok  # losing a race is not an error
    snap = DeltaTable(path).snapshot()
    assert victim not in snap.file_paths()
    assert all(f.path in snap.file_paths() for f in bin_b.files if f.path != victim)  # the rest of bin b stays
    assert sum(read_multiset(path).values()) == 2 * 4 * 25 - 25


def test_two_compactions_of_the_same_plan_never_duplicate_rows(two_partitions):
    path = two_partitions
    before = read_multiset(path)
    dtable = DeltaTable(path)
    plan = plan_compaction(dtable)
    first, _ = run_local(dtable.storage, plan)
    second, _ = run_local(dtable.storage, plan)
    record, skipped = commit_bins(dtable, plan, first)
    assert record is not None and not skipped
    record2, skipped2 = commit_bins(dtable, plan, second)
    assert record2 is None and sorted(s.bin_id for s in skipped2) == [0, 1]
    assert read_multiset(path) == before
    assert all(not os.path.exists(o.storage_path) for o in second)


def test_schema_change_after_planning_commits_nothing(two_partitions):
    path = two_partitions
    dtable = DeltaTable(path)
    plan = plan_compaction(dtable)
    outputs, _ = run_local(dtable.storage, plan)
    snap = dtable.snapshot()
    md = snap.metadata
    doc = json.loads(md.schema_string)
    doc["fields"].append({"name": "extra", "type": "long", "nullable": True, "metadata": {}})
    txn = Transaction(dtable.storage, snap, operation="ADD COLUMNS")
    txn.update_metadata(dataclasses.replace(md, schema_string=json.dumps(doc)))
    version = txn.commit().version
    with pytest.raises(OperationRefusedError, match="schema changed"):
        commit_bins(dtable, plan, outputs)
    assert dtable.version() == version
    assert all(not os.path.exists(o.storage_path) for o in outputs)


def test_unpartitioned_table_with_blind_appends(tmp_path):
    path = str(tmp_path / "t")
    t = make_table(path)
    for i in range(5):
        append(t, rows(10, i * 10))
    result = compact(path)
    assert result.ok and result.to_dict()["num_files_removed"] == 5
    assert sum(read_multiset(path).values()) == 50
