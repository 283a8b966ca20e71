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
from test_compaction_support import multiset_of, rich_rows

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
    assert result.ok and result.to_dict()["numFilesRemoved"] == 8 and result.to_dict()["numFilesAdded"] == 2
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
    assert result.ok and result.to_dict()["numFilesRemoved"] == 4 and result.to_dict()["numFilesAdded"] == 2
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
    assert d["engine"] == "spark" and d["numFilesRemoved"] == 6 and d["numFilesAdded"] == 2
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
