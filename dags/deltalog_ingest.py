"""Daily ingest: Spark writes a day of events as Parquet, deltalog commits them once.

``ensure_table`` creates the Delta table on the first run (and does nothing after),
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
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, task

from deltalog_example import DEFAULT_TASK_ARGS, EVENTS_SCHEMA, PARTITION_BY, REQUESTS_DIR, setting, spark_submit_args
from deltalog_provider.operators.commit import DeltaCommitOperator

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

    @task(execution_timeout=timedelta(minutes=5))
    def ensure_table(table: str, conn_id: str) -> dict[str, Any]:
        """Create the events table on first use; an existing table is left untouched."""
        from deltalog.create import create_table
        from deltalog.errors import TableAlreadyExistsError
        from deltalog_provider.hooks.delta_table import DeltaTableHook

        hook = DeltaTableHook(deltalog_conn_id=conn_id)
        uri = hook.resolve_uri(table)
        try:
            result = create_table(uri, EVENTS_SCHEMA, PARTITION_BY, storage_options=hook.storage_options)
            return {"table": uri, "created": True, "version": result.version}
        except TableAlreadyExistsError:
            return {"table": uri, "created": False, "version": hook.get_table(table).version()}

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

    ensure_table(TABLE, CONN_ID) >> ingest >> commit
