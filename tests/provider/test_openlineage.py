"""OpenLineage from the operators, against the real OpenLineage provider and client.

Each operator runs its ``execute`` on a small real table (no stand-ins), then
``get_openlineage_facets_on_complete`` must return the provider's own
``OperatorLineage`` with the table as the dataset (named as the OpenLineage client's
own naming classes name it), the version / lifecycle / output-statistics facets the
operator claims with the numbers it really wrote, and facets that the client's
serializer turns into plain JSON. The last test runs one operator in a ``dag.test()``
with the OpenLineage listener switched on through the environment (file transport)
and reads the COMPLETE event the listener emitted. "Provider not installed" is
simulated by blocking the imports in ``sys.modules``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.openlineage.extractors import OperatorLineage
from airflow_helpers import write_dag_file
from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
from openlineage.client.generated.base import InputDataset, OutputDataset
from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
from openlineage.client.generated.lifecycle_state_change_dataset import (
    LifecycleStateChange,
    LifecycleStateChangeDatasetFacet,
)
from openlineage.client.generated.output_statistics_output_dataset import OutputStatisticsOutputDatasetFacet
from openlineage.client.naming.dataset import GCS, S3, LocalFileSystem
from openlineage.client.serde import Serde

from deltalog import DeltaTable
from deltalog_provider.operators import (
    DeltaCheckpointOperator,
    DeltaCommitOperator,
    DeltaCompactOperator,
    DeltaConvertOperator,
    DeltaHealthCheckOperator,
    DeltaLogCleanupOperator,
    DeltaManifestOperator,
    DeltaVacuumOperator,
)
from deltalog_provider.utils.lineage import build_operator_lineage, openlineage_dataset_name
from helpers import append, make_table, rows, write_data_file

pytestmark = pytest.mark.airflow

#: Modules whose absence means "OpenLineage not installed" (set to None in sys.modules to simulate it).
OL_MODULES = ("airflow.providers.openlineage.extractors", "openlineage.client.generated.base")


class FakeTI:
    """The little of a task instance that the commit operator reads (app id, map index)."""

    dag_id = "dag"
    task_id = "commit"
    map_index = -1
    try_number = 1


def commit_context() -> dict[str, Any]:
    return {"ti": FakeTI(), "logical_date": dt.datetime(2024, 5, 2, tzinfo=dt.UTC)}


def small_files_table(path: Path, n: int = 3) -> DeltaTable:
    """A table with ``n`` one-commit appends of two rows each (versions 1..n)."""
    table = make_table(str(path))
    for i in range(n):
        append(table, rows(2, start=2 * i))
    return table


def only_output(lineage: Any) -> OutputDataset:
    """The single output dataset of a real ``OperatorLineage`` (and no inputs)."""
    assert isinstance(lineage, OperatorLineage), type(lineage)
    assert lineage.inputs == []
    (out,) = lineage.outputs
    assert isinstance(out, OutputDataset), type(out)
    return out


def assert_local_name(dataset: Any, path: Path) -> None:
    """Named like the OpenLineage client names a local file: namespace ``file``, absolute path."""
    reference = LocalFileSystem(path=str(path))
    assert (dataset.namespace, dataset.name) == (reference.get_namespace(), reference.get_name()) == ("file", str(path))


def assert_table_facets(dataset: Any, *, version: int, lifecycle: LifecycleStateChange | None) -> None:
    version_facet = dataset.facets["version"]
    assert isinstance(version_facet, DatasetVersionDatasetFacet) and version_facet.datasetVersion == str(version)
    if lifecycle is None:
        assert "lifecycleStateChange" not in dataset.facets
    else:
        change = dataset.facets["lifecycleStateChange"]
        assert isinstance(change, LifecycleStateChangeDatasetFacet) and change.lifecycleStateChange is lifecycle


def statistics(dataset: OutputDataset) -> tuple[int | None, int | None, int | None] | None:
    """``(rowCount, size, fileCount)`` of the outputStatistics facet, or None when there is none."""
    stats = (dataset.outputFacets or {}).get("outputStatistics")
    if stats is None:
        return None
    assert isinstance(stats, OutputStatisticsOutputDatasetFacet)
    return stats.rowCount, stats.size, stats.fileCount


def serialized(dataset: Any) -> dict[str, Any]:
    """The dataset as the client serializes it into an event; nothing may fall back to a repr."""
    text = Serde.to_json(dataset)
    assert "non-serializable" not in text, text
    return json.loads(text)


def live_file_sizes(table_path: Path) -> dict[str, int]:
    snapshot = DeltaTable(str(table_path)).snapshot()
    return {path: os.path.getsize(table_path / path) for path in snapshot.file_paths()}


# --- each operator kind, on a real table -------------------------------------------------------


def test_commit_reports_the_files_bytes_and_rows_it_committed(tmp_path):
    table_path = tmp_path / "t"
    make_table(str(table_path))
    adds = [write_data_file(str(table_path), rows(3)), write_data_file(str(table_path), rows(4, start=3))]
    op = DeltaCommitOperator(
        task_id="commit", table=str(table_path), request={"add": [{"path": a["path"]} for a in adds]}
    )
    assert op.get_openlineage_facets_on_complete(None) is None  # nothing ran yet: nothing to report
    metrics = op.execute(commit_context())
    assert metrics["version"] == 1

    out = only_output(op.get_openlineage_facets_on_complete(None))
    assert_local_name(out, table_path)
    assert_table_facets(out, version=1, lifecycle=LifecycleStateChange.ALTER)
    assert statistics(out) == (7, sum(a["size"] for a in adds), 2)

    doc = serialized(out)
    assert (doc["namespace"], doc["name"]) == ("file", str(table_path))
    assert doc["facets"]["version"]["datasetVersion"] == "1"
    assert doc["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "ALTER"
    stats = doc["outputFacets"]["outputStatistics"]
    assert (stats["rowCount"], stats["size"], stats["fileCount"]) == (7, sum(a["size"] for a in adds), 2)
    for facet in (doc["facets"]["version"], doc["facets"]["lifecycleStateChange"], stats):
        assert facet["_producer"] and facet["_schemaURL"].startswith("https://openlineage.io/spec/facets/")


def test_compaction_reports_the_rewritten_file(tmp_path):
    table_path = tmp_path / "t"
    small_files_table(table_path)
    op = DeltaCompactOperator(task_id="compact", table=str(table_path))
    metrics = op.execute({})
    assert (metrics["num_files_removed"], metrics["num_files_added"], metrics["versions"]) == (3, 1, [4])

    out = only_output(op.get_openlineage_facets_on_complete(None))
    assert_local_name(out, table_path)
    assert_table_facets(out, version=4, lifecycle=LifecycleStateChange.ALTER)
    ((_, new_size),) = live_file_sizes(table_path).items()  # the one file compaction wrote
    assert statistics(out) == (None, new_size, 1)
    stats = serialized(out)["outputFacets"]["outputStatistics"]
    assert (stats["size"], stats["fileCount"]) == (new_size, 1) and "rowCount" not in stats  # unknown: left out


def test_compaction_plan_only_reads_the_table(tmp_path):
    table_path = tmp_path / "t"
    small_files_table(table_path)
    op = DeltaCompactOperator(task_id="plan", table=str(table_path), plan_only=True)
    op.execute({})
    lineage = op.get_openlineage_facets_on_complete(None)
    assert isinstance(lineage, OperatorLineage) and lineage.outputs == []
    (read,) = lineage.inputs
    assert isinstance(read, InputDataset)
    assert_local_name(read, table_path)
    assert_table_facets(read, version=3, lifecycle=None)
    assert serialized(read)["facets"]["version"]["datasetVersion"] == "3"


def test_vacuum_reports_the_table_altered_and_a_dry_run_only_reads_it(tmp_path):
    table_path = tmp_path / "t"
    small_files_table(table_path)
    DeltaCompactOperator(task_id="compact", table=str(table_path)).execute({})  # 3 files become tombstones

    dry = DeltaVacuumOperator(
        task_id="vacuum_dry", table=str(table_path), retention_hours=0, allow_short_retention=True, dry_run=True
    )
    assert dry.execute({})["num_files_to_delete"] == 3
    dry_lineage = dry.get_openlineage_facets_on_complete(None)
    assert dry_lineage.outputs == []
    (read,) = dry_lineage.inputs
    assert_local_name(read, table_path)
    assert_table_facets(read, version=4, lifecycle=None)

    op = DeltaVacuumOperator(task_id="vacuum", table=str(table_path), retention_hours=0, allow_short_retention=True)
    metrics = op.execute({})
    assert metrics["num_deleted_files"] == 3 and metrics["end_commit_version"] == 6
    out = only_output(op.get_openlineage_facets_on_complete(None))
    assert_local_name(out, table_path)
    # The version facet is the VACUUM END commit, i.e. the table's version afterwards.
    assert_table_facets(out, version=DeltaTable(str(table_path)).version(), lifecycle=LifecycleStateChange.ALTER)
    assert DeltaTable(str(table_path)).version() == 6
    assert statistics(out) is None  # vacuum writes no data: it claims no output statistics
    assert serialized(out)["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "ALTER"


def test_checkpoint_reports_the_checkpoint_file_it_wrote(tmp_path):
    table_path = tmp_path / "t"
    small_files_table(table_path)
    op = DeltaCheckpointOperator(task_id="checkpoint", table=str(table_path))
    metrics = op.execute({})
    assert metrics["version"] == 3 and metrics["kind"] == "classic"

    out = only_output(op.get_openlineage_facets_on_complete(None))
    assert_local_name(out, table_path)
    assert_table_facets(out, version=3, lifecycle=LifecycleStateChange.ALTER)
    checkpoint_file = table_path / "_delta_log" / "00000000000000000003.checkpoint.parquet"
    assert statistics(out) == (None, checkpoint_file.stat().st_size, 1)
    assert serialized(out)["outputFacets"]["outputStatistics"]["size"] == checkpoint_file.stat().st_size


def test_convert_reports_a_created_table_with_all_its_rows(tmp_path):
    folder = tmp_path / "plain"
    written = [write_data_file(str(folder), rows(3 + i, part=p), {"part": p}) for i, p in enumerate("xy")]
    op = DeltaConvertOperator(task_id="convert", table=str(folder), partition_by="part string")
    assert op.execute({})["version"] == 0

    out = only_output(op.get_openlineage_facets_on_complete(None))
    assert_local_name(out, folder)
    assert_table_facets(out, version=0, lifecycle=LifecycleStateChange.CREATE)
    assert statistics(out) == (7, sum(w["size"] for w in written), 2)
    doc = serialized(out)
    assert doc["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "CREATE"
    assert doc["outputFacets"]["outputStatistics"]["rowCount"] == 7


def test_log_cleanup_and_manifest_report_the_table(tmp_path):
    table_path = tmp_path / "t"
    small_files_table(table_path, n=2)
    cleanup = DeltaLogCleanupOperator(task_id="log_cleanup", table=str(table_path))
    cleanup.execute({})
    out = only_output(cleanup.get_openlineage_facets_on_complete(None))
    assert_local_name(out, table_path)
    assert_table_facets(out, version=2, lifecycle=LifecycleStateChange.ALTER)
    assert statistics(out) is None
    dry = DeltaLogCleanupOperator(task_id="log_cleanup_dry", table=str(table_path), dry_run=True)
    dry.execute({})
    dry_lineage = dry.get_openlineage_facets_on_complete(None)
    assert dry_lineage.outputs == [] and [d.name for d in dry_lineage.inputs] == [str(table_path)]

    manifest = DeltaManifestOperator(task_id="manifest", table=str(table_path), full=True)
    assert manifest.execute({})["manifests_written"] == ["_symlink_format_manifest/manifest"]
    out = only_output(manifest.get_openlineage_facets_on_complete(None))
    assert_table_facets(out, version=2, lifecycle=LifecycleStateChange.ALTER)
    assert statistics(out) == (None, None, 1)


def test_health_check_reads_the_table(tmp_path):
    table_path = tmp_path / "t"
    small_files_table(table_path, n=2)
    op = DeltaHealthCheckOperator(task_id="health", table=str(table_path), max_tombstone_bytes=10**9)
    op.execute({})
    lineage = op.get_openlineage_facets_on_complete(None)
    assert isinstance(lineage, OperatorLineage) and lineage.outputs == []
    (read,) = lineage.inputs
    assert isinstance(read, InputDataset)
    assert_local_name(read, table_path)
    assert_table_facets(read, version=2, lifecycle=None)


@pytest.mark.s3
def test_s3_table_through_a_connection_is_named_by_bucket_and_key(monkeypatch, s3_server, s3_bucket):
    from deltalog.create import create_table

    monkeypatch.setenv(
        "AIRFLOW_CONN_DELTALOG_OL_S3",
        json.dumps(
            {
                "conn_type": "deltalog",
                "host": f"s3://{s3_bucket}/warehouse",
                "login": "testing",
                "password": "testing",
                "extra": {"endpoint_url": s3_server, "region_name": "us-east-1"},
            }
        ),
    )
    from deltalog_provider.hooks.delta_table import DeltaTableHook

    hook = DeltaTableHook(deltalog_conn_id="deltalog_ol_s3")
    create_table(hook.resolve_uri("events"), rows(1).schema, storage_options=hook.storage_options)
    op = DeltaCheckpointOperator(task_id="checkpoint", table="events", deltalog_conn_id="deltalog_ol_s3")
    metrics = op.execute({})
    assert metrics["version"] == 0

    out = only_output(op.get_openlineage_facets_on_complete(None))
    reference = S3(bucket_name=s3_bucket, object_key="warehouse/events")
    assert (out.namespace, out.name) == (reference.get_namespace(), reference.get_name())
    assert out.namespace == f"s3://{s3_bucket}" and out.name == "warehouse/events"
    assert_table_facets(out, version=0, lifecycle=LifecycleStateChange.ALTER)
    assert statistics(out) == (None, metrics["size_in_bytes"], 1)
    doc = serialized(out)
    assert (doc["namespace"], doc["name"]) == (f"s3://{s3_bucket}", "warehouse/events")
    assert "testing" not in json.dumps(doc) and s3_server not in json.dumps(doc)  # no connection options leak


def test_dataset_naming_matches_the_openlineage_client():
    assert openlineage_dataset_name("/data/t/") == ("file", "/data/t")
    assert openlineage_dataset_name("file:///data/t") == ("file", "/data/t")
    for uri in ("s3://bucket/wh/t", "s3a://bucket/wh/t", "s3n://bucket/wh/t/"):
        s3 = S3(bucket_name="bucket", object_key="wh/t")
        assert openlineage_dataset_name(uri) == (s3.get_namespace(), s3.get_name())
    for uri in ("gs://bucket/wh/t", "gcs://bucket/wh/t"):
        gcs = GCS(bucket_name="bucket", object_key="wh/t")
        assert openlineage_dataset_name(uri) == (gcs.get_namespace(), gcs.get_name())
    assert openlineage_dataset_name("abfss://c@a.dfs.core.windows.net/t") == ("abfss://c@a.dfs.core.windows.net", "t")


def test_a_whole_run_event_serializes(tmp_path):
    """The facets inside a complete OpenLineage RunEvent built with the client's own classes."""
    table_path = tmp_path / "t"
    small_files_table(table_path, n=2)
    op = DeltaCompactOperator(task_id="compact", table=str(table_path))
    op.execute({})
    lineage = op.get_openlineage_facets_on_complete(None)
    event = RunEvent(
        eventType=RunState.COMPLETE,
        eventTime=dt.datetime.now(dt.UTC).isoformat(),
        run=Run(runId="01890ee8-0b6a-7c2f-8d1c-6f2e7b3a9c41"),
        job=Job(namespace="deltalog-test", name="dag.compact"),
        inputs=lineage.inputs,
        outputs=lineage.outputs,
    )
    text = Serde.to_json(event)
    assert "non-serializable" not in text
    (out,) = json.loads(text)["outputs"]
    assert (out["namespace"], out["name"]) == ("file", str(table_path))
    assert out["facets"]["version"]["datasetVersion"] == "3"
    assert out["outputFacets"]["outputStatistics"]["fileCount"] == 1


