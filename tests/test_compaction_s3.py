"""Compaction and convert against a local S3-compatible server (moto): the fsspec paths, not just the local ones."""

from __future__ import annotations

import io

import deltalake
import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.compaction import compact
from deltalog.convert import convert_to_delta
from deltalog.engines.spark_packages import s3a_conf, spark_conf
from s3_server import ACCESS_KEY, REGION, SECRET_KEY
from test_compaction_support import commit_actions, multiset_of, rich_rows

pytestmark = [pytest.mark.slow, pytest.mark.s3]


def _read(uri: str, options: dict[str, str]):
    return multiset_of(deltalake.DeltaTable(uri, storage_options=options).to_pyarrow_table())


def test_compact_on_s3(s3_table_uri, s3_storage_options, s3_deltalake_options):
    for i in range(4):
        for part in ("a", "b"):
            deltalake.write_deltalake(
                s3_table_uri,
                rich_rows(30, i * 100 + (0 if part == "a" else 50), part),
                mode="append",
                partition_by=["part"],
                storage_options=s3_deltalake_options,
            )
    before = _read(s3_table_uri, s3_deltalake_options)
    result = compact(s3_table_uri, storage_options=s3_storage_options)
    assert result.ok and result.to_dict()["num_files_removed"] == 8 and result.to_dict()["num_files_added"] == 2
    assert _read(s3_table_uri, s3_deltalake_options) == before
    assert compact(s3_table_uri, storage_options=s3_storage_options).noop
    paths = DeltaTable(s3_table_uri, s3_storage_options).snapshot().file_paths()
    assert sorted(p.split("/")[0] for p in paths) == ["part=a", "part=b"]


def test_zorder_on_s3(s3_table_uri, s3_storage_options, s3_deltalake_options):
    """Z-order reads and writes through fsspec (spill files stay local); several output files per partition."""
    for i in range(4):
        deltalake.write_deltalake(
            s3_table_uri, rich_rows(200, i * 1000), mode="append", storage_options=s3_deltalake_options
        )
    before = _read(s3_table_uri, s3_deltalake_options)
    size = sum(r["size"] for r in DeltaTable(s3_table_uri, s3_storage_options).snapshot().files.to_pylist())
    result = compact(
        s3_table_uri, zorder_by=["id", "ts"], target_size=size // 2 + 1, storage_options=s3_storage_options
    )
    assert result.ok and result.to_dict()["num_files_removed"] == 4 and result.to_dict()["num_files_added"] == 2
    assert _read(s3_table_uri, s3_deltalake_options) == before


@pytest.mark.spark
def test_spark_engine_on_s3_through_s3a(s3_server, s3_table_uri, s3_storage_options, s3_deltalake_options):
    """Our Spark job reads and writes the S3 test server through s3a (hadoop-aws + AWS SDK from the jar cache)."""
    for i in range(3):
        for part in ("a", "b"):
            deltalake.write_deltalake(
                s3_table_uri,
                rich_rows(20, i * 100 + (0 if part == "a" else 50), part),
                mode="append",
                partition_by=["part"],
                storage_options=s3_deltalake_options,
            )
    before = _read(s3_table_uri, s3_deltalake_options)
    conf = {**spark_conf(delta=False), **s3a_conf(s3_server, ACCESS_KEY, SECRET_KEY, REGION)}
    result = compact(
        s3_table_uri,
        storage_options=s3_storage_options,
        engine="spark",
        spark_options={"master": "local[1]", "conf": conf, "timeout": 420},
    )
    assert result.ok, result.to_dict()
    d = result.to_dict()
    assert d["engine"] == "spark" and d["num_files_removed"] == 6 and d["num_files_added"] == 2
    assert _read(s3_table_uri, s3_deltalake_options) == before
    snap = DeltaTable(s3_table_uri, s3_storage_options).snapshot()
    assert sorted(p.split("/")[0] for p in snap.file_paths()) == ["part=a", "part=b"]
    fs = fsspec.filesystem("s3", **s3_storage_options)
    bucket_root = s3_table_uri[len("s3://") :]
    leftovers = [p for p in fs.find(bucket_root) if "_deltalog_staging" in p or p.endswith(("_SUCCESS", ".crc"))]
    assert not leftovers, leftovers


