"""Log maintenance commands: ``checkpoint``, ``cleanup-log``, ``manifest``, ``uniform-sync``."""

from __future__ import annotations

import argparse

from deltalog.cli import emit
from deltalog.cli.history_option import add_history_option, recorded
from deltalog.log_maintenance import CheckpointResult, create_checkpoint
from deltalog.log_maintenance.log_cleanup import LogCleanupResult, cleanup_log
from deltalog.log_maintenance.manifest import ManifestResult, generate_manifest
from deltalog.table import DeltaTable

__all__ = ["register"]


def register(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "checkpoint",
        parents=[parent],
        help="write a checkpoint (classic, or V2 with sidecars) and update _last_checkpoint",
        description="Write a checkpoint of the latest version (or --version N), verify it, then point "
        "_last_checkpoint at it. A complete checkpoint already at that version is reused.",
    )
    p.add_argument("table", help="table path or URI")
    p.add_argument("--version", type=int, metavar="N", help="checkpoint this version instead of the latest")
    add_history_option(p)
    p.set_defaults(handler=cmd_checkpoint)

    p = sub.add_parser(
        "cleanup-log",
        parents=[parent],
        help="delete expired _delta_log files (PROTOCOL.md Metadata Cleanup); --dry-run shows the plan",
        description="Delete commits, checkpoints, .crc, log compaction files and unreferenced sidecars older than "
        "the newest checkpoint before midnight UTC of now - delta.logRetentionDuration (default 30 days). "
        "Deletes nothing when no checkpoint qualifies.",
    )
    p.add_argument("table", help="table path or URI")
    p.add_argument("--dry-run", action="store_true", help="show what would be deleted; delete nothing")
    p.add_argument("--no-file-list", action="store_true", help="with --json: omit the per-file list")
    add_history_option(p)
    p.set_defaults(handler=cmd_cleanup_log)

    p = sub.add_parser(
        "manifest",
        parents=[parent],
        help="write symlink-format manifests for Presto/Trino/Athena (incremental unless --full)",
        description="Write _symlink_format_manifest/[<partition>/]manifest files listing the absolute URI of every "
        "live data file. Incremental: only partitions changed since the previous generation.",
    )
    p.add_argument("table", help="table path or URI")
    p.add_argument("--full", action="store_true", help="rewrite every manifest and delete stale ones")
    p.add_argument("--dry-run", action="store_true", help="show what would be written and deleted; change nothing")
    add_history_option(p)
    p.set_defaults(handler=cmd_manifest)

    p = sub.add_parser(
        "uniform-sync",
        parents=[parent],
        help="write a UniForm table's Iceberg metadata up to its latest version (what every commit's hook does)",
        description="Bring the Iceberg metadata under metadata/ to the table's latest Delta version (or --version N): "
        "one Iceberg snapshot per Delta version that changed data files, or one catch-up snapshot when the metadata "
        "is far behind (docs/uniform.md). Refused, with the reason, for a table state Iceberg cannot express.",
    )
    p.add_argument("table", help="table path or URI")
    p.add_argument("--version", type=int, metavar="N", help="convert up to this version instead of the latest")
    p.set_defaults(handler=cmd_uniform_sync)


def cmd_checkpoint(args: argparse.Namespace) -> None:
    with recorded(args, args.table, "checkpoint") as op:
        result = op.result = create_checkpoint(DeltaTable(args.table, args.storage_options), version=args.version)

    def human(r: CheckpointResult) -> str:
        lines = [
            r.summary_line(),
            f"files: {', '.join(r.files)}" + (f" + {len(r.sidecars)} sidecars" if r.sidecars else ""),
            "_last_checkpoint " + ("updated" if r.last_checkpoint_updated else "left alone (names a newer checkpoint)"),
        ]
        return "\n".join(lines + [f"warning: {w}" for w in r.warnings])

    emit(args, result, human)


def cmd_cleanup_log(args: argparse.Namespace) -> None:
    with recorded(args, args.table, "log_cleanup", skip=args.dry_run) as op:
        result = op.result = cleanup_log(DeltaTable(args.table, args.storage_options), dry_run=args.dry_run)

    def human(r: LogCleanupResult) -> str:
        if r.skipped_reason:
            return r.summary_line()
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(r.by_kind.items()))
        return (
            f"{r.summary_line()}\n"
            f"cutoff {r.cutoff_time} (retention {r.log_retention}): cutoff commit {r.cutoff_commit}, "
            f"cutoff checkpoint {r.cutoff_checkpoint}; files by kind: {kinds or 'none'}"
        )

    if args.json and args.no_file_list:
        emit(args, result.summary())
        return
    emit(args, result, human)


def cmd_manifest(args: argparse.Namespace) -> None:
    with recorded(args, args.table, "manifest", skip=args.dry_run) as op:
        table = DeltaTable(args.table, args.storage_options)
        result = op.result = generate_manifest(table, full=args.full, dry_run=args.dry_run)

    emit(args, result, ManifestResult.summary_line)


def cmd_uniform_sync(args: argparse.Namespace) -> None:
    from deltalog.uniform.convert import IcebergSyncResult, sync_iceberg_metadata

    result = sync_iceberg_metadata(DeltaTable(args.table, args.storage_options), version=args.version)
    emit(args, result, IcebergSyncResult.summary_line)
