"""The Spark compaction job submitted by someone else (``compact_with_spark_job``, ``write_compaction_plan``).

A scheduler (Airflow's ``SparkSubmitHook``) submits the job its own way; deltalog writes the plan,
reads back the commit request and commits it. The stand-in ``submit`` below does the job's work
with the local engine in this process (same files, same request), so the hand-off is tested
without a JVM; the real Spark job runs in ``test_compaction_spark.py``.
"""

from __future__ import annotations

import json
import os

import pytest

from deltalog import (
    CompactionPlan,
    DeltaTable,
    SparkHandoff,
    compact_with_spark_job,
    plan_compaction,
    write_compaction_plan,
)
from deltalog.compaction.local import run_local
from deltalog.errors import EngineError, OperationCancelledError
from deltalog.storage.filesystem import Storage
from helpers import append, make_table, rows


def _small_files(path: str) -> object:
    table = make_table(path)
    for i in range(3):
        append(table, rows(2, start=i * 2))
    return table


class LocalJob:
    """``submit``: what deltalog's Spark job does, with the local engine: rewrite the bins, write the request."""

    def __init__(self) -> None:
        self.handoffs: list[SparkHandoff] = []

    def __call__(self, handoff: SparkHandoff) -> None:
        self.handoffs.append(handoff)
        args = handoff.job_arguments()
        opt = dict(zip(args[::2], args[1::2], strict=True))
        plan_file = Storage(opt["--plan"])
        plan = CompactionPlan.from_json(plan_file.read_bytes(plan_file.root))
        outputs, _ = run_local(Storage(opt["--table"]), plan)
        request = {"add": [o.add for o in outputs], "remove": [f.path for b in plan.bins for f in b.files]}
        # As the real job does: the request names the plan's table and version.
        request.update(tableId=plan.table_id, readVersion=plan.snapshot_version)
        out = Storage(opt["--output-request"])
        out.write_atomic(out.root, json.dumps(request).encode())


def test_the_job_reads_the_plan_and_its_request_is_committed(tmp_path):
    table = _small_files(str(tmp_path / "t"))
    plan = plan_compaction(table)
    job = LocalJob()
    result = compact_with_spark_job(table, plan, job)
    assert result.ok and result.engine == "spark" and len(result.commits) == 1
    assert len(table.snapshot().file_paths()) == 1 and table.version() == 4
    (handoff,) = job.handoffs
    assert (
        handoff.table_uri == table.uri and handoff.run_id in handoff.plan_uri and handoff.run_id in handoff.request_uri
    )
    assert os.listdir(tmp_path / "t" / "_compaction") == []  # plan and request are scratch files


def test_a_plan_path_is_kept_where_the_caller_said(tmp_path):
    table = _small_files(str(tmp_path / "t"))
    plan = plan_compaction(table)
    kept = str(tmp_path / "plans" / "run-1.json")
    compact_with_spark_job(table, plan, LocalJob(), plan_path=kept)
    assert CompactionPlan.from_json(open(kept, "rb").read()).to_json() == plan.to_json()
    relative = write_compaction_plan(table, plan, "_compaction/named.json")
    assert relative == table.uri + "/_compaction/named.json"
    assert CompactionPlan.from_json((tmp_path / "t" / "_compaction" / "named.json").read_bytes()).bins == plan.bins


def test_cancelled_before_the_job_starts_nothing_runs_and_nothing_is_left(tmp_path):
    import threading

    table = _small_files(str(tmp_path / "t"))
    cancel = threading.Event()
    cancel.set()
    job = LocalJob()
    with pytest.raises(OperationCancelledError, match="nothing changed"):
        compact_with_spark_job(table, plan_compaction(table), job, cancel=cancel)
    assert job.handoffs == [] and table.version() == 3
    assert os.listdir(tmp_path / "t" / "_compaction") == []


def test_a_failed_job_commits_nothing_and_leaves_no_scratch_file(tmp_path):
    table = _small_files(str(tmp_path / "t"))

    def failing(handoff: SparkHandoff) -> None:
        raise RuntimeError("the cluster said no")

    with pytest.raises(RuntimeError, match="the cluster said no"):
        compact_with_spark_job(table, plan_compaction(table), failing)
    assert table.version() == 3 and os.listdir(tmp_path / "t" / "_compaction") == []
    with pytest.raises(EngineError, match="no readable commit request"):
        compact_with_spark_job(table, plan_compaction(table), lambda handoff: None)  # the job wrote nothing
    assert table.version() == 3 and os.listdir(tmp_path / "t" / "_compaction") == []


def test_a_store_no_hadoop_connector_reaches_is_refused_before_the_plan_is_written(tmp_path):
    from deltalog.errors import OperationRefusedError

    table = _small_files(str(tmp_path / "t"))
    storage = Storage("memory://handoff-gate/t")
    storage.fs.put(str(tmp_path / "t") + "/", storage.root + "/", recursive=True)
    before = sorted(f.path for f in storage.walk_files())
    job = LocalJob()
    with pytest.raises(OperationRefusedError, match="Spark engine"):
        compact_with_spark_job(storage, plan_compaction(table), job)
    assert job.handoffs == [] and sorted(f.path for f in storage.walk_files()) == before


@pytest.mark.azure
def test_an_azure_table_is_handed_over_as_abfs_names_it_with_its_hadoop_settings(
    tmp_path, azure_table_uri, azure_storage_options
):
    """Whoever submits the job gets the table's ABFS URI and the settings that reach it (no JVM here)."""
    _small_files(str(tmp_path / "t"))
    storage = Storage(azure_table_uri, azure_storage_options)
    storage.fs.put(str(tmp_path / "t") + "/", storage.root + "/", recursive=True)
    seen: list[SparkHandoff] = []

    def fail(handoff: SparkHandoff) -> None:
        seen.append(handoff)
        raise EngineError("the job failed")

    with pytest.raises(EngineError):
        compact_with_spark_job(storage, plan_compaction(storage), fail)
    (handoff,) = seen
    container, _, path = storage.root.partition("/")
    assert handoff.table_uri == f"abfs://{container}@devstoreaccount1.dfs.core.windows.net/{path}"
    assert handoff.conf["spark.hadoop.fs.azure.abfs.endpoint"].startswith("127.0.0.1:")
    assert "spark.hadoop.fs.azure.account.key.devstoreaccount1.dfs.core.windows.net" in handoff.conf
    assert [f.path for f in storage.walk_files() if "_compaction" in f.path] == []  # no plan, no request left
    assert len(DeltaTable(azure_table_uri, azure_storage_options).snapshot().file_paths()) == 3
