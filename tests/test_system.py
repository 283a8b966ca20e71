"""The example DAGs on a real deployment: Postgres, LocalExecutor, the four Airflow 3 components,
a Spark standalone cluster and an S3 server, all started here (scripts/airflow_stack.py) and
stopped at the end.

Settings come from ``docker/airflow.env`` (what docker-compose.yml gives its Airflow
containers) plus the hosts and ports of this machine and a few test sizes (small ingest,
a one-minute deadline, a quick sensor). Everything is driven through the REST API, the
way a user's UI or CLI trigger is:

1. ``deltalog_maintenance`` is triggered while still paused: its run queues and its
   one-minute deadline passes, so the triggerer runs the deadline callback;
2. ``deltalog_ingest`` is triggered **without** a logical date (Airflow 3's default);
   its commit queues an asset-triggered ``deltalog_maintenance_on_change`` run whose
   sensor defers (the table is not due yet);
3. ``deltalog_ingest`` is triggered for an older logical date (a backfill): its commit
   makes maintenance due, the trigger fires, and the sensor resumes;
4. the first ingest run's commit is cleared and runs again: it commits nothing;
5. ``deltalog_maintenance`` is unpaused and runs.

Then: every task state, the rows (each ingested day exactly once), the deferred sensor,
the asset-triggered run, and the callback's record in the metadata database.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from airflow_stack import SHARED_ENV, AirflowStack, Postgres, SparkStandalone, StackError, free_port  # noqa: E402

from s3_server import ACCESS_KEY, REGION, SECRET_KEY, deltalake_options_for, start_s3_server_process  # noqa: E402

# The stack's start-up runs inside the first test's time limit, beside the other workers (the limit stops a hang).
pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.spark, pytest.mark.s3, pytest.mark.timeout(1800)]

log = logging.getLogger(__name__)

BUCKET = "deltalog"
TABLE = f"s3://{BUCKET}/warehouse/events"
ROWS = 1500
BACKFILL_DAYS_AGO = 3
INGEST = ["ensure_table", "ingest_events", "commit"]
ON_CHANGE = ["wait_until_due", "compact", "checkpoint", "report"]
#: The maintenance path behind the health branch (the Spark path may have more tasks).
MAINTENANCE_PATH = {
    "choose_engine",
    "compact_local",
    "compact_spark",
    "checkpoint",
    "vacuum",
    "log_cleanup",
    "manifest",
}


def _test_settings(s3: str, spark_master: str) -> dict[str, str]:
    """What differs from docker/airflow.env here: hosts and ports, and test sizes and clocks."""
    from deltalog.engines.spark_packages import HADOOP_AWS_PACKAGE, resolve_conf, s3a_conf

    host, port = spark_master.removeprefix("spark://").rsplit(":", 1)
    spark_conf = {
        **s3a_conf(s3, ACCESS_KEY, SECRET_KEY, REGION),
        **resolve_conf(HADOOP_AWS_PACKAGE),  # as compose's jobs: Ivy resolves (from the cache, Maven Central alone)
        "spark.driver.host": "127.0.0.1",
        "spark.driver.memory": "512m",
        "spark.executor.memory": "512m",
        "spark.cores.max": "1",
    }
    return {
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
            {"conn_type": "spark", "host": f"spark://{host}", "port": int(port), "extra": {"deploy-mode": "client"}}
        ),
        "AIRFLOW_CONN_DELTALOG_DEFAULT": json.dumps(
            {
                "conn_type": "deltalog",
                "host": f"s3://{BUCKET}/warehouse",
                "login": ACCESS_KEY,
                "password": SECRET_KEY,
                "extra": {"endpoint_url": s3, "region_name": REGION},
            }
        ),
        "AIRFLOW_VAR_DELTALOG_TABLE_URI": TABLE,
        "AIRFLOW_VAR_DELTALOG_SPARK_CONF": json.dumps(spark_conf),
        "AIRFLOW_VAR_DELTALOG_INGEST_ROWS": str(ROWS),
        "AIRFLOW_VAR_DELTALOG_INGEST_FILES": "1",
        # Triggered runs only: unpausing a @daily DAG would add a scheduled run of today.
        "AIRFLOW_VAR_DELTALOG_INGEST_SCHEDULE": "",
        "AIRFLOW_VAR_DELTALOG_MAINTENANCE_SCHEDULE": "",
        # Only "commits since the last checkpoint" decides: 2 commits (create + first ingest)
        # are not due, the backfill's third commit is.
        "AIRFLOW_VAR_DELTALOG_MAX_COMMITS_SINCE_CHECKPOINT": "2",
        "AIRFLOW_VAR_DELTALOG_MAX_SMALL_FILE_SHARE": "",
        "AIRFLOW_VAR_DELTALOG_MAX_TOMBSTONE_BYTES": "",
        "AIRFLOW_VAR_DELTALOG_MAX_VERSIONS_SINCE_VACUUM": "",
        "AIRFLOW_VAR_DELTALOG_MAINTENANCE_DEADLINE_MINUTES": "1",
        "AIRFLOW_VAR_DELTALOG_ON_CHANGE_POKE_SECONDS": "3",
        "AIRFLOW_VAR_DELTALOG_ON_CHANGE_TIMEOUT_MINUTES": "10",
        # Quick pick-up of triggered runs and finished tasks on a busy 2-core machine.
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
    }


@pytest.fixture(scope="module")
def stack() -> Iterator[dict[str, Any]]:
    """Start everything, yield handles; stop everything that was started, whatever happened."""
    # Not under pytest's tmp dir: its parent is private to root, and Postgres runs as `postgres`.
    base = tempfile.mkdtemp(prefix="deltalog-system-")
    os.chmod(base, 0o755)
    started: list[Any] = []
    s3_proc = None
    try:
        t0 = time.monotonic()
        s3, _, s3_proc = start_s3_server_process()
        import boto3

        boto3.client(
            "s3", endpoint_url=s3, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region_name=REGION
        ).create_bucket(Bucket=BUCKET)
        pg = Postgres(os.path.join(base, "postgres"))
        started.append(pg)
        url = pg.start()
        spark = SparkStandalone(os.path.join(base, "spark"), dict(os.environ), cores=1, memory="1g")
        os.makedirs(spark.base, exist_ok=True)
        started.append(spark)
        spark.launch()
        home = os.path.join(base, "airflow")
        os.makedirs(home)
        api_port = free_port()
        env = AirflowStack.environment(home, url, api_port, _test_settings(s3, spark.master_url))
        airflow = AirflowStack(home, env, api_port)
        # While the Spark worker registers: issue 15 fault 1, `db migrate` needs the Postgres drivers.
        airflow.airflow("db", "migrate", timeout=600)
        airflow.airflow("pools", "set", "deltalog_maintenance", "1", "serialises rewrites of the example table")
        spark.wait_ready()
        started.append(airflow)
        airflow.start()
        log.info("stack up in %.0f s", time.monotonic() - t0)
        yield {"airflow": airflow, "postgres": pg, "s3": s3, "base": base, "t0": t0}
    finally:
        for component in reversed(started):
            try:
                component.stop()
            except Exception as exc:  # noqa: BLE001 - stop the rest regardless
                log.warning("stopping %s failed: %s", type(component).__name__, exc)
        if s3_proc is not None:
            s3_proc.terminate()
            s3_proc.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)


def _wait_dags_parsed(airflow: AirflowStack, dag_ids: list[str], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    missing = dag_ids
    while time.monotonic() < deadline:
        missing = []
        for dag_id in dag_ids:
            try:
                airflow.request("GET", f"/api/v2/dags/{dag_id}")
            except StackError:
                missing.append(dag_id)
        if not missing:
            return
        time.sleep(2)
    errors = airflow.request("GET", "/api/v2/importErrors")
    raise AssertionError(f"DAGs {missing} not parsed after {timeout} s; import errors: {errors}")


def _wait_state(airflow: AirflowStack, dag_id: str, run_id: str, task_id: str, states: set[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = airflow.task_states(dag_id, run_id).get(task_id)
        if state in states:
            return state
        time.sleep(1)
    raise AssertionError(f"{dag_id}.{task_id} in {run_id} is {state}, not {states}, after {timeout} s")


def _asset_run(airflow: AirflowStack, after: set[str], timeout: float = 240) -> str:
    """The first asset-triggered run of the on-change DAG not in ``after``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [r for r in airflow.runs("deltalog_maintenance_on_change") if r["dag_run_id"] not in after]
        runs = [r for r in runs if r["run_type"] == "asset_triggered"]
        if runs:
            return sorted(runs, key=lambda r: r["queued_at"] or "")[0]["dag_run_id"]
        time.sleep(2)
    raise AssertionError("no asset-triggered run of deltalog_maintenance_on_change was queued")


