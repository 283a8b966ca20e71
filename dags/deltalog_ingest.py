"""Daily ingest: Spark writes a day of events as Parquet, deltalog commits them once.

``ensure_table`` (``DeltaCreateTableOperator``) creates the Delta table on the first run (and keeps it after),
``ingest_events`` runs ``spark_jobs/ingest_events.py`` with ``SparkSubmitOperator``
(plain Parquet files into the table folder plus a commit request; no Delta jars on
the cluster) and ``commit`` turns the request into exactly one Delta commit.

The day ingested is the run's logical date, or the day it was triggered for
(``run_after``) when it has none, the Airflow 3 default for UI, CLI and REST triggers.

Exactly once per day: the commit carries an application transaction whose app id
names the day (``airflow:deltalog_ingest:commit:<day>``, version 1), so a retried,
cleared or re-triggered run of a day already committed commits nothing, while every
other day, older ones (backfills) included, commits once, in any order. Files a
failed or repeated Spark attempt wrote but nobody committed are never visible to
readers; vacuum deletes them once they are past the retention.

Settings (Airflow Variables, see ``deltalog_example``): ``deltalog_table_uri``,
``deltalog_conn_id``, ``spark_conn_id``, ``deltalog_spark_conf``,
``deltalog_ingest_rows``, ``deltalog_ingest_files``. Each commit is an event on the
table's Asset, which schedules ``deltalog_maintenance_on_change``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

from deltalog_provider.operators.commit import DeltaCommitOperator
from deltalog_provider.operators.create import DeltaCreateTableOperator
from deltalog_provider.version_compat import dag_folder_on_sys_path

# deltalog_example/ (the example DAGs' settings) sits beside this file in the DAGs folder.
dag_folder_on_sys_path(__file__)

from deltalog_example import (  # noqa: E402
    DEFAULT_TASK_ARGS,
    EVENTS_SCHEMA,
    PARTITION_BY,
    REQUESTS_DIR,
    RUN_DAY,
    RUN_KEY,
    TEMPLATE_FILTERS,
    optional_setting,
    setting,
    spark_submit_args,
)
from deltalog_example.history import history_uri  # noqa: E402

TABLE = setting("deltalog_table_uri")
CONN_ID = setting("deltalog_conn_id")
#: One request file per run (a retry of the Spark task overwrites its own).
REQUEST = f"{REQUESTS_DIR}/ingest-{RUN_KEY}.json"
#: One app transaction per ingested day: its data is committed once, whichever run gets there first.
APP_ID = f"airflow:deltalog_ingest:commit:{RUN_DAY}"

with DAG(
    dag_id="deltalog_ingest",
    description="Spark ingest of one day of events, committed to a Delta table by deltalog",
    schedule=optional_setting("deltalog_ingest_schedule"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_TASK_ARGS,
    user_defined_filters=TEMPLATE_FILTERS,
    tags=["deltalog", "example", "spark"],
    doc_md=__doc__,
) as dag:
    ensure_table = DeltaCreateTableOperator(
        task_id="ensure_table",
        table=TABLE,
        deltalog_conn_id=CONN_ID,
        schema=EVENTS_SCHEMA,
        partition_by=PARTITION_BY,
        if_exists="ignore",  # created on the first run, kept after
        emit_asset=False,  # the commit's event is the one that schedules maintenance
        execution_timeout=timedelta(minutes=5),
    )

    ingest = SparkSubmitOperator(
        task_id="ingest_events",
        **spark_submit_args(
            "ingest_events.py",
            f"deltalog-ingest-events-{RUN_KEY}",
            ["--table", TABLE, "--date", RUN_DAY, "--run-id", "{{ run_id }}"]
            + ["--request", f"{TABLE.rstrip('/')}/{REQUEST}"]
            + ["--rows", setting("deltalog_ingest_rows"), "--files", setting("deltalog_ingest_files")],
        ),
        execution_timeout=timedelta(minutes=30),
    )

    commit = DeltaCommitOperator(
        task_id="commit",
        table=TABLE,
        deltalog_conn_id=CONN_ID,
        request=REQUEST,
        app_id=APP_ID,
        txn_version=1,
        execution_timeout=timedelta(minutes=10),
        history_uri=history_uri(),  # the commit's row in the maintenance history (empty: none)
    )

    ensure_table >> ingest >> commit
