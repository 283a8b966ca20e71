"""``deltalog vacuum``: delete files no retained version needs (``--dry-run`` shows the plan)."""

from __future__ import annotations

import argparse

from deltalog.cli import emit, key_values
from deltalog.cli.history_option import add_history_option, recorded
from deltalog.log.history import format_ms
from deltalog.vacuuming import VacuumResult, vacuum
from deltalog.vacuuming.vacuum_plan import DEFAULT_MAX_WORKERS, ENGINES, MODES

__all__ = ["register"]


def register(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "vacuum",
        parents=[parent],
        help="delete files that no version inside the retention window references",
        description="Delete data, deletion vector and change data files that no table version committed within the "
        "retention window (delta.deletedFileRetentionDuration, default 7 days) references and that are older than "
        "the cutoff. Writes VACUUM START / VACUUM END commits. Use --dry-run to see the plan first.",
    )
    p.add_argument("table", help="table path or URI")
    p.add_argument(
        "--retention-hours",
        type=float,
        metavar="H",
        help="keep files removed within the last H hours (default: the table's delta.deletedFileRetentionDuration)",
    )
    p.add_argument(
        "--mode", choices=MODES, default="full", help="full: list the table directory; lite: read the log only"
    )
    p.add_argument("--dry-run", action="store_true", help="show what would be deleted; delete and write nothing")
    p.add_argument(
        "--allow-short-retention",
        action="store_true",
        help="allow a retention shorter than the table's (or zero); unsafe while anything reads or writes the table",
    )
    p.add_argument(
        "--inventory",
        metavar="PATH",
        help="Parquet/CSV listing (path, size, modificationTime) to use instead of listing",
    )
    p.add_argument(
        "--full-fallback", action="store_true", help="lite mode: run a full vacuum when the needed commits are gone"
    )
    p.add_argument(
        "--max-workers", type=int, default=DEFAULT_MAX_WORKERS, metavar="N", help="parallel listing/deleting workers"
    )
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="where the plan is made: local (this process) or spark (a Spark job: the anti-join of the inventory "
        "or a distributed listing against every protected path; full mode). Deleting is this process's either way",
    )
    p.add_argument("--spark-master", default="local[2]", metavar="URL", help="spark engine: --master (local[2])")
    p.add_argument("--spark-conf", action="append", metavar="KEY=VALUE", help="spark engine: extra --conf")
    p.add_argument("--no-file-list", action="store_true", help="with --json: omit the per-file list")
    add_history_option(p)
    p.set_defaults(handler=cmd_vacuum)


def _human(r: VacuumResult) -> str:
    lines = [
        r.summary_line(),
        f"retention {r.retention_hours:g} hours (table: {r.configured_retention_hours:g}), cutoff {format_ms(r.cutoff_ms)}",
    ]
    if not r.dry_run:
        lines.append(f"{r.num_vacuumed_directories} empty directories removed")
    if r.start_commit_version is not None:
        lines.append(f"commits: VACUUM START {r.start_commit_version}, VACUUM END {r.end_commit_version}")
    if r.dry_run and r.plan is not None:
        for row in r.plan.head(20).to_pylist():
            lines.append(f"  {row['path']}  {row['size']}  ({row['reason']})")
        if r.plan.num_files > 20:
            lines.append(f"  ... and {r.plan.num_files - 20} more (use --json for all)")
        kept = r.plan.kept_for_iceberg
        if kept.num_rows:
            lines.append(f"kept for Iceberg readers ({kept.num_rows}):")
            for row in kept.slice(0, 20).to_pylist():
                lines.append(f"  {row['path']}  ({row['reason']})")
            if kept.num_rows > 20:
                lines.append(f"  ... and {kept.num_rows - 20} more (use --json for all)")
    lines += [f"warning: {w}" for w in r.warnings]
    return "\n".join(lines)


def cmd_vacuum(args: argparse.Namespace) -> None:
    with recorded(args, args.table, "vacuum", skip=args.dry_run) as op:
        result = op.result = _vacuum(args)
    if args.json:
        emit(args, result.to_dict(include_files=not args.no_file_list))
    else:
        emit(args, result, _human)


def _vacuum(args: argparse.Namespace) -> VacuumResult:
    return vacuum(
        args.table,
        retention_hours=args.retention_hours,
        mode=args.mode,
        dry_run=args.dry_run,
        allow_short_retention=args.allow_short_retention,
        inventory=args.inventory,
        max_workers=args.max_workers,
        full_fallback=args.full_fallback,
        engine=args.engine,
        spark_options=(
            {"master": args.spark_master, "conf": key_values(args.spark_conf, "--spark-conf")}
            if args.engine == "spark"
            else None
        ),
        storage_options=args.storage_options,
    )
