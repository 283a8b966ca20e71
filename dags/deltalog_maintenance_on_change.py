"""Maintenance triggered by the table itself: runs after commits to it, by any writer, acts only when due.

Scheduled on the table's log, which watches itself (``watched_table_asset``, docs/events.md): a
watcher in the triggerer polls ``_delta_log`` every ``deltalog_watch_poll_seconds`` and announces
the new commits of any writer (Spark, Databricks, Flink, delta-rs, a streaming query: no deltalog
code on their side) once no commit came for ``deltalog_watch_quiet_seconds``, or
``deltalog_watch_max_commits`` wait (a table committing every second does not start a run per
commit), as an asset event that says which versions, operations and writers. It is also scheduled
on the table's Asset, which the ingest DAG's ``DeltaCommitOperator`` updates at once after each of
its commits. Either queues a run (``deltalog_watch`` "false": only the operator's events do).

``decide`` logs which commits started the run (every history row of the run records them too:
``triggered_by_*``, docs/history.md): all versions since the last one announced before the run, so the
commits of an event lost at a triggerer restart are named by the next run (its tasks read the log
asset's stored events as inlets). It then checks the table's health: when small files or commits
since the last checkpoint cross a threshold, the cheap, local maintenance runs at once (compaction
with the local engine, then a checkpoint). When nothing is due and the watcher's events started
the run, the run ends there: the watcher announces the next commits, which start the next run.
When nothing is due and only the operator's event started it, ``wait_until_due``
(``DeltaMaintenanceDueSensor``, deferrable: it waits in the triggerer, holding no worker slot)
re-checks every ``deltalog_on_change_poke_seconds`` (60) and maintenance runs as soon as it falls
due; a table still healthy after ``deltalog_on_change_timeout_minutes`` (15) ends the run skipped
(``soft_fail``), the normal outcome.

The heavy work (vacuum, log cleanup, manifests, Spark compaction) stays in the daily
``deltalog_maintenance``. The tasks here emit no asset events of their own, so a
compaction does not queue yet another run of this DAG (and the watcher never announces a
compaction on its own: it rides along in the next announcement); compaction shares the
``deltalog_maintenance`` pool with the daily DAG, so the two never compact the table
at the same time.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, AssetAny, task

from deltalog_provider.assets import watched_table_asset
from deltalog_provider.operators import DeltaCheckpointOperator, DeltaCompactOperator
from deltalog_provider.sensors.delta_table import DeltaMaintenanceDueSensor
from deltalog_provider.utils.results import table_asset_uri
from deltalog_provider.version_compat import dag_folder_on_sys_path

# deltalog_example/ (the example DAGs' settings) sits beside this file in the DAGs folder.
dag_folder_on_sys_path(__file__)

from deltalog_example import (  # noqa: E402
    DEFAULT_TASK_ARGS,
    MAINTENANCE_POOL,
    bool_setting,
    health_thresholds,
    int_setting,
    optional_setting,
    setting,
    watch_settings,
)
from deltalog_example.history import history_uri  # noqa: E402
from deltalog_example.lease import table_lease  # noqa: E402

log = logging.getLogger(__name__)

TABLE = setting("deltalog_table_uri")
CONN_ID = setting("deltalog_conn_id")
#: The Asset the commit operator updates (its events start a run at once), and the table's log watching itself
#: (docs/events.md: any writer's commits, debounced).
TABLE_ASSET = Asset(table_asset_uri(TABLE))
LOG_ASSET = (
    watched_table_asset(TABLE, deltalog_conn_id=CONN_ID, **watch_settings()) if bool_setting("deltalog_watch") else None
)
SCHEDULE: Any = AssetAny(TABLE_ASSET, LOG_ASSET) if LOG_ASSET is not None else [TABLE_ASSET]

with DAG(
    dag_id="deltalog_maintenance_on_change",
    description="Compact and checkpoint a Delta table after commits, when its health says so",
    schedule=SCHEDULE,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_TASK_ARGS,
    tags=["deltalog", "example", "maintenance", "asset"],
    doc_md=__doc__,
) as dag:
    common: dict[str, Any] = {"table": TABLE, "deltalog_conn_id": CONN_ID}
    #: The tasks that name the run's commits read the log's stored events: versions of a lost event are covered.
    watched: dict[str, Any] = {"inlets": [LOG_ASSET]} if LOG_ASSET is not None else {}

    thresholds = health_thresholds()

    @task.branch(execution_timeout=timedelta(minutes=10), **watched)
    def decide(**context: Any) -> list[str]:
        """Which commits started the run (logged), and what follows: maintenance now, a wait, or nothing."""
        from deltalog_provider.hooks.delta_table import DeltaTableHook
        from deltalog_provider.utils.checks import MaintenanceThresholds, evaluate_health
        from deltalog_provider.utils.commit_events import triggered_by, triggering_ranges

        ranges = triggering_ranges(context)
        for r in ranges:
            log.info(f"started by {r.summary_line()}, written by {', '.join(r.writers)}")
        for table, covered in triggered_by(context).items():  # since the last version announced before the run
            log.info(f"this run covers {table} {covered.summary_line()}")
        hook = DeltaTableHook(deltalog_conn_id=CONN_ID)
        limits = {k: v for k, v in thresholds.items() if k != "target_file_size"}
        size = thresholds.get("target_file_size")
        report = hook.run(
            evaluate_health,
            hook.get_table(TABLE),
            MaintenanceThresholds.from_values(**limits),
            int(size) if size else None,
        )
        log.info(report.summary())
        context["ti"].xcom_push(key="health", value=report.to_dict())
        if report.due:
            return ["due_now"]
        if ranges:  # the watcher announces the next commits: they start the next run
            log.info("nothing due; the log watcher's next announcement starts the next run")
            return []
        return ["wait_until_due"]

    due_now = EmptyOperator(task_id="due_now", execution_timeout=timedelta(minutes=1))
    due = DeltaMaintenanceDueSensor(
        task_id="wait_until_due",
        **thresholds,
        # Waits in the triggerer, not in a worker slot: LocalExecutor has only a few.
        deferrable=True,
        poke_interval=int_setting("deltalog_on_change_poke_seconds") or 60,
        timeout=60 * (int_setting("deltalog_on_change_timeout_minutes") or 15),
        soft_fail=True,
        **common,
    )
    compact = DeltaCompactOperator(
        task_id="compact",
        engine="local",
        target_size=optional_setting("deltalog_target_file_size"),
        emit_asset=False,
        # After due_now or after the sensor, whichever of the two ran (decide skips the other).
        trigger_rule="none_failed_min_one_success",
        pool=MAINTENANCE_POOL,
        execution_timeout=timedelta(hours=1),
        **watched,
        **table_lease(TABLE, CONN_ID, timedelta(hours=1)),
        history_uri=history_uri(),
        **common,
    )
    checkpoint = DeltaCheckpointOperator(
        task_id="checkpoint",
        emit_asset=False,
        execution_timeout=timedelta(minutes=15),
        **watched,
        history_uri=history_uri(),
        **common,
    )

    @task(execution_timeout=timedelta(minutes=5), multiple_outputs=False)
    def report(table: str, conn_id: str, **context: Any) -> dict[str, Any]:
        """Log the table's state after the run next to the health and the commits that triggered it."""
        from deltalog_example.report import table_report
        from deltalog_provider.hooks.delta_table import DeltaTableHook
        from deltalog_provider.utils.commit_events import triggering_ranges

        ti = context["ti"]
        health = ti.xcom_pull(task_ids="wait_until_due") or ti.xcom_pull(task_ids="decide", key="health") or {}
        after = table_report(DeltaTableHook(deltalog_conn_id=conn_id).get_table(table)).to_dict()
        before = health.get("health") or {}
        log.info(
            f"{table}: crossed {sorted(health.get('crossed') or [])}; live files "
            f"{before.get('num_files')} -> {after['live_files']}, small files {before.get('num_small_files')} -> "
            f"{after['small_files']}, checkpoint at version {after['checkpoint_version']}"
        )
        started_by = [r.to_dict() for r in triggering_ranges(context)]
        return {"before": before, "after": after, "crossed": health.get("crossed"), "started_by": started_by}

    decide() >> [due_now, due]
    [due_now, due] >> compact >> checkpoint >> report(TABLE, CONN_ID)
