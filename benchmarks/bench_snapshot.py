"""Snapshot load, deltalog vs deltalake (issue #2, section 7).

Cases (``--scale full``; ``small`` uses a tenth of the commits for development):

- JSON-only log: 10,000 commits x 10 adds over 16 partitions (~90,000 live files).
  Target: time at most 0.5x deltalake's.
- Checkpointed: the same shape at ~500,000 live files (55,600 commits), a deltalake
  checkpoint at the last generated version, then 50 more JSON commits.
  Target: time and peak memory at most 1.0x deltalake's.
- ``deltalog snapshot --json`` on the JSON-only table against deltalake plus the same
  JSON document built from its add actions (informational: no target).

"Load" means: open the table and materialise its live file list as Arrow
(``DeltaTable(path).snapshot().files`` / ``deltalake.DeltaTable(path).get_add_actions()``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
from typing import Any

from common import checkpointed_table, compare_row, measure_pair, synthetic_table, table_info

log = logging.getLogger("benchmarks.snapshot")

SCALES = {
    "full": {"json_commits": 10_000, "cp_commits": 55_600},
    "small": {"json_commits": 1_000, "cp_commits": 5_560},
}
OURS_PRELOAD = ["pyarrow", "pyarrow.compute", "pyarrow.parquet", "pyarrow.json", "deltalog.table", "deltalog.cli"]
THEIRS_PRELOAD = ["pyarrow", "deltalake"]


# --- measured in a fresh process (see common.measure) ----------------------------------


def ours_load(path: str) -> int:
    from deltalog.table import DeltaTable

    return DeltaTable(path).snapshot().files.num_rows


def deltalake_load(path: str) -> int:
    import deltalake

    return deltalake.DeltaTable(path).get_add_actions(flatten=False).num_rows


def ours_cli_json(path: str) -> int:
    from deltalog.cli import main

    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        code = main(["snapshot", path, "--json"])
    if code:
        raise RuntimeError(f"deltalog snapshot exited {code}")
    return 0


def deltalake_cli_json(path: str) -> int:
    """The same document from deltalake: its add actions as path/size/partitionValues dicts."""
    import json

    import deltalake
    import pyarrow as pa

    dt = deltalake.DeltaTable(path)
    adds = pa.table(dt.get_add_actions(flatten=False))
    parts = adds.column("partition").to_pylist() if "partition" in adds.column_names else None
    files = [
        {"path": p, "size": s, "partitionValues": parts[i] if parts else {}}
        for i, (p, s) in enumerate(zip(adds.column("path").to_pylist(), adds.column("size_bytes").to_pylist()))
    ]
    doc = {"version": dt.version(), "metadata": {"id": dt.metadata().id}, "files": files}
    with open(os.devnull, "w") as sink:
        sink.write(json.dumps(doc))
    return 0


# --- the benchmark ---------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--case", choices=["json", "checkpoint", "cli"], action="append", help="only these cases (repeatable)"
    )


def _compare(case: str, path: str, ours_fn: str, theirs_fn: str, repeat: int, **targets: Any) -> dict[str, Any]:
    log.info("%s: %d alternating fresh-process runs per side", case, repeat)
    ours, theirs = measure_pair(
        "bench_snapshot",
        ours_fn,
        theirs_fn,
        [path],
        ours_preload=OURS_PRELOAD,
        theirs_preload=THEIRS_PRELOAD,
        repeat=repeat,
    )
    log.info(
        "%s: deltalog %.2f s, %.0f MiB; deltalake %.2f s, %.0f MiB",
        case,
        ours.seconds,
        ours.peak_mb,
        theirs.seconds,
        theirs.peak_mb,
    )
    if ours.result != theirs.result:
        raise RuntimeError(f"{case}: deltalog found {ours.result} files, deltalake {theirs.result}")
    return compare_row(case, ours, theirs, **targets)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    scale = SCALES[args.scale]
    cases = set(getattr(args, "case", None) or ["json", "checkpoint", "cli"])
    rows = []
    if cases & {"json", "cli"}:
        json_table = synthetic_table(scale["json_commits"])
        info = table_info(json_table)
        shape = f"{info['commits']:,} JSON commits, {info['live_files']:,} live files"
        if "json" in cases:
            rows.append(
                _compare(
                    f"snapshot load: {shape}",
                    str(json_table),
                    "ours_load",
                    "deltalake_load",
                    args.repeat,
                    time_target=0.5,
                )
            )
            if args.spark:
                _spark(rows[-1], json_table)
        if "cli" in cases:
            row = _compare(
                f"`snapshot --json` to stdout: {shape}",
                str(json_table),
                "ours_cli_json",
                "deltalake_cli_json",
                args.repeat,
            )
            row["note"] = "deltalake side: load + the same JSON built from get_add_actions()"
            rows.append(row)
    if "checkpoint" in cases:
        cp_table = checkpointed_table(scale["cp_commits"])
        info = table_info(cp_table)
        shape = (
            f"checkpoint at v{info['checkpoint_version']:,} + {info['tail_commits']} JSON commits, "
            f"{info['live_files']:,} live files"
        )
        rows.append(
            _compare(
                f"snapshot load: {shape}",
                str(cp_table),
                "ours_load",
                "deltalake_load",
                args.repeat,
                time_target=1.0,
                mem_target=1.0,
            )
        )
        if args.spark:
            _spark(rows[-1], cp_table)
    return rows


def _spark(row: dict[str, Any], table: Any) -> None:
    """Delta Spark's snapshot load (``DESCRIBE DETAIL``: state reconstruction) on the same table, same run."""
    import spark_side

    log.info("%s: Delta Spark", row["case"])
    got = spark_side.add_column(row, "snapshot_load", [str(table)])
    if got is not None and got != table_info(table)["live_files"]:
        raise RuntimeError(f"{row['case']}: Delta Spark found {got} files")
