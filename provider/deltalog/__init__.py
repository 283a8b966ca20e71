"""deltalog: the Delta Lake transaction-log protocol in Python (pyarrow + fsspec).

The entry points::

    from deltalog import DeltaTable
    table = DeltaTable("s3://bucket/events", storage_options={...})
    table.snapshot(); table.history(limit=10); table.health()
    table.compact(target_size="128m"); table.create_checkpoint(); table.vacuum(dry_run=True)
    table.cleanup_log(); table.generate_manifest(); table.transaction(operation="WRITE")

and the same operations as functions taking a table (a ``DeltaTable``, a path/URI or a
``Storage``; every option keyword-only, ``storage_options`` included): ``compact``,
``plan_compaction``, ``vacuum``, ``plan_vacuum``, ``execute_vacuum``, ``create_checkpoint``,
``cleanup_log``, ``generate_manifest``, ``create_table``, ``convert_to_delta``,
``commit_request``, ``maintenance_due``, the fleet's ``discover_tables`` /
``fleet_health`` / ``run_fleet``. Every public function and every result class is
importable from here (``__all__``); each lives in the package of its layer (see
``docs/design.md``). Errors are ``deltalog.errors`` classes (``DeltaLogError``).

No Airflow import anywhere in this package: the Airflow provider lives in
``deltalog_provider`` and only calls into here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from deltalog._version import __version__
from deltalog.errors import DeltaLogError
from deltalog.table import DeltaTable

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time, each name is imported on first use
    from deltalog.commit import CommitResult, PostCommitHook, PostCommitHookResult, Transaction
    from deltalog.compaction import (
        Bin,
        BinOutput,
        BinSkipped,
        CompactionCommit,
        CompactionOptions,
        CompactionPlan,
        CompactionResult,
        DeletionVectorHealth,
        LocalOptions,
        commit_outputs,
        compact,
        deletion_vector_health,
        plan_compaction,
    )
    from deltalog.compaction.liquid import ClusteringSpec
    from deltalog.compaction.plan import PlanFile
    from deltalog.compaction.spark import (
        SparkHandoff,
        commit_spark_result,
        compact_with_spark_job,
        read_spark_request,
        spark_job_script,
        spark_table_uri,
        storage_spark_conf,
        write_compaction_plan,
    )
    from deltalog.convert import ConvertResult, convert_to_delta
    from deltalog.create import choose_protocol, create_table, required_features
    from deltalog.engines.spark import IngestResult, WrittenFile, write_ingest
    from deltalog.fleet import (
        DiscoveryResult,
        FleetRunResult,
        FoundTable,
        Lease,
        PlannedTable,
        TableOutcome,
        TableReport,
        acquire_lease,
        discover_tables,
        fleet_health,
        maintain_table,
        measurement_rows,
        run_fleet,
    )
    from deltalog.ingest import AddSpec, CommitRequest, commit_request, load_commit_request, prepare_actions
    from deltalog.journal import (
        AppendResult,
        DayRollup,
        Figure,
        HistoryRecorder,
        JournalRow,
        Measure,
        OperationSpan,
        RollupStore,
        RollupWindow,
        RunContext,
        TableOverview,
        TableState,
        append_arrow,
        append_rows,
        check_history_table,
        day_figures,
        fleet_overview,
        history_row,
        history_table_uri,
        make_row,
        merge_rollups,
        read_history,
        rollup_rows,
        rows_for_table,
        table_rows,
        table_state,
        table_summaries,
    )
    from deltalog.log import HistoryEntry, LogListing, NewCommit, Snapshot, find_new_commit, list_log, snapshot_at
    from deltalog.log_maintenance import (
        CheckpointDescription,
        CheckpointResult,
        LogCleanupResult,
        ManifestResult,
        cleanup_log,
        create_checkpoint,
        describe_checkpoint,
        generate_manifest,
        last_checkpoint_checksum,
    )
    from deltalog.maintenance import (
        DueRule,
        ExplainedSetting,
        FleetPolicy,
        MaintenanceDue,
        TableHealth,
        TableSettings,
        compute_health,
        due_rules,
        maintenance_due,
        settings_for,
    )
    from deltalog.protocol import (
        Feature,
        Operation,
        Protocol,
        arrow_schema_to_schema_string,
        check_can_write,
        parse_schema_string,
    )
    from deltalog.protocol.features import Cell
    from deltalog.storage import FileInfo, Storage, is_remote
    from deltalog.uniform import (
        ForeignIcebergMetadataError,
        IcebergMetadataError,
        IcebergReferences,
        MetadataFile,
        ReaderSnapshot,
        read_iceberg_references,
    )
    from deltalog.vacuuming import (
        LiteVacuumUnavailableError,
        VacuumPlan,
        VacuumResult,
        execute_vacuum,
        plan_vacuum,
        vacuum,
    )
    from deltalog.vacuuming.iceberg_guard import IcebergGuard
    from deltalog.vacuuming.retention import Retention
    from deltalog.vacuuming.spark import vacuum_job_script

#: Public names -> the package (or module) that exports them, imported on first use so
#: ``import deltalog`` stays cheap (``tests/test_public_api.py`` keeps this complete).
_LAZY = {
    # deltalog.commit
    "CommitResult": "deltalog.commit",
    "PostCommitHook": "deltalog.commit",
    "PostCommitHookResult": "deltalog.commit",
    "Transaction": "deltalog.commit",
    # deltalog.compaction
    "Bin": "deltalog.compaction",
    "BinOutput": "deltalog.compaction",
    "BinSkipped": "deltalog.compaction",
    "CompactionCommit": "deltalog.compaction",
    "CompactionOptions": "deltalog.compaction",
    "CompactionPlan": "deltalog.compaction",
    "CompactionResult": "deltalog.compaction",
    "DeletionVectorHealth": "deltalog.compaction",
    "LocalOptions": "deltalog.compaction",
    "commit_outputs": "deltalog.compaction",
    "compact": "deltalog.compaction",
    "deletion_vector_health": "deltalog.compaction",
    "plan_compaction": "deltalog.compaction",
    # deltalog.compaction.liquid
    "ClusteringSpec": "deltalog.compaction.liquid",
    # deltalog.compaction.plan
    "PlanFile": "deltalog.compaction.plan",
    # deltalog.compaction.spark
    "SparkHandoff": "deltalog.compaction.spark",
    "commit_spark_result": "deltalog.compaction.spark",
    "compact_with_spark_job": "deltalog.compaction.spark",
    "read_spark_request": "deltalog.compaction.spark",
    "spark_job_script": "deltalog.compaction.spark",
    "spark_table_uri": "deltalog.compaction.spark",
    "storage_spark_conf": "deltalog.compaction.spark",
    "write_compaction_plan": "deltalog.compaction.spark",
    # deltalog.convert
    "ConvertResult": "deltalog.convert",
    "convert_to_delta": "deltalog.convert",
    # deltalog.create
    "choose_protocol": "deltalog.create",
    "create_table": "deltalog.create",
    "required_features": "deltalog.create",
    # deltalog.engines.spark
    "IngestResult": "deltalog.engines.spark",
    "WrittenFile": "deltalog.engines.spark",
    "write_ingest": "deltalog.engines.spark",
    # deltalog.fleet
    "DiscoveryResult": "deltalog.fleet",
    "FleetRunResult": "deltalog.fleet",
    "FoundTable": "deltalog.fleet",
    "Lease": "deltalog.fleet",
    "PlannedTable": "deltalog.fleet",
    "TableOutcome": "deltalog.fleet",
    "TableReport": "deltalog.fleet",
    "acquire_lease": "deltalog.fleet",
    "discover_tables": "deltalog.fleet",
    "fleet_health": "deltalog.fleet",
    "maintain_table": "deltalog.fleet",
    "measurement_rows": "deltalog.fleet",
    "run_fleet": "deltalog.fleet",
    # deltalog.ingest
    "AddSpec": "deltalog.ingest",
    "CommitRequest": "deltalog.ingest",
    "commit_request": "deltalog.ingest",
    "load_commit_request": "deltalog.ingest",
    "prepare_actions": "deltalog.ingest",
    # deltalog.journal
    "AppendResult": "deltalog.journal",
    "DayRollup": "deltalog.journal",
    "Figure": "deltalog.journal",
    "Measure": "deltalog.journal",
    "RollupStore": "deltalog.journal",
    "RollupWindow": "deltalog.journal",
    "append_arrow": "deltalog.journal",
    "check_history_table": "deltalog.journal",
    "day_figures": "deltalog.journal",
    "history_row": "deltalog.journal",
    "history_table_uri": "deltalog.journal",
    "merge_rollups": "deltalog.journal",
    "rollup_rows": "deltalog.journal",
    "table_rows": "deltalog.journal",
    "table_summaries": "deltalog.journal",
    "HistoryRecorder": "deltalog.journal",
    "JournalRow": "deltalog.journal",
    "OperationSpan": "deltalog.journal",
    "RunContext": "deltalog.journal",
    "TableOverview": "deltalog.journal",
    "TableState": "deltalog.journal",
    "append_rows": "deltalog.journal",
    "fleet_overview": "deltalog.journal",
    "make_row": "deltalog.journal",
    "read_history": "deltalog.journal",
    "rows_for_table": "deltalog.journal",
    "table_state": "deltalog.journal",
    # deltalog.log
    "HistoryEntry": "deltalog.log",
    "LogListing": "deltalog.log",
    "NewCommit": "deltalog.log",
    "Snapshot": "deltalog.log",
    "find_new_commit": "deltalog.log",
    "list_log": "deltalog.log",
    "snapshot_at": "deltalog.log",
    # deltalog.log_maintenance
    "CheckpointDescription": "deltalog.log_maintenance",
    "CheckpointResult": "deltalog.log_maintenance",
    "LogCleanupResult": "deltalog.log_maintenance",
    "ManifestResult": "deltalog.log_maintenance",
    "cleanup_log": "deltalog.log_maintenance",
    "create_checkpoint": "deltalog.log_maintenance",
    "describe_checkpoint": "deltalog.log_maintenance",
    "generate_manifest": "deltalog.log_maintenance",
    "last_checkpoint_checksum": "deltalog.log_maintenance",
    # deltalog.maintenance
    "DueRule": "deltalog.maintenance",
    "ExplainedSetting": "deltalog.maintenance",
    "FleetPolicy": "deltalog.maintenance",
    "TableSettings": "deltalog.maintenance",
    "due_rules": "deltalog.maintenance",
    "settings_for": "deltalog.maintenance",
    "MaintenanceDue": "deltalog.maintenance",
    "TableHealth": "deltalog.maintenance",
    "compute_health": "deltalog.maintenance",
    "maintenance_due": "deltalog.maintenance",
    # deltalog.protocol
    "Feature": "deltalog.protocol",
    "Operation": "deltalog.protocol",
    "Protocol": "deltalog.protocol",
    "arrow_schema_to_schema_string": "deltalog.protocol",
    "check_can_write": "deltalog.protocol",
    "parse_schema_string": "deltalog.protocol",
    # deltalog.protocol.features
    "Cell": "deltalog.protocol.features",
    # deltalog.storage
    "FileInfo": "deltalog.storage",
    "Storage": "deltalog.storage",
    "is_remote": "deltalog.storage",
    # deltalog.uniform
    "ForeignIcebergMetadataError": "deltalog.uniform",
    "IcebergMetadataError": "deltalog.uniform",
    "IcebergReferences": "deltalog.uniform",
    "MetadataFile": "deltalog.uniform",
    "ReaderSnapshot": "deltalog.uniform",
    "read_iceberg_references": "deltalog.uniform",
    # deltalog.vacuuming
    "LiteVacuumUnavailableError": "deltalog.vacuuming",
    "VacuumPlan": "deltalog.vacuuming",
    "VacuumResult": "deltalog.vacuuming",
    "execute_vacuum": "deltalog.vacuuming",
    "plan_vacuum": "deltalog.vacuuming",
    "vacuum": "deltalog.vacuuming",
    # deltalog.vacuuming.iceberg_guard
    "IcebergGuard": "deltalog.vacuuming.iceberg_guard",
    # deltalog.vacuuming.retention
    "Retention": "deltalog.vacuuming.retention",
    # deltalog.vacuuming.spark
    "vacuum_job_script": "deltalog.vacuuming.spark",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'deltalog' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AddSpec",
    "AppendResult",
    "Bin",
    "BinOutput",
    "BinSkipped",
    "Cell",
    "CheckpointDescription",
    "CheckpointResult",
    "ClusteringSpec",
    "CommitRequest",
    "CommitResult",
    "CompactionCommit",
    "CompactionOptions",
    "CompactionPlan",
    "CompactionResult",
    "ConvertResult",
    "DayRollup",
    "DeletionVectorHealth",
    "DeltaLogError",
    "DeltaTable",
    "DiscoveryResult",
    "DueRule",
    "ExplainedSetting",
    "Feature",
    "Figure",
    "FileInfo",
    "FleetPolicy",
    "FleetRunResult",
    "ForeignIcebergMetadataError",
    "FoundTable",
    "HistoryEntry",
    "HistoryRecorder",
    "IcebergGuard",
    "IcebergMetadataError",
    "IcebergReferences",
    "IngestResult",
    "JournalRow",
    "Lease",
    "LiteVacuumUnavailableError",
    "LocalOptions",
    "LogCleanupResult",
    "LogListing",
    "MaintenanceDue",
    "ManifestResult",
    "Measure",
    "MetadataFile",
    "NewCommit",
    "Operation",
    "OperationSpan",
    "PlanFile",
    "PlannedTable",
    "PostCommitHook",
    "PostCommitHookResult",
    "Protocol",
    "ReaderSnapshot",
    "Retention",
    "RollupStore",
    "RollupWindow",
    "RunContext",
    "Snapshot",
    "SparkHandoff",
    "Storage",
    "TableHealth",
    "TableOutcome",
    "TableOverview",
    "TableReport",
    "TableSettings",
    "TableState",
    "Transaction",
    "VacuumPlan",
    "VacuumResult",
    "WrittenFile",
    "__version__",
    "acquire_lease",
    "append_arrow",
    "append_rows",
    "arrow_schema_to_schema_string",
    "check_can_write",
    "check_history_table",
    "choose_protocol",
    "cleanup_log",
    "commit_outputs",
    "commit_request",
    "commit_spark_result",
    "compact",
    "compact_with_spark_job",
    "compute_health",
    "convert_to_delta",
    "create_checkpoint",
    "create_table",
    "day_figures",
    "deletion_vector_health",
    "describe_checkpoint",
    "discover_tables",
    "due_rules",
    "execute_vacuum",
    "find_new_commit",
    "fleet_health",
    "fleet_overview",
    "generate_manifest",
    "history_row",
    "history_table_uri",
    "is_remote",
    "last_checkpoint_checksum",
    "list_log",
    "load_commit_request",
    "maintain_table",
    "maintenance_due",
    "make_row",
    "measurement_rows",
    "merge_rollups",
    "parse_schema_string",
    "plan_compaction",
    "plan_vacuum",
    "prepare_actions",
    "read_history",
    "read_iceberg_references",
    "read_spark_request",
    "required_features",
    "rollup_rows",
    "rows_for_table",
    "run_fleet",
    "settings_for",
    "snapshot_at",
    "spark_job_script",
    "spark_table_uri",
    "storage_spark_conf",
    "table_rows",
    "table_state",
    "table_summaries",
    "vacuum",
    "vacuum_job_script",
    "write_compaction_plan",
    "write_ingest",
]
