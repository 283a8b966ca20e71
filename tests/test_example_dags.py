"""The example DAGs end to end: real Airflow 3 (``airflow dags test``, SQLite) and real Spark.

One AIRFLOW_HOME for the module, every Airflow command in a subprocess (so this
module never configures Airflow for the rest of the session), two Spark
submissions in all (the ingest job, the compaction job). The environment is the
one ``scripts/demo.py`` uses, so these tests also cover the main job's set-up.

Table A (42 days of history): ingest with Spark -> re-commit (idempotent) ->
maintenance with the Spark compaction path. Table B: the asset-scheduled DAG.
Results are read back with deltalake, an independent reader.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
DAGS = REPO / "dags"
sys.path[:0] = [str(DAGS), str(REPO / "scripts")]

from demo import airflow_env, task_states  # noqa: E402

from airflow_homes import prepare_home  # noqa: E402

VENV_BIN = str(Path(sys.executable).parent)
TODAY = dt.datetime.now(dt.UTC).date()
INGEST_ROWS, INGEST_FILES = 3000, 4
SPARK_PATH = ["compact_spark"]
CORE = ["health_check", "choose_engine", "checkpoint", "vacuum", "log_cleanup", "manifest", "summary"]

# The module's pipeline (a Spark ingest, its commit again, the maintenance DAG on the Spark path) is set up
# inside its first test's time limit: 600 s was too tight beside two other workers on a loaded machine
# (the limit stops a hang; it asserts nothing).
pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(1800)]


def _airflow(env: dict[str, str], *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [os.path.join(VENV_BIN, "airflow"), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"airflow {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _rows(table: str) -> Any:
    from deltalake import DeltaTable as RsTable

    return RsTable(table).to_pyarrow_table()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("airflow_home"))
    prepare_home(tmp_path_factory, path)  # what `airflow db migrate` leaves (tests/airflow_homes.py)
    yield path


@pytest.fixture(scope="module")
def pipeline(home: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Seed table A, run ingest, re-run its commit, run maintenance on the Spark path; record every step."""
    from deltalog import DeltaTable
    from deltalog_example.report import table_report
    from deltalog_example.seed import seed_history

    table = str(tmp_path_factory.mktemp("tables") / "events_a")
    seeded = seed_history(table, days=42, files_per_day=2, rows_per_file=100, reingested_days=(20,), orphans=1)
    env = airflow_env(home, table, VENV_BIN)
    env.update(
        {
            "AIRFLOW_VAR_DELTALOG_INGEST_ROWS": str(INGEST_ROWS),
            "AIRFLOW_VAR_DELTALOG_INGEST_FILES": str(INGEST_FILES),
            # Every table counts as large: exercise the Spark compaction path.
            "AIRFLOW_VAR_DELTALOG_SPARK_COMPACTION_MIN_BYTES": "0",
            # Every operation of the example DAGs records its row here.
            "AIRFLOW_VAR_DELTALOG_HISTORY_URI": str(tmp_path_factory.mktemp("lake") / "_deltalog" / "history"),
        }
    )
    out: dict[str, Any] = {"table": table, "seeded": seeded, "seeded_rows": _rows(table).num_rows}
    out["history"] = env["AIRFLOW_VAR_DELTALOG_HISTORY_URI"]
    started = time.monotonic()
    _airflow(env, "dags", "test", "deltalog_ingest", TODAY.isoformat())
    out["ingest_seconds"] = time.monotonic() - started
    out["ingest_states"] = task_states(home, "deltalog_ingest")
    out["after_ingest"] = table_report(DeltaTable(table))
    out["rows_after_ingest"] = _rows(table)
    # A retry of the commit after a lost response: same run, same request, same app transaction.
    recommit = _airflow(env, "tasks", "test", "deltalog_ingest", "commit", TODAY.isoformat())
    out["recommit_log"] = recommit.stdout + recommit.stderr
    out["after_recommit"] = table_report(DeltaTable(table))
    log_before = set(os.listdir(os.path.join(table, "_delta_log")))
    started = time.monotonic()
    _airflow(env, "dags", "test", "deltalog_maintenance", TODAY.isoformat())
    out["maintenance_seconds"] = time.monotonic() - started
    out["maintenance_states"] = task_states(home, "deltalog_maintenance")
    out["after_maintenance"] = table_report(DeltaTable(table))
    out["log_removed"] = sorted(log_before - set(os.listdir(os.path.join(table, "_delta_log"))))
    return out


