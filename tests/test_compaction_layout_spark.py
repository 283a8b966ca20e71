"""The Spark engine's layout modes: Z-order, deletion-vector purge and liquid clustering.

Fast checks of the curve plumbing without Spark, one end-to-end ``spark-submit`` (the CLI's
``--engine spark --zorder-by``), and the job run in the test's Delta Spark session
(``run_job``, the same code ``spark-submit`` runs) for the purge and the clustering, judged
by deltalake and by Delta Spark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from deltalog import DeltaTable
from deltalog.compaction import plan_compaction
from deltalog.compaction.file_names import output_file_name
from deltalog.compaction.spark.commit import commit_spark_result, outputs_from_request
from deltalog.compaction.spark.curve import sample_boundaries
from deltalog.create import create_table
from deltalog.errors import EngineError
from deltalog.log.listing import commit_name
from spark_session_jobs import run_job_in_session
from test_compaction_support import add_deletion_vector, read_multiset
from test_compaction_zorder import _random_table, overlap_share


def test_sample_boundaries_are_distinct_sorted_quantiles_without_nulls():
    values = [None, float("nan")] + [float(v) for v in range(1000)]
    b = sample_boundaries(values, 2)
    assert b == [250.0, 500.0, 750.0]  # 4 ranges: 3 boundaries at the quartiles
    assert sample_boundaries(["b", "a", "a", "a", None], 3) == ["a", "b"]  # ties collapse
    assert sample_boundaries([None, None], 4) == []


def _info(path: str, version: int) -> dict:
    with open(os.path.join(path, "_delta_log", commit_name(version))) as fh:
        return json.loads(fh.readline())["commitInfo"]


def test_a_curve_bin_maps_several_files_and_their_tags(tmp_path):
    path = str(tmp_path / "t")
    _random_table(path, files=3, rows=50)
    plan = plan_compaction(path, zorder_by=["x"])
    (b,) = plan.bins
    names = [output_file_name(b.id, plan.codec) for _ in range(2)]
    stats = json.dumps({"numRecords": 75})
    add = {"size": 10, "modificationTime": 1, "partitionValues": {}, "stats": stats, "tags": {"k": "v"}}
    request = {"add": [{**add, "path": n} for n in names], "remove": [f.path for f in b.files]}
    (out,), skipped = outputs_from_request(DeltaTable(path).storage, plan, request, [])
    assert not skipped and [a["path"] for a in out.adds] == names and out.rows_out == 150
    assert all(a["tags"] == {"k": "v"} for a in out.adds)
    # A plain bin still has exactly one file.
    plain = plan_compaction(path)
    (pb,) = plain.bins
    request = {"add": [{**add, "path": output_file_name(pb.id, plan.codec)} for _ in range(2)], "remove": []}
    with pytest.raises(EngineError, match="belongs to no bin"):
        outputs_from_request(DeltaTable(path).storage, plain, request, [])


@pytest.mark.slow
@pytest.mark.spark
def test_cli_zorder_with_the_spark_engine(tmp_path):
    pytest.importorskip("pyspark")
    path = str(tmp_path / "t")
    _random_table(path, files=6, rows=4000)
    before = read_multiset(path)
    size = sum(f["size"] for f in DeltaTable(path).snapshot().files.to_pylist())
    cli = [sys.executable, "-m", "deltalog", "compact", path, "--engine", "spark", "--zorder-by", "x,y"]
    run = subprocess.run([*cli, "--target-size", str(size // 4 + 1), "--json"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert result["engine"] == "spark" and result["num_files_removed"] == 6
    assert read_multiset(path) == before
    files = DeltaTable(path).snapshot().files.to_pylist()
    assert 2 <= len(files) <= 4
    assert overlap_share(path, "x", 0, 1000) <= 0.5 and overlap_share(path, "y", 0.0, 0.1) <= 0.75
    info = _info(path, DeltaTable(path).snapshot().version)
    assert info["operation"] == "OPTIMIZE" and json.loads(info["operationParameters"]["zOrderBy"]) == ["x", "y"]
    assert info["operationParameters"]["engine"] == "spark"


def _run_in_session(spark, path: str, plan, tmp_path) -> object:
    """What spark-submit runs (``run_job``), in this session, then deltalog's commit of its request."""
    request, failures = run_job_in_session(spark, path, plan, tmp_path)
    return commit_spark_result(path, plan, request, failures=failures)


