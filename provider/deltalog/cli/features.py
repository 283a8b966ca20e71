"""``deltalog features``: the feature x operation table (what deltalog supports, refuses, and why)."""

from __future__ import annotations

import argparse

from deltalog.cli import emit
from deltalog.protocol.features import Operation, support_table, text_table

__all__ = ["register"]


def register(sub: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "features", parents=[parent], help="which table features each operation supports or refuses, and why"
    )
    p.set_defaults(handler=cmd_features)


def cmd_features(args: argparse.Namespace) -> None:
    if args.json:
        emit(args, {"operations": [op.value for op in Operation], "features": support_table()})
        return
    print(text_table())
