"""The maintenance history table's schema: one row per table and operation, version 3.

The schema is a contract with the users' own queries (Spark SQL, DuckDB, Trino,
dashboards), so it changes only by adding nullable columns, and every change bumps
:data:`SCHEMA_VERSION`, which the table records in its properties
(:data:`SCHEMA_VERSION_PROPERTY`). docs/history.md documents every column; a test keeps
the two equal.

The table is partitioned by ``run_date`` (the UTC day an operation started): a page
showing the last weeks reads only those partitions, and old days can be compacted,
or dropped by a user who wants a bounded history, partition by partition.
"""

from __future__ import annotations

import pyarrow as pa

from deltalog.maintenance.objectives import OBJECTIVES

#: The version of the columns below; recorded as the table property :data:`SCHEMA_VERSION_PROPERTY`.
#: 1: the first release's columns; 2: the service-level objectives (``objectives_*``,
#: ``objective_<name>_*``, ``finish_by*``), appended as nullable columns; 3: which commits started the
#: run (``triggered_by_*``: the log watcher's asset events) and the writers beside maintenance
#: (:data:`WRITER_COLUMNS`: files compaction left them, what the log shows of the conflicts it
#: caused), appended as nullable columns.
SCHEMA_VERSION = 3
SCHEMA_VERSION_PROPERTY = "deltalog.history.schemaVersion"
#: Marks a table as a deltalog maintenance history (appends refuse any other table).
KIND_PROPERTY = "deltalog.history.kind"
KIND = "maintenance-history"
PARTITION_COLUMN = "run_date"

#: What an operation row's ``status`` may be.
STATUSES = ("done", "nothing_due", "deferred", "refused", "failed")
#: The operations a row may name; ``measure`` is a health measurement (what is due and why), ``commit``
#: a commit request's commit (files written by a Spark job or any writer), ``convert`` a Parquet
#: directory made a Delta table. Later releases may add operations (a value, not a column).
OPERATIONS = (
    "measure",
    "compaction",
    "purge",
    "checkpoint",
    "vacuum",
    "log_cleanup",
    "manifest",
    "commit",
    "convert",
    "fleet_run",
)

#: The operation of the fleet run's own row (its finishing time): its ``table_uri`` names the fleet (its root,
#: its list or its DAG), never a table.
FLEET_RUN = "fleet_run"

#: The table's properties at creation. Append-only: the history is an audit trail (compaction
#: still may rewrite it, since its commits change no data); an app transaction older than
#: seven days is dropped at the next checkpoint, so the idempotency records do not pile up.
TABLE_PROPERTIES = {
    SCHEMA_VERSION_PROPERTY: str(SCHEMA_VERSION),
    KIND_PROPERTY: KIND,
    "delta.appendOnly": "true",
    "delta.setTransactionRetentionDuration": "interval 7 days",
}

_TS = pa.timestamp("us", tz="UTC")

