"""Daily maintenance of a Delta table, decided by its health and watched by a deadline.

1. ``health_check`` (``DeltaHealthBranchOperator``) measures the table; when no
   threshold is crossed, everything but ``summary`` is skipped.
2. ``choose_engine`` picks what rewrites run: a compaction when the health report says
   compaction has work, with the local pyarrow engine for small tables and Spark above
   ``deltalog_spark_compaction_min_bytes``; ``purge_dvs`` when deletion vectors hide more
   than ``deltalog_max_dv_hidden_share`` of the rows (the files whose DV hides more than
   that share are rewritten, ``REORG ... APPLY (PURGE)``); ``no_rewrite`` when neither.
   ``compact_spark`` (``DeltaCompactOperator(engine="spark")``) plans in deltalog,
   rewrites in Spark through the Spark connection (plain Parquet, no Delta jars) and
   commits the job's files in deltalog, bin by bin. Layout, in order of precedence: a
   table with liquid clustering is clustered by its own ``CLUSTER BY`` columns; else
   ``deltalog_zorder_by`` (columns) makes the compaction a Z-order of the partitions;
   else it bin-packs small files.
3. ``checkpoint`` -> ``vacuum`` -> ``log_cleanup`` -> ``manifest``, each one core
   operation with its own safety checks (vacuum keeps the table's retention unless
   the Variables explicitly override it; log cleanup follows the protocol's
   Metadata Cleanup rules).
4. ``summary`` measures the table again and logs what changed and what was reclaimed.

Scheduling guarantees: ``max_active_runs=1``, and every task that rewrites or
deletes files runs in the ``deltalog_maintenance`` pool (one slot), shared with
``deltalog_maintenance_on_change``, so two compactions of the table never overlap
(and if one ever did, deltalog's conflict checks would fail the second commit). Those
tasks also hold the table's maintenance lease (``deltalog_example.lease``), shared with
``deltalog_fleet_maintenance``, so a fleet run never works on the table at the same time.

The SLA is a Deadline Alert (Airflow 3.1+; on 3.0 the DAG runs without one and says so
once in the log): a run still going ``deltalog_maintenance_deadline_minutes`` after it
was queued fires ``deltalog_provider.callbacks.log_missed_deadline`` in the triggerer. Every task also
has an ``execution_timeout``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, task

from deltalog_provider.callbacks import log_missed_deadline
from deltalog_provider.operators import (
    DeltaCheckpointOperator,
    DeltaCompactOperator,
    DeltaHealthBranchOperator,
    DeltaLogCleanupOperator,
    DeltaManifestOperator,
    DeltaVacuumOperator,
)
from deltalog_provider.version_compat import dag_folder_on_sys_path, deadline_kwargs

# deltalog_example/ (the example DAGs' settings) sits beside this file in the DAGs folder.
dag_folder_on_sys_path(__file__)

from deltalog_example import (  # noqa: E402
    DEFAULT_TASK_ARGS,
    MAINTENANCE_POOL,
    RUN_KEY,
    TEMPLATE_FILTERS,
    bool_setting,
    health_thresholds,
    int_setting,
    optional_setting,
    setting,
    spark_conf,
    spark_env,
    zorder_columns,
)
from deltalog_example.history import history_uri  # noqa: E402
from deltalog_example.lease import table_lease  # noqa: E402

log = logging.getLogger(__name__)

TABLE = setting("deltalog_table_uri")
CONN_ID = setting("deltalog_conn_id")
#: 0 turns the deadline off: ``airflow dags test`` of a DAG with a deadline crashes after a
#: successful run in Airflow 3.3.2 (apache/airflow#73428), so the demo and tests use 0.
DEADLINE_MINUTES = int_setting("deltalog_maintenance_deadline_minutes") or 0
#: ``DAG(deadline=...)`` where the Airflow release has Deadline Alerts (3.1+); nothing on 3.0.
DEADLINE = deadline_kwargs(DEADLINE_MINUTES, log_missed_deadline, {"table": TABLE, "minutes": DEADLINE_MINUTES})
#: Runs when at least one upstream path ran and none failed (the other path was skipped).
AFTER_BRANCH = "none_failed_min_one_success"

with DAG(
    dag_id="deltalog_maintenance",
    description="Health-driven compaction, checkpoint, vacuum, log cleanup and manifests for one Delta table",
    schedule=optional_setting("deltalog_maintenance_schedule"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_TASK_ARGS,
    **DEADLINE,
    user_defined_filters=TEMPLATE_FILTERS,
    tags=["deltalog", "example", "maintenance"],
    doc_md=__doc__,
) as dag:
    # Every operation appends its row to the maintenance history (deltalog_history_uri; empty: none).
    common: dict[str, Any] = {"table": TABLE, "deltalog_conn_id": CONN_ID, "history_uri": history_uri()}

    health = DeltaHealthBranchOperator(
        task_id="health_check",
        **health_thresholds(),
        # summary is listed on both paths: a branch skips every direct downstream it does not follow.
        follow_task_ids_if_due=["choose_engine", "summary"],
        follow_task_ids_if_healthy="summary",
        execution_timeout=timedelta(minutes=5),
        **common,
    )

    @task.branch(execution_timeout=timedelta(minutes=1))
    def choose_engine(report: dict[str, Any], **context: Any) -> list[str]:
        """The rewrites that have work: compaction (Spark above the size threshold, read at run time,
        the local engine otherwise), the deletion-vector purge, or none. Also where vacuum plans
        (XCom ``vacuum_engine``): Spark from a number of live files on, its cost growing with files."""
        files = int((report.get("health") or {}).get("num_files") or 0)
        vacuum_threshold = int_setting("deltalog_spark_vacuum_min_files")
        vacuum_engine = "spark" if vacuum_threshold is not None and files >= vacuum_threshold else "local"
        log.info(
            "table holds %d live files (Spark from %s): vacuum plans with the %s engine",
            files,
            vacuum_threshold,
            vacuum_engine,
        )
        context["ti"].xcom_push(key="vacuum_engine", value=vacuum_engine)
        chosen = []
        if (report.get("operations") or {}).get("compaction"):
            size = int((report.get("health") or {}).get("size_in_bytes") or 0)
            threshold = int_setting("deltalog_spark_compaction_min_bytes")
            if threshold is not None and size >= threshold:
                log.info("table holds %d bytes >= %s: compacting with Spark", size, threshold)
                chosen.append("compact_spark")
            else:
                log.info("table holds %d bytes < %s: compacting with the local engine", size, threshold)
                chosen.append("compact_local")
        if "dv_hidden_share" in (report.get("crossed") or {}):
            log.info("deletion vectors hide %s of the rows: purging", report["crossed"]["dv_hidden_share"])
            chosen.append("purge_dvs")
        return chosen or ["no_rewrite"]

    engine = choose_engine(health.output)
    no_rewrite = EmptyOperator(task_id="no_rewrite", execution_timeout=timedelta(minutes=1))

    compact_local = DeltaCompactOperator(
        task_id="compact_local",
        engine="local",
        target_size=optional_setting("deltalog_target_file_size"),
        zorder_by=zorder_columns(),
        # With the Deadline Alert on, start no bin in the last 5 minutes before it (finished
        # bins stay committed; the rest is due again tomorrow).
        deadline_margin=timedelta(minutes=5),
        pool=MAINTENANCE_POOL,
        execution_timeout=timedelta(hours=1),
        **table_lease(TABLE, CONN_ID, timedelta(hours=1)),
        **common,
    )

    # Plan, Spark job (through the Spark connection; killing the task kills the job), commit bin by bin.
    compact_spark = DeltaCompactOperator(
        task_id="compact_spark",
        engine="spark",
        target_size=optional_setting("deltalog_target_file_size"),
        zorder_by=zorder_columns(),
        spark_conn_id=setting("spark_conn_id"),
        spark_options={"conf": spark_conf(), "env_vars": spark_env(), "name": f"deltalog-compact-{RUN_KEY}"},
        pool=MAINTENANCE_POOL,
        execution_timeout=timedelta(hours=2),
        **table_lease(TABLE, CONN_ID, timedelta(hours=2)),
        **common,
    )

    # REORG ... APPLY (PURGE) of the files whose DV hides more than the threshold share of their rows.
    purge_dvs = DeltaCompactOperator(
        task_id="purge_dvs",
        engine="local",
        purge_deletion_vectors=True,
        min_deleted_share=float(optional_setting("deltalog_max_dv_hidden_share") or 0),
        target_size=optional_setting("deltalog_target_file_size"),
        pool=MAINTENANCE_POOL,
        execution_timeout=timedelta(hours=1),
        **table_lease(TABLE, CONN_ID, timedelta(hours=1)),
        **common,
    )

    checkpoint = DeltaCheckpointOperator(
        task_id="checkpoint", trigger_rule=AFTER_BRANCH, execution_timeout=timedelta(minutes=15), **common
    )
    vacuum = DeltaVacuumOperator(
        task_id="vacuum",
        # Chosen by choose_engine from the live files (deltalog_spark_vacuum_min_files); the deletion runs here.
        engine="{{ ti.xcom_pull(task_ids='choose_engine', key='vacuum_engine') or 'local' }}",
        spark_conn_id=setting("spark_conn_id"),
        spark_options={"conf": spark_conf()},
        retention_hours=optional_setting("deltalog_vacuum_retention_hours"),
        allow_short_retention=bool_setting("deltalog_vacuum_allow_short_retention"),
        pool=MAINTENANCE_POOL,
        execution_timeout=timedelta(hours=1),
        **table_lease(TABLE, CONN_ID, timedelta(hours=1)),
        **common,
    )
    log_cleanup = DeltaLogCleanupOperator(task_id="log_cleanup", execution_timeout=timedelta(minutes=15), **common)
    manifest = DeltaManifestOperator(task_id="manifest", execution_timeout=timedelta(minutes=15), **common)

    @task(trigger_rule="none_failed", execution_timeout=timedelta(minutes=5), multiple_outputs=False)
    def summary(table: str, conn_id: str, report: dict[str, Any] | None = None) -> dict[str, Any]:
        """Measure the table again and log a before/after table plus what each operation did."""
        from deltalog_example.report import operations_since, table_report
        from deltalog_provider.hooks.delta_table import DeltaTableHook

        dtable = DeltaTableHook(deltalog_conn_id=conn_id).get_table(table)
        before = (report or {}).get("health") or {}
        after = table_report(dtable)
        ops = operations_since(dtable, int(before.get("version", after.version)))
        vacuumed = ops.get("VACUUM END", {})
        result = {
            "table": dtable.uri,
            "maintenance_due": bool((report or {}).get("crossed")),
            "version_before": before.get("version"),
            "live_files_before": before.get("num_files"),
            "small_files_before": before.get("num_small_files"),
            "live_bytes_before": before.get("size_in_bytes"),
            "after": after.to_dict(),
            "files_compacted": ops.get("OPTIMIZE", {}).get("numRemovedFiles", 0),
            "files_written_by_compaction": ops.get("OPTIMIZE", {}).get("numAddedFiles", 0),
            "files_reclaimed_by_vacuum": vacuumed.get("numDeletedFiles", 0),
            "operations": ops,
        }
        lines = [f"maintenance summary of {dtable.uri}"]
        lines += [f"  {k}: {v}" for k, v in result.items() if k not in ("operations", "after")]
        lines += [f"  after.{k}: {v}" for k, v in result["after"].items()]
        lines += [f"  {op}: {metrics}" for op, metrics in ops.items()]
        log.info("%s", "\n".join(lines))
        return result

    done = summary(TABLE, CONN_ID, health.output)

    health >> [engine, done]
    engine >> [compact_local, compact_spark, purge_dvs, no_rewrite]
    [compact_local, compact_spark, purge_dvs, no_rewrite] >> checkpoint >> vacuum >> log_cleanup >> manifest >> done