def test_dag_files_import_cleanly_with_their_scheduling_guarantees(home: str) -> None:
    """DagBag (as the DAG processor builds it) has no import errors; timeouts, pools, deadline, asset wired."""
    code = r"""
import json
from airflow.dag_processing.dagbag import BundleDagBag
bag = BundleDagBag(dag_folder=DAGS, bundle_path=DAGS, bundle_name="dags-folder")
from deltalog_example import MAINTENANCE_POOL  # importable now: the bag put the bundle on sys.path
m = bag.dags["deltalog_maintenance"]
out = {
    "errors": {k: v[-500:] for k, v in bag.import_errors.items()},
    "dags": sorted(bag.dags),
    "no_timeout": sorted(f"{d.dag_id}.{t.task_id}" for d in bag.dags.values() for t in d.tasks
                         if t.execution_timeout is None and not t.task_id.startswith("wait_")),
    "max_active_runs": {d.dag_id: d.max_active_runs for d in bag.dags.values()},
    "rewrite_pools": {f"{d.dag_id}.{t.task_id}": t.pool for d in bag.dags.values() for t in d.tasks
                      if t.task_id in ("compact_local", "compact_spark", "vacuum", "compact")},
    "deadline": [(type(a.reference).__name__, a.interval.total_seconds(), a.callback.path) for a in (m.deadline or [])],
    "on_change_schedule": [a.uri for a in bag.dags["deltalog_maintenance_on_change"].schedule.objects],
    "on_change_watchers": [[w.trigger.serialize()[1]["table_uri"] for w in a.watchers]
                           for a in bag.dags["deltalog_maintenance_on_change"].schedule.objects],
    "commit_outlets": [o.uri for o in bag.dags["deltalog_ingest"].get_task("commit").outlets],
    "pool": MAINTENANCE_POOL,
    "deferrable": sorted(f"{d.dag_id}.{t.task_id}" for d in bag.dags.values() for t in d.tasks
                         if getattr(t, "deferrable", False)),
}
print(json.dumps(out))
""".replace("DAGS", repr(str(DAGS)))
    env = airflow_env(home, "/data/events", VENV_BIN)
    env["AIRFLOW_VAR_DELTALOG_MAINTENANCE_DEADLINE_MINUTES"] = "45"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["errors"] == {}
    assert info["dags"] == [
        "deltalog_fleet_maintenance",
        "deltalog_ingest",
        "deltalog_maintenance",
        "deltalog_maintenance_on_change",
    ]
    assert info["no_timeout"] == []
    assert set(info["max_active_runs"].values()) == {1}
    assert info["rewrite_pools"] and set(info["rewrite_pools"].values()) == {info["pool"]}
    assert info["deadline"] == [
        ["DagRunQueuedAtDeadline", 45 * 60.0, "deltalog_provider.callbacks.log_missed_deadline"]
    ]
    # The on-change DAG listens to exactly the asset the ingest commit emits.
    assert info["commit_outlets"] == ["file:///data/events"]
    # ... and to the table's log, which watches itself: any writer's commits (docs/events.md).
    assert info["on_change_schedule"] == ["file:///data/events", "file:///data/events/_delta_log"]
    assert info["on_change_watchers"] == [[], ["file:///data/events"]]
    # Issue 15 fault 11: the on-change sensor waits in the triggerer, not in one of the few worker slots.
    assert info["deferrable"] == ["deltalog_maintenance_on_change.wait_until_due"]


