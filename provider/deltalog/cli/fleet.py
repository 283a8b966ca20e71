"""Fleet commands: ``discover``, ``health`` (one table, several, or every table under a root), ``maintain``,
``policy`` (a table's settings, where each came from, and why each operation is due or not)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from deltalog._flags import require_workers
from deltalog.cli import emit, fail
from deltalog.cli.history_option import add_history_option, recorder_for
from deltalog.errors import InvalidArgumentError
from deltalog.fleet.discover import DEFAULT_MAX_DEPTH, DiscoveryResult, FoundTable, discover_tables, tables_from_list
from deltalog.fleet.objectives import first_because, judge_objectives, objective_work, states_to_dicts
from deltalog.fleet.ranking import TableReport, fleet_health
from deltalog.fleet.report import format_summary, render_html
from deltalog.fleet.run import compliance_views, run_fleet
from deltalog.journal import HistoryRecorder
from deltalog.log.load import snapshot_at
from deltalog.maintenance.due import maintenance_due
from deltalog.maintenance.health import compute_health
from deltalog.maintenance.policy import FleetPolicy, due_rules, due_under
from deltalog.table import DeltaTable

__all__ = ["add_source", "check_source", "read_json", "register", "tables_from"]


def add_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", metavar="ROOT", help="every Delta table under this folder or bucket prefix")
    p.add_argument(
        "--list", dest="list_file", metavar="FILE", help="a file (local path or URI) naming one table URI per line"
    )
    p.add_argument("--max-depth", type=int, default=DEFAULT_MAX_DEPTH, metavar="N", help="folders below the root")
    p.add_argument("--workers", type=int, default=8, metavar="N", help="concurrent listings/measurements")


def register(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "discover",
        parents=[parent],
        help="find every Delta table under a root (parallel listing; unreadable folders reported)",
        description="Walk ROOT (or read --list FILE) and print every folder holding a _delta_log with a commit or "
        "checkpoint, with its latest version. Tables are not descended into.",
    )
    p.add_argument("root", nargs="?", help="folder, bucket or prefix (s3://bucket/prefix)")
    add_source(p)
    p.set_defaults(handler=cmd_discover)

    p = sub.add_parser(
        "health",
        parents=[parent],
        help="is maintenance due? one table, several, or every table under --root, ranked by expected gain",
        description="Health numbers and the due verdict per operation (compaction finds a bin, checkpoint interval "
        "passed, vacuum has reclaimable files past retention, log cleanup has expired files). Several tables are "
        "measured concurrently and ranked by what maintenance would gain.",
    )
    p.add_argument("table", nargs="*", help="table paths or URIs")
    add_source(p)
    p.add_argument("--target-file-size", type=int, metavar="BYTES", help="default: delta.targetFileSize or 128 MiB")
    p.set_defaults(handler=cmd_health)
    _register_maintain(sub, parent)

    p = sub.add_parser(
        "policy",
        parents=[parent],
        help="a table's maintenance settings, where each value came from, and why each operation is due or not",
        description="Resolve the table's settings through the layers of docs/fleet.md (fleet defaults, path-prefix "
        "rules, the table's own delta.* properties, per-table overrides) and print each effective value with its "
        "source and the values it overrode; then each maintenance operation's rule: due or not, and the numbers "
        "that decide it.",
    )
    p.add_argument("table", help="table path or URI")
    p.add_argument("--settings", metavar="FILE", help="the maintenance settings file (JSON; see docs/fleet.md)")
    p.add_argument(
        "--history",
        metavar="URI",
        help="the maintenance history: since when each objective is breached, its trend (docs/objectives.md)",
    )
    p.set_defaults(handler=cmd_policy)


def _register_maintain(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "maintain",
        parents=[parent],
        help="maintain many tables: only what is due, best gain per second first, within --time-budget",
        description="Measure every table, order the due ones by expected gain per second and run their due "
        "operations (compaction, checkpoint, vacuum, log cleanup, manifest) under a per-table lease. Past "
        "--time-budget nothing new starts and a running compaction stops between bins (finished bins are "
        "committed); the summary says what was done and what was deferred.",
    )
    p.add_argument("table", nargs="*", help="table paths or URIs")
    add_source(p)
    p.add_argument("--time-budget", type=float, metavar="SECONDS", help="stop starting work after this long")
    p.add_argument(
        "--settings", metavar="FILE", help="maintenance settings file: defaults, path-prefix rules, per-table overrides"
    )
    p.add_argument(
        "--results",
        metavar="FILE",
        help="JSON file of run results: read first (the previous run's throughput), then replaced by this run's",
    )
    p.add_argument("--html", metavar="FILE", help="write the summary as a self-contained HTML report")
    p.add_argument("--dry-run", action="store_true", help="measure and order only; change nothing")
    p.add_argument(
        "--allow-short-retention",
        action="store_true",
        help="let a per-table vacuum_retention_hours go below the table's retention",
    )
    add_history_option(p)
    p.add_argument(
        "--history-view-url",
        metavar="URL",
        help="the fleet view's address (e.g. https://airflow.example.com/deltalog/): the HTML report links each "
        "table to its page there; without it, to a query of the history",
    )
    p.set_defaults(handler=cmd_maintain)


def read_json(path: str, what: str, missing_ok: bool = False) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise InvalidArgumentError(f"cannot read the {what} {path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"cannot read the {what} {path}: {exc}") from None


def tables_from(args: argparse.Namespace) -> tuple[list[str | FoundTable], list[dict[str, str]]]:
    """The tables named on the command line, or those discovered under --root/--list with the
    folders discovery could not read (reported, never fatal)."""
    if args.table:
        return list(args.table), []
    found = _discover(args, args.root)
    return list(found.tables), list(found.errors)


def cmd_maintain(args: argparse.Namespace) -> int:
    check_source(args, args.table)
    settings = read_json(args.settings, "settings file") if args.settings else None
    previous = read_json(args.results, "results file", missing_ok=True) if args.results else None
    policy = FleetPolicy.parse(settings)  # a bad settings file fails before any work
    history = recorder_for(args, prepare=not args.dry_run)  # a dry run reads it (objectives), records nothing
    tables, errors = tables_from(args)
    result = run_fleet(
        tables,
        storage_options=args.storage_options,
        time_budget_seconds=args.time_budget,
        settings=policy,
        previous_results=previous,
        owner="deltalog maintain (CLI)",
        dry_run=args.dry_run,
        allow_short_retention=args.allow_short_retention,
        history=history,
    )
    result = dataclasses.replace(result, unreadable=[*result.unreadable, *errors])
    doc = result.to_dict()
    if args.results and not args.dry_run:
        with open(args.results, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, default=str)
    if args.html:
        with open(args.html, "w", encoding="utf-8") as fh:
            fh.write(render_html(doc, view_url=args.history_view_url))
    if result.history_error:
        print(f"warning: {result.history_error}", file=sys.stderr)

    def human(d: dict[str, Any]) -> str:
        if args.dry_run:
            lines = [
                f"{p['uri']}: gain {p['gain']:.1f} in ~{p['estimated_seconds']:.1f} s"
                + (f" (first: {p['first_because']})" if p.get("first_because") else "")
                + (f"; writers: {p['writers']}" if p.get("writers") else "")
                for p in d["planned"]
            ]
            head = "dry run: nothing changed; due tables, breached first, then at risk, then best gain per second:"
            return "\n".join([head, *lines])
        return format_summary(d)

    emit(args, doc, human)
    code = result.exit_code  # 2: a table failed or was unreadable, 1: one was refused (docs/cli.md)
    if code:
        counts = result.counts()
        named = [f"{counts[s]} {s}" for s in ("failed", "unreadable", "refused") if counts.get(s)]
        return fail(f"not every table was maintained: {', '.join(named)} (see the summary)", code)
    return 0


def check_source(args: argparse.Namespace, positional: list[str]) -> None:
    given = sum(bool(x) for x in (positional, args.root, args.list_file))
    if given != 1:
        raise InvalidArgumentError("give tables, --root ROOT or --list FILE (exactly one of them)")
    require_workers(args.workers, "--workers")


def _discover(args: argparse.Namespace, root: str | None) -> DiscoveryResult:
    if args.list_file:
        return tables_from_list(args.list_file, args.storage_options, max_workers=args.workers)
    assert root is not None
    return discover_tables(
        root, storage_options=args.storage_options, max_depth=args.max_depth, max_workers=args.workers
    )


def cmd_discover(args: argparse.Namespace) -> None:
    root = args.root
    check_source(args, [])
    result = _discover(args, root)

    def human(r: DiscoveryResult) -> str:
        lines = [f"{t.uri}  v{t.version}" for t in r.tables]
        lines += [f"error: {e['uri']}: {e['error']}" for e in r.errors]
        lines.append(r.summary_line())
        return "\n".join(lines)

    emit(args, result, human)


def _single(args: argparse.Namespace, uri: str) -> None:
    if args.target_file_size is not None and args.target_file_size <= 0:
        raise InvalidArgumentError(f"target file size must be positive, got {args.target_file_size}")
    table = DeltaTable(uri, args.storage_options)
    snapshot = table.snapshot()
    out: dict[str, Any] = compute_health(snapshot, target=args.target_file_size).to_dict()
    out.update(maintenance_due(table, snapshot, target_size=args.target_file_size).to_dict())

    def human(d: dict[str, Any]) -> str:
        lines = [f"{k}: {v}" for k, v in d.items() if k not in ("due", "reasons", "work", "refused")]
        due = [op for op, flag in d["due"].items() if flag]
        lines.append("due: " + (", ".join(due) if due else "nothing"))
        lines += [f"  {r}" for r in d["reasons"]]
        return "\n".join(lines)

    emit(args, out, human)


def cmd_health(args: argparse.Namespace) -> None:
    check_source(args, args.table)
    if len(args.table) == 1:
        _single(args, args.table[0])
        return
    tables, errors = tables_from(args)
    if args.target_file_size is not None and args.target_file_size <= 0:
        raise InvalidArgumentError(f"target file size must be positive, got {args.target_file_size}")
    reports = fleet_health(
        tables, storage_options=args.storage_options, target_size=args.target_file_size, max_workers=args.workers
    )
    out = {
        "tables": [r.to_dict() for r in reports],
        "errors": errors,
        "num_tables": len(reports),
        "num_due": sum(r.any_due for r in reports),
    }

    def human(_: Any) -> str:
        return format_ranking(reports, errors)

    emit(args, out, human)


def format_ranking(reports: list[TableReport], errors: list[dict[str, str]]) -> str:
    lines = []
    for rank, r in enumerate(reports, 1):
        lines.append(f"{rank:>3}. {r.summary_line()}")
        if r.due is not None and r.error is None:
            lines += [f"       {reason}" for reason in r.due.reasons]
    lines += [f"error: {e['uri']}: {e['error']}" for e in errors]
    lines.append(f"{len(reports)} tables, {sum(r.any_due for r in reports)} due")
    return "\n".join(lines)


def cmd_policy(args: argparse.Namespace) -> None:
    policy = FleetPolicy.parse(read_json(args.settings, "settings file") if args.settings else None)
    table = DeltaTable(args.table, args.storage_options)
    snapshot = snapshot_at(table.storage)
    settings = policy.resolve(table.uri, snapshot.metadata.configuration)
    health = compute_health(snapshot, target=settings.target_file_size)
    due = due_under(settings, table.storage, snapshot)
    rules = due_rules(due, health, settings)
    view = None
    if args.history:
        views = compliance_views(HistoryRecorder(args.history, args.storage_options), [table.uri])
        view = (views or {}).get(table.uri)
    objectives = judge_objectives(snapshot, settings, health, due, history=view)
    because = first_because(objectives)
    doc = {
        "table": table.uri,
        "version": snapshot.version,
        "settings": [e.to_dict() for e in settings.explained],
        "due": [r.to_dict() for r in rules],
        "refused": due.refused,
        "objectives": states_to_dicts(objectives),
        "objective_work": objective_work(objectives, due),
        "ranking": (
            f"ahead of the gain order: {because}"
            if because
            else "by gain per second (no objective breached or at risk)"
        ),
    }

    def human(d: dict[str, Any]) -> str:
        lines = [f"{d['table']} (version {d['version']})", "", f"{'setting':<30} {'value':<20} source"]
        for e in d["settings"]:
            where = f"{e['source']} {e['detail']}".strip() + ("" if e["settable"] else " (the table decides)")
            lines.append(f"{e['name']:<30} {_shown(e['value']):<20} {where}")
            for o in e["overridden"]:
                lines.append(f"{'':<30}   over {_shown(o['value'])} from {(o['source'] + ' ' + o['detail']).strip()}")
        lines += ["", "due rules:"]
        lines += [f"  {r['operation']:<12} {'DUE' if r['due'] else 'not due':<8} {r['why']}" for r in d["due"]]
        if objectives:
            lines += ["", "objectives:"]
            lines += [f"  {o.describe()}  [{o.source}]" for o in objectives]
            lines += [f"  {op} runs for it: {why}" for op, why in d["objective_work"].items()]
        lines += ["", f"ranking: {d['ranking']}"]
        return "\n".join(lines)

    emit(args, doc, human)


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)