# --- OpenLineage not installed -------------------------------------------------------------


@pytest.mark.parametrize("missing", OL_MODULES)
def test_without_openlineage_the_operators_return_none(monkeypatch, tmp_path, missing):
    table_path = tmp_path / "t"
    small_files_table(table_path, n=2)
    installed = sys.modules[missing]
    monkeypatch.setitem(sys.modules, missing, None)  # importing it now raises ImportError
    assert build_operator_lineage(str(table_path), version=3, file_count=1) is None
    compact = DeltaCompactOperator(task_id="compact", table=str(table_path))
    assert compact.execute({})["num_files_added"] == 1  # the operator itself still works
    assert compact.get_openlineage_facets_on_complete(None) is None
    health = DeltaHealthCheckOperator(task_id="health", table=str(table_path), max_tombstone_bytes=10**9)
    health.execute({})
    assert health.get_openlineage_facets_on_complete(None) is None

    monkeypatch.setitem(sys.modules, missing, installed)  # back again: the same operator reports lineage
    assert only_output(compact.get_openlineage_facets_on_complete(None)).name == str(table_path)


# --- the listener in a real DAG run ----------------------------------------------------------------

#: Runs one DAG with ``dag.test()`` in a fresh interpreter, so the OpenLineage settings below
#: (read once per process when Airflow loads its plugins) reach only this run, not the other
#: provider suites of the session.
_RUNNER = """
import json, sys
from pathlib import Path
from airflow_helpers import run_dag, task_states
dag_run = run_dag(Path(sys.argv[1]), sys.argv[2])
print("RESULT=" + json.dumps({"run": str(dag_run.state), "tasks": task_states(dag_run)}))
"""