def _table_version(stack: dict[str, Any]) -> int:
    from deltalog import DeltaTable
    from s3_server import storage_options_for

    return DeltaTable(TABLE, storage_options_for(stack["s3"])).version()


@pytest.fixture(scope="module")
def scenario(stack: dict[str, Any]) -> dict[str, Any]:
    """Drive the DAGs through the REST API (module doc) and record what happened."""
    airflow: AirflowStack = stack["airflow"]
    out: dict[str, Any] = {}
    _wait_dags_parsed(airflow, ["deltalog_ingest", "deltalog_maintenance", "deltalog_maintenance_on_change"])
    assert all(airflow.request("GET", f"/api/v2/dags/{d}")["is_paused"] for d in ("deltalog_ingest",))
    # 1. A trigger of a paused DAG queues; its deadline clock runs.
    out["maintenance_run"] = airflow.trigger("deltalog_maintenance")
    airflow.unpause("deltalog_ingest")
    airflow.unpause("deltalog_maintenance_on_change")
    # 2. No logical date, as the UI, `airflow dags trigger` and a bare REST call do.
    out["ingest_today"] = airflow.trigger("deltalog_ingest")
    out["ingest_today_run"] = airflow.wait_run("deltalog_ingest", out["ingest_today"], 420)
    out["ingest_today_states"] = airflow.task_states("deltalog_ingest", out["ingest_today"])
    on_change = _asset_run(airflow, set())
    out["on_change_run"] = on_change
    out["sensor_state_before_backfill"] = _wait_state(
        airflow, "deltalog_maintenance_on_change", on_change, "wait_until_due", {"deferred", "success", "failed"}, 240
    )
    # 3. A backfill of an older date, after a newer run committed.
    today = dt.date.fromisoformat(out["ingest_today_run"]["run_after"][:10])
    backfill_day = today - dt.timedelta(days=BACKFILL_DAYS_AGO)
    out["days"] = (today, backfill_day)
    out["ingest_backfill"] = airflow.trigger("deltalog_ingest", f"{backfill_day.isoformat()}T00:00:00Z")
    out["ingest_backfill_run"] = airflow.wait_run("deltalog_ingest", out["ingest_backfill"], 420)
    out["ingest_backfill_states"] = airflow.task_states("deltalog_ingest", out["ingest_backfill"])
    out["on_change_state"] = airflow.wait_run("deltalog_maintenance_on_change", on_change, 240)["state"]
    out["on_change_states"] = airflow.task_states("deltalog_maintenance_on_change", on_change)
    out["on_change_run_type"] = airflow.run("deltalog_maintenance_on_change", on_change)["run_type"]
    # 4. The first run's commit cleared and run again (as after a lost response): it commits nothing.
    out["versions_before_clear"] = _table_version(stack)
    airflow.clear_tasks("deltalog_ingest", out["ingest_today"], ["commit"])
    out["ingest_again_run"] = airflow.wait_run("deltalog_ingest", out["ingest_today"], 300)
    out["versions_after_clear"] = _table_version(stack)
    out["commit_after_clear"] = airflow.task_instance("deltalog_ingest", out["ingest_today"], "commit")
    # 5. The deadline (one minute after queueing) has long passed: its callback ran in the triggerer.
    pg: Postgres = stack["postgres"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        out["callbacks"] = pg.query("SELECT state, output, data::text FROM callback")
        if any(state in ("success", "failed") for state, *_ in out["callbacks"]):
            break
        time.sleep(2)
    out["maintenance_state_while_paused"] = airflow.run("deltalog_maintenance", out["maintenance_run"])["state"]
    airflow.unpause("deltalog_maintenance")
    out["maintenance"] = airflow.wait_run("deltalog_maintenance", out["maintenance_run"], 300)
    out["maintenance_states"] = airflow.task_states("deltalog_maintenance", out["maintenance_run"])
    out["seconds"] = time.monotonic() - stack["t0"]
    log.info("system scenario done in %.0f s", out["seconds"])
    return out


def test_ingest_runs_without_and_with_a_logical_date(scenario: dict[str, Any]) -> None:
    """Issue 15 faults 1 and 2: Postgres metadata database, and triggers without a logical date."""
    for key in ("ingest_today_run", "ingest_backfill_run", "ingest_again_run"):
        assert scenario[key]["state"] == "success", (key, scenario[key])
    assert scenario["ingest_today_run"]["logical_date"] is None
    assert scenario["ingest_backfill_run"]["logical_date"].startswith(scenario["days"][1].isoformat())
    assert scenario["ingest_today_states"] == dict.fromkeys(INGEST, "success")
    assert scenario["ingest_backfill_states"] == dict.fromkeys(INGEST, "success")
    # The cleared commit ran again and committed nothing.
    assert scenario["versions_after_clear"] == scenario["versions_before_clear"]
    assert scenario["commit_after_clear"]["try_number"] >= 2 and scenario["commit_after_clear"]["state"] == "success"


def test_every_ingested_day_is_committed_exactly_once(stack: dict[str, Any], scenario: dict[str, Any]) -> None:
    """Issue 15 fault 5: the backfill of an older day commits after a newer run; a re-run commits nothing."""
    from deltalake import DeltaTable as RsTable

    from deltalog import DeltaTable
    from s3_server import storage_options_for

    data = RsTable(TABLE, storage_options=deltalake_options_for(stack["s3"])).to_pyarrow_table()
    days = data.column("event_date").to_pylist()
    today, backfill_day = scenario["days"]
    assert {d: days.count(d) for d in set(days)} == {today: ROWS, backfill_day: ROWS}
    assert len(set(data.column("event_id").to_pylist())) == data.num_rows
    history = DeltaTable(TABLE, storage_options_for(stack["s3"])).history()
    writes = [h for h in history if h.operation == "WRITE"]
    assert len(writes) == 2, [h.operation for h in history]


def test_asset_triggered_run_deferred_and_resumed_by_the_triggerer(scenario: dict[str, Any]) -> None:
    """The ingest commit's asset event queued the on-change run; its sensor waited in the triggerer."""
    assert scenario["on_change_run_type"] == "asset_triggered"
    assert scenario["sensor_state_before_backfill"] == "deferred"
    assert scenario["on_change_state"] == "success"
    assert scenario["on_change_states"] == dict.fromkeys(ON_CHANGE, "success")


def test_missed_deadline_runs_its_callback_naming_the_run(scenario: dict[str, Any]) -> None:
    """Issue 15 faults 3 and 4: the paused run missed its deadline; the callback names it (dag_run_id)."""
    assert scenario["maintenance_state_while_paused"] == "queued"
    done = [(state, output) for state, output, _ in scenario["callbacks"] if state in ("success", "failed")]
    assert done, scenario["callbacks"]
    state, output = done[0]
    assert state == "success", output
    assert f"run {scenario['maintenance_run']} of deltalog_maintenance" in output
    assert "missed its deadline" in output


def test_maintenance_runs_once_unpaused(scenario: dict[str, Any]) -> None:
    """Healthy after the on-change checkpoint: the branch skips the maintenance path, summary runs."""
    assert scenario["maintenance"]["state"] == "success", scenario["maintenance_states"]
    states = scenario["maintenance_states"]
    assert states["health_check"] == "success" and states["summary"] == "success"
    assert MAINTENANCE_PATH <= set(states), states
    skipped = {t: state for t, state in states.items() if t not in ("health_check", "summary")}
    assert skipped == dict.fromkeys(skipped, "skipped")


def test_stack_reads_the_settings_compose_reads(stack: dict[str, Any]) -> None:
    from airflow_stack import read_env_file

    shared = read_env_file(SHARED_ENV)
    env = stack["airflow"].env
    assert {k: env[k] for k in shared} == shared
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