RENDER_CODE = r"""
import datetime as dt, json, sys, types
from airflow.dag_processing.dagbag import BundleDagBag
from airflow.sdk.definitions.xcom_arg import XComArg
bag = BundleDagBag(dag_folder=DAGS, bundle_path=DAGS, bundle_name="dags-folder")
assert not bag.import_errors, bag.import_errors
logical = None if sys.argv[1] == "none" else dt.datetime.fromisoformat(sys.argv[1])
run_after = dt.datetime(2026, 11, 23, 10, 0, tzinfo=dt.timezone.utc)
run_id = "manual__2026-11-23T10:00:00+00:00" if logical is None else "backfill__" + logical.isoformat()

def has_xcom(v):
    if isinstance(v, XComArg):
        return True
    if isinstance(v, (list, tuple)):
        return any(has_xcom(x) for x in v)
    return isinstance(v, dict) and any(has_xcom(x) for x in v.values())

out = {}
for dag_id, dag in sorted(bag.dags.items()):
    env = dag.get_template_env()
    dag_run = types.SimpleNamespace(logical_date=logical, run_after=run_after, run_id=run_id, dag_id=dag_id, conf={})
    # What the task SDK puts in the context of a run without a logical date: no ds/ts keys at all.
    # The task instance is always there; here no upstream task has pushed an XCom yet.
    ti = types.SimpleNamespace(xcom_pull=lambda *a, **k: None)
    ctx = {"dag": dag, "dag_run": dag_run, "run_id": run_id, "params": {}, "ti": ti, "task_instance": ti}
    if logical is not None:
        ctx.update(logical_date=logical, ds=logical.strftime("%Y-%m-%d"), ds_nodash=logical.strftime("%Y%m%d"),
                   ts=logical.isoformat(), ts_nodash=logical.strftime("%Y%m%dT%H%M%S"))
    for task in dag.tasks:
        ctx["task"] = task
        for name in task.template_fields:
            value = getattr(task, name, None)
            if value is None or has_xcom(value):
                continue
            out[f"{dag_id}.{task.task_id}.{name}"] = task.render_template(value, ctx, env)
print(json.dumps(out, default=str))
"""


def _render_all(home: str, logical_date: str) -> dict[str, Any]:
    env = airflow_env(home, "s3://bucket/warehouse/events", VENV_BIN)
    code = RENDER_CODE.replace("DAGS", repr(str(DAGS)))
    proc = subprocess.run(
        [sys.executable, "-c", code, logical_date], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("logical_date", "day"), [("none", "2026-11-23"), ("2026-11-20T00:00:00+00:00", "2026-11-20")])
def test_templates_render_with_and_without_a_logical_date(home: str, logical_date: str, day: str) -> None:
    """Issue 15 fault 2: a REST/CLI trigger without a logical date rendered ``'ds_nodash' is undefined``."""
    r = _render_all(home, logical_date)
    args = r["deltalog_ingest.ingest_events.application_args"]
    assert args[args.index("--date") + 1] == day
    request = args[args.index("--request") + 1]
    assert request == "s3://bucket/warehouse/events/" + r["deltalog_ingest.commit.request"]
    assert ":" not in request.split("://", 1)[1] and "+" not in request
    # One app transaction per ingested day, whichever run commits it.
    assert r["deltalog_ingest.commit.app_id"] == f"airflow:deltalog_ingest:commit:{day}"
    # The Spark compaction names its job (and its plan files, inside the operator) without ds/ts.
    job_name = r["deltalog_maintenance.compact_spark.spark_options"]["name"]
    assert job_name.startswith("deltalog-compact-") and ":" not in job_name and "+" not in job_name
    # Vacuum's engine comes from choose_engine's XCom; none pushed: the local engine.
    assert r["deltalog_maintenance.vacuum.engine"] == "local"


