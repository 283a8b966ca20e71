"""Z-order (OPTIMIZE ... ZORDER BY), local engine: rows kept, files narrower on every column, Delta's commit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import deltalake
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltalog import DeltaTable
from deltalog.compaction import compact
from deltalog.compaction.zorder import interleave, rank_scaled
from deltalog.create import create_table
from deltalog.errors import InvalidArgumentError
from deltalog.log.listing import commit_name
from test_compaction_support import add_deletion_vector, read_multiset


def _random_table(path: str, files: int = 8, rows: int = 3000, partitioned: bool = False) -> None:
    rng = np.random.default_rng(7)
    for i in range(files):
        data = pa.table(
            {
                "x": pa.array(rng.integers(0, 10_000, rows), pa.int64()),
                "y": pa.array(rng.uniform(0, 1, rows), pa.float64()),
                "s": pa.array([f"s{v:05d}" for v in rng.integers(0, 50_000, rows)]),
                "p": pa.array(["a" if i % 2 else "b"] * rows),
            }
        )
        deltalake.write_deltalake(path, data, mode="append", partition_by=["p"] if partitioned else None)


def overlap_share(path: str, column: str, lo: float, hi: float) -> float:
    """Share of live files whose [min, max] stats on ``column`` overlap [lo, hi] (what data skipping reads)."""
    stats = [json.loads(s) for s in DeltaTable(path).snapshot().files.column("stats").to_pylist()]
    hit = [s["minValues"][column] <= hi and s["maxValues"][column] >= lo for s in stats]
    return sum(hit) / len(hit)


def _commit_info(path: str, version: int) -> dict:
    with open(os.path.join(path, "_delta_log", commit_name(version))) as fh:
        actions = [json.loads(line) for line in fh if line.strip()]
    return actions


def test_zorder_keeps_rows_and_narrows_files_on_both_columns(tmp_path):
    path = str(tmp_path / "t")
    _random_table(path)
    before = read_multiset(path)
    size = sum(r["size"] for r in DeltaTable(path).snapshot().files.to_pylist())
    share_before = (overlap_share(path, "x", 0, 1000), overlap_share(path, "y", 0.0, 0.1))
    assert share_before == (1.0, 1.0)

    result = compact(path, zorder_by=["x", "y"], target_size=size // 4 + 1)

    assert result.ok and len(result.commits) == 1
    assert read_multiset(path) == before
    snap = DeltaTable(path).snapshot()
    assert snap.files.num_rows == 4
    counts = [json.loads(s)["numRecords"] for s in snap.files.column("stats").to_pylist()]
    assert sum(counts) == 8 * 3000 and max(counts) - min(counts) <= 1
    after = (overlap_share(path, "x", 0, 1000), overlap_share(path, "y", 0.0, 0.1))
    assert after[0] <= 0.5 and after[1] <= 0.5
    actions = _commit_info(path, result.commits[0].version)
    info = actions[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE" and json.loads(info["operationParameters"]["zOrderBy"]) == ["x", "y"]
    files = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert len(files) == 12 and all(f["dataChange"] is False for f in files)


def test_zorder_per_partition_applies_dvs_and_reads_in_deltalake(tmp_path):
    path = str(tmp_path / "t")
    schema = pa.schema([("x", pa.int64()), ("y", pa.float64()), ("s", pa.string()), ("p", pa.string())])
    create_table(path, schema, partition_by=["p"], configuration={"delta.enableDeletionVectors": "true"})
    _random_table(path, files=6, rows=2000, partitioned=True)
    paths = DeltaTable(path).snapshot().file_paths()
    add_deletion_vector(path, paths[0], list(range(0, 1500)))
    before = read_multiset(path)
    result = compact(path, zorder_by=["s"], where="p = 'a'")
    assert result.ok and result.to_dict()["num_deletion_vectors_applied"] == (1 if "p=a" in paths[0] else 0)
    assert read_multiset(path) == before
    assert [b.partition_values for b in result.plan.bins] == [{"p": "a"}]
    snap = DeltaTable(path).snapshot()
    a_files = [r for r in snap.files.to_pylist() if dict(r["partitionValues"])["p"] == "a"]
    b_files = [r for r in snap.files.to_pylist() if dict(r["partitionValues"])["p"] == "b"]
    assert len(a_files) == 1 and len(b_files) == 3  # partition b untouched
    (a_file,) = a_files
    assert json.loads(a_file["stats"])["numRecords"] == sum(n for r, n in before.items() if r[0] == "a")


def test_zorder_refusals_write_nothing(tmp_path):
    path = str(tmp_path / "t")
    _random_table(path, files=2, rows=10, partitioned=True)
    version = DeltaTable(path).snapshot().version
    for cols, message in (
        (["p"], "partition column"),
        (["nope"], "not a top-level column"),
        ("x", "non-empty list"),
        ([], "non-empty list"),
        (["x", "x"], "twice"),
    ):
        with pytest.raises(InvalidArgumentError, match=message):
            compact(path, zorder_by=cols)
    with pytest.raises(InvalidArgumentError, match="choose one"):
        compact(path, zorder_by=["x"], purge_deletion_vectors=True)
    assert DeltaTable(path).snapshot().version == version


def test_cli_zorder_by(tmp_path):
    path = str(tmp_path / "t")
    _random_table(path, files=3, rows=100)
    cli = [sys.executable, "-m", "deltalog", "compact", path]
    bad = subprocess.run([*cli, "--zorder-by", "x,nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "nope" in bad.stderr
    ok = subprocess.run([*cli, "--zorder-by", "x,y", "--json"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["num_files_removed"] == 3
    assert DeltaTable(path).snapshot().files.num_rows == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 255), st.integers(0, 255)), min_size=2, max_size=2))
def test_interleave_is_monotone_in_every_column(pair):
    (a1, b1), (a2, b2) = pair
    lo = (min(a1, a2), min(b1, b2))
    hi = (max(a1, a2), max(b1, b2))
    z = interleave([np.array([lo[0], hi[0]], np.uint64), np.array([lo[1], hi[1]], np.uint64)], 8)
    assert z[0] <= z[1]
    # Bits alternate, first column most significant: decode and compare.
    for k, (x, y) in enumerate((lo, hi)):
        xs = sum(((int(z[k]) >> (2 * i + 1)) & 1) << i for i in range(8))
        ys = sum(((int(z[k]) >> (2 * i)) & 1) << i for i in range(8))
        assert (xs, ys) == (x, y)


def test_rank_scaled_puts_nulls_first_and_ties_together():
    r = rank_scaled(pa.array([5, None, 5, 1, 9]), 2)
    assert r.tolist() == [1, 0, 1, 0, 3]  # ranks 2,0,2,1,4 of 5 scaled to 2 bits


def test_zorder_is_refused_on_a_clustered_table(tmp_path):
    from deltalog.errors import OperationRefusedError
    from test_clustering import clustered_table

    t = clustered_table(str(tmp_path / "t"))
    version = t.snapshot().version
    with pytest.raises(OperationRefusedError, match="liquid clustering"):
        compact(t.uri, zorder_by=["id"])
    assert t.snapshot().version == version
