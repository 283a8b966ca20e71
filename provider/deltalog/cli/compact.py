"""``deltalog compact`` (merge small files, dataChange=false) and ``deltalog convert`` (Parquet -> Delta)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from deltalog.cli import emit, key_values
from deltalog.cli.history_option import add_history_option, recorded
from deltalog.compaction import CompactionOptions, CompactionPlan, CompactionResult, compact
from deltalog.compaction.options import ENGINES
from deltalog.convert import ConvertResult, convert_to_delta
from deltalog.errors import CommitFailedError, EngineError, InvalidArgumentError
from deltalog.protocol.sizes import parse_size

__all__ = ["register"]


def _size(text: str) -> int:
    try:
        return parse_size(text, "size")
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _columns(text: str) -> list[str]:
    cols = [c.strip() for c in text.split(",")]
    if not all(cols):
        raise argparse.ArgumentTypeError(f"--zorder-by wants column names separated by commas, got {text!r}")
    return cols


def register(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "compact",
        parents=[parent],
        help="merge small files per partition (OPTIMIZE, dataChange=false)",
        description="Bin-pack files below the small-file threshold (half the target size) per partition into files "
        "of about the target size (delta.targetFileSize, else 128 MiB), rewrite them with the local engine (pyarrow) "
        "or Spark, and commit one OPTIMIZE commit with dataChange=false. Concurrent appends never conflict; bins "
        "whose input files a concurrent commit removed are skipped and reported. On a table with liquid clustering "
        "the local engine clusters the unclustered and small clustered files by the clustering columns instead. "
        "--plan-only writes nothing.",
    )
    p.add_argument("table", help="table path or URI")
    p.add_argument("--target-size", type=_size, metavar="BYTES", help="target file size (e.g. 134217728 or 128m)")
    p.add_argument("--where", metavar="EXPR", help="partition filter: col = 'v', col IN ('a','b'), joined by AND")
    p.add_argument("--engine", choices=ENGINES, help="who rewrites the bins (local)")
    p.add_argument("--plan-only", action="store_true", help="print the plan (bins and files); write nothing")
    p.add_argument("--plan", metavar="FILE", help="run a plan printed earlier by --plan-only --json")
    p.add_argument("--min-files", type=int, metavar="N", help="smallest number of files worth a bin (2)")
    p.add_argument("--max-bins", type=int, metavar="N", help="rewrite at most N bins (the fullest) this run")
    p.add_argument("--small-file-threshold", type=_size, metavar="BYTES", help="default: half the target size")
    p.add_argument("--bins-per-commit", type=int, metavar="N", help="commit every N bins instead of once")
    p.add_argument("--max-workers", type=int, metavar="N", help="local engine: bins rewritten at once")
    p.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="local engine: start no bin after this long; finished bins are committed, the rest deferred",
    )
    p.add_argument(
        "--purge-deletion-vectors",
        action="store_true",
        help="rewrite the files whose deletion vector hides rows, applying it (REORG ... APPLY (PURGE)); local engine",
    )
    p.add_argument(
        "--min-deleted-share",
        type=float,
        metavar="X",
        help="with --purge-deletion-vectors: only files whose DV hides more than this share of rows (default 0)",
    )
    p.add_argument(
        "--zorder-by",
        type=_columns,
        metavar="COL[,COL]",
        help="rewrite every file of each partition along a Z curve of these columns (OPTIMIZE ZORDER BY); local engine",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="liquid clustering: re-cluster files clustered by other columns too (OPTIMIZE ... FULL)",
    )
    p.add_argument(
        "--no-writer-aware",
        dest="writer_aware",
        action="store_false",
        help="compact as if no DELETE/UPDATE/MERGE writer were there (default: files where one works wait for its "
        "quiet moment or the next run; see docs/compaction.md)",
    )
    p.add_argument(
        "--writer-wait",
        type=float,
        dest="writer_wait_seconds",
        metavar="SECONDS",
        help="the longest a commit waits for a quiet moment of the writers (default 60; 0: defer instead)",
    )
    p.add_argument("--spark-master", default="local[2]", metavar="URL", help="spark engine: --master (local[2])")
    p.add_argument("--spark-conf", action="append", metavar="KEY=VALUE", help="spark engine: extra --conf")
    add_history_option(p)
    p.set_defaults(handler=cmd_compact)

    p = sub.add_parser(
        "convert",
        parents=[parent],
        help="make a Parquet directory a Delta table in place (commit 0, no data rewritten)",
        description="List every Parquet file under PATH (hidden _/. paths skipped) in one commit 0 with sizes, "
        "partition values and footer stats. The schema comes from the files; files that disagree on a column's "
        "type are refused by name. Nothing is written unless every file passes.",
    )
    p.add_argument("path", help="directory path or URI")
    p.add_argument(
        "--partition-by", metavar="'COL TYPE, ...'", help='hive-style partition columns, e.g. "year int, region string"'
    )
    add_history_option(p)
    p.set_defaults(handler=cmd_convert)


def _load_plan(path: str) -> CompactionPlan:
    try:
        doc: Any = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read plan {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InvalidArgumentError(f"plan {path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidArgumentError(f"plan {path} is nested too deeply to be a compaction plan") from None
    if isinstance(doc, dict) and isinstance(doc.get("plan"), dict) and "bins" in doc["plan"]:
        doc = doc["plan"]  # the whole --plan-only --json output
    return CompactionPlan.from_dict(doc)


def _human(r: CompactionResult) -> str:
    lines = [r.summary_line()]
    if r.plan_only or r.noop:
        for b in r.plan.bins[:20]:
            lines.append(f"  bin {b.id}: {len(b.files)} files, {b.size} bytes, {b.partition_values}")
        if len(r.plan.bins) > 20:
            lines.append(f"  ... and {len(r.plan.bins) - 20} more (use --json for all)")
        if r.plan.writers is not None:
            lines.append(r.plan.writers.summary_line())
            lines += [f"  deferred {why}" for why in r.plan.writers.reasons()]
        return "\n".join(lines)
    lines.append(f"{r.to_dict()['num_partitions_optimized']} partitions optimized in {r.seconds:.1f}s")
    for s in r.skipped:
        lines.append(f"skipped bin {s.bin_id} ({s.kind}): {s.reason}")
    writers = r.plan.writers
    if writers is not None and writers.deferred:
        lines += [f"deferred for the writers: {why}" for why in writers.reasons()]
    return "\n".join(lines)


def _deadline(budget: float | None) -> float | None:
    if budget is None:
        return None
    if not budget > 0:
        raise InvalidArgumentError(f"--time-budget must be a positive number of seconds, got {budget:g}")
    return time.monotonic() + budget


#: ``deltalog compact`` flags that are CompactionOptions fields of the same name (unset: the option's default).
OPTION_FLAGS = (
    "target_size",
    "where",
    "engine",
    "plan_only",
    "min_files",
    "max_bins",
    "small_file_threshold",
    "bins_per_commit",
    "max_workers",
    "purge_deletion_vectors",
    "min_deleted_share",
    "zorder_by",
    "full",
    "writer_wait_seconds",
)


def cmd_compact(args: argparse.Namespace) -> None:
    plan = _load_plan(args.plan) if args.plan else None
    given = {name: getattr(args, name) for name in OPTION_FLAGS}
    given = {name: value for name, value in given.items() if value is not None and value is not False}
    if not args.writer_aware:
        given["writer_aware"] = False
    if args.engine == "spark":
        given["spark_options"] = {"master": args.spark_master, "conf": key_values(args.spark_conf, "--spark-conf")}
    options = CompactionOptions(deadline=_deadline(args.time_budget), **given)
    operation = "purge" if options.purge_deletion_vectors else "compaction"
    with recorded(args, args.table, operation, engine=options.engine, skip=options.plan_only) as op:
        result = op.result = compact(args.table, options=options, plan=plan, storage_options=args.storage_options)
    emit(args, result, _human)
    if result.error:
        raise CommitFailedError(f"compaction stopped after {len(result.commits)} commit(s): {result.error}")
    failed = [s for s in result.skipped if s.kind == "error"]
    if failed:
        committed = result.committed_bins
        landed = (
            f"{len(committed)} other bin(s) committed in version(s) {[c.version for c in result.commits]}"
            if committed
            else "no bin was committed"
        )
        raise EngineError(f"{len(failed)} bin(s) could not be rewritten (first: {failed[0].reason}); {landed}")


def _human_convert(r: ConvertResult) -> str:
    return r.summary_line()


def cmd_convert(args: argparse.Namespace) -> None:
    with recorded(args, args.path, "convert", measure_before=False) as op:
        result = op.result = convert_to_delta(
            args.path, partition_by=args.partition_by, storage_options=args.storage_options
        )
    emit(args, result, _human_convert)
