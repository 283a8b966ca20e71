"""The ten-million-file generator (benchmarks/tenmillion_table.py) at 10,000 files: no timing here.

The benchmark's tables are only worth measuring if every reader agrees on them, so the
small version must load in deltalog and deltalake with the counts the generator
reports, its checkpoint must hold exactly the state its JSON commits replay to, and
its inventory must make vacuum plan exactly the orphans.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import deltalake
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_tenmillion  # noqa: E402
import tenmillion_table as gen  # noqa: E402
from deltalog.log_maintenance.log_cleanup import cleanup_log  # noqa: E402
from deltalog.table import DeltaTable  # noqa: E402
from deltalog.vacuuming import vacuum  # noqa: E402

SMALL = {"adds_per_commit": 1_000, "part_rows": 4_000, "orphans": 500, "partitions": 10}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(gen, "CACHE_ROOT", tmp_path / "cache")
    return tmp_path


def _paths(files) -> set[str]:
    return set(files.column("path").to_pylist())


@pytest.mark.parametrize("kind", ["classic", "v2"])
def test_the_table_loads_in_deltalog_and_deltalake_with_the_generated_counts(cache, kind):
    table, info = gen.build(kind, 10_000, tail=50 if kind == "classic" else 0, **SMALL)
    assert info["checkpoint_version"] == 10 and info["version"] == 10 + info["tail"]
    expected = 10_000 + info["tail"] - info["tail"] // 5
    assert info["live_files"] == expected
    snap = DeltaTable(str(table)).snapshot()
    assert snap.version == info["version"] and snap.files.num_rows == expected
    assert snap.segment.checkpoint is not None and snap.segment.checkpoint.version == 10
    theirs = deltalake.DeltaTable(str(table))
    assert theirs.version() == info["version"]
    assert theirs.get_add_actions(flatten=False).num_rows == expected
    names = sorted(os.listdir(table / "_delta_log"))
    if kind == "classic":
        parts = [n for n in names if ".checkpoint." in n]
        assert parts == [f"{10:020d}.checkpoint.{i:010d}.{3:010d}.parquet" for i in (1, 2, 3)]
    else:
        assert tuple(snap.protocol.reader_features) == ("v2Checkpoint",)
        sidecars = os.listdir(table / "_delta_log" / "_sidecars")
        assert len(sidecars) == 3
        rows = sum(pq.ParquetFile(table / "_delta_log" / "_sidecars" / s).metadata.num_rows for s in sidecars)
        assert rows == 10_000


def test_the_checkpoint_holds_what_the_commits_replay_to(cache, tmp_path):
    table, info = gen.build("classic", 10_000, tail=20, **SMALL)
    with_cp = DeltaTable(str(table)).snapshot().files
    json_only = tmp_path / "json-only"
    shutil.copytree(table, json_only, ignore=shutil.ignore_patterns("*.checkpoint.*", "_last_checkpoint"))
    replayed = DeltaTable(str(json_only)).snapshot()
    assert replayed.version == info["version"]
    assert _paths(replayed.files) == _paths(with_cp)
    assert replayed.files.num_rows == info["live_files"]
    # Sizes and partition values agree too (the checkpoint is not just the right names).
    a = {
        p: (s, dict(pv))
        for p, s, pv in zip(*(with_cp.column(c).to_pylist() for c in ("path", "size", "partitionValues")))
    }
    b = {
        p: (s, dict(pv))
        for p, s, pv in zip(*(replayed.files.column(c).to_pylist() for c in ("path", "size", "partitionValues")))
    }
    assert a == b


def test_a_long_log_after_the_checkpoint_filters_superseded_rows_in_groups_correctly(cache, tmp_path):
    """More than 4,096 file actions after the checkpoint: the reader filters groups of batches (issue 19)."""
    table, info = gen.build("classic", 20_000, tail=6_000, **dict(SMALL, part_rows=20_000))
    with_cp = DeltaTable(str(table)).snapshot()
    assert with_cp.segment.checkpoint is not None and len(with_cp.segment.commits) == 6_000
    json_only = tmp_path / "json-only"
    shutil.copytree(table, json_only, ignore=shutil.ignore_patterns("*.checkpoint.*", "_last_checkpoint"))
    replayed = DeltaTable(str(json_only)).snapshot().files
    assert with_cp.files.num_rows == info["live_files"] == 20_000 + 6_000 - 1_200
    assert _paths(with_cp.files) == _paths(replayed)


def test_the_inventory_makes_vacuum_plan_exactly_the_orphans_and_removed_files(cache):
    table, info = gen.build("classic", 10_000, tail=50, **SMALL)
    plan = vacuum(str(table), dry_run=True, inventory=info["inventory"]).plan
    planned = _paths(plan.files)
    removed = info["tail"] // 5
    assert len(planned) == SMALL["orphans"] + removed
    assert sum(p.rsplit("/", 1)[-1].startswith("orphan-") for p in planned) == SMALL["orphans"]
    assert not planned & _paths(DeltaTable(str(table)).snapshot().files)


def test_log_cleanup_finds_the_versions_before_the_checkpoint_expired(cache, tmp_path):
    table, info = gen.build("classic", 10_000, **SMALL)
    copy = bench_tenmillion.fresh_copy(table, tmp_path)
    result = cleanup_log(copy)
    assert result.num_deleted == info["checkpoint_version"]  # versions 0..9, dated 2023
    left = sorted(n for n in os.listdir(os.path.join(copy, "_delta_log")) if n.endswith(".json"))
    assert left == [f"{10:020d}.json"]
    # The cached table is untouched (the copy's log files are hard links).
    assert len([n for n in os.listdir(table / "_delta_log") if n.endswith(".json")]) == 11


def test_a_fresh_copy_with_an_extra_commit_leaves_the_cache_alone(cache, tmp_path):
    table, info = gen.build("v2", 10_000, **SMALL)
    copy = bench_tenmillion.fresh_copy(table, tmp_path, extra_commit=True)
    snap = DeltaTable(copy).snapshot()
    assert snap.version == info["version"] + 1 and snap.files.num_rows == 10_001
    assert DeltaTable(str(table)).snapshot().version == info["version"]


def test_a_finished_table_is_reused_and_a_changed_one_rebuilt(cache):
    table, info = gen.build("classic", 10_000, **SMALL)
    marker = table.parent / ".complete"
    stamp = marker.stat().st_mtime_ns
    again, _ = gen.build("classic", 10_000, **SMALL)
    assert again == table and marker.stat().st_mtime_ns == stamp
    _, other = gen.build("classic", 10_000, **dict(SMALL, orphans=7))
    assert other["orphans"] == 7 and other["inventory_rows"] == 10_007
