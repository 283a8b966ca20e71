"""Commands that write to the log: ``commit`` (a commit request) and ``create`` (a new table)."""

from __future__ import annotations

import argparse

import fsspec
import pyarrow.parquet as pq

from deltalog.cli import emit, key_values
from deltalog.cli.history_option import add_history_option, recorded
from deltalog.commit.result import CommitResult
from deltalog.errors import InvalidArgumentError

__all__ = ["register"]


def register(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "commit",
        parents=[parent],
        help="commit data files already written into the table, described by a JSON commit request",
    )
    p.add_argument("table", help="table path or URI")
    p.add_argument("--request", required=True, metavar="FILE.json", help="the commit request (path or URI)")
    p.add_argument("--app-id", help="application id of an idempotent commit (with --txn-version)")
    p.add_argument("--txn-version", type=int, help="application transaction version (with --app-id)")
    p.add_argument(
        "--single-writer",
        action="store_true",
        help="allow committing on a filesystem without atomic put-if-absent (only if nothing else writes)",
    )
    add_history_option(p)
    p.set_defaults(handler=cmd_commit)

    p = sub.add_parser("create", parents=[parent], help="create an empty table with the schema of a Parquet file")
    p.add_argument("table", help="table path or URI")
    p.add_argument("--schema-from", required=True, metavar="FILE.parquet", help="take the schema from this file")
    p.add_argument(
        "--partition-by", action="append", metavar="COLS", help="partition columns, comma-separated (repeatable)"
    )
    p.add_argument("--property", action="append", metavar="K=V", help="table property (repeatable)")
    p.add_argument("--name", help="table name stored in the metadata")
    p.add_argument("--description", help="table description stored in the metadata")
    p.add_argument("--single-writer", action="store_true", help="see 'commit --help'")
    p.set_defaults(handler=cmd_create)


def _human(result: CommitResult) -> str:
    text = result.summary_line()
    failed = [h for h in result.hooks if not h.ok]
    for h in failed:
        text += f"\nwarning: post-commit hook {h.name} failed: {h.detail}"
    return text


def cmd_commit(args: argparse.Namespace) -> None:
    from deltalog.ingest import commit_request

    if (args.app_id is None) != (args.txn_version is None):
        raise InvalidArgumentError("give both --app-id and --txn-version, or neither")
    with recorded(args, args.table, "commit") as op:
        result = op.result = commit_request(
            args.table,
            args.request,
            app_id=args.app_id,
            txn_version=args.txn_version,
            single_writer=args.single_writer,
            storage_options=args.storage_options,
        )
    emit(args, result, _human)


def cmd_create(args: argparse.Namespace) -> None:
    from deltalog.create import create_table

    config = key_values(args.property, "--property")
    partition_by = [c.strip() for v in args.partition_by or [] for c in v.split(",") if c.strip()]
    try:
        with fsspec.open(args.schema_from, "rb", **args.storage_options) as fh:
            schema = pq.read_schema(fh)
    except FileNotFoundError:
        raise InvalidArgumentError(f"schema file {args.schema_from} does not exist") from None
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"cannot read a Parquet schema from {args.schema_from}: {exc}") from None
    result = create_table(
        args.table,
        schema.remove_metadata(),
        partition_by=partition_by,
        configuration=config,
        storage_options=args.storage_options,
        name=args.name,
        description=args.description,
        single_writer=args.single_writer,
    )
    emit(args, result, _human)