@pytest.mark.slow
def test_listener_emits_the_table_in_the_complete_event(airflow_db, tmp_path):
    table_path = tmp_path / "events"
    table = small_files_table(table_path)
    events_file = tmp_path / "openlineage" / "events.jsonl"
    events_file.parent.mkdir()
    dag_file = write_dag_file(
        "deltalog_openlineage",
        f"""
        import datetime as dt
        from airflow.sdk import DAG
        from deltalog_provider.operators import DeltaCompactOperator

        with DAG("deltalog_openlineage", schedule=None, start_date=dt.datetime(2024, 1, 1)) as dag:
            DeltaCompactOperator(task_id="compact", table={str(table_path)!r})
        """,
    )
    tests_dir = Path(__file__).resolve().parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tests_dir), str(tests_dir.parent), os.environ.get("PYTHONPATH", "")]),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events_file), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "deltalog-test",
        # Emit from a thread of the task process instead of a fork of it (safer under dag.test).
        "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True",
        "AIRFLOW__OPENLINEAGE__DISABLED": "False",
    }
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(dag_file), "deltalog_openlineage"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(f"dag.test with the OpenLineage listener: {time.monotonic() - started:.1f}s")
    result_lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT=")]
    assert proc.returncode == 0 and result_lines, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    result = json.loads(result_lines[-1][len("RESULT=") :])
    assert result == {"run": "success", "tasks": {"compact": "success"}}, result
    assert table.version() == 4  # the compaction really ran

    assert events_file.exists(), f"no OpenLineage events written\n{proc.stderr[-5000:]}"
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    task_events = [e for e in events if e.get("job", {}).get("name") == "deltalog_openlineage.compact"]
    by_type = {e["eventType"]: e for e in task_events}
    assert {"START", "COMPLETE"} <= set(by_type), [(e["eventType"], e["job"]["name"]) for e in events]
    # START (before execute) names the table from the task's outlet Asset: the same dataset.
    assert [(o["namespace"], o["name"]) for o in by_type["START"]["outputs"]] == [("file", str(table_path))]
    complete = by_type["COMPLETE"]
    assert complete["job"]["namespace"] == "deltalog-test"
    assert complete["inputs"] == []
    (out,) = complete["outputs"]
    assert (out["namespace"], out["name"]) == ("file", str(table_path))
    assert out["facets"]["version"]["datasetVersion"] == "4"
    assert out["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "ALTER"
    new_size = os.path.getsize(table_path / DeltaTable(str(table_path)).snapshot().file_paths()[0])
    stats = out["outputFacets"]["outputStatistics"]
    assert (stats["fileCount"], stats["size"]) == (1, new_size)
