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

The table's Asset watches its own log (docs/events.md): the triggerer announces every writer's
commits. After the scenario above, writers with no deltalog code commit to the table:

6. a Delta Spark job (``spark-submit``, tests/delta_spark_append.py) appends three commits: the
   watcher's event starts an on-change run, which compacts, and its history rows name those commits;
7. deltalake commits a burst of 200 single-row appends, and the triggerer is restarted in the middle
   of it: the burst starts only a few runs, and the watcher's asset events, across the restart, cover
   every version of the table once (contiguous, no overlap).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.parse
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
#: The on-change run the commit operator's event started: not due at first, so it waited (deferred) for the backfill.
ON_CHANGE = {
    "decide": "success",
    "due_now": "skipped",
    "wait_until_due": "success",
    "compact": "success",
    "checkpoint": "success",
    "report": "success",
}
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


#: The example table's Asset watches its log this fast here (docs/events.md: its defaults are 60 s, 30 s).
WATCH_POLL_SECONDS = 2
#: Long enough that the commit operator's own event has started its run before the watcher's event comes.
WATCH_QUIET_SECONDS = 15
WATCH_MAX_COMMITS = 100
BURST = 200
#: The burst's commit after which the triggerer is restarted (the watcher holds them, unannounced).
RESTART_AFTER = 60


def _test_settings(s3: str, spark_master: str, history: str) -> dict[str, str]:
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
        "AIRFLOW_VAR_DELTALOG_WATCH_POLL_SECONDS": str(WATCH_POLL_SECONDS),
        "AIRFLOW_VAR_DELTALOG_WATCH_QUIET_SECONDS": str(WATCH_QUIET_SECONDS),
        "AIRFLOW_VAR_DELTALOG_WATCH_MAX_COMMITS": str(WATCH_MAX_COMMITS),
        "AIRFLOW_VAR_DELTALOG_WATCH_MAX_WAIT_SECONDS": "60",
        # The maintenance history every operator records into: which commits started each run.
        "AIRFLOW_VAR_DELTALOG_HISTORY_URI": history,
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
        history = os.path.join(base, "history")
        env = AirflowStack.environment(home, url, api_port, _test_settings(s3, spark.master_url, history))
        airflow = AirflowStack(home, env, api_port)
        # While the Spark worker registers: issue 15 fault 1, `db migrate` needs the Postgres drivers.
        airflow.airflow("db", "migrate", timeout=600)
        airflow.airflow("pools", "set", "deltalog_maintenance", "1", "serialises rewrites of the example table")
        spark.wait_ready()
        started.append(airflow)
        airflow.start()
        log.info("stack up in %.0f s", time.monotonic() - t0)
        yield {"airflow": airflow, "postgres": pg, "s3": s3, "base": base, "t0": t0, "history": history}
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


