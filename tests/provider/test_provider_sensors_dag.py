"""Sensors and health operators inside real DAG runs (``dag.test()``, SQLite, temp AIRFLOW_HOME).

One run covers: a poke-mode and a reschedule-mode version sensor, deferrable sensors
running through their triggers (inline in ``dag.test()``), the maintenance-due sensor,
the health check and the health branch. A writer thread appends commits while the run
waits, so each sensor really has to wait for a commit made after it started.
"""

from __future__ import annotations

import threading

import pytest
from airflow_helpers import run_dag, task_instance, task_states, write_dag_file, xcom_value

from helpers import append, make_table, rows

pytestmark = [pytest.mark.airflow, pytest.mark.slow]


class Writer(threading.Thread):
    """Append one commit every ``interval`` seconds until stopped (at most ``limit``)."""

    def __init__(self, table, interval: float = 1.0, limit: int = 60) -> None:
        super().__init__(daemon=True)
        self.table, self.interval, self.limit = table, interval, limit
        self.stop = threading.Event()
        self.commits = 0

    def run(self) -> None:
        while not self.stop.wait(self.interval) and self.commits < self.limit:
            append(self.table, rows(1, start=self.commits))
            self.commits += 1


def test_sensors_and_health_in_a_dag_run(airflow_db, tmp_path):
    table_path = str(tmp_path / "events")
    # No automatic checkpoint while the writer runs (the default interval, 10, would reset
    # commits_since_checkpoint under the branch when the run is slow).
    table = make_table(table_path, configuration={"delta.checkpointInterval": "1000"})
    append(table, rows(3))  # version 1
    dag_file = write_dag_file(
        "deltalog_sensors",
        f"""
        import datetime as dt
        from airflow.sdk import DAG
        from airflow.providers.standard.operators.empty import EmptyOperator
        from deltalog_provider.operators import DeltaHealthBranchOperator, DeltaHealthCheckOperator
        from deltalog_provider.sensors import DeltaMaintenanceDueSensor, DeltaTableVersionSensor

        TABLE = {table_path!r}
        with DAG("deltalog_sensors", schedule=None, start_date=dt.datetime(2024, 1, 1),
                 params={{"after": 0}}, default_args={{"retries": 2}}) as dag:
            healthy = DeltaHealthCheckOperator(task_id="health", table=TABLE, max_commits_since_checkpoint=1000,
                                               max_small_file_share=1.0)
            poke = DeltaTableVersionSensor(task_id="poke", table=TABLE, after_version="{{{{ params.after }}}}",
                                           poke_interval=1, timeout=120)
            resched = DeltaTableVersionSensor(task_id="resched", table=TABLE, operations=["WRITE"],
                                              mode="reschedule", poke_interval=1, timeout=120)
            deferred = DeltaTableVersionSensor(task_id="deferred", table=TABLE, deferrable=True,
                                               poke_interval=1, timeout=120)
            due = DeltaMaintenanceDueSensor(task_id="due", table=TABLE, max_commits_since_checkpoint=6,
                                            deferrable=True, poke_interval=1, timeout=120)
            branch = DeltaHealthBranchOperator(
                task_id="branch", table=TABLE, max_commits_since_checkpoint=6,
                follow_task_ids_if_due={{"commits_since_checkpoint": "checkpoint_path"}},
                follow_task_ids_if_healthy="healthy_path")
            checkpoint_path = EmptyOperator(task_id="checkpoint_path")
            healthy_path = EmptyOperator(task_id="healthy_path")
            healthy >> poke >> resched >> deferred >> due >> branch >> [checkpoint_path, healthy_path]
        """,
    )
    writer = Writer(table)
    writer.start()
    try:
        dr = run_dag(dag_file, "deltalog_sensors")
    finally:
        writer.stop.set()
        writer.join()

    states = task_states(dr)
    assert states == {
        "health": "success",
        "poke": "success",
        "resched": "success",
        "deferred": "success",
        "due": "success",
        "branch": "success",
        "checkpoint_path": "success",
        "healthy_path": "skipped",
    }, states
    assert str(dr.state) == "success"

    health = xcom_value(dr, "health")
    assert health["due"] is False and health["crossed"] == {}
    assert health["health"]["num_files"] >= 1

    poked = xcom_value(dr, "poke")
    assert poked["previous_version"] == 0 and poked["version"] >= 1

    resched = xcom_value(dr, "resched")
    assert resched["operation"] == "WRITE"
    assert resched["version"] > resched["previous_version"] >= 1  # baseline: the version at the first poke
    assert task_instance(dr, "resched").try_number == 1

    deferred = xcom_value(dr, "deferred")
    assert deferred["version"] > deferred["previous_version"] >= resched["version"]

    due = xcom_value(dr, "due")
    assert due["due"] is True and due["crossed"]["commits_since_checkpoint"]["value"] > 6

    branch = xcom_value(dr, "branch")
    assert "commits_since_checkpoint" in branch["crossed"]
