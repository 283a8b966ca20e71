"""Shared settings of the example DAGs (not a DAG file: listed in ``dags/.airflowignore``).

Every knob is an Airflow Variable (set it in the UI, with ``airflow variables set``
or as ``AIRFLOW_VAR_<NAME>`` in the environment, which is what docker-compose.yml
does), with a default that works on a laptop: the table in ``.demo/events`` of
this repository and Spark in local mode through the ``spark_default`` connection.

Values are read when the DAG file is parsed because the table's URI is also the
Asset the on-change DAG is scheduled on; ``Variable.get`` checks the environment
first, so the docker-compose stack and the tests need no metadata-database row.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import timedelta
from typing import Any

import pyarrow as pa

from deltalog.engines.spark.ingest import safe_run_id

log = logging.getLogger(__name__)

DAGS_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(DAGS_FOLDER)
SPARK_JOBS = os.path.join(DAGS_FOLDER, "spark_jobs")

#: The example table's columns; ``spark_jobs/ingest_events.py`` writes exactly these.
EVENTS_SCHEMA = pa.schema(
    [
        ("event_id", pa.int64()),
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("user_id", pa.int64()),
        ("event_type", pa.string()),
        ("amount", pa.float64()),
        ("event_date", pa.date32()),
    ]
)
PARTITION_BY = ["event_date"]
#: Where the ingest job leaves its commit requests, relative to the table root (hidden from readers).
REQUESTS_DIR = "_commit_requests"
#: The day a run stands for: its logical date, else when it was due (``run_after``). Runs
#: triggered from the UI, the CLI or the REST API have no logical date by default in
#: Airflow 3, and then ``ds``/``ts_nodash`` are undefined; ``dag_run.run_after`` never is.
RUN_DAY = "{{ (dag_run.logical_date or dag_run.run_after) | ds }}"
#: Unique to the run (its run id) and safe in object names and Hadoop paths (no ``:``/``+``).
RUN_KEY = "{{ run_id | path_safe }}"
#: ``user_defined_filters`` of the example DAGs (``path_safe`` for RUN_KEY).
TEMPLATE_FILTERS = {"path_safe": safe_run_id}
#: Pool that serialises every rewrite of the example table (compaction, vacuum).
MAINTENANCE_POOL = "deltalog_maintenance"
#: Pool bounding the fleet DAG's table maintenance across all its runs (create it with N slots).
FLEET_POOL = "deltalog_fleet"

DEFAULTS: dict[str, Any] = {
    "deltalog_table_uri": os.path.join(REPO_ROOT, ".demo", "events"),
    "deltalog_conn_id": "deltalog_default",
    "spark_conn_id": "spark_default",
    # Extra Spark configuration (JSON object), e.g. s3a settings on the compose stack.
    "deltalog_spark_conf": "{}",
    "deltalog_ingest_rows": "20000",
    "deltalog_ingest_files": "8",
    # Compaction: target file size, and the table size above which Spark does the rewrite.
    "deltalog_target_file_size": str(128 * 1024 * 1024),
    "deltalog_spark_compaction_min_bytes": str(10 * 1024**3),
    # Live files from which vacuum plans in Spark: below it the local engine is faster (at 10 million files
    # 25 s and 1.7 GiB against the Spark job's 2 minutes, docs/vacuum.md), at it it needs about 3.5 GiB.
    "deltalog_spark_vacuum_min_files": str(20_000_000),
    # Health thresholds that make maintenance due (empty disables a check).
    "deltalog_max_small_file_share": "0.2",
    "deltalog_max_commits_since_checkpoint": "10",
    "deltalog_max_tombstone_bytes": str(1024**3),
    "deltalog_max_versions_since_vacuum": "100",
    # Share of rows hidden by deletion vectors above which deltalog_maintenance purges them
    # (REORG ... APPLY (PURGE) of the files whose DV hides more than that share); empty: never.
    "deltalog_max_dv_hidden_share": "",
    # Z-order columns of deltalog_maintenance's table (comma-separated): a due compaction then
    # rewrites the partitions along their Z curve instead of bin-packing; empty: bin-packing.
    # A table with liquid clustering is clustered by its own CLUSTER BY columns (leave this empty).
    "deltalog_zorder_by": "",
    # Vacuum keeps the table's delta.deletedFileRetentionDuration (7 days) unless this is set;
    # a shorter value is refused unless deltalog_vacuum_allow_short_retention is "true".
    "deltalog_vacuum_retention_hours": "",
    "deltalog_vacuum_allow_short_retention": "false",
    "deltalog_maintenance_deadline_minutes": "60",
    # Fleet maintenance (deltalog_fleet_maintenance): a root to discover tables under, or a list
    # (JSON list or one URI a line) that replaces discovery; per-table settings (JSON mapping of
    # table URI or folder name to {"target_file_size", "vacuum_retention_hours", "zorder_by",
    # "max_dv_hidden_share"}); concurrency;
    # the run's deadline and the margin kept free of new work before it.
    "deltalog_fleet_root": os.path.join(REPO_ROOT, ".demo", "fleet"),
    "deltalog_fleet_tables": "",
    # The asset an upstream DAG emits table lists on (extra {"tables": [...]} or {"list_uri": ...});
    # an event starts a fleet run, and its list wins over the Variable and discovery.
    "deltalog_fleet_tables_asset": "deltalog://fleet/tables",
    # The fleet DAG's cron schedule besides the asset; empty = asset events and manual runs only.
    "deltalog_fleet_schedule": "@daily",
    # The maintenance settings file (docs/fleet.md), service-level objectives included (docs/objectives.md):
    # breached tables are maintained first and the objectives_alert task reports breaches.
    "deltalog_fleet_table_settings": json.dumps(
        {"defaults": {"max_small_files": 200, "max_versions_since_checkpoint": 100, "max_days_since_vacuum": 7}}
    ),
    # Who gets the objectives alert (comma-separated addresses; empty: the message is only logged), from
    # whom, through which SMTP connection (the SMTP provider's SmtpNotifier).
    "deltalog_alert_email": "",
    "deltalog_alert_from": "deltalog@localhost",
    "deltalog_alert_smtp_conn_id": "smtp_default",
    "deltalog_fleet_max_parallel": "4",
    "deltalog_fleet_deadline_minutes": "60",
    "deltalog_fleet_deadline_margin_minutes": "5",
    "deltalog_fleet_report_dir": os.path.join(REPO_ROOT, ".demo"),
    # The fleet view's address (the plugin's /deltalog/ page): the fleet report links each table to
    # its page there; empty: to a query of the maintenance history instead.
    "deltalog_fleet_view_url": "",
    # The maintenance history (a Delta table every example DAG appends a row per operation to; the
    # fleet view's [deltalog] history_uri); empty: none recorded.
    "deltalog_history_uri": os.path.join(REPO_ROOT, ".demo", "_deltalog", "history"),
    # Cron schedule of the daily DAGs; empty = triggered runs only (the system test uses that).
    "deltalog_ingest_schedule": "@daily",
    "deltalog_maintenance_schedule": "@daily",
    # The on-change DAG's deferrable sensor: how often the trigger checks, and when it gives up.
    "deltalog_on_change_poke_seconds": "60",
    "deltalog_on_change_timeout_minutes": "15",
    # Event-driven maintenance (docs/events.md): the on-change DAG's table watches its own log, so any
    # writer's commits start it ("false": only the commit operator's asset events do); the watcher polls
    # every poll_seconds and announces once no commit came for quiet_seconds, or max_commits wait, or the
    # first waited max_wait_seconds. The fleet DAG watches every table under deltalog_fleet_root too when
    # deltalog_fleet_watch is "true" (the tables found are kept for deltalog_watch_refresh_minutes).
    "deltalog_watch": "true",
    "deltalog_watch_poll_seconds": "60",
    "deltalog_watch_quiet_seconds": "30",
    "deltalog_watch_max_commits": "100",
    "deltalog_watch_max_wait_seconds": "600",
    "deltalog_fleet_watch": "false",
    "deltalog_watch_refresh_minutes": "60",
}


def setting(name: str) -> str:
    """An Airflow Variable (environment first, then the metadata database), else the default."""
    default = DEFAULTS[name]
    env = os.environ.get(f"AIRFLOW_VAR_{name.upper()}")
    if env is not None:
        return env
    try:
        from airflow.sdk import Variable

        return str(Variable.get(name, default=default))
    except Exception as exc:  # noqa: BLE001 - parsing must not fail because the DB is unreachable
        log.debug("variable %s not readable (%s); using the default", name, exc)
        return default


def int_setting(name: str) -> int | None:
    raw = setting(name).strip()
    return int(raw) if raw else None


def optional_setting(name: str) -> str | None:
    """The setting, or None when it is empty (an unset threshold or override)."""
    raw = setting(name).strip()
    return raw or None


def bool_setting(name: str) -> bool:
    return setting(name).strip().lower() in ("1", "true", "yes", "on")


def spark_conf(**overrides: str) -> dict[str, str]:
    """Spark configuration for every job: small local defaults, then the ``deltalog_spark_conf`` Variable."""
    conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4", "spark.sql.session.timeZone": "UTC"}
    conf.update(overrides)
    extra = json.loads(setting("deltalog_spark_conf") or "{}")
    if not isinstance(extra, dict):
        raise ValueError("the deltalog_spark_conf Variable must be a JSON object")
    conf.update({str(k): str(v) for k, v in extra.items()})
    return conf


def spark_master() -> str:
    """The master URL of the ``spark_conn_id`` connection, built as SparkSubmitHook builds it (host, port)."""
    from deltalog_provider.hooks.spark_submit import spark_master as master_of

    return master_of(setting("spark_conn_id"))


def health_thresholds() -> dict[str, str | None]:
    """The thresholds that make maintenance due, for the health check and the maintenance-due sensor."""
    names = (
        "max_small_file_share",
        "max_commits_since_checkpoint",
        "max_tombstone_bytes",
        "max_versions_since_vacuum",
        "max_dv_hidden_share",
    )
    out: dict[str, str | None] = {name: optional_setting(f"deltalog_{name}") for name in names}
    out["target_file_size"] = optional_setting("deltalog_target_file_size")
    return out


def watch_settings() -> dict[str, Any]:
    """The log watcher's settings from the ``deltalog_watch_*`` Variables (``watched_table_asset``'s keywords)."""
    return {
        "poll_interval": float(setting("deltalog_watch_poll_seconds")),
        "quiet_seconds": float(setting("deltalog_watch_quiet_seconds")),
        "max_commits": int(setting("deltalog_watch_max_commits")),
        "max_wait_seconds": float(setting("deltalog_watch_max_wait_seconds")),
    }


def zorder_columns() -> list[str] | None:
    """The ``deltalog_zorder_by`` Variable as a list of columns (None when empty: bin-packing)."""
    raw = optional_setting("deltalog_zorder_by")
    return [c.strip() for c in raw.split(",") if c.strip()] if raw else None


def spark_submit_args(job: str, name: str, application_args: list[str]) -> dict[str, Any]:
    """Arguments of a ``SparkSubmitOperator`` for one of ``spark_jobs/`` (connection, conf, driver env)."""
    return {
        "conn_id": setting("spark_conn_id"),
        "application": os.path.join(SPARK_JOBS, job),
        "name": name,
        "conf": spark_conf(),
        "env_vars": spark_env(),
        "application_args": application_args,
    }


def spark_env() -> dict[str, str]:
    """Driver environment: the PySpark driver runs Airflow's interpreter, where deltalog is installed.

    Executors get no Python setting: the jobs use DataFrame expressions only, so they never
    start Python workers (whose interpreter would have to exist on the Spark workers).
    """
    import sys

    return {"PYSPARK_DRIVER_PYTHON": sys.executable}


DEFAULT_TASK_ARGS: dict[str, Any] = {
    "owner": "data-platform",
    "retries": 1,
    "retry_delay": timedelta(seconds=30),
}