#: (name, Arrow type, nullable, meaning), in table order.
COLUMNS: tuple[tuple[str, pa.DataType, bool, str], ...] = (
    ("run_id", pa.string(), False, "the run that wrote the row: a fleet run, a CLI command or an Airflow DAG run"),
    ("row_id", pa.string(), False, "unique id of the row (a UUID)"),
    (PARTITION_COLUMN, pa.date32(), False, "UTC day the operation started (the partition column)"),
    ("table_uri", pa.string(), False, "the maintained table's URI"),
    ("table_id", pa.string(), True, "the table's metaData id (stays the same when the table moves)"),
    (
        "operation",
        pa.string(),
        False,
        "measure, compaction, purge, checkpoint, vacuum, log_cleanup, manifest, commit or convert",
    ),
    ("engine", pa.string(), True, "where the work ran: local or spark (compaction), else null"),
    ("status", pa.string(), False, "done, nothing_due, deferred, refused or failed"),
    ("reason", pa.string(), True, "why: what was due, why nothing was, why it was deferred, refused or failed"),
    ("summary", pa.string(), True, "the operation's one-line summary, as the CLI prints it"),
    ("due_operations", pa.list_(pa.string()), True, "measure rows: the operations due at that time"),
    (
        "policy",
        pa.string(),
        True,
        "fleet rows: the table's maintenance settings as JSON, each value with the layer it came from",
    ),
    ("started_at", _TS, False, "when the operation started (UTC)"),
    ("ended_at", _TS, False, "when it ended (UTC)"),
    ("duration_s", pa.float64(), False, "wall-clock seconds"),
    ("cpu_s", pa.float64(), True, "CPU seconds of the recording process and the processes it waited for"),
    ("version_before", pa.int64(), True, "table version before the operation"),
    ("version_after", pa.int64(), True, "table version after it"),
    ("files_read", pa.int64(), False, "data files read (rewritten by compaction or purge)"),
    ("bytes_read", pa.int64(), False, "bytes of the data files read"),
    ("files_written", pa.int64(), False, "files written: data files, checkpoint parts, manifests"),
    ("bytes_written", pa.int64(), False, "bytes written"),
    ("files_removed", pa.int64(), False, "data files removed from the table (remove actions) or deleted by vacuum"),
    ("bytes_removed", pa.int64(), False, "bytes of the files removed"),
    ("bytes_reclaimed", pa.int64(), False, "storage freed: files vacuum deleted, log files log cleanup deleted"),
    ("log_files_removed", pa.int64(), False, "_delta_log files deleted"),
    ("live_files_before", pa.int64(), True, "live data files before"),
    ("live_files_after", pa.int64(), True, "live data files after"),
    ("small_files_before", pa.int64(), True, "live files under half the target file size, before"),
    ("small_files_after", pa.int64(), True, "the same, after"),
    ("table_bytes_before", pa.int64(), True, "bytes of the live files, before"),
    ("table_bytes_after", pa.int64(), True, "the same, after"),
    ("versions_since_checkpoint_before", pa.int64(), True, "commits a reader replays after the last checkpoint"),
    ("versions_since_checkpoint_after", pa.int64(), True, "the same, after"),
    ("dv_share_before", pa.float64(), True, "share of rows hidden by deletion vectors, before"),
    ("dv_share_after", pa.float64(), True, "the same, after"),
    ("log_files_before", pa.int64(), True, "commit files in _delta_log (the log's length), before"),
    ("log_files_after", pa.int64(), True, "the same, after"),
    ("airflow_dag_id", pa.string(), True, "Airflow DAG id, when run by Airflow"),
    ("airflow_run_id", pa.string(), True, "Airflow DAG run id"),
    ("airflow_task_id", pa.string(), True, "Airflow task id"),
    ("airflow_map_index", pa.int32(), True, "Airflow map index (-1 for an unmapped task)"),
    ("airflow_try_number", pa.int32(), True, "Airflow try number"),
    ("deltalog_version", pa.string(), False, "the deltalog release that wrote the row"),
)

_OBJECTIVE_TYPES = {"count": pa.int64(), "days": pa.float64(), "share": pa.float64()}

