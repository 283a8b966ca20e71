"""The Spark vacuum engine: what only it does (spilled plans, spark-submit, its refusals), and a tampered plan.

Its plans are checked against the local engine's (and so against Delta Spark's) in
tests/test_delta_spark_oracle.py and tests/test_delta_spark_vacuum_cutoffs.py, and the
safety tests of tests/test_vacuum.py run on both engines. The in-process tests share
the test run's one Spark session (``delta_spark``); one test goes through
``spark-submit`` (the CLI), as users and the operators run it.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.errors import InvalidArgumentError, OperationRefusedError
from deltalog.log_maintenance import create_checkpoint
from deltalog.vacuuming import execute_vacuum, plan_vacuum, vacuum
from deltalog.vacuuming.paths import UnrelativisablePathError
from deltalog.vacuuming.spark import driver as spark_driver
from deltalog.vacuuming.verdict import PLAN_SCHEMA
from test_vacuum import build_history, write_commit
from vacuum_helpers import DAY_MS, commit_at, deltalake_ids, files_on_disk, log_files, now_ms, set_mtime

spark_marks = [pytest.mark.slow, pytest.mark.spark]


def _session(delta_spark: object) -> dict:
    return {"engine": "spark", "spark_options": {"session": delta_spark}}


@pytest.mark.slow
@pytest.mark.spark
def test_a_spilled_plan_is_checked_and_deleted_batch_by_batch(delta_spark, tmp_path, monkeypatch):
    """Past LOAD_LIMIT files a Spark plan stays in Parquet: counted, shown, re-validated and deleted from there."""
    path = str(tmp_path / "t")
    h = build_history(path)
    monkeypatch.setattr(spark_driver, "LOAD_LIMIT", 0)
    plan = plan_vacuum(path, **_session(delta_spark))
    assert plan.files_location and plan.files.num_rows == 0 and plan.engine == "spark"
    assert plan.num_files == 4 and plan.size_in_bytes > 0
    expected = {h["a"]["path"], h["b"]["path"], h["c"]["path"], h["junk"]}
    assert {r["path"] for b in plan.file_batches(batch_rows=1) for r in b.to_pylist()} == expected
    assert plan.head(2).num_rows == 2 and plan.to_dict()["files"] is None
    # A RESTORE re-adds A between planning and executing: the spilled plan is re-validated too.
    commit_at(h["table"], now_ms(), adds=[dict(h["a"], modificationTime=now_ms())], operation="RESTORE")
    result = execute_vacuum(path, plan)
    assert result.num_kept_by_revalidation == 1 and result.num_deleted_files == 3
    remaining = files_on_disk(path)
    assert h["a"]["path"] in remaining and not {h["b"]["path"], h["c"]["path"], h["junk"]} & remaining
    assert {h["d"]["path"], h["e"]["path"], h["fresh"]} <= remaining
    assert deltalake_ids(path, 3) == [10, 11, 20, 21]
    location = plan.files_location
    del plan, result
    gc.collect()
    assert not os.path.exists(location), "the spilled plan's folder outlives its plan"


def test_a_plan_naming_a_path_outside_the_root_or_a_hidden_one_is_refused_before_anything(tmp_path):
    """Execution checks every planned path itself (a spilled plan is a file anyone could edit)."""
    path = str(tmp_path / "t")
    build_history(path)
    plan = plan_vacuum(path)
    before = (files_on_disk(path), log_files(path))
    for bad in ("../outside.parquet", "/etc/hosts", "part=a/../../x", "_delta_log/00000000000000000000.json", ""):
        folder = tmp_path / f"plan-{abs(hash(bad))}"
        folder.mkdir()
        rows = plan.files.to_pylist() + [{"path": bad, "size": 1, "modificationTime": 1, "reason": "x"}]
        pq.write_table(pa.Table.from_pylist(rows, schema=PLAN_SCHEMA), str(folder / "part-0.parquet"))
        tampered = dataclasses.replace(
            plan, files=PLAN_SCHEMA.empty_table(), files_location=str(folder), spilled=(5, 5)
        )
        with pytest.raises(OperationRefusedError, match="refusing to run it"):
            execute_vacuum(path, tampered)
        assert (files_on_disk(path), log_files(path)) == before, bad


@pytest.mark.slow
@pytest.mark.spark
def test_spark_engine_refusals_come_back_as_the_local_engines_errors(delta_spark, tmp_path):
    """A task's error (a log path outside the table, an inventory in seconds) is the planner's one clear error."""
    now = now_ms()
    path = str(tmp_path / "t")
    h = build_history(path)
    # Seconds read as milliseconds: every file would look written in January 1970.
    inv = str(tmp_path / "inventory.parquet")
    rows = [
        {"path": "file:" + os.path.join(path, p), "size": 1, "modificationTime": now // 1000}
        for p in files_on_disk(path)
    ]
    pq.write_table(pa.Table.from_pylist(rows), inv)
    with pytest.raises(InvalidArgumentError, match="Is the column in seconds") as local_err:
        plan_vacuum(path, inventory=inv)
    with pytest.raises(InvalidArgumentError, match="Is the column in seconds") as spark_err:
        plan_vacuum(path, inventory=inv, **_session(delta_spark))
    assert str(spark_err.value).split(" for ")[0] == str(local_err.value).split(" for ")[0]
    with pytest.raises(InvalidArgumentError, match="Parquet inventories"):
        plan_vacuum(path, inventory=str(tmp_path / "inv.csv"), **_session(delta_spark))
    with pytest.raises(InvalidArgumentError, match="lite mode"):
        plan_vacuum(path, mode="lite", **_session(delta_spark))
    with pytest.raises(InvalidArgumentError, match="unknown spark_options"):
        plan_vacuum(path, engine="spark", spark_options={"masters": "local[1]"})
    # A checkpointed add naming a file of another table: the checkpoint is read by the job, which stops.
    other = str(tmp_path / "elsewhere.parquet")
    add = dict(h["e"], path="file://" + other, modificationTime=now)
    write_commit(path, 5, [{"commitInfo": {"timestamp": now, "operation": "WRITE"}}, {"add": add}], now)
    create_checkpoint(path)
    for kwargs in ({}, _session(delta_spark)):
        with pytest.raises(UnrelativisablePathError, match="cannot be relativised"):
            plan_vacuum(path, **kwargs)
    # Links in a local table: the local engine protects through them, the Spark engine refuses.
    os.symlink(os.path.join(path, "part=b"), os.path.join(path, "part=link"))
    os.remove(os.path.join(path, "_delta_log", "00000000000000000005.json"))
    for f in os.listdir(os.path.join(path, "_delta_log")):
        if "checkpoint" in f or f == "_last_checkpoint":
            os.remove(os.path.join(path, "_delta_log", f))
    with pytest.raises(OperationRefusedError, match="symbolic links"):
        plan_vacuum(path, **_session(delta_spark))


@pytest.mark.slow
@pytest.mark.spark
def test_cli_spark_engine_through_spark_submit_deletes_and_reports(tmp_path):
    """``deltalog vacuum --engine spark``: spark-submit plans, this process re-validates and deletes."""
    path = str(tmp_path / "t")
    h = build_history(path)
    create_checkpoint(path)  # the job reads the checkpoint's file actions
    expected_v3 = deltalake_ids(path, 3)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, "-m", "deltalog", "vacuum", path, "--engine", "spark", "--spark-master", "local[1]", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["status"] == "COMPLETED" and doc["plan"]["engine"] == "spark" and doc["num_deleted_files"] == 4
    assert {f["path"] for f in doc["plan"]["files"]} == {h["a"]["path"], h["b"]["path"], h["c"]["path"], h["junk"]}
    remaining = files_on_disk(path)
    assert {h["d"]["path"], h["e"]["path"], h["fresh"], "part=a/.x.parquet.crc", "_tmp/leftover.parquet"} <= remaining
    assert deltalake_ids(path, 3) == expected_v3
    assert DeltaTable(path).history(limit=1)[0].operation == "VACUUM END"
    # Dates inside the job are the table's: files of a day ago are too new for the default week.
    set_mtime(os.path.join(path, h["e"]["path"]), now_ms() - DAY_MS)
    again = vacuum(path, dry_run=True)
    assert again.num_files_to_delete == 0


def test_a_malformed_descriptor_in_a_checkpoint_the_job_would_read_is_refused_before_submitting(tmp_path, monkeypatch):
    """The Spark job reads the checkpoint's file rows itself: the driver checks them first, as a snapshot load does."""
    import json as json_module

    from corrupt_log_helpers import checkpointed, fingerprint, rewrite_checkpoint_field
    from deltalog.errors import CorruptCheckpointError

    path = str(tmp_path / "t")
    cp_path = checkpointed(path, drop_commits=True)
    dv = {"storageType": "z", "pathOrInlineDv": "abc", "offset": 1, "sizeInBytes": 10, "cardinality": 1}
    rewrite_checkpoint_field(cp_path, "add", "deletionVector", dv)
    rewrite_checkpoint_field(cp_path, "add", "stats", json_module.dumps({"numRecords": 3}))
    submitted = []
    monkeypatch.setattr(spark_driver, "spark_submit", lambda *a, **k: submitted.append(a))
    before = fingerprint(path)
    with pytest.raises(CorruptCheckpointError, match=r"the add action is invalid: 'deletionVector.storageType'"):
        plan_vacuum(path, engine="spark")
    assert not submitted and fingerprint(path) == before
