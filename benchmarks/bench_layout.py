"""Z-order: data skipping gained and speed, side by side (issue 18).

Sides (each in a fresh process on a fresh copy of the same cached table, Z-ordered by
``(x, y)`` into files of the same target size):

- deltalog's local engine (``compact(zorder_by=...)``) vs deltalake's ``optimize.z_order``;
- with ``--spark``: deltalog's Spark engine (``spark-submit --master local[2]`` end to end,
  JVM start included) vs Delta Spark's ``OPTIMIZE ... ZORDER BY (x, y)`` in a ``local[2]``
  session (``spark.databricks.delta.optimize.maxFileSize`` = the target; session start
  timed apart).

The table (``--size-mb``, default 2048; 64 with ``--scale small``) is unpartitioned,
written by ``deltalake.write_deltalake`` in appends of about 16 MB: ``x`` (long, uniform
0..1,000,000), ``y`` (double, uniform 0..1) and ``payload`` (200 random letters, so rows
are wide and the table reaches its size with about 14 M rows rather than 100 M). Seeded and
cached under ``~/.cache/deltalog/bench-layout-v{GENERATOR_VERSION}-{size}mb`` (a ``.complete``
marker with the parameters; bump the version when the data changes).

Skipping is read from each side's own file stats: the share of live files whose ``[min,
max]`` overlaps a range predicate covering 5 % of a column's domain (``x < 50,000``;
``y < 0.05``), before and after; "files touched" is that share times the file count.
Lower is better; 1.0 means every file must be read. Each finished side is logged as one
JSON line (``layout side``), so a long run leaves its figures even if stopped.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import compare_row, measure, optimize_counts

log = logging.getLogger("benchmarks.layout")

GENERATOR_VERSION = 1
FILE_MB = 16
PAYLOAD_CHARS = 200
RANGES = {"x": (0, 50_000), "y": (0.0, 0.05)}
CACHE_ROOT = Path(os.environ.get("DELTALOG_BENCH_LAYOUT_CACHE", Path.home() / ".cache" / "deltalog"))
OURS_PRELOAD = ["deltalog.compaction", "pyarrow.parquet", "numpy"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size-mb", type=int, default=None, help="table size (default 2048; 64 with --scale small)")
    parser.add_argument("--local", choices=["yes", "no"], default="yes", help="run the two local sides (default yes)")


# --- measured in a fresh process ---------------------------------------------------------


def ours_zorder(path: str, target: int) -> dict[str, Any]:
    from deltalog.compaction import compact

    r = compact(path, zorder_by=["x", "y"], target_size=target, run_hooks=False)
    assert r.ok, r.to_dict()
    return {"removed": r.to_dict()["num_files_removed"], "added": r.to_dict()["num_files_added"]}


def deltalake_zorder(path: str, target: int) -> dict[str, Any]:
    import deltalake
    from deltalake import PostCommitHookProperties

    m = deltalake.DeltaTable(path).optimize.z_order(
        ["x", "y"],
        target_size=target,
        post_commithook_properties=PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False),
    )
    return optimize_counts(m)


def ours_spark_zorder(path: str, target: int) -> dict[str, Any]:
    """Our Spark engine end to end (plan, spark-submit local[2] incl. JVM start, commit)."""
    import resource

    from deltalog.compaction import compact

    r = compact(
        path,
        zorder_by=["x", "y"],
        target_size=target,
        engine="spark",
        spark_options={"master": "local[2]", "timeout": 7200},
        run_hooks=False,
    )
    assert r.ok, r.to_dict()
    return {
        "removed": r.to_dict()["num_files_removed"],
        "added": r.to_dict()["num_files_added"],
        "jvm_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def delta_spark_zorder(path: str, target: int) -> dict[str, Any]:
    """Delta Spark's OPTIMIZE ZORDER BY in a local[2] session; session (JVM) start timed apart."""
    from pyspark.sql import SparkSession

    from bench_wide import _descendants_peak_mb
    from deltalog.engines.spark_packages import spark_conf

    t0 = time.perf_counter()
    builder = SparkSession.builder.master("local[2]").appName("bench-delta-zorder")
    conf = {
        **spark_conf(delta=True, s3a=False),
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.databricks.delta.optimize.maxFileSize": str(target),
    }
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    started = time.perf_counter() - t0
    t1 = time.perf_counter()
    row = spark.sql(f"OPTIMIZE delta.`{path}` ZORDER BY (x, y)").collect()[0]
    optimize_s = time.perf_counter() - t1
    metrics = row["metrics"]
    peak = _descendants_peak_mb()
    spark.stop()
    return {
        **optimize_counts(metrics),
        "jvm_start_s": started,
        "optimize_s": optimize_s,
        "jvm_peak_mb": peak,
    }


# --- set-up and skipping (not timed) -------------------------------------------------------


def overlap_shares(path: str) -> dict[str, Any]:
    """Per column, the share of live files whose min/max stats overlap its range predicate (and the count)."""
    from deltalog import DeltaTable

    stats = [json.loads(s) for s in DeltaTable(path).snapshot().files.column("stats").to_pylist()]
    out: dict[str, Any] = {"files": len(stats)}
    for col, (lo, hi) in RANGES.items():
        hit = [s["minValues"][col] <= hi and s["maxValues"][col] >= lo for s in stats]
        out[col] = round(sum(hit) / len(hit), 3)
        out[f"{col}_files_touched"] = sum(hit)
    return out


def table_path(size_mb: int) -> Path:
    return CACHE_ROOT / f"bench-layout-v{GENERATOR_VERSION}-{size_mb}mb"