def _consumed(airflow: AirflowStack, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """The asset events a run consumed (id, extra, ...)."""
    path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/upstreamAssetEvents"
    return list(airflow.request("GET", path)["asset_events"])


def _asset_run(airflow: AirflowStack, after: set[str], timeout: float = 240) -> str:
    """The first asset-triggered run of the on-change DAG not in ``after`` that the commit operator's event started
    (the table's log watcher starts runs of its own too: the one for the table's creation comes first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [r for r in airflow.runs("deltalog_maintenance_on_change") if r["dag_run_id"] not in after]
        runs = [r for r in runs if r["run_type"] == "asset_triggered"]
        for run in sorted(runs, key=lambda r: r["queued_at"] or ""):
            events = _consumed(airflow, "deltalog_maintenance_on_change", run["dag_run_id"])
            if events and not any((e.get("extra") or {}).get("from_trigger") for e in events):
                return run["dag_run_id"]
        time.sleep(2)
    raise AssertionError("no run of deltalog_maintenance_on_change started by the commit operator's event")


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
    assert scenario["on_change_states"] == ON_CHANGE


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


# --- 6, 7: writers with no deltalog code; the table's Asset watches its log ---------------------------------

ON_CHANGE_DAG = "deltalog_maintenance_on_change"


def _watcher_events(pg: Postgres) -> list[dict[str, Any]]:
    """The log watcher's events on the table's log Asset, oldest first: payload, when stored, event id."""
    rows = pg.query(
        "SELECT e.id, e.timestamp, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
        "WHERE a.uri = %s ORDER BY e.id",
        TABLE + "/_delta_log",  # the table's log Asset, which the watcher announces on
    )
    out = []
    for event_id, stamp, extra in rows:
        doc = extra if isinstance(extra, dict) else json.loads(extra)
        if doc.get("from_trigger"):
            out.append({"id": event_id, "at": stamp, **doc["payload"]})
    return out


def _wait_announced(pg: Postgres, version: int, timeout: float) -> list[dict[str, Any]]:
    """The watcher's events once one announces ``version`` (or a later one)."""
    deadline = time.monotonic() + timeout
    while True:
        events = _watcher_events(pg)
        if events and events[-1]["to_version"] >= version:
            return events
        if time.monotonic() > deadline:
            raise AssertionError(f"version {version} not announced after {timeout} s; events: {events}")
        time.sleep(1)


def _run_events(airflow: AirflowStack, run_id: str) -> list[int]:
    """The ids of the asset events a run consumed."""
    return [e["id"] for e in _consumed(airflow, ON_CHANGE_DAG, run_id)]


def _settle(airflow: AirflowStack, runs_before: set[str], timeout: float, *, new: bool = True) -> list[dict[str, Any]]:
    """The on-change runs started after ``runs_before`` (at least one when ``new``), once none is queued or running
    and no run has started for longer than a quiet period and a poll (the last announcement has had its chance).

    An event does not always start a run of its own: one that lands while the scheduler creates a run for the
    earlier ones is consumed by the next run (Airflow 3.3), so "every event consumed" is no end condition."""
    deadline = time.monotonic() + timeout
    seen: tuple[str, ...] = ()
    stable_since = time.monotonic()
    while True:
        every = airflow.runs(ON_CHANGE_DAG)
        ids = tuple(sorted(r["dag_run_id"] for r in every))
        if ids != seen:
            seen, stable_since = ids, time.monotonic()
        runs = [r for r in every if r["dag_run_id"] not in runs_before]
        idle = not any(r["state"] in ("queued", "running") for r in every)
        if (
            idle
            and (runs or not new)
            and time.monotonic() - stable_since > WATCH_QUIET_SECONDS + 2 * WATCH_POLL_SECONDS + 10
        ):
            return runs
        if time.monotonic() > deadline:
            raise AssertionError(f"on-change runs still going after {timeout} s: {runs}")
        time.sleep(3)


def _decided(airflow: AirflowStack, run_id: str) -> dict[str, Any] | None:
    """What ``decide`` found (its ``health`` XCom: version, what crossed), or None."""
    path = (
        f"/api/v2/dags/{ON_CHANGE_DAG}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/decide"
        "/xcomEntries/health"
    )
    try:
        value = airflow.request("GET", path).get("value")
    except StackError:
        return None
    doc = json.loads(value) if isinstance(value, str) else value
    return {k: doc.get(k) for k in ("version", "crossed", "reasons", "due")} if isinstance(doc, dict) else None


def _last_triggering_version(stack: dict[str, Any]) -> int:
    """The table's newest commit that starts an announcement (maintenance's own commits only ride along)."""
    from deltalog import DeltaTable
    from deltalog.log.commit_watch import DEFAULT_QUIET_OPERATIONS
    from s3_server import storage_options_for

    history = DeltaTable(TABLE, storage_options_for(stack["s3"])).history()
    return max(h.version for h in history if (h.operation or "").upper() not in DEFAULT_QUIET_OPERATIONS)


def _spark_append(stack: dict[str, Any], commits: int, first_id: int) -> float:
    """Delta Spark appends ``commits`` commits (spark-submit, local): a writer with no deltalog code. Its end time."""
    import subprocess

    import pyspark

    from deltalog.engines.spark_packages import s3a_conf, spark_conf

    conf = {
        **spark_conf(delta=True, s3a=True),
        **s3a_conf(stack["s3"], ACCESS_KEY, SECRET_KEY, REGION),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "1",
        "spark.driver.memory": "512m",
    }
    submit = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
    args = [submit, "--master", "local[1]"]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    table = TABLE.replace("s3://", "s3a://", 1)
    job = str(REPO / "tests" / "delta_spark_append.py")
    proc = subprocess.run([*args, job, table, str(commits), str(first_id)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return time.time()


@pytest.fixture(scope="module")
def watched(stack: dict[str, Any], scenario: dict[str, Any]) -> dict[str, Any]:
    """Steps 6 and 7 (module doc), after the scenario: foreign writers, the watcher, a triggerer restart."""
    import deltalake
    import pyarrow as pa

    airflow: AirflowStack = stack["airflow"]
    pg: Postgres = stack["postgres"]
    out: dict[str, Any] = {}
    _wait_announced(pg, _last_triggering_version(stack), 300)  # the scenario's commits are announced
    _settle(airflow, set(), 900, new=False)  # ... and their runs are over: the next run is the Spark commits' own
    # 6. Delta Spark: three appends. A checkpoint first, so that only the third makes maintenance due (commits since
    # the checkpoint above 2): runs started after the first two end at decide, and no deltalog commit races Delta
    # Spark's, whose S3 log store is safe for one writer only (docs/commits.md).
    from deltalog import create_checkpoint
    from s3_server import storage_options_for as s3_options

    create_checkpoint(TABLE, storage_options=s3_options(stack["s3"]))
    runs_before = {r["dag_run_id"] for r in airflow.runs(ON_CHANGE_DAG)}
    before_spark = _table_version(stack)
    out["spark_done_at"] = _spark_append(stack, 3, 1_000_000)
    out["spark_versions"] = (before_spark + 1, _table_version(stack))
    assert out["spark_versions"][1] == before_spark + 3, out
    _wait_announced(pg, out["spark_versions"][1], 300)
    out["spark_runs"] = _settle(airflow, runs_before, 900)
    # 7. deltalake: a burst of single-row appends, the triggerer restarted in the middle of it.
    runs_before |= {r["dag_run_id"] for r in out["spark_runs"]}
    options = deltalake_options_for(stack["s3"])
    writer = deltalake.DeltaTable(TABLE, storage_options=options)
    schema = writer.schema().to_arrow()
    out["burst_first"] = _table_version(stack) + 1
    for i in range(BURST):
        now = dt.datetime.now(dt.UTC)
        row = {
            "event_id": [2_000_000 + i],
            "event_time": [now],
            "user_id": [i % 7],
            "event_type": ["burst"],
            "amount": [float(i)],
            "event_date": [now.date()],
        }
        deltalake.write_deltalake(writer, pa.Table.from_pydict(row, schema=pa.schema(schema)), mode="append")
        if i + 1 == RESTART_AFTER:
            out["restart_at_version"] = writer.version()
            out["events_before_restart"] = _watcher_events(pg)
            airflow.restart("triggerer")
    out["burst_last"] = writer.version()
    out["events"] = _wait_announced(pg, out["burst_last"], 600)
    out["burst_runs"] = _settle(airflow, runs_before, 1200)
    out["run_events"] = {r["dag_run_id"]: _run_events(airflow, r["dag_run_id"]) for r in out["burst_runs"]}
    out["spark_run_events"] = {r["dag_run_id"]: _run_events(airflow, r["dag_run_id"]) for r in out["spark_runs"]}
    out["decided"] = {
        r["dag_run_id"]: _decided(airflow, r["dag_run_id"]) for r in out["spark_runs"] + out["burst_runs"]
    }
    out["run_states"] = {
        r["dag_run_id"]: airflow.task_states(ON_CHANGE_DAG, r["dag_run_id"])
        for r in out["spark_runs"] + out["burst_runs"]
    }
    from deltalog import DeltaTable
    from s3_server import storage_options_for

    table = DeltaTable(TABLE, storage_options_for(stack["s3"]))
    out["history"] = {h.version: h.operation for h in table.history()}
    out["latest"] = table.version()
    from deltalog.journal import read_history

    out["history_rows"] = read_history(stack["history"]).to_pylist()
    triggerer_log = airflow.logs("triggerer")
    out["triggerer_log"] = triggerer_log
    log.info("watched writers done: %d events, %d burst runs", len(out["events"]), len(out["burst_runs"]))
    return out


def test_every_version_is_announced_once_across_a_triggerer_restart(watched: dict[str, Any]) -> None:
    """Contiguous, no overlap, every version from the table's creation on, the restart in the middle of the burst."""
    events = watched["events"]
    ranges = [(e["from_version"], e["to_version"]) for e in events]
    covered = [v for a, b in ranges for v in range(a, b + 1)]
    # From the version after the one the watcher first saw (the DAG was unpaused around the table's creation)
    # to the last commit, each version once.
    first = re.search(
        r"watching \S+ from version (-?\d+), its newest version \(first start\)", watched["triggerer_log"]
    )
    assert first is not None and covered[0] == int(first.group(1)) + 1 <= 1, (first, ranges)
    assert covered == list(range(covered[0], covered[-1] + 1)), ranges
    assert covered[-1] >= watched["burst_last"]
    # What follows the last announcement can only be maintenance's own commits (they never start an event).
    trailing = {watched["history"][v] for v in range(covered[-1] + 1, watched["latest"] + 1)}
    assert trailing <= {"OPTIMIZE", "VACUUM START", "VACUUM END"}, trailing
    # The restart came while the watcher held burst commits it had not announced: they were announced once after.
    restart = watched["restart_at_version"]
    assert all(e["to_version"] < watched["burst_first"] for e in watched["events_before_restart"])
    assert any(e["from_version"] <= restart <= e["to_version"] for e in events)
    assert watched["triggerer_log"].count("the position kept in the asset state store") >= 1


def test_a_delta_spark_job_starts_maintenance_which_compacts_and_records_which_commits(watched: dict[str, Any]) -> None:
    first, last = watched["spark_versions"]
    spark = [e for e in watched["events"] if e["from_version"] <= last and e["to_version"] >= first]
    assert spark and any(w.startswith("Apache-Spark") for e in spark for w in e["writers"]), spark
    assert all(e["operations"].get("WRITE") for e in spark)
    spark_ids = {e["id"] for e in spark}
    started = [run for run, ids in watched["spark_run_events"].items() if spark_ids & set(ids)]
    assert started, watched["spark_run_events"]
    # The third commit made maintenance due: the run its announcement started compacted and checkpointed.
    compacting = [r for r in started if watched["run_states"][r].get("compact") == "success"]
    why = ({r: (watched["run_states"][r], watched["decided"].get(r)) for r in started}, watched["history"])
    assert len(compacting) == 1 and watched["run_states"][compacting[0]]["checkpoint"] == "success", why
    rows = [
        r
        for r in watched["history_rows"]
        if r["airflow_run_id"] == compacting[0] and r["operation"] == "compaction" and r["status"] == "done"
    ]
    assert rows, [r for r in watched["history_rows"] if r["airflow_run_id"] == compacting[0]]
    row = rows[0]
    # The run a Spark commit's announcement started; its decide may see the third commit before it is announced
    # (a loaded machine spreads the job's commits over more than a quiet period).
    assert row["triggered_by_from_version"] <= last and row["triggered_by_to_version"] >= first, (row, spark)
    assert any(w.startswith("Apache-Spark") for w in row["triggered_by_writers"]) and row["triggered_by_events"] >= 1
    assert row["files_read"] >= 3 and row["files_written"] >= 1  # the compaction rewrote the small files


def test_a_burst_of_deltalake_commits_starts_only_a_few_runs_that_compact(watched: dict[str, Any]) -> None:
    first, last = watched["burst_first"], watched["burst_last"]
    burst = [e for e in watched["events"] if e["to_version"] >= first]
    assert 1 <= len(burst) <= 4, [(e["from_version"], e["to_version"], e["reason"]) for e in burst]
    assert all(w.startswith("delta-rs") or w.startswith("deltalog") for e in burst for w in e["writers"])
    # Each of the burst's appends announced once; a deltalog commit that landed between two of them (a run the
    # burst started compacting) takes a version inside first..last too, and rides along as its own operation.
    assert sum(e["operations"].get("WRITE", 0) for e in burst) == BURST, [e["operations"] for e in burst]
    assert sum(sum(e["operations"].values()) for e in burst if e["from_version"] >= first) <= last - first + 1
    burst_ids = {e["id"] for e in burst}
    runs = [run for run, ids in watched["run_events"].items() if burst_ids & set(ids)]
    assert 1 <= len(runs) <= 4, watched["run_events"]
    assert all(watched["run_states"][r].get("decide") == "success" for r in runs), watched["run_states"]
    assert any(watched["run_states"][r].get("compact") == "success" for r in runs)
    compacted = [r for r in watched["history_rows"] if r["airflow_run_id"] in runs and r["operation"] == "compaction"]
    assert any(r["status"] == "done" and r["files_read"] > 1 for r in compacted), compacted
    assert all(any(w.startswith("delta-rs") for w in r["triggered_by_writers"]) for r in compacted)