#: Schema version 2: the service-level objectives of measure rows and the fleet run's finishing time.
OBJECTIVE_COLUMNS: tuple[tuple[str, pa.DataType, bool, str], ...] = (
    (
        "objectives_met",
        pa.bool_(),
        True,
        "measure rows: no objective set for the table is breached (null: none is set)",
    ),
    (
        "objectives_breached",
        pa.list_(pa.string()),
        True,
        "measure rows: the objectives breached at that time (empty: none; null: none is set)",
    ),
    (
        "objectives_at_risk",
        pa.list_(pa.string()),
        True,
        "measure rows: the objectives met but predicted to breach before the next run",
    ),
    *(
        column
        for o in OBJECTIVES
        for column in (
            (f"objective_{o.name}_target", _OBJECTIVE_TYPES[o.kind], True, f"{o.name}: the target (null: not set)"),
            (f"objective_{o.name}_value", _OBJECTIVE_TYPES[o.kind], True, f"{o.name}: the value, {o.measures}"),
            (f"objective_{o.name}_met", pa.bool_(), True, f"{o.name}: value at most the target (null: unknown)"),
            (f"objective_{o.name}_source", pa.string(), True, f"{o.name}: where the target came from"),
        )
    ),
    ("finish_by", pa.string(), True, "fleet_run rows: the run's finish_by objective (06:00 Europe/Berlin)"),
    ("finish_by_deadline", _TS, True, "fleet_run rows: the moment the run had to end by (UTC)"),
    ("finish_by_met", pa.bool_(), True, "fleet_run rows: the run ended (ended_at) by its deadline"),
)
#: Schema version 3: the commits whose announcement (the log watcher's asset events, docs/events.md) started the
#: run that wrote the row, for rows of that table; null when no such event started it.
TRIGGER_COLUMNS: tuple[tuple[str, pa.DataType, bool, str], ...] = (
    ("triggered_by_from_version", pa.int64(), True, "the first version of the commits whose events started the run"),
    ("triggered_by_to_version", pa.int64(), True, "the last version of those commits"),
    ("triggered_by_commits", pa.int64(), True, "how many commits those events announced"),
    ("triggered_by_events", pa.int64(), True, "how many of the log watcher's events started the run"),
    ("triggered_by_operations", pa.list_(pa.string()), True, "the commits' operations (commitInfo), sorted"),
    ("triggered_by_writers", pa.list_(pa.string()), True, "the commits' writers (commitInfo engineInfo), sorted"),
    (
        "triggered_by_blind_append_only",
        pa.bool_(),
        True,
        "every one of those commits was a blind append (added files, removed none); null: unknown (a lost event's)",
    ),
)
_V1 = len(COLUMNS)
COLUMNS = COLUMNS + OBJECTIVE_COLUMNS
_V2 = len(COLUMNS)
#: Schema version 3: the DELETE/UPDATE/MERGE writers beside maintenance (docs/compaction.md, "Writers").
WRITER_COLUMNS: tuple[tuple[str, pa.DataType, bool, str], ...] = (
    (
        "files_deferred_for_writers",
        pa.int64(),
        True,
        "compaction and purge rows: small files left to the table's DELETE/UPDATE/MERGE writers this run",
    ),
    (
        "deferred_files",
        pa.list_(pa.string()),
        True,
        "compaction and purge rows: the paths of those files (the first 1000), each with its reason in the row's reason",
    ),
    (
        "bins_deferred_for_writers",
        pa.int64(),
        True,
        "compaction and purge rows: bins rewritten but not committed: their writers left no quiet moment in time",
    ),
    (
        "bins_lost_to_writers",
        pa.int64(),
        True,
        "compaction and purge rows: bins dropped because a writer's commit removed or changed an input first",
    ),
    (
        "writer_wait_s",
        pa.float64(),
        True,
        "compaction and purge rows: seconds spent waiting for the writers' quiet moments",
    ),
    (
        "writer_dml_commits",
        pa.int64(),
        True,
        "measure rows: DELETE/UPDATE/MERGE commits among the table's recent commits (the last 100, 24 hours)",
    ),
    (
        "writer_overlaps",
        pa.int64(),
        True,
        "measure rows: writer commits there that landed after a deltalog rewrite they had not read (each passed "
        "Delta's conflict check against it; failed attempts leave no commit)",
    ),
    ("writer_dml_overlaps", pa.int64(), True, "measure rows: the DELETE/UPDATE/MERGE commits among writer_overlaps"),
)
COLUMNS = COLUMNS + TRIGGER_COLUMNS + WRITER_COLUMNS
#: The columns each schema version added (an older history is upgraded by adding the later ones).
COLUMNS_BY_VERSION = {1: _V1, 2: _V2, 3: len(COLUMNS)}
#: The counters of work done (files and bytes read, written, removed, reclaimed): summed over rows.
WORK_COLUMNS = (
    "files_read",
    "bytes_read",
    "files_written",
    "bytes_written",
    "files_removed",
    "bytes_removed",
    "bytes_reclaimed",
    "log_files_removed",
)

#: Every column, as the table's schema.
HISTORY_SCHEMA = pa.schema([pa.field(name, typ, nullable) for name, typ, nullable, _ in COLUMNS])
#: The columns stored in data files (the partition column lives in the path and the log).
DATA_SCHEMA = pa.schema([f for f in HISTORY_SCHEMA if f.name != PARTITION_COLUMN])
COLUMN_NAMES = tuple(name for name, *_ in COLUMNS)


def schema_of_version(version: int) -> pa.Schema:
    """The history's columns as schema version ``version`` had them (a prefix of today's)."""
    return pa.schema(list(HISTORY_SCHEMA)[: COLUMNS_BY_VERSION[version]])


__all__ = [
    "COLUMNS",
    "COLUMNS_BY_VERSION",
    "COLUMN_NAMES",
    "DATA_SCHEMA",
    "FLEET_RUN",
    "HISTORY_SCHEMA",
    "KIND",
    "KIND_PROPERTY",
    "OBJECTIVE_COLUMNS",
    "OPERATIONS",
    "PARTITION_COLUMN",
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_PROPERTY",
    "STATUSES",
    "TABLE_PROPERTIES",
    "TRIGGER_COLUMNS",
    "schema_of_version",
    "WORK_COLUMNS",
    "WRITER_COLUMNS",
]
