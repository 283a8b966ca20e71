"""Liquid clustering by compaction (local engine): Delta Spark's OPTIMIZE on a clustered table, incrementally."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pyarrow as pa
import pytest

from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.compaction import compact, plan_compaction
from deltalog.compaction.zorder import hilbert
from deltalog.errors import InvalidArgumentError
from deltalog.ingest import commit_request
from deltalog.protocol.table_protocol import Protocol
from helpers import make_table, write_data_file
from test_compaction_support import commit_actions, read_multiset

PROTOCOL = Protocol(1, 7, None, ("clustering", "domainMetadata"))
SCHEMA = pa.schema([("x", pa.int64()), ("y", pa.float64()), ("s", pa.string())])


def set_clustering(t: DeltaTable, columns: list[str]) -> None:
    """What ``CREATE TABLE ... CLUSTER BY`` / ``ALTER TABLE ... CLUSTER BY`` write: the domain."""
    txn = Transaction(t.storage, t.snapshot(), operation="CLUSTER BY", allow_system_domains=True)
    config = {"clusteringColumns": [[c] for c in columns], "domainName": "delta.clustering"}
    txn.set_domain_metadata("delta.clustering", json.dumps(config))
    txn.commit()


def append_random(t: DeltaTable, files: int, rows: int, seed: int) -> None:
    """Blind appends of uniformly random rows, one file each (stats from the footers)."""
    rng = np.random.default_rng(seed)
    for _ in range(files):
        data = pa.table(
            {
                "x": pa.array(rng.integers(0, 100_000, rows), pa.int64()),
                "y": pa.array(rng.uniform(0, 1, rows), pa.float64()),
                "s": pa.array([f"s{v:05d}" for v in rng.integers(0, 50_000, rows)]),
            }
        )
        commit_request(t, {"operation": "WRITE", "add": [{"path": write_data_file(t.storage.root, data)["path"]}]})


def clustered(path: str, columns: list[str], files: int = 8, rows: int = 3000) -> DeltaTable:
    t = make_table(path, SCHEMA, protocol=PROTOCOL)
    set_clustering(t, columns)
    append_random(t, files, rows, seed=11)
    return t


def live(t: DeltaTable) -> list[dict]:
    return t.snapshot().files.to_pylist()


def overlap_share(t: DeltaTable, column: str, lo: float, hi: float) -> float:
    stats = [json.loads(f["stats"]) for f in live(t)]
    return sum(s["minValues"][column] <= hi and s["maxValues"][column] >= lo for s in stats) / len(stats)


def test_hilbert_visits_every_cell_once_and_moves_one_step_at_a_time():
    for dims, bits in ((2, 4), (3, 3), (4, 2)):
        side = 1 << bits
        cells = np.array(list(itertools.product(range(side), repeat=dims)), np.uint64)
        h = hilbert([cells[:, d] for d in range(dims)], bits)
        assert sorted(h.tolist()) == list(range(side**dims))  # a bijection onto the index range
        path = cells[np.argsort(h)].astype(np.int64)
        assert set(np.abs(np.diff(path, axis=0)).sum(axis=1).tolist()) == {1}  # neighbours only


def test_clustering_keeps_rows_tags_files_and_narrows_them_on_both_columns(tmp_path):
    t = clustered(str(tmp_path / "t"), ["x", "y"])
    before = read_multiset(t.uri)
    domain = t.snapshot().domain_metadata["delta.clustering"]
    size = sum(f["size"] for f in live(t))
    assert (overlap_share(t, "x", 0, 5000), overlap_share(t, "y", 0.0, 0.05)) == (1.0, 1.0)

    result = compact(t.uri, target_size=size // 4 + 1)

    assert result.ok and len(result.commits) == 1 and result.plan.clustering is not None
    assert read_multiset(t.uri) == before
    files = live(t)
    assert len(files) == 4
    cubes = {dict(f["tags"])["ZCUBE_ID"] for f in files}
    assert len(cubes) == 1  # one rewritten group: one ZCube
    for f in files:
        assert f["clusteringProvider"] == "liquid"
        assert json.loads(dict(f["tags"])["ZCUBE_ZORDER_BY"]) == ["x", "y"]
    assert overlap_share(t, "x", 0, 5000) <= 0.5 and overlap_share(t, "y", 0.0, 0.05) <= 0.5
    actions = commit_actions(t, result.commits[0].version)
    info = actions[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE"
    params = info["operationParameters"]
    assert json.loads(params["clusterBy"]) == ["x", "y"] and params["zOrderBy"] == "[]"
    assert params["isFull"] == "false"
    file_actions = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert len(file_actions) == 12 and all(a["dataChange"] is False for a in file_actions)
    assert not any("domainMetadata" in a for a in actions)
    assert t.snapshot().domain_metadata["delta.clustering"] == domain  # the domain is kept

    # Incremental: a second run has nothing to do (one ZCube, nothing unclustered).
    again = compact(t.uri, target_size=size // 4 + 1)
    assert again.plan.bins == [] and not again.commits


def test_clustering_is_incremental_good_files_stay(tmp_path):
    t = clustered(str(tmp_path / "t"), ["x"], files=6, rows=4000)
    size = sum(f["size"] for f in live(t))
    target = size // 3 + 1
    compact(t.uri, target_size=target, small_file_threshold=1000)
    first = {f["path"] for f in live(t)}
    assert len(first) == 3
    append_random(t, files=2, rows=500, seed=99)
    new = {f["path"] for f in live(t)} - first
    before = read_multiset(t.uri)

    plan = plan_compaction(t.uri, target_size=target, small_file_threshold=1000)
    assert {f.path for b in plan.bins for f in b.files} == new  # only the unclustered files
    assert plan.num_kept_clustered_files == 3
    result = compact(t.uri, plan=plan)

    assert result.ok and read_multiset(t.uri) == before
    after = live(t)
    assert first <= {f["path"] for f in after}  # the clustered files of a good size are left alone
    added = [f for f in after if f["path"] not in first]
    assert len(added) == 1 and added[0]["clusteringProvider"] == "liquid"
    # One column: the curve is the column's order, so each output file is one range of x.
    assert dict(added[0]["tags"])["ZCUBE_ZORDER_BY"] == '["x"]'


def test_small_clustered_files_join_new_ones(tmp_path):
    t = clustered(str(tmp_path / "t"), ["x"], files=3, rows=1000)
    compact(t.uri)  # default target: every output is small
    (first,) = live(t)
    append_random(t, files=1, rows=100, seed=5)
    plan = plan_compaction(t.uri)
    assert {f.path for b in plan.bins for f in b.files} == {f["path"] for f in live(t)}
    result = compact(t.uri, plan=plan)
    assert result.ok and len(live(t)) == 1 and live(t)[0]["path"] != first["path"]
    assert json.loads(live(t)[0]["stats"])["numRecords"] == 3100


def test_changed_clustering_columns_are_honoured_and_full_reclusters(tmp_path):
    t = clustered(str(tmp_path / "t"), ["x"], files=4, rows=2000)
    compact(t.uri, small_file_threshold=1000)
    by_x = {f["path"] for f in live(t)}
    set_clustering(t, ["y", "s"])  # ALTER TABLE ... CLUSTER BY (y, s)
    append_random(t, files=2, rows=300, seed=3)
    before = read_multiset(t.uri)

    result = compact(t.uri, small_file_threshold=1000)
    assert result.ok and read_multiset(t.uri) == before
    files = live(t)
    assert by_x <= {f["path"] for f in files}  # clustered by the old columns: left alone (Delta Spark too)
    (new,) = [f for f in files if f["path"] not in by_x]
    assert json.loads(dict(new["tags"])["ZCUBE_ZORDER_BY"]) == ["y", "s"]
    assert result.plan.num_kept_clustered_files == len(by_x)
    info = commit_actions(t, result.commits[0].version)[0]["commitInfo"]
    assert json.loads(info["operationParameters"]["clusterBy"]) == ["y", "s"]

    full = compact(t.uri, small_file_threshold=1000, full=True)
    assert full.ok and read_multiset(t.uri) == before
    files = live(t)
    assert not by_x & {f["path"] for f in files}
    assert {dict(f["tags"])["ZCUBE_ZORDER_BY"] for f in files} == {'["y","s"]'}
    info = commit_actions(t, full.commits[0].version)[0]["commitInfo"]
    assert info["operationParameters"]["isFull"] == "true"


def test_clustering_refusals_write_nothing(tmp_path):
    t = clustered(str(tmp_path / "t"), ["x"], files=2, rows=10)
    version = t.snapshot().version
    with pytest.raises(InvalidArgumentError, match="full must be True or False"):
        compact(t.uri, full="yes")
    plain = make_table(str(tmp_path / "plain"), SCHEMA)
    with pytest.raises(InvalidArgumentError, match="OPTIMIZE ... FULL"):
        compact(plain.uri, full=True)
    assert t.snapshot().version == version


def test_cli_clusters_and_full_needs_a_clustered_table(tmp_path):
    import subprocess
    import sys

    t = clustered(str(tmp_path / "t"), ["x", "s"], files=3, rows=50)
    plain = make_table(str(tmp_path / "plain"), SCHEMA)
    cli = [sys.executable, "-m", "deltalog", "compact"]
    bad = subprocess.run([*cli, plain.uri, "--full"], capture_output=True, text=True)
    assert bad.returncode == 2 and "FULL" in bad.stderr
    ok = subprocess.run([*cli, t.uri, "--json"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["num_files_removed"] == 3
    assert [f["clusteringProvider"] for f in live(t)] == ["liquid"]
