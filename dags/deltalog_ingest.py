"""Daily ingest: Spark writes a day of events as Parquet, deltalog commits them once.

``ensure_table`` (``DeltaCreateTableOperator``) creates the Delta table on the first run (and keeps it after),
``ingest_events`` runs ``spark_jobs/ingest_events.py`` with ``SparkSubmitOperator``
(plain Parquet files into the table folder plus a commit request; no Delta jars on
the cluster) and ``commit`` turns the request into exactly one Delta commit.

Idempotent across retries and re-runs: the commit carries an application
transaction (app id = this DAG and task, version = the run's logical date), so a
retried or cleared run whose commit already landed commits nothing the second
time. Files a failed or repeated Spark attempt wrote but nobody committed are
never visible to readers; vacuum deletes them once they are past the retention.

Settings (Airflow Variables, see ``deltalog_example``): ``deltalog_table_uri``,
``deltalog_conn_id``, ``spark_conn_id``, ``deltalog_spark_conf``,
``deltalog_ingest_rows``, ``deltalog_ingest_files``. Each commit is an event on the
table's Asset, which schedules ``deltalog_maintenance_on_change``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

from deltalog_example import DEFAULT_TASK_ARGS, EVENTS_SCHEMA, PARTITION_BY, REQUESTS_DIR, setting, spark_submit_args
from deltalog_provider.operators.commit import DeltaCommitOperator
from deltalog_provider.operators.create import DeltaCreateTableOperator

TABLE = setting("deltalog_table_uri")
CONN_ID = setting("deltalog_conn_id")
#: One request file per logical date: a re-run overwrites it, and its commit is a no-op.
REQUEST = f"{REQUESTS_DIR}/ingest-{{{{ ts_nodash }}}}.json"

with DAG(
    dag_id="deltalog_ingest",
    description="Spark ingest of one day of events, committed to a Delta table by deltalog",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_TASK_ARGS,
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
            "deltalog-ingest-events-{{ ds_nodash }}",
            ["--table", TABLE, "--date", "{{ ds }}", "--run-id", "{{ run_id }}"]
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
        execution_timeout=timedelta(minutes=10),
    )

    ensure_table >> ingest >> commit