def build_table(size_mb: int) -> tuple[Path, dict[str, Any]]:
    """The cached table (built on first use) and its info."""
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    path = table_path(size_mb)
    params = {"version": GENERATOR_VERSION, "size_mb": size_mb}
    try:
        info = json.loads((path / ".complete").read_text())
        if info.get("params") == params:
            return path, info
    except (OSError, ValueError):
        pass
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(18)
    t0 = time.perf_counter()

    def batch(rows: int) -> pa.Table:
        letters = rng.integers(97, 123, size=(rows, PAYLOAD_CHARS), dtype=np.uint8)
        payload = pa.array(letters.view(f"S{PAYLOAD_CHARS}").ravel()).cast(pa.string())
        return pa.table(
            {
                "x": pa.array(rng.integers(0, 1_000_000, rows), pa.int64()),
                "y": pa.array(rng.uniform(0, 1, rows)),
                "payload": payload,
            }
        )

    def data_bytes() -> int:
        return sum(f.stat().st_size for f in path.glob("*.parquet"))

    probe = 20_000
    write_deltalake(str(path), batch(probe), mode="append")
    rows = max(1000, int(probe * FILE_MB * 2**20 / data_bytes()))
    appends = max(1, round((size_mb * 2**20 - data_bytes()) / (FILE_MB * 2**20)))
    total = probe
    for i in range(appends):
        write_deltalake(str(path), batch(rows), mode="append")
        total += rows
        if i % 20 == 19:
            log.info("%s: %d of %d appends", path.name, i + 1, appends)
    info = {"params": params, "files": appends + 1, "bytes": data_bytes(), "rows": total}
    (path / ".complete").write_text(json.dumps(info))
    log.info(
        "built %s: %d files, %d MiB, %d rows in %.0f s",
        path.name,
        info["files"],
        info["bytes"] >> 20,
        total,
        time.perf_counter() - t0,
    )
    return path, info


def _fresh(table: Path, dst: Path) -> str:
    """A copy of the table: the log copied, the data files hard-linked (a Z-order only adds files)."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(table, dst, copy_function=os.link, ignore=shutil.ignore_patterns("_delta_log", ".complete"))
    shutil.copytree(table / "_delta_log", dst / "_delta_log")
    return str(dst)


def _side(name: str, fn: str, table: Path, work: Path, target: int, preload: list[str]) -> tuple[Any, dict]:
    dest = _fresh(table, work / name)
    m = measure(__name__, fn, [dest, target], preload=preload, timeout=7200)
    after = overlap_shares(dest)
    log.info(
        "layout side %s",
        json.dumps(
            {
                "side": name,
                "seconds": round(m.seconds, 1),
                "cpu": m.cpu_seconds,
                "peak_mb": m.peak_mb,
                "result": m.result,
                "after": after,
                "load": os.getloadavg()[0],
            }
        ),
    )
    shutil.rmtree(dest, ignore_errors=True)
    return m, after


def _note(before: dict[str, Any], sides: dict[str, dict[str, Any]]) -> str:
    parts = [
        f"files overlapping x<50k / y<0.05: before {before['x']:.2f} / {before['y']:.2f} ({before['files']} files)"
    ]
    for name, after in sides.items():
        parts.append(
            f"{name} after {after['x']:.2f} / {after['y']:.2f} ({after['files']} files; touched "
            f"{after['x_files_touched']} / {after['y_files_touched']})"
        )
    return "; ".join(parts) + f"; load average {os.getloadavg()[0]:.1f}"


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    size_mb = args.size_mb or (64 if args.scale == "small" else 2048)
    table, info = build_table(size_mb)
    target = info["bytes"] // 16 + 1
    before = overlap_shares(str(table))
    mib = info["bytes"] >> 20
    work = Path(tempfile.mkdtemp(prefix="deltalog-bench-layout-", dir=table.parent))
    rows: list[dict[str, Any]] = []
    try:
        if args.local == "yes":
            ours, ours_after = _side("ours", "ours_zorder", table, work, target, OURS_PRELOAD)
            theirs, theirs_after = _side("deltalake", "deltalake_zorder", table, work, target, ["deltalake"])
            row = compare_row(
                f"Z-order by (x, y), {info['files']} files / {mib} MiB / {info['rows']} rows, target "
                f"{target >> 20} MiB: local engine vs deltalake z_order",
                ours,
                theirs,
                time_target=1.0,
                note=_note(before, {"ours": ours_after, "deltalake": theirs_after}),
            )
            row.update(overlap_before=before, overlap_ours=ours_after, overlap_deltalake=theirs_after, table=info)
            rows.append(row)
        if args.spark:
            delta, delta_after = _side("delta_spark", "delta_spark_zorder", table, work, target, ["pyspark"])
            ours_s, ours_s_after = _side("ours_spark", "ours_spark_zorder", table, work, target, OURS_PRELOAD)
            d, o = delta.result, ours_s.result
            delta.peak_mb = max(delta.peak_mb, d["jvm_peak_mb"])
            ours_s.peak_mb = max(ours_s.peak_mb, o["jvm_peak_mb"])
            row = compare_row(
                f"Z-order by (x, y), {mib} MiB: Spark engine (local[2], end to end) vs Delta Spark OPTIMIZE ZORDER BY "
                "(local[2]); deltalake column = Delta Spark",
                ours_s,
                delta,
                note=_note(before, {"ours Spark": ours_s_after, "Delta Spark": delta_after})
                + f"; ours {info['bytes'] / 2**20 / ours_s.seconds:.1f} MiB/s incl. JVM start, Delta Spark OPTIMIZE "
                f"{d['optimize_s']:.1f} s ({info['bytes'] / 2**20 / d['optimize_s']:.1f} MiB/s) after a "
                f"{d['jvm_start_s']:.1f} s session start",
            )
            row.update(overlap_before=before, overlap_ours_spark=ours_s_after, overlap_delta_spark=delta_after)
            rows.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows
