"""Vacuum and deltalake (delta-rs): tables written by deltalake, vacuumed by us, read back by deltalake (and by
DuckDB's delta_scan, which must read every retained version as deltalake does: tests/reader_checks.py).

deltalake writes with real timestamps, so its tables are aged after writing:
every time in the first commits (commitInfo, deletion and modification times,
commit and data file mtimes) is moved ten days back, as if written then.
"""

from __future__ import annotations

import json
import os
import uuid

import deltalake
import pyarrow as pa
import pytest

from deltalog import DeltaTable
from deltalog.vacuuming import plan_vacuum, vacuum
from reader_checks import delta_readers_agree
from shared_data import golden_copy
from vacuum_helpers import DAY_MS, commit_path, deltalake_ids, files_on_disk, now_ms, set_mtime


def _batch(start: int, n: int, part: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "value": pa.array([f"v{i}" for i in range(start, start + n)]),
            "part": pa.array([part] * n),
        }
    )


def _all_rows(path: str, version: int | None = None) -> list[tuple]:
    t = pa.table(deltalake.DeltaTable(path, version=version).scan())
    return sorted(zip(*(t.column(c).to_pylist() for c in sorted(t.column_names))))


def age_commits(path: str, versions: range, shift_ms: int) -> None:
    """Move every timestamp of ``versions`` (and their files) ``shift_ms`` into the past."""
    for v in versions:
        cp = commit_path(path, v)
        with open(cp) as fh:
            actions = [json.loads(line) for line in fh if line.strip()]
        when = None
        for a in actions:
            ((kind, body),) = a.items()
            if kind == "commitInfo":
                body["timestamp"] -= shift_ms
                when = body["timestamp"]
            elif kind == "remove" and body.get("deletionTimestamp") is not None:
                body["deletionTimestamp"] -= shift_ms
            elif kind == "add":
                body["modificationTime"] -= shift_ms
        when = when or int(os.path.getmtime(cp) * 1000) - shift_ms
        with open(cp, "w") as fh:
            fh.write("\n".join(json.dumps(a) for a in actions) + "\n")
        for a in actions:
            if "add" in a:
                from urllib.parse import unquote

                set_mtime(os.path.join(path, unquote(a["add"]["path"])), when)
        set_mtime(cp, when)


@pytest.fixture
def deltalake_table(tmp_path):
    """v0 append, v1 append, v2 overwrite of part b, v3 delete id<3 (all aged 10 days), v4 append (now)."""
    path = str(tmp_path / "dl")
    deltalake.write_deltalake(path, _batch(0, 5, "a"), partition_by=["part"])
    deltalake.write_deltalake(path, _batch(5, 5, "b"), mode="append")
    deltalake.write_deltalake(path, _batch(100, 3, "b"), mode="overwrite", predicate="part = 'b'")
    deltalake.DeltaTable(path).delete("id < 3")
    age_commits(path, range(0, 4), 10 * DAY_MS)
    deltalake.write_deltalake(path, _batch(200, 2, "c"), mode="append")
    assert deltalake.DeltaTable(path).version() == 4
    return path


def test_our_plan_matches_deltalake_full_vacuum_on_its_own_table(deltalake_table):
    path = deltalake_table
    theirs = set(deltalake.DeltaTable(path).vacuum(dry_run=True, full=True))
    ours = set(plan_vacuum(path).files.column("path").to_pylist())
    assert theirs and ours == theirs


def test_vacuumed_deltalake_table_reads_back_at_latest_and_retained_versions(deltalake_table):
    path = deltalake_table
    expected = {v: deltalake_ids(path, v) for v in (3, 4)}
    before = files_on_disk(path)
    result = vacuum(path)
    assert result.fully_readable_from_version == 3 and result.num_deleted_files > 0
    assert files_on_disk(path) < before
    for v, ids in expected.items():
        assert deltalake_ids(path, v) == ids
        assert not delta_readers_agree(path, v)
    # deltalake sees our VACUUM START / END commits in the history, with Delta Spark's metrics.
    history = {h["version"]: h for h in deltalake.DeltaTable(path).history()}
    assert history[5]["operation"] == "VACUUM START" and history[6]["operation"] == "VACUUM END"
    assert history[6]["operationMetrics"]["numDeletedFiles"] in (
        result.num_deleted_files,
        str(result.num_deleted_files),
    )
    # ...and its own vacuum finds nothing left to delete (its dry run still names expired tombstones, gone now).
    assert not set(deltalake.DeltaTable(path).vacuum(dry_run=True, full=True)) & files_on_disk(path)
    # deltalake keeps writing to the table afterwards.
    deltalake.write_deltalake(path, _batch(300, 1, "a"), mode="append")
    assert 300 in deltalake_ids(path)


def test_deltalake_checkpoint_and_cleaned_log_still_vacuum_safely(deltalake_table):
    path = deltalake_table
    deltalake.DeltaTable(path, version=2).create_checkpoint()
    for v in range(0, 3):  # log cleanup: version 2 now only lives in the checkpoint
        os.remove(commit_path(path, v))
    expected = deltalake_ids(path, 4)
    result = vacuum(path)
    assert result.fully_readable_from_version == 3 and not result.warnings
    assert deltalake_ids(path) == expected
    assert deltalake_ids(path, 3) == [3, 4, 100, 101, 102]
    assert not delta_readers_agree(path, 3) and not delta_readers_agree(path, 4)


