"""Z-order: data skipping gained and speed, deltalog's local engine vs deltalake's ``optimize.z_order`` (issue 18).

The table (built in the same run with ``deltalake.write_deltalake``, unpartitioned):
``files`` appends of 50,000 rows, columns ``x`` (long, uniform 0..1,000,000),
``y`` (double, uniform 0..1), ``payload`` (string). Full scale: 60 files (3 M rows,
about 50 MB); ``--scale small``: 12 files. Not the issue's 2 GB table: this
machine is shared and the run must stay short; the rows say so.

Both sides Z-order by ``(x, y)`` into files of ``target`` bytes (a fifth of the
table, so each side writes several files), each in a fresh process on a fresh copy
of the table. Skipping is measured from the files' own min/max stats: the share of
files whose ``[min, max]`` overlaps a range predicate covering 5 % of each column's
domain (``x < 50,000``; ``y < 0.05``), before and after. Lower is better; 1.0
means every file must be read.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from common import CACHE, compare_row, measure

log = logging.getLogger("benchmarks.layout")

SCALES = {"full": 60, "small": 12}
ROWS = 50_000
RANGES = {"x": (0, 50_000), "y": (0.0, 0.05)}


def ours_zorder(path: str, target: int) -> dict[str, Any]:
    from deltalog.compaction import compact

    r = compact(path, zorder_by=["x", "y"], target_size=target, run_hooks=False)
    return {"removed": r.to_dict()["numFilesRemoved"], "added": r.to_dict()["numFilesAdded"]}


def deltalake_zorder(path: str, target: int) -> dict[str, Any]:
    import deltalake
    from deltalake import PostCommitHookProperties

    m = deltalake.DeltaTable(path).optimize.z_order(
        ["x", "y"],
        target_size=target,
        post_commithook_properties=PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False),
    )
    return {"removed": m["numFilesRemoved"], "added": m["numFilesAdded"]}


def overlap_shares(path: str) -> dict[str, float]:
    """Per column, the share of live files whose min/max stats overlap its range predicate."""
    from deltalog import DeltaTable

    stats = [json.loads(s) for s in DeltaTable(path).snapshot().files.column("stats").to_pylist()]
    out = {}
    for col, (lo, hi) in RANGES.items():
        hit = [s["minValues"][col] <= hi and s["maxValues"][col] >= lo for s in stats]
        out[col] = round(sum(hit) / len(hit), 3)
    return out


def build_table(path: Path, files: int) -> int:
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    if (path / "_delta_log").exists():
        shutil.rmtree(path)
    rng = np.random.default_rng(18)
    for i in range(files):
        x = rng.integers(0, 1_000_000, ROWS)
        data = pa.table(
            {
                "x": pa.array(x, pa.int64()),
                "y": pa.array(rng.uniform(0, 1, ROWS)),
                "payload": pa.array([f"row-{i}-{v}" for v in x]),
            }
        )
        write_deltalake(str(path), data, mode="append")
    return sum(f.stat().st_size for f in path.glob("*.parquet"))


def run(args: Any) -> list[dict[str, Any]]:
    files = SCALES[args.scale]
    base = CACHE / f"layout-{args.scale}"
    size = build_table(base, files)
    target = size // 5 + 1
    before = overlap_shares(str(base))
    ours_path, theirs_path = CACHE / "layout-ours", CACHE / "layout-theirs"
    ours_runs, theirs_runs = [], []
    for _ in range(max(1, args.repeat)):
        for dest, fn, runs in ((ours_path, "ours_zorder", ours_runs), (theirs_path, "deltalake_zorder", theirs_runs)):
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(base, dest)
            runs.append(measure("bench_layout", fn, [str(dest), target]))
    ours = min(ours_runs, key=lambda m: m.seconds)
    theirs = min(theirs_runs, key=lambda m: m.seconds)
    after_ours, after_theirs = overlap_shares(str(ours_path)), overlap_shares(str(theirs_path))
    log.info("overlap before %s, ours after %s, deltalake after %s", before, after_ours, after_theirs)
    row = compare_row(
        f"Z-order by (x, y), {files} files x {ROWS} rows ({size // 2**20} MiB), target {target // 2**20} MiB",
        ours,
        theirs,
        time_target=1.0,
        note=(
            f"files overlapping x<50k / y<0.05: before {before['x']:.2f} / {before['y']:.2f}; "
            f"ours after {after_ours['x']:.2f} / {after_ours['y']:.2f} ({ours.result['added']} files); "
            f"deltalake after {after_theirs['x']:.2f} / {after_theirs['y']:.2f} ({theirs.result['added']} files)"
        ),
    )
    row.update(
        overlap_before=before,
        overlap_ours=after_ours,
        overlap_deltalake=after_theirs,
        table_bytes=size,
        target=row["target"],
    )
    return [row]