def test_convert_on_s3(s3_bucket, s3_storage_options, s3_deltalake_options):
    uri = f"s3://{s3_bucket}/parquet"
    fs = fsspec.filesystem("s3", **s3_storage_options)
    tables = []
    for region in ("eu", "us"):
        data = pa.table({"x": [1, 2, 3], "y": ["p", None, "q"]})
        buf = io.BytesIO()
        pq.write_table(data, buf)
        fs.pipe_file(f"{s3_bucket}/parquet/region={region}/f.parquet", buf.getvalue())
        tables.append(data.append_column("region", pa.array([region] * 3)))
    result = convert_to_delta(uri, partition_by="region string", storage_options=s3_storage_options)
    assert result.num_files == 2 and result.num_records == 6
    assert _read(uri, s3_deltalake_options) == multiset_of(pa.concat_tables(tables))


def _rows_with_dvs(uri: str, options: dict[str, str], version: int | None = None):
    """Rows through deltalog's snapshot and DV reader, files read over fsspec (deltalake's DV-aware SQL engine
    blocks on the in-process S3 server)."""
    import numpy as np

    from deltalog.protocol.deletion_vectors import read_deletion_vector

    dtable = DeltaTable(uri, options)
    snap = dtable.snapshot(version=version)
    out = []
    for r in snap.files.to_pylist():
        data = pq.read_table(io.BytesIO(dtable.storage.read_bytes(dtable.storage.join(r["path"]))))
        dv = {k: v for k, v in (r["deletionVector"] or {}).items() if v is not None}
        if dv:
            keep = np.ones(data.num_rows, dtype=bool)
            keep[read_deletion_vector(dtable.storage, dv).astype(np.int64)] = False
            data = data.filter(pa.array(keep))
        for col, value in dict(r["partitionValues"] or []).items():
            data = data.append_column(col, pa.array([value] * data.num_rows, pa.string()))
        out.append(data.select(sorted(data.column_names)))
    return multiset_of(pa.concat_tables(out))


def test_purge_on_s3(s3_table_uri, s3_storage_options, s3_deltalake_options):
    """A DV purge reads stored (S3 object) and inline DVs through fsspec and keeps every row at every version."""
    from deltalog.create import create_table
    from test_compaction_support import RICH_SCHEMA, add_deletion_vector

    create_table(
        s3_table_uri,
        RICH_SCHEMA,
        partition_by=["part"],
        configuration={"delta.enableDeletionVectors": "true"},
        storage_options=s3_storage_options,
    )
    for i in range(2):
        for part in ("a", "b"):
            deltalake.write_deltalake(
                s3_table_uri,
                rich_rows(40, i * 100 + (0 if part == "a" else 50), part),
                mode="append",
                partition_by=["part"],
                storage_options=s3_deltalake_options,
            )
    paths = DeltaTable(s3_table_uri, s3_storage_options).snapshot().file_paths()
    add_deletion_vector(s3_table_uri, paths[0], list(range(25)), storage_options=s3_storage_options)
    add_deletion_vector(s3_table_uri, paths[1], [2], inline=True, storage_options=s3_storage_options)
    version = DeltaTable(s3_table_uri, s3_storage_options).snapshot().version
    before = _rows_with_dvs(s3_table_uri, s3_storage_options)
    assert sum(before.values()) == 160 - 26

    result = compact(
        s3_table_uri, purge_deletion_vectors=True, min_deleted_share=0.5, storage_options=s3_storage_options
    )

    assert result.ok and result.to_dict()["num_files_removed"] == 1  # 25 of 40 hidden; 1 of 40 stays
    assert _rows_with_dvs(s3_table_uri, s3_storage_options) == before
    assert _rows_with_dvs(s3_table_uri, s3_storage_options, version) == before
    live = {r["path"]: r for r in DeltaTable(s3_table_uri, s3_storage_options).snapshot().files.to_pylist()}
    assert paths[0] not in live and live[paths[1]]["deletionVector"] is not None
    everything = compact(s3_table_uri, purge_deletion_vectors=True, storage_options=s3_storage_options)
    assert everything.ok and _rows_with_dvs(s3_table_uri, s3_storage_options) == before
    files = DeltaTable(s3_table_uri, s3_storage_options).snapshot().files.to_pylist()
    assert not any(r["deletionVector"] for r in files)
    # deltalake's log replay sees the same live files (its pyarrow reader refuses the DV feature itself).
    theirs = deltalake.DeltaTable(s3_table_uri, storage_options=s3_deltalake_options).get_add_actions(flatten=True)
    assert sorted(theirs.column("path").to_pylist()) == sorted(r["path"] for r in files)


