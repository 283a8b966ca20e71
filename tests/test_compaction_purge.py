"""Deletion-vector purge (REORG ... APPLY (PURGE)): DVs applied, rows identical at every version, no DV left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.compaction import compact
from deltalog.compaction.purge import deletion_vector_health
from deltalog.create import create_table
from deltalog.errors import InvalidArgumentError
from deltalog.log.listing import commit_name
from deltalog.maintenance.due import maintenance_due
from deltalog.protocol.deletion_vectors import dv_location, read_deletion_vector
from test_compaction_support import RICH_SCHEMA, add_deletion_vector, make_rich_table, multiset_of


def _deltalake_rows(path: str, version: int) -> Counter:
    table = deltalake.DeltaTable(path, version=version)
    data = deltalake.QueryBuilder().register("t", table).execute("select * from t").read_all()
    return multiset_of(pa.table(data))


def _our_rows(path: str, version: int) -> Counter:
    """Rows of ``version`` read through deltalog's snapshot and DV reader (partition values re-attached)."""
    dtable = DeltaTable(path)
    snap = dtable.snapshot(version=version)
    out: list[pa.Table] = []
    for r in snap.files.to_pylist():
        data = pq.read_table(os.path.join(path, r["path"]))
        dv = {k: v for k, v in (r["deletionVector"] or {}).items() if v is not None}
        if dv:
            keep = np.ones(data.num_rows, dtype=bool)
            keep[read_deletion_vector(dtable.storage, dv).astype(np.int64)] = False
            data = data.filter(pa.array(keep))
        for col, value in dict(r["partitionValues"] or []).items():
            data = data.append_column(col, pa.array([value] * data.num_rows, pa.string()))
        out.append(data.select(sorted(data.column_names)))
    return multiset_of(pa.concat_tables(out)) if out else Counter()


def _dv_table(tmp_path) -> tuple[str, list[str]]:
    """Two partitions, three files each; DVs hide 5001 of 6000 rows of one file and 4 rows of another."""
    path = str(tmp_path / "t")
    create_table(path, RICH_SCHEMA, partition_by=["part"], configuration={"delta.enableDeletionVectors": "true"})
    make_rich_table(path, True, appends=3, rows_per_append=6000)
    paths = DeltaTable(path).snapshot().file_paths()
    add_deletion_vector(path, paths[0], list(range(0, 5000)) + [5999])
    add_deletion_vector(path, paths[1], [1, 2, 3, 100], inline=True)
    return path, paths


def _commit(path: str, version: int) -> list[dict]:
    with open(os.path.join(path, "_delta_log", commit_name(version))) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_purge_applies_every_dv_and_keeps_rows_at_every_version(tmp_path):
    path, paths = _dv_table(tmp_path)
    latest = DeltaTable(path).snapshot().version
    before = {v: _deltalake_rows(path, v) for v in range(1, latest + 1)}
    dv_files = {
        dv_location({k: v for k, v in r["deletionVector"].items() if v is not None})[0]
        for r in DeltaTable(path).snapshot().files.to_pylist()
        if r["deletionVector"] and r["deletionVector"]["storageType"] == "u"
    }
    assert len(dv_files) == 1

    result = compact(path, purge_deletion_vectors=True)

    assert result.ok and len(result.commits) == 1
    d = result.to_dict()
    assert d["num_files_removed"] == 2 and d["num_deletion_vectors_applied"] == 2
    new = result.commits[0].version
    for v, rows in before.items():  # old versions unchanged, by both readers
        assert _deltalake_rows(path, v) == rows
        assert _our_rows(path, v) == rows
    assert _deltalake_rows(path, new) == before[latest] == _our_rows(path, new)
    snap = DeltaTable(path).snapshot()
    assert all(dv is None for dv in snap.files.column("deletionVector").to_pylist())
    assert set(paths[2:]) <= set(snap.file_paths())  # files without a DV are left alone, small or not
    actions = _commit(path, new)
    info = actions[0]["commitInfo"]
    assert info["operation"] == "REORG" and info["isolationLevel"] == "SnapshotIsolation"
    assert info["operationParameters"]["applyPurge"] == "true"
    assert info["operationParameters"]["predicate"] == "[]"
    files = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert files and all(f["dataChange"] is False for f in files)
    assert not any(a["add"].get("deletionVector") for a in actions if "add" in a)
    assert deletion_vector_health(snap).files_with_dvs == 0
    # A second purge has nothing to do.
    assert compact(path, purge_deletion_vectors=True).noop