def test_golden_deletion_vector_table_keeps_every_dv_a_retained_version_uses(tmp_path):
    """Spark-written DVs (UUID-named, Z85 in the log): versions 9..15 are retained, 0..8 are not."""
    path = golden_copy("dv-partitioned-with-checkpoint", tmp_path)
    now = now_ms()
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            set_mtime(os.path.join(dirpath, name), now - 30 * DAY_MS)
    for v in range(16):  # the first ten commits a month ago, the rest yesterday
        set_mtime(commit_path(path, v), now - (30 * DAY_MS if v < 10 else DAY_MS) + v * 1000)
    orphan = f"deletion_vector_{uuid.uuid4()}.bin"
    with open(os.path.join(path, orphan), "wb") as fh:
        fh.write(b"\x00" * 34)
    set_mtime(os.path.join(path, orphan), now - 30 * DAY_MS)
    expected = {v: _all_rows(path, v) for v in range(9, 16)}
    result = vacuum(path)
    assert result.fully_readable_from_version == 9 and result.num_deleted_files > 1
    on_disk = files_on_disk(path)
    assert orphan not in on_disk
    from deltalog.vacuuming.paths import dv_paths_of

    for v, rows in expected.items():
        snap = DeltaTable(path).snapshot(version=v)
        assert set(dv_paths_of(snap.files.column("deletionVector"))) <= on_disk
        assert _all_rows(path, v) == rows
        assert not delta_readers_agree(path, v)
    # With a zero retention only the latest version is kept whole, DVs included.
    expected_latest = expected[15]
    vacuum(path, retention_hours=0, allow_short_retention=True)
    on_disk = files_on_disk(path)
    assert set(dv_paths_of(DeltaTable(path).snapshot().files.column("deletionVector"))) <= on_disk
    assert _all_rows(path) == expected_latest
    assert not delta_readers_agree(path, 15)


# --- on S3 (moto server over real HTTP): listing, deleting and the cursor through s3fs ----------


@pytest.mark.s3
@pytest.mark.slow
def test_vacuum_on_s3(s3_table_uri, s3_storage_options, s3_deltalake_options):
    import time

    import fsspec

    def ids(version=None):
        dt = deltalake.DeltaTable(s3_table_uri, version=version, storage_options=s3_deltalake_options)
        return sorted(pa.table(dt.scan(columns=["id"])).column("id").to_pylist())

    opts = s3_deltalake_options
    deltalake.write_deltalake(s3_table_uri, _batch(0, 3, "a"), partition_by=["part"], storage_options=opts)
    deltalake.write_deltalake(s3_table_uri, _batch(3, 3, "b"), mode="append", storage_options=opts)
    deltalake.write_deltalake(
        s3_table_uri, _batch(10, 2, "a"), mode="overwrite", predicate="part = 'a'", storage_options=opts
    )
    fs, root = fsspec.core.url_to_fs(s3_table_uri, **s3_storage_options)
    fs.pipe(f"{root}/part=z/junk.parquet", b"junk")  # a failed writer's leftover
    fs.pipe(f"{root}/_tmp/hidden.parquet", b"x")
    latest = ids()
    time.sleep(1.2)  # S3 keeps modification times to the second
    # With a one-hour retention everything is too recent: the removed file is in the window.
    assert (
        vacuum(
            s3_table_uri, retention_hours=1, allow_short_retention=True, storage_options=s3_storage_options
        ).num_deleted_files
        == 0
    )
    plan = plan_vacuum(s3_table_uri, retention_hours=0, allow_short_retention=True, storage_options=s3_storage_options)
    planned = set(plan.files.column("path").to_pylist())
    assert "part=z/junk.parquet" in planned and len(planned) == 2 and plan.source == "listing"
    result = vacuum(s3_table_uri, retention_hours=0, allow_short_retention=True, storage_options=s3_storage_options)
    assert result.num_deleted_files == 2 and result.end_commit_version == result.start_commit_version + 1
    fs.invalidate_cache()
    assert not fs.exists(f"{root}/part=z/junk.parquet") and fs.exists(f"{root}/_tmp/hidden.parquet")
    assert ids() == latest
    assert json.loads(fs.cat(f"{root}/_delta_log/_last_vacuum_info")) == {
        "latestCommitVersionOutsideOfRetentionWindow": result.start_commit_version - 1
    }
    # Lite mode over S3: only the file the next overwrite removes (found via HEAD, no listing).
    deltalake.write_deltalake(
        s3_table_uri, _batch(20, 1, "b"), mode="overwrite", predicate="part = 'b'", storage_options=opts
    )
    time.sleep(1.2)
    lite = vacuum(
        s3_table_uri, mode="lite", retention_hours=0, allow_short_retention=True, storage_options=s3_storage_options
    )
    assert lite.plan.source == "log" and lite.num_deleted_files == 1
    assert ids() == [10, 11, 20]