def _x_overlap(uri: str, options: dict, lo: int, hi: int) -> dict[str, tuple[int, int]]:
    """Per partition: (live files whose x min/max overlaps [lo, hi], live files), what data skipping reads."""
    import json

    out: dict[str, tuple[int, int]] = {}
    for r in DeltaTable(uri, options).snapshot().files.to_pylist():
        s = json.loads(r["stats"])
        part = dict(r["partitionValues"])["part"]
        hit, n = out.get(part, (0, 0))
        out[part] = (hit + (s["minValues"]["x"] <= hi and s["maxValues"]["x"] >= lo), n + 1)
    return out


@pytest.mark.spark
def test_spark_engine_zorder_and_purge_on_s3_through_s3a(
    s3_server, s3_bucket, s3_storage_options, s3_deltalake_options
):
    """Issue 18's layout modes with the Spark engine on the S3 test server: Z-order of a partitioned table, then a
    deletion-vector purge; one spark-submit each."""
    import json

    import numpy as np

    from deltalog.create import create_table
    from test_compaction_support import add_deletion_vector

    conf = {**spark_conf(delta=False), **s3a_conf(s3_server, ACCESS_KEY, SECRET_KEY, REGION)}
    spark_options = {"master": "local[1]", "conf": conf, "timeout": 420}
    rng = np.random.default_rng(18)

    def batch(part: str, rows: int = 200) -> pa.Table:
        return pa.table(
            {
                "x": pa.array(rng.integers(0, 1000, rows), pa.int64()),
                "y": pa.array(rng.uniform(0, 1, rows), pa.float64()),
                "part": pa.array([part] * rows),
            }
        )

    # Z-order: 3 files per partition, each spanning the whole x range.
    zuri = f"s3://{s3_bucket}/zorder"
    for _ in range(3):
        for part in ("a", "b"):
            deltalake.write_deltalake(
                zuri, batch(part), mode="append", partition_by=["part"], storage_options=s3_deltalake_options
            )
    before = _read(zuri, s3_deltalake_options)
    ours_before = _rows_with_dvs(zuri, s3_storage_options)
    assert ours_before == before and _x_overlap(zuri, s3_storage_options, 0, 50) == {"a": (3, 3), "b": (3, 3)}
    size = sum(r["size"] for r in DeltaTable(zuri, s3_storage_options).snapshot().files.to_pylist())

    result = compact(
        zuri,
        zorder_by=["x", "y"],
        target_size=size // 4 + 1,  # about 2 files per partition
        storage_options=s3_storage_options,
        engine="spark",
        spark_options=spark_options,
    )

    assert result.ok, result.to_dict()
    assert result.to_dict()["engine"] == "spark" and result.to_dict()["num_files_removed"] == 6
    assert _read(zuri, s3_deltalake_options) == before
    assert _rows_with_dvs(zuri, s3_storage_options) == before
    overlap = _x_overlap(zuri, s3_storage_options, 0, 50)
    # x ranges sorted apart: in each partition the low-x range skips at least one file (before: none).
    assert set(overlap) == {"a", "b"} and all(n >= 2 and hit < n for hit, n in overlap.values()), overlap
    total = sum(n for _, n in overlap.values())
    snap = DeltaTable(zuri, s3_storage_options).snapshot()
    assert sorted({p.split("/")[0] for p in snap.file_paths()}) == ["part=a", "part=b"]
    actions = commit_actions(zuri, storage_options=s3_storage_options, version=result.commits[0].version)
    info = actions[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE" and json.loads(info["operationParameters"]["zOrderBy"]) == ["x", "y"]
    assert info["operationParameters"]["engine"] == "spark"
    files = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert len(files) == 6 + total and all(f["dataChange"] is False for f in files)

    # Purge: a stored DV hiding most of one file, an inline one hiding a single row of another.
    duri = f"s3://{s3_bucket}/dv"
    schema = pa.schema([("x", pa.int64()), ("y", pa.float64()), ("part", pa.string())])
    create_table(
        duri,
        schema,
        partition_by=["part"],
        configuration={"delta.enableDeletionVectors": "true"},
        storage_options=s3_storage_options,
    )
    for part in ("a", "b"):
        deltalake.write_deltalake(
            duri, batch(part, 40), mode="append", partition_by=["part"], storage_options=s3_deltalake_options
        )
    paths = DeltaTable(duri, s3_storage_options).snapshot().file_paths()
    add_deletion_vector(duri, paths[0], list(range(25)), storage_options=s3_storage_options)
    add_deletion_vector(duri, paths[1], [2], inline=True, storage_options=s3_storage_options)
    version = DeltaTable(duri, s3_storage_options).snapshot().version
    before = _rows_with_dvs(duri, s3_storage_options)
    assert sum(before.values()) == 80 - 26

    result = compact(
        duri,
        purge_deletion_vectors=True,
        min_deleted_share=0.5,
        storage_options=s3_storage_options,
        engine="spark",
        spark_options=spark_options,
    )

    assert result.ok, result.to_dict()
    assert result.to_dict()["engine"] == "spark" and result.to_dict()["num_files_removed"] == 1
    assert _rows_with_dvs(duri, s3_storage_options) == before
    assert _rows_with_dvs(duri, s3_storage_options, version) == before
    live = {r["path"]: r for r in DeltaTable(duri, s3_storage_options).snapshot().files.to_pylist()}
    assert paths[0] not in live and live[paths[1]]["deletionVector"] is not None  # 1 of 40: below the share
    (new,) = [r for r in live.values() if r["path"] != paths[1]]
    assert new["deletionVector"] is None and json.loads(new["stats"])["numRecords"] == 40 - 25
    actions = commit_actions(duri, storage_options=s3_storage_options, version=result.commits[0].version)
    info = actions[0]["commitInfo"]
    assert info["operation"] == "REORG" and info["operationParameters"]["applyPurge"] == "true"
    assert info["operationParameters"]["engine"] == "spark"
    files = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert len(files) == 2 and all(f["dataChange"] is False for f in files)
    # deltalake's log replay sees the same live files (its pyarrow reader refuses the DV feature itself).
    theirs = deltalake.DeltaTable(duri, storage_options=s3_deltalake_options).get_add_actions(flatten=True)
    assert sorted(theirs.column("path").to_pylist()) == sorted(live)
    fs = fsspec.filesystem("s3", **s3_storage_options)
    leftovers = [p for p in fs.find(s3_bucket) if "_deltalog_staging" in p or p.endswith(("_SUCCESS", ".crc"))]
    assert not leftovers, leftovers
