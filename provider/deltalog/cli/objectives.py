"""``deltalog objectives``: each table's service-level objectives, met or breached, and since when.

Exit status (docs/cli.md): 0 when every objective of every table is met (or none is set),
:data:`EXIT_BREACHED` (4) when one is breached, 2 when a table could not be read (it is not
met either) or the input is bad; so cron and BashOperator users alert on it as it is.
"""

from __future__ import annotations

import argparse
from typing import Any

from deltalog.cli import emit, fail
from deltalog.cli.fleet import add_source, check_source, read_json, tables_from
from deltalog.errors import InvalidArgumentError
from deltalog.fleet.service import check_objectives
from deltalog.maintenance.policy import FleetPolicy

__all__ = ["EXIT_BREACHED", "register"]

#: ``deltalog objectives``' status when an objective is breached: not 1 (a refusal, nothing of it
#: is refused), not 2 (bad input, unreadable) and not 3 (an internal error): its own number.
EXIT_BREACHED = 4


def register(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "objectives",
        parents=[parent],
        help="each table's service-level objectives: target, value, met or breached, and since when",
        description="Judge every objective the settings and the tables' deltalog.objective.* properties set "
        "(max_small_files, max_versions_since_checkpoint, max_days_since_vacuum, max_dv_share) on the tables now; "
        "with --history, breached_since comes from the maintenance history's measurements. Exit 0: all met; "
        f"{EXIT_BREACHED}: an objective is breached; 2: a table could not be read or bad input (docs/cli.md).",
    )
    p.add_argument("table", nargs="*", help="table paths or URIs")
    add_source(p)
    p.add_argument("--settings", metavar="FILE", help="the maintenance settings file (JSON; see docs/objectives.md)")
    p.add_argument(
        "--history",
        metavar="URI",
        help="the maintenance history: since when each breach lasts, the last vacuum it recorded",
    )
    p.add_argument(
        "--history-storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="storage option of the history (repeatable; default: --storage-option)",
    )
    p.set_defaults(handler=cmd_objectives)


def cmd_objectives(args: argparse.Namespace) -> int:
    from deltalog.cli import key_values

    check_source(args, args.table)
    policy = FleetPolicy.parse(read_json(args.settings, "settings file") if args.settings else None)
    history_options = key_values(args.history_storage_option, "--history-storage-option") or None
    if args.history is not None and not args.history.strip():
        raise InvalidArgumentError("--history needs the maintenance history's URI or path")
    tables, errors = tables_from(args)
    judged = check_objectives(
        tables,
        storage_options=args.storage_options,
        settings=policy,
        history=args.history,
        history_storage_options=history_options,
        max_workers=args.workers,
    )
    doc = {"tables": [t.to_dict() for t in judged] + [_unlisted(e) for e in errors]}

    def human(d: dict[str, Any]) -> str:
        lines = []
        for t in judged:
            lines.append(t.summary_line())
            lines += [f"  {o.describe()}  [{o.source}]" for o in t.objectives]
        lines += [f"{e['uri']}: error: {e['error']}" for e in errors]
        met = sum(t.met for t in judged)
        lines.append(f"{len(d['tables'])} tables, {met} met")
        return "\n".join(lines)

    emit(args, doc, human)
    unreadable = [t for t in doc["tables"] if t.get("error")]
    breached = [t for t in doc["tables"] if not t["met"] and not t.get("error")]
    if unreadable:
        return fail(
            f"{len(unreadable)} table(s) could not be judged"
            + (f", {len(breached)} breach an objective" if breached else "")
            + f": {', '.join(t['table_uri'] for t in unreadable)}",
            2,
        )
    if breached:
        return fail(
            f"{len(breached)} table(s) breach an objective: {', '.join(t['table_uri'] for t in breached)}",
            EXIT_BREACHED,
        )
    return 0


def _unlisted(error: dict[str, str]) -> dict[str, Any]:
    """A folder discovery could not read, as an unjudged table."""
    return {"table_uri": error["uri"], "met": False, "objectives": [], "error": error["error"]}
