"""Build a demo table with many small files under .demo/ and print its health."""

from __future__ import annotations

import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from helpers import append, make_table, rows  # noqa: E402

from deltalog.cli import main as cli_main  # noqa: E402


def run() -> int:
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".demo", "events")
    shutil.rmtree(root, ignore_errors=True)
    table = make_table(root, partition_by=["part"])
    for i in range(40):
        append(table, rows(100, start=i * 100, part=f"p{i % 4}"), partition={"part": f"p{i % 4}"})
    return cli_main(["health", root])


if __name__ == "__main__":
    raise SystemExit(run())
