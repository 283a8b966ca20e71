"""The Spark engine: one real spark-submit run (slow), plus its plumbing without Spark (fast)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from deltalog import DeltaTable
from deltalog.compaction import compact, plan_compaction
from deltalog.compaction.file_names import output_file_name
from deltalog.compaction.spark.commit import outputs_from_request
from deltalog.compaction.spark.submit import run_spark
from deltalog.create import create_table
from deltalog.errors import EngineError
from deltalog.log.listing import commit_name
from test_compaction_support import RICH_SCHEMA, add_deletion_vector, make_rich_table, read_multiset


@pytest.fixture
def small_plan(tmp_path):
    path = make_rich_table(str(tmp_path / "t"), True, appends=2, rows_per_append=5)
    return path, plan_compaction(path)


def test_request_is_mapped_back_onto_bins(small_plan):
    path, plan = small_plan
    storage = DeltaTable(path).storage
    b0, b1 = plan.bins
    name = output_file_name(b0.id, "zstd")
    request = {
        "operation": "OPTIMIZE",
        "dataChange": False,
        "add": [
            {
                "path": f"part=a/{name}",
                "size": 10,
                "partitionValues": {"part": "a"},
                "modificationTime": 1,
                "stats": '{"numRecords":10}',
            }
        ],
        "remove": [f.path for f in b0.files],
    }
    outputs, skipped = outputs_from_request(storage, plan, request, [{"bin": b1.id, "reason": "boom"}])
    assert [(o.bin_id, o.add["path"], o.rows_out) for o in outputs] == [(b0.id, f"part=a/{name}", 10)]
    assert outputs[0].add["dataChange"] is False
    assert [(s.bin_id, s.kind) for s in skipped] == [(b1.id, "error")] and "boom" in skipped[0].reason
    # A bin whose rows were all deleted: inputs removed, nothing added.
    outputs, skipped = outputs_from_request(storage, plan, {"add": [], "remove": [f.path for f in b0.files]}, [])
    assert [(o.bin_id, o.add) for o in outputs] == [(b0.id, None)]
    assert [s.bin_id for s in skipped] == [b1.id] and "did not report" in skipped[0].reason
    stray = {"add": [{**request["add"][0], "path": "part=a/part-00099-" + "0" * 32 + ".c000.zstd.parquet"}]}
    with pytest.raises(EngineError, match="belongs to no bin"):
        outputs_from_request(storage, plan, stray, [])


def test_a_failing_spark_job_commits_nothing(small_plan, tmp_path):
    path, plan = small_plan
    fake = tmp_path / "spark-submit"
    fake.write_text("#!/bin/sh\necho 'starting' >&2\necho 'error: the cluster is on fire' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    version = DeltaTable(path).version()
    with pytest.raises(EngineError, match="cluster is on fire"):
        run_spark(DeltaTable(path).storage, plan, spark_submit=str(fake))
    with pytest.raises(EngineError, match="nothing was committed"):
        compact(path, engine="spark", spark_options={"spark_submit": str(fake)})
    assert DeltaTable(path).version() == version


def test_a_failing_job_names_the_python_error_spark_submit_prints_on_stdout(small_plan, tmp_path):
    """spark-submit merges the Python driver's stderr into stdout: the error line is found there."""
    path, plan = small_plan
    fake = tmp_path / "spark-submit"
    fake.write_text(
        "#!/bin/sh\necho 'Traceback (most recent call last):'\n"
        "echo 'pyspark.errors.exceptions.captured.IllegalArgumentException: Wrong FS file:///p -expected s3a://b'\n"
        "echo 'INFO SparkContext: Successfully stopped SparkContext' >&2\nexit 1\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(EngineError, match="IllegalArgumentException: Wrong FS"):
        run_spark(DeltaTable(path).storage, plan, spark_submit=str(fake))


@pytest.mark.slow
@pytest.mark.spark
def test_spark_engine_on_a_real_table(tmp_path):
    """One spark-submit --master local[2]: nested/decimal/timestamp/null-heavy columns, two partitions, DVs."""
    path = str(tmp_path / "t")
    create_table(path, RICH_SCHEMA, partition_by=["part"], configuration={"delta.enableDeletionVectors": "true"})
    make_rich_table(path, True, appends=4, rows_per_append=50)
    live = DeltaTable(path).snapshot().file_paths()
    add_deletion_vector(path, live[0], [0, 7, 49])
    add_deletion_vector(path, live[1], [3], inline=True)
    before = read_multiset(path)
    assert sum(before.values()) == 400 - 4

    result = compact(path, engine="spark", spark_options={"master": "local[2]", "timeout": 420})

    assert result.ok, result.to_dict()
    d = result.to_dict()
    assert d["engine"] == "spark" and d["num_files_removed"] == 8 and d["num_files_added"] == 2
    assert d["num_deletion_vectors_applied"] == 2
    assert read_multiset(path) == before
    snap = DeltaTable(path).snapshot()
    assert all(dv is None for dv in snap.files.column("deletionVector").to_pylist())
    stats = [json.loads(s) for s in snap.files.column("stats").to_pylist()]
    assert sum(s["numRecords"] for s in stats) == 396
    assert all({"minValues", "maxValues", "nullCount"} <= set(s) for s in stats)
    assert sorted(p.split("/")[0] for p in snap.file_paths()) == ["part=a", "part=b"]
    with open(os.path.join(path, "_delta_log", commit_name(result.commits[0].version))) as fh:
        info = json.loads(fh.readline())["commitInfo"]
    assert info["operation"] == "OPTIMIZE" and info["operationParameters"]["engine"] == "spark"
    assert not os.path.exists(os.path.join(path, "_deltalog_staging"))
    leftovers = {
        os.path.join(d, n)
        for d, _, names in os.walk(path)
        if "_delta_log" not in d
        for n in names
        if n.endswith(".crc")
    }
    assert not leftovers
    assert compact(path).noop  # the Spark output is as compact as the local engine's


def test_a_cancelled_spark_job_is_stopped_and_commits_nothing(small_plan, tmp_path):
    """The cancel event (an Airflow on_kill) terminates spark-submit instead of waiting for it."""
    import threading
    import time

    from deltalog.errors import OperationCancelledError

    path, plan = small_plan
    fake = tmp_path / "spark-submit"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    version = DeltaTable(path).version()
    started = time.monotonic()
    with pytest.raises(OperationCancelledError, match="cancelled"):
        compact(path, engine="spark", spark_options={"spark_submit": str(fake)}, cancel=cancel)
    assert time.monotonic() - started < 20 and DeltaTable(path).version() == version


def test_commit_spark_result_commits_bin_by_bin(small_plan):
    """The library step after spark-submit: the request's files are committed per bin, failures reported."""
    from deltalog.compaction.local import run_local
    from deltalog.compaction.spark.commit import commit_spark_result

    path, plan = small_plan
    before = read_multiset(path)
    b0, b1 = plan.bins
    (out,), _ = run_local(DeltaTable(path).storage, plan, [b0])  # stands in for the Spark job's file
    request = {"add": [out.add], "remove": [f.path for f in b0.files]}
    request.update(tableId=plan.table_id, readVersion=plan.snapshot_version)
    result = commit_spark_result(path, plan, request, failures=[{"bin": b1.id, "reason": "executor lost"}])
    assert result.engine == "spark" and [c.bins for c in result.commits] == [[b0.id]]
    assert [(s.bin_id, s.kind) for s in result.skipped] == [(b1.id, "error")] and not result.ok
    assert result.to_dict()["num_files_removed"] == len(b0.files)
    assert read_multiset(path) == before