def test_min_deleted_share_selects_only_heavy_dvs(tmp_path):
    path, paths = _dv_table(tmp_path)
    health = deletion_vector_health(DeltaTable(path).snapshot())
    assert (health.files_with_dvs, health.rows_hidden) == (2, 5005)
    assert health.hidden_share == round(5005 / 36000, 6) and health.max_file_share == round(5001 / 6000, 6)
    plan = compact(path, purge_deletion_vectors=True, min_deleted_share=0.5, plan_only=True).plan
    assert [f.path for b in plan.bins for f in b.files] == [paths[0]]
    assert plan.purge_min_deleted_share == 0.5
    before = _deltalake_rows(path, DeltaTable(path).snapshot().version)
    result = compact(path, purge_deletion_vectors=True, min_deleted_share=0.5)
    assert result.ok and result.to_dict()["num_files_removed"] == 1
    snap = DeltaTable(path).snapshot()
    assert _deltalake_rows(path, snap.version) == before
    remaining = [r["path"] for r in snap.files.to_pylist() if r["deletionVector"]]
    assert remaining == [paths[1]]
    params = _commit(path, snap.version)[0]["commitInfo"]["operationParameters"]
    assert params["minDeletedShare"] == "0.5"


def test_purge_due_verdict_and_plain_compaction_ignores_share(tmp_path):
    path, _ = _dv_table(tmp_path)
    due = maintenance_due(DeltaTable(path))
    assert due.to_dict()["work"]["rows_hidden_by_dvs"] == 5005
    assert due.to_dict()["work"]["files_with_dvs"] == 2
    assert any(r.startswith("deletion vectors: 5005 rows hidden in 2 files") for r in due.reasons)
    cli = subprocess.run(
        [sys.executable, "-m", "deltalog", "health", path, "--json"], capture_output=True, text=True, check=True
    )
    work = json.loads(cli.stdout)["work"]
    assert (work["rows_hidden_by_dvs"], work["dv_max_file_share"]) == (5005, round(5001 / 6000, 6))
    compact(path, purge_deletion_vectors=True)
    due = maintenance_due(DeltaTable(path))
    assert due.to_dict()["work"]["rows_hidden_by_dvs"] == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"purge_deletion_vectors": "yes"}, "purge_deletion_vectors"),
        ({"purge_deletion_vectors": True, "min_deleted_share": "0.5"}, "min_deleted_share"),
        ({"purge_deletion_vectors": True, "min_deleted_share": 1.0}, "below 1"),
        ({"purge_deletion_vectors": True, "min_deleted_share": True}, "min_deleted_share"),
        ({"min_deleted_share": 0.2}, "purge only"),
    ],
)
def test_bad_purge_arguments_are_refused_and_nothing_is_written(tmp_path, kwargs, message):
    path = make_rich_table(str(tmp_path / "t"), True, appends=2, rows_per_append=5)
    version = DeltaTable(path).snapshot().version
    with pytest.raises(InvalidArgumentError, match=message):
        compact(path, **kwargs)
    assert DeltaTable(path).snapshot().version == version


@pytest.mark.parametrize("name", ["dv-partitioned-with-checkpoint", "dv-with-columnmapping"])
def test_purge_of_delta_spark_dv_tables_keeps_every_version(tmp_path, name):
    """Tables Delta Spark wrote with deletion vectors (golden corpus): rows identical at every version."""
    from shared_data import golden_copy

    path = golden_copy(name, tmp_path)
    latest = DeltaTable(path).snapshot().version
    first = min(DeltaTable(path).list_log().commits)
    before = {v: _deltalake_rows(path, v) for v in range(first, latest + 1)}
    dv_paths = [r["path"] for r in DeltaTable(path).snapshot().files.to_pylist() if r["deletionVector"]]
    assert dv_paths

    result = compact(path, purge_deletion_vectors=True)

    assert result.ok and result.to_dict()["num_files_removed"] == len(dv_paths)
    for v, rows in before.items():
        assert _deltalake_rows(path, v) == rows
    assert _deltalake_rows(path, result.commits[0].version) == before[latest]
    snap = DeltaTable(path).snapshot()
    assert not any(snap.files.column("deletionVector").to_pylist())
    assert not set(dv_paths) & set(snap.file_paths())


def test_cli_purge_deletion_vectors(tmp_path):
    path = str(tmp_path / "t")
    create_table(path, RICH_SCHEMA, partition_by=["part"], configuration={"delta.enableDeletionVectors": "true"})
    make_rich_table(path, True, appends=2, rows_per_append=20)
    paths = DeltaTable(path).snapshot().file_paths()
    add_deletion_vector(path, paths[0], [0, 1])
    add_deletion_vector(path, paths[1], list(range(15)))
    cli = [sys.executable, "-m", "deltalog", "compact", path]
    bad = subprocess.run(
        [*cli, "--purge-deletion-vectors", "--min-deleted-share", "1.5"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "min_deleted_share" in bad.stderr
    alone = subprocess.run([*cli, "--min-deleted-share", "0.5"], capture_output=True, text=True)
    assert alone.returncode == 2 and "purge only" in alone.stderr
    ok = subprocess.run(
        [*cli, "--purge-deletion-vectors", "--min-deleted-share", "0.5", "--json"], capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["num_files_removed"] == 1  # 15 of 20 rows hidden; 2 of 20 stays
    left = [r["path"] for r in DeltaTable(path).snapshot().files.to_pylist() if r["deletionVector"]]
    assert left == [paths[0]]