@pytest.mark.slow
@pytest.mark.spark
def test_spark_engine_purges_deletion_vectors(delta_spark, tmp_path):
    path = str(tmp_path / "t")
    schema = pa.schema([("x", pa.int64()), ("y", pa.float64()), ("s", pa.string()), ("p", pa.string())])
    create_table(path, schema, partition_by=["p"], configuration={"delta.enableDeletionVectors": "true"})
    _random_table(path, files=4, rows=200, partitioned=True)
    paths = DeltaTable(path).snapshot().file_paths()
    add_deletion_vector(path, paths[0], list(range(0, 150)))
    add_deletion_vector(path, paths[1], [3, 4], inline=True)
    before = read_multiset(path)

    plan = plan_compaction(path, purge_deletion_vectors=True, min_deleted_share=0.5, engine="spark")
    assert [f.path for b in plan.bins for f in b.files] == [paths[0]]
    result = _run_in_session(delta_spark, path, plan, tmp_path)

    assert result.ok and read_multiset(path) == before
    live = {f["path"]: f for f in DeltaTable(path).snapshot().files.to_pylist()}
    assert paths[0] not in live and live[paths[1]]["deletionVector"] is not None  # 2 of 200: below the share
    info = _info(path, result.commits[0].version)
    assert info["operation"] == "REORG" and info["operationParameters"]["applyPurge"] == "true"
    assert info["operationParameters"]["engine"] == "spark"
    rows = delta_spark.read.format("delta").load(path).count()
    assert rows == sum(before.values())


@pytest.mark.slow
@pytest.mark.spark
def test_spark_engine_clusters_a_delta_spark_clustered_table(delta_spark, tmp_path):
    spark = delta_spark
    path = str(tmp_path / "c")
    spark.sql(f"CREATE TABLE delta.`{path}` (x BIGINT, y DOUBLE, s STRING) USING delta CLUSTER BY (x, y)")
    rng = np.random.default_rng(3)
    for _ in range(4):
        values = ", ".join(f"({int(a)}, {float(b)!r}, 's{int(a) % 97}')" for a, b in rng.uniform(0, 1000, (300, 2)))
        spark.sql(f"INSERT INTO delta.`{path}` VALUES {values}")
    expected = sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
    size = sum(f["size"] for f in DeltaTable(path).snapshot().files.to_pylist())

    plan = plan_compaction(path, target_size=size // 2 + 1, small_file_threshold=1, engine="spark")
    assert plan.clustering is not None and plan.num_input_files == 4
    result = _run_in_session(spark, path, plan, tmp_path)

    assert result.ok
    files = DeltaTable(path).snapshot().files.to_pylist()
    assert len(files) == 2 and {f["clusteringProvider"] for f in files} == {"liquid"}
    assert len({dict(f["tags"])["ZCUBE_ID"] for f in files}) == 1
    assert {dict(f["tags"])["ZCUBE_ZORDER_BY"] for f in files} == {'["x","y"]'}
    assert sorted(tuple(r) for r in spark.read.format("delta").load(path).collect()) == expected
    info = _info(path, result.commits[0].version)
    assert json.loads(info["operationParameters"]["clusterBy"]) == ["x", "y"]
    spark.sql(f"OPTIMIZE delta.`{path}`")  # Delta Spark keeps working on our ZCube
    assert sorted(tuple(r) for r in spark.read.format("delta").load(path).collect()) == expected