def test_deadline_callback_logs_the_missed_run(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    from deltalog_provider.callbacks import log_missed_deadline

    context = {"dag_run": {"run_id": "scheduled__2026-11-21", "dag_id": "deltalog_maintenance"}}
    with caplog.at_level("WARNING", logger="deltalog.maintenance.deadline"):
        message = asyncio.run(log_missed_deadline(table="s3://b/t", minutes=60, context=context))
    assert "s3://b/t" in message and "scheduled__2026-11-21" in message and "60 minutes" in message
    assert message in caplog.text


def test_deadline_callback_reads_the_run_id_airflow_passes(tmp_path: Path) -> None:
    """Issue 15 fault 4: Airflow 3.3.2 passes the run as DAGRunResponse JSON, whose run id is ``dag_run_id``."""
    import asyncio

    from deltalog_provider.callbacks import log_missed_deadline

    # The payload's shape, from the installed Airflow (in a subprocess: importing Airflow configures it).
    code = (
        "from airflow.api_fastapi.core_api.datamodels.dag_run import DAGRunResponse as R; print(sorted(R.model_fields))"
    )
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    fields = proc.stdout.strip().splitlines()[-1]
    assert "'dag_run_id'" in fields and "'run_id'" not in fields
    context = {"dag_run": {"dag_run_id": "manual__2026-11-23T10:00:00+00:00", "dag_id": "deltalog_maintenance"}}
    message = asyncio.run(log_missed_deadline(table="s3://b/t", minutes=1, context=context))
    assert "run manual__2026-11-23T10:00:00+00:00 of deltalog_maintenance" in message


def test_ingest_commits_exactly_the_spark_rows(pipeline: dict[str, Any]) -> None:
    assert pipeline["ingest_states"] == (
        "success",
        {"ensure_table": "success", "ingest_events": "success", "commit": "success"},
    )
    data = pipeline["rows_after_ingest"]
    assert data.num_rows == pipeline["seeded_rows"] + INGEST_ROWS
    assert len(set(data.column("event_id").to_pylist())) == data.num_rows
    today = [d for d in data.column("event_date").to_pylist() if d == TODAY]
    assert len(today) == INGEST_ROWS
    before, after = pipeline["seeded"], pipeline["after_ingest"]
    assert after.version == before.versions  # exactly one new commit
    assert after.live_files == before.live_files + INGEST_FILES


def test_commit_retry_is_a_noop(pipeline: dict[str, Any]) -> None:
    assert pipeline["after_recommit"].version == pipeline["after_ingest"].version
    assert pipeline["after_recommit"].live_files == pipeline["after_ingest"].live_files
    assert "already committed" in pipeline["recommit_log"]


def test_maintenance_takes_the_spark_path_and_every_task_succeeds(pipeline: dict[str, Any]) -> None:
    run_state, states = pipeline["maintenance_states"]
    assert run_state == "success"
    assert {t: states[t] for t in CORE + SPARK_PATH} == dict.fromkeys(CORE + SPARK_PATH, "success")
    assert states["compact_local"] == "skipped"


def test_maintenance_keeps_every_row_and_compacts_each_partition(pipeline: dict[str, Any]) -> None:
    from deltalog import DeltaTable

    data = _rows(pipeline["table"])
    before = pipeline["rows_after_ingest"]
    assert data.num_rows == before.num_rows
    assert sorted(data.column("event_id").to_pylist()) == sorted(before.column("event_id").to_pylist())
    snapshot = DeltaTable(pipeline["table"]).snapshot()
    days = [pv[0][1] for pv in snapshot.files.column("partitionValues").to_pylist()]
    assert len(days) == len(set(days)), "a partition still has more than one file"
    after = pipeline["after_maintenance"]
    assert after.live_files == len({d for d in data.column("event_date").to_pylist()})
    assert after.live_files < pipeline["after_ingest"].live_files


def test_checkpoint_and_log_cleanup(pipeline: dict[str, Any]) -> None:
    after = pipeline["after_maintenance"]
    assert after.checkpoint_version is not None and after.checkpoint_version > pipeline["after_ingest"].version
    # 42 dated-back days: commits older than 30 days before the checkpoint at version 10 are gone.
    assert after.oldest_version == 10
    assert [n for n in pipeline["log_removed"] if n.endswith(".json")] == [f"{v:020d}.json" for v in range(10)]


def test_vacuum_reclaimed_only_files_past_retention(pipeline: dict[str, Any]) -> None:
    """Vacuum deleted the old re-ingested files and the orphan; today's compacted inputs stay (7-day retention)."""
    from deltalog import DeltaTable
    from deltalog.vacuuming import vacuum

    table = DeltaTable(pipeline["table"])
    ends = [r for r in table.history() if r.operation == "VACUUM END"]
    assert len(ends) == 1 and int(ends[0].operationMetrics["numDeletedFiles"]) == 2 + 1  # re-ingested day + orphan
    plan = vacuum(table, dry_run=True).to_dict()
    assert plan["num_files_to_delete"] == 0
    # With the retention overridden to zero, exactly the files the compaction removed would go.
    short = vacuum(table, retention_hours=0, dry_run=True, allow_short_retention=True).to_dict()
    optimize = next(r for r in table.history() if r.operation == "OPTIMIZE")
    assert short["num_files_to_delete"] == int(optimize.operationMetrics["numRemovedFiles"])
    after = pipeline["after_maintenance"]
    assert after.data_files_on_storage == after.live_files + short["num_files_to_delete"]


def test_manifest_lists_the_live_files(pipeline: dict[str, Any]) -> None:
    from deltalog import DeltaTable

    root = Path(pipeline["table"]) / "_symlink_format_manifest"
    listed = {line.strip() for m in root.rglob("manifest") for line in m.read_text().splitlines() if line.strip()}
    live = DeltaTable(pipeline["table"]).snapshot().files.column("path").to_pylist()
    assert len(listed) == len(live)
    assert all(any(entry.endswith(p) for entry in listed) for p in live)


def test_the_example_dags_record_every_operation_in_the_history(pipeline: dict[str, Any]) -> None:
    """The ingest's commit and each maintenance operation, one row each, naming its task (read by deltalake)."""
    rows = _rows(pipeline["history"]).to_pylist()
    done = {(r["airflow_dag_id"], r["airflow_task_id"]): r for r in rows}
    commit = done[("deltalog_ingest", "commit")]
    assert commit["operation"] == "commit" and commit["status"] == "done" and commit["files_written"] == INGEST_FILES
    expected = {
        "compact_spark": "compaction",
        "checkpoint": "checkpoint",
        "vacuum": "vacuum",
        "log_cleanup": "log_cleanup",
        "manifest": "manifest",
    }
    for task, operation in expected.items():
        row = done[("deltalog_maintenance", task)]
        assert (row["operation"], row["status"]) == (operation, "done"), row
        assert row["airflow_try_number"] == 1 and row["airflow_map_index"] == -1
    assert done[("deltalog_maintenance", "compact_spark")]["engine"] == "spark"
    assert done[("deltalog_maintenance", "vacuum")]["files_removed"] == 3  # the re-ingested day and the orphan
    assert done[("deltalog_maintenance", "log_cleanup")]["log_files_removed"] >= 10
    assert {r["table_uri"] for r in rows} == {"file://" + pipeline["table"]}


def test_on_change_dag_compacts_and_checkpoints_a_due_table(home: str, tmp_path: Path) -> None:
    from deltalog import DeltaTable
    from deltalog_example.report import table_report
    from deltalog_example.seed import seed_history

    table = str(tmp_path / "events_b")
    seeded = seed_history(table, days=4, files_per_day=3, rows_per_file=50, reingested_days=(), orphans=0)
    rows = _rows(table).num_rows
    _airflow(airflow_env(home, table, VENV_BIN), "dags", "test", "deltalog_maintenance_on_change")
    run_state, states = task_states(home, "deltalog_maintenance_on_change")
    assert run_state == "success"
    # Due at once: maintenance runs without waiting (the sensor, for a table not due yet, is skipped).
    assert states == {
        **dict.fromkeys(["decide", "due_now", "compact", "checkpoint", "report"], "success"),
        "wait_until_due": "skipped",
    }
    after = table_report(DeltaTable(table))
    assert after.live_files == 4 and seeded.live_files == 12
    assert after.checkpoint_version == after.version
    assert _rows(table).num_rows == rows
