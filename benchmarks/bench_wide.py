"""Compaction of wide tables (issue 19): deltalog local vs deltalake vs the pyarrow ceiling.

The tables come from ``wide_table.py`` (cached under ``~/.cache/deltalog/bench-wide-...``):
about ``--size-mb`` MB (200 by default, 50 with ``--scale small``; 1000-5000 for the
large rows) of ~1 MB files with twelve columns of many types, partitioned by 8
regions and unpartitioned (``--layout``).

Three cases per layout, each in a fresh process on a fresh copy of the table (the
log copied, data files hard-linked: compaction only reads them), run round-robin in a
rotating order within one run so load from other work on the machine hits all alike:

- ours: ``deltalog.compaction.compact(path, target_size=128 MiB, run_hooks=False)``
  (load, plan, rewrite, statistics, commit).
- deltalake: ``DeltaTable(path).optimize.compact(target_size=128 MiB)`` with the same
  codec as ours (the table's ``delta.parquet.compression.codec``, Delta's default zstd)
  and no post-commit hooks.
- ceiling: pyarrow reading every input file once and writing the same rows once into
  the same groups (per partition, packed to 128 MiB) with the same writer settings
  (codec, row-group size, dictionary choice), two groups at a time (both cores), no
  Delta work (no log, no schema conforming, no statistics JSON, no commit). What the
  hardware and pyarrow allow for the file we write.

Time is the fastest of ``--repeat`` rounds, peak is the highest ``VmHWM`` of the
measuring process (deltalake and pyarrow run in-process, so that is all of the work).
Ratios are what to read: the machine is shared, its load average is in the note.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from common import Measurement, compare_row, measure, merge, optimize_counts

log = logging.getLogger("benchmarks.wide")

TARGET = 128 * 1024 * 1024
OURS_PRELOAD = [
    "pyarrow",
    "pyarrow.parquet",
    "pyarrow.compute",
    "numpy",
    "deltalog.compaction",
    "deltalog.table",
]
THEIRS_PRELOAD = ["pyarrow", "pyarrow.parquet", "deltalake"]
CEILING_PRELOAD = ["pyarrow", "pyarrow.parquet", "deltalog.compaction.local"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size-mb", type=int, default=None, help="table size (default 200; 50 with --scale small)")
    parser.add_argument("--layout", choices=["both", "partitioned", "flat"], default="both")
    parser.add_argument("--codec", default="zstd", help="pyarrow codec for all three (default zstd, Delta's default)")


# --- measured in a fresh process ---------------------------------------------------------


def ours(path: str, codec: str) -> dict[str, Any]:
    from deltalog.compaction import compact

    d = compact(path, target_size=TARGET, run_hooks=False).to_dict()
    return {"removed": d["num_files_removed"], "added": d["num_files_added"]}


def deltalake_compact(path: str, codec: str) -> dict[str, Any]:
    import deltalake

    props = deltalake.PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
    writer = deltalake.WriterProperties(compression=codec.upper())
    m = deltalake.DeltaTable(path).optimize.compact(
        target_size=TARGET, writer_properties=writer, post_commithook_properties=props
    )
    return optimize_counts(m)


def ceiling(groups_json: str, codec: str) -> dict[str, Any]:
    """Every input file read once, its rows written once into its group's file: pyarrow only.

    The writer settings are our engine's (row groups of up to 1 Mi rows or a worker's share of
    the memory budget, the same dictionary choice), so the output is the same bytes ours writes, minus all Delta work.
    """
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa
    import pyarrow.parquet as pq

    from deltalog.compaction.bin_writer import dictionary_columns, open_parquet_writer
    from deltalog.compaction.options import LocalOptions

    limits = LocalOptions()
    group_bytes = limits.worker_row_group_bytes(2)

    groups: list[dict[str, Any]] = json.loads(Path(groups_json).read_text())

    def write(writer: pq.ParquetWriter | None, out: str, t: pa.Table) -> pq.ParquetWriter:
        if writer is None:  # the first row group decides the dictionaries, as in our engine
            writer = open_parquet_writer(out, t.schema, codec, dictionary_columns(t))
        writer.write_table(t, row_group_size=t.num_rows)
        return writer

    def one(g: dict[str, Any]) -> int:
        writer = None
        buf: list[pa.Table] = []
        rows = nbytes = 0
        for f in g["files"]:
            t = pq.ParquetFile(f).read(use_threads=False)
            buf.append(t)
            rows += t.num_rows
            nbytes += t.nbytes
            if rows >= limits.row_group_rows or nbytes >= group_bytes:
                writer = write(writer, g["out"], pa.concat_tables(buf))
                buf, rows, nbytes = [], 0, 0
        if buf:
            writer = write(writer, g["out"], pa.concat_tables(buf))
        assert writer is not None
        writer.close()
        return len(g["files"])

    with ThreadPoolExecutor(max_workers=2) as pool:
        removed = sum(pool.map(one, groups))
    return {"removed": removed, "added": len(groups)}


def ours_spark(path: str) -> dict[str, Any]:
    """Our Spark engine end to end (plan, spark-submit local[2] incl. JVM start, commit); peak = the JVM's."""
    import resource

    from deltalog.compaction import compact

    d = compact(path, target_size=TARGET, engine="spark", spark_options={"master": "local[2]"}, run_hooks=False)
    assert d.ok, d.to_dict()
    return {
        "removed": d.to_dict()["num_files_removed"],
        "added": d.to_dict()["num_files_added"],
        "jvm_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def _descendants_peak_mb() -> float:
    """The largest VmHWM among this process's descendants (the JVM PySpark started)."""
    peak = 0
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            kids = [
                int(c)
                for t in os.listdir(f"/proc/{pid}/task")
                for c in open(f"/proc/{pid}/task/{t}/children").read().split()
            ]
        except OSError:
            continue
        for k in kids:
            todo.append(k)
            try:
                for line in open(f"/proc/{k}/status"):
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
            except OSError:
                pass
    return peak / 1024


def delta_spark_optimize(path: str) -> dict[str, Any]:
    """Delta Spark's OPTIMIZE in a local[2] session; session (JVM) start timed apart."""
    import time

    from pyspark.sql import SparkSession

    from deltalog.engines.spark_packages import spark_conf

    t0 = time.perf_counter()
    builder = SparkSession.builder.master("local[2]").appName("bench-delta-optimize")
    conf = {**spark_conf(delta=True, s3a=False), "spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"}
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    started = time.perf_counter() - t0
    t1 = time.perf_counter()
    row = spark.sql(f"OPTIMIZE delta.`{path}`").collect()[0]
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


def _run_spark(table: Path, info: dict[str, Any], work: Path) -> list[dict[str, Any]]:
    mb = info["bytes"] / 1e6
    delta = measure(__name__, "delta_spark_optimize", [_fresh(table, work / "t")], preload=["pyspark"], timeout=1800)
    ours_m = measure(__name__, "ours_spark", [_fresh(table, work / "t")], preload=OURS_PRELOAD, timeout=1800)
    d, o = delta.result, ours_m.result
    assert d["removed"] == o["removed"] == info["files"], (d, o)
    delta.peak_mb = max(delta.peak_mb, d["jvm_peak_mb"])
    ours_m.peak_mb = max(ours_m.peak_mb, o["jvm_peak_mb"])
    row = compare_row(
        f"Spark engine (local[2]) vs Delta Spark OPTIMIZE (local[2]), wide table, {info['files']} files, {mb:.0f} MB",
        ours_m,
        delta,
        note=f"ours {o['added']} files, {mb / ours_m.seconds:.1f} MB/s end to end incl. JVM start; Delta Spark "
        f"{d['added']} files, OPTIMIZE {d['optimize_s']:.1f} s ({mb / d['optimize_s']:.1f} MB/s) after a "
        f"{d['jvm_start_s']:.1f} s session start; ours without one such start ~"
        f"{mb / max(0.1, ours_m.seconds - d['jvm_start_s']):.1f} MB/s (estimate); deltalake column = Delta Spark; "
        f"peaks = largest process (the JVM); load average {os.getloadavg()[0]:.1f}",
    )
    return [row]


# --- set-up (not timed) ------------------------------------------------------------------


def _groups(table: Path, out_dir: Path) -> list[dict[str, Any]]:
    """The files of each partition, packed by name order into groups of at most TARGET bytes."""
    by_dir: dict[str, list[str]] = {}
    for d, _, fs in os.walk(table):
        if "_delta_log" in d:
            continue
        by_dir.setdefault(d, []).extend(os.path.join(d, f) for f in fs if f.endswith(".parquet"))
    groups = []
    for d in sorted(by_dir):
        current: list[str] = []
        size = 0
        for f in sorted(by_dir[d]):
            s = os.path.getsize(f)
            if current and size + s > TARGET:
                groups.append(current)
                current, size = [], 0
            current.append(f)
            size += s
        if current:
            groups.append(current)
    return [{"files": g, "out": str(out_dir / f"group-{i}.parquet")} for i, g in enumerate(groups)]


def _fresh(table: Path, dst: Path) -> str:
    """A copy of the table: the log copied, the data files hard-linked (nothing rewrites them)."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(table, dst, copy_function=os.link, ignore=shutil.ignore_patterns("_delta_log"))
    shutil.copytree(table / "_delta_log", dst / "_delta_log")
    return str(dst)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import wide_table

    size_mb = args.size_mb or (50 if args.scale == "small" else 200)
    layouts = [True, False] if args.layout == "both" else [args.layout == "partitioned"]
    rows = []
    for partitioned in layouts:
        table, info = wide_table.build(size_mb, partitioned)
        rows.extend(_run_layout(table, info, partitioned, args))
        if partitioned and args.spark:
            work = Path(tempfile.mkdtemp(prefix="deltalog-wide-spark-", dir=table.parent))
            try:
                rows.extend(_run_spark(table, info, work))
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return rows


def _run_layout(table: Path, info: dict[str, Any], partitioned: bool, args: argparse.Namespace) -> list[dict]:
    mb = info["bytes"] / 1e6
    work = Path(tempfile.mkdtemp(prefix="deltalog-wide-", dir=table.parent))
    try:
        groups_json = work / "groups.json"
        out_dir = work / "ceiling"
        out_dir.mkdir()
        groups = _groups(table, out_dir)
        groups_json.write_text(json.dumps(groups))
        runs: dict[str, list[Measurement]] = {"ours": [], "deltalake": [], "ceiling": []}
        loads = [os.getloadavg()[0]]
        order = ["ours", "deltalake", "ceiling"]
        for i in range(max(1, args.repeat)):
            for case in order[i % 3 :] + order[: i % 3]:  # rotate who goes first
                if case == "ours":
                    m = measure(__name__, "ours", [_fresh(table, work / "t"), args.codec], preload=OURS_PRELOAD)
                elif case == "deltalake":
                    path = _fresh(table, work / "t")
                    m = measure(__name__, "deltalake_compact", [path, args.codec], preload=THEIRS_PRELOAD)
                else:
                    m = measure(__name__, "ceiling", [str(groups_json), args.codec], preload=CEILING_PRELOAD)
                runs[case].append(m)
                loads.append(os.getloadavg()[0])
            log.info(
                "round %d: ours %.2fs, deltalake %.2fs, ceiling %.2fs (load %.1f)",
                i + 1,
                runs["ours"][-1].seconds,
                runs["deltalake"][-1].seconds,
                runs["ceiling"][-1].seconds,
                loads[-1],
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    o, t, c = merge(runs["ours"]), merge(runs["deltalake"]), merge(runs["ceiling"])
    assert o.result["removed"] == info["files"] == t.result["removed"] == c.result["removed"], (o, t, c)
    layout = f"{info['partitions']} partitions" if partitioned else "unpartitioned"
    shape = f"wide table ({layout}, {info['files']} files, {mb:.0f} MB, {info['rows']:,} rows, {args.codec})"
    per_round = " ".join(
        f"{a:.2f}/{b:.2f}/{x:.2f}"
        for a, b, x in zip(
            (m.seconds for m in runs["ours"]),
            (m.seconds for m in runs["deltalake"]),
            (m.seconds for m in runs["ceiling"]),
        )
    )
    load_note = f"load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs"
    return [
        compare_row(
            f"compact {shape} -> {o.result['added']} files",
            o,
            t,
            time_target=0.7,
            mem_target=1.0,
            note=f"ours {mb / o.seconds:.0f} MB/s, deltalake {mb / t.seconds:.0f} MB/s, ceiling "
            f"{mb / c.seconds:.0f} MB/s; ours/ceiling {o.seconds / c.seconds:.2f}x time, "
            f"{o.peak_mb / c.peak_mb:.2f}x peak; rounds ours/deltalake/ceiling s: {per_round}; {load_note}",
        ),
        compare_row(
            f"ceiling: pyarrow read once + write once, same groups and codec, no Delta ({layout})",
            c,
            t,
            note=f"{mb / c.seconds:.0f} MB/s; informational (against deltalake)",
        ),
    ]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
