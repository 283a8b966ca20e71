"""Read-only commands: ``snapshot``, ``history`` (``health`` lives in ``cli/fleet.py``)."""

from __future__ import annotations

import argparse

from deltalog.cli import emit
from deltalog.log.history import format_ms
from deltalog.table import DeltaTable

__all__ = ["register"]


def register(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("snapshot", parents=[parent], help="the table state at a version (files, protocol, metadata)")
    p.add_argument("table", help="table path or URI")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--version", type=int, help="time travel to this version")
    g.add_argument("--timestamp", help="time travel to this time (ISO-8601 or epoch ms)")
    p.set_defaults(handler=cmd_snapshot)

    p = sub.add_parser("history", parents=[parent], help="commits still in the log, newest first")
    p.add_argument("table")
    p.add_argument("--limit", type=int, help="at most this many commits")
    p.set_defaults(handler=cmd_history)


def cmd_snapshot(args: argparse.Namespace) -> None:
    snap = DeltaTable(args.table, args.storage_options).snapshot(version=args.version, timestamp=args.timestamp)

    def human(s) -> str:
        return (
            f"version {s.version}: {s.num_files} files, {s.size_in_bytes} bytes\n"
            f"protocol: reader {s.protocol.min_reader_version} writer {s.protocol.min_writer_version}"
            f" features {sorted(s.protocol.effective_reader_features() | s.protocol.effective_writer_features())}\n"
            f"partition columns: {s.partition_columns}\n"
            f"schema: {', '.join(f'{f.name} {f.type}' for f in s.schema)}"
        )

    emit(args, snap, human)


def cmd_history(args: argparse.Namespace) -> None:
    records = DeltaTable(args.table, args.storage_options).history(limit=args.limit)
    if args.json:
        emit(args, {"commits": [r.to_dict() for r in records]})
        return
    for r in records:
        print(f"{r.version:>8}  {format_ms(r.timestamp)}  {r.operation or '-'}  {r.operationParameters}")
