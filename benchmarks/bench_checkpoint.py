"""Checkpoint writing, deltalog vs deltalake (issue #4, section 5).

Cases (``--scale full``; ``small`` uses a tenth of the commits for development):

- JSON-only log: 10,000 commits x 10 adds over 16 partitions (~90,000 live files), no
  checkpoint yet. Target: time at most 0.5x deltalake's.
- ~500,000 live files: 55,600 commits with a deltalake checkpoint at the last generated
  version plus 50 JSON commits (the snapshot benchmark's table). Target: time and peak
  memory at most 1.0x deltalake's.

"Checkpoint" means, end to end in a fresh process: open the table, reconstruct the
latest state and write its checkpoint plus ``_last_checkpoint``
(``deltalog.log_maintenance.create_checkpoint(path)`` /
``deltalake.DeltaTable(path).create_checkpoint()``). Each run gets its own copy of the
log (made before the clock starts), because a checkpoint changes the table; both
checkpoints are then read back to check they hold the same number of files.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from common import CACHE, Measurement, checkpointed_table, compare_row, measure, synthetic_table, table_info

log = logging.getLogger("benchmarks.checkpoint")

SCALES = {
    "full": {"json_commits": 10_000, "cp_commits": 55_600},
    "small": {"json_commits": 1_000, "cp_commits": 5_560},
}
OURS_PRELOAD = ["pyarrow", "pyarrow.compute", "pyarrow.parquet", "pyarrow.json", "deltalog.log_maintenance"]
THEIRS_PRELOAD = ["pyarrow", "deltalake"]


# --- measured in a fresh process (see common.measure) ----------------------------------


def ours_checkpoint(path: str) -> int:
    from deltalog.log_maintenance import create_checkpoint

    return create_checkpoint(path).version


def deltalake_checkpoint(path: str) -> int:
    import deltalake

    dt = deltalake.DeltaTable(path)
    dt.create_checkpoint()
    return dt.version()


# --- the benchmark ---------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--case", choices=["json", "large"], action="append", help="only these cases (repeatable)")


def _fresh_copy(table: Path, work: Path) -> str:
    dest = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    shutil.copytree(table / "_delta_log", dest / "_delta_log")  # copy2: modification times kept
    return str(dest)


def _checkpoint_adds(path: str, version: int) -> int:
    """Add actions in the checkpoint written at ``version`` (read back with pyarrow)."""
    import pyarrow.parquet as pq

    log_dir = os.path.join(path, "_delta_log")
    names = [n for n in os.listdir(log_dir) if n.startswith(f"{version:020d}.checkpoint") and n.endswith(".parquet")]
    total = 0
    for n in names:
        col = pq.ParquetFile(os.path.join(log_dir, n)).read(columns=["add.path"]).column("add")
        total += len(col) - col.null_count
    return total


def _measure_each(table: Path, fn: str, preload: list[str], repeat: int, work: Path) -> tuple[Measurement, int]:
    """``repeat`` fresh processes, each on its own copy of the log; fastest time, highest peak."""
    runs, peaks, bases, adds = [], [], [], 0
    for _ in range(max(1, repeat)):
        path = _fresh_copy(table, work)
        try:
            m = measure("bench_checkpoint", fn, [path], preload=preload, repeat=1)
            adds = _checkpoint_adds(path, m.result)
        finally:
            shutil.rmtree(path, ignore_errors=True)
        runs.append(m.seconds)
        peaks.append(m.peak_mb)
        bases.append(m.base_mb)
    return Measurement(seconds=min(runs), peak_mb=max(peaks), base_mb=min(bases), runs=runs, result=adds), adds


def _compare(case: str, table: Path, repeat: int, spark: bool = False, **targets: Any) -> dict[str, Any]:
    work = CACHE / "work"
    work.mkdir(parents=True, exist_ok=True)
    log.info("%s: deltalog", case)
    ours, ours_adds = _measure_each(table, "ours_checkpoint", OURS_PRELOAD, repeat, work)
    log.info("%s: deltalog %.2f s, %.0f MiB; now deltalake", case, ours.seconds, ours.peak_mb)
    theirs, their_adds = _measure_each(table, "deltalake_checkpoint", THEIRS_PRELOAD, repeat, work)
    log.info("%s: deltalake %.2f s, %.0f MiB", case, theirs.seconds, theirs.peak_mb)
    if ours_adds != their_adds:
        raise RuntimeError(f"{case}: deltalog's checkpoint holds {ours_adds} files, deltalake's {their_adds}")
    row = compare_row(case, ours, theirs, note=f"{ours_adds:,} add actions in each checkpoint", **targets)
    if spark:
        import spark_side

        log.info("%s: Delta Spark", case)
        path = _fresh_copy(table, work)
        try:
            version = spark_side.add_column(row, "checkpoint", [path])
            if version is not None and _checkpoint_adds(path, version) != ours_adds:
                raise RuntimeError(f"{case}: Delta Spark's checkpoint holds {_checkpoint_adds(path, version)} files")
        finally:
            shutil.rmtree(path, ignore_errors=True)
    return row


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    scale = SCALES[args.scale]
    cases = set(getattr(args, "case", None) or ["json", "large"])
    rows = []
    if "json" in cases:
        table = synthetic_table(scale["json_commits"])
        info = table_info(table)
        shape = f"{info['commits']:,} JSON commits, {info['live_files']:,} live files"
        rows.append(_compare(f"checkpoint: {shape}", table, args.repeat, args.spark, time_target=0.5))
    if "large" in cases:
        table = checkpointed_table(scale["cp_commits"])
        info = table_info(table)
        shape = (
            f"{info['live_files']:,} live files (checkpoint + {info['version'] - info['checkpoint_version']} commits)"
        )
        rows.append(_compare(f"checkpoint: {shape}", table, args.repeat, args.spark, time_target=1.0, mem_target=1.0))
    return rows
