"""Compaction throughput, deltalog vs deltalake (issue #6, section 6).

The table (built in the same run with ``deltalake.write_deltalake``): 200 appends
of 20,000 rows, each append into one of 4 partitions (``part = i % 4``), columns
``id`` (long), ``value`` (string), ``amount`` (float): 200 files of ~360 KB, about
70 MB. ``--scale small`` uses 40 appends for development.

Cases, each in a fresh process on a fresh copy of the table, ours and theirs
interleaved so that load from other work on the machine hits both alike:

- local engine: ``deltalog.compaction.compact(path, run_hooks=False)`` (load, plan,
  rewrite, commit) against ``deltalake.DeltaTable(path).optimize.compact()`` with
  ``PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)``
  (load, rewrite, commit): the same work on both sides. Both turn the 200 files
  into 4. Target: throughput at least 1.0x deltalake's, i.e. time ratio
  ours/theirs at most 1.0. Peak RSS reported.
- with post-commit hooks (informational, once each): the defaults. Our commit lands
  on version 200, where ``delta.checkpointInterval`` (10) asks for a checkpoint;
  deltalake's rule ((version + 1) % 100) does not, so ours does more work here.
- naive pyarrow (informational): per partition ``read_table`` every file,
  ``concat_tables``, one ``write_table`` (no commit).
- Spark engine (informational, once): ``compact(path, engine="spark")`` with
  ``spark-submit --master local[2]``; the time includes JVM start-up. Its peak is
  the largest process of the job (the JVM), from ``RUSAGE_CHILDREN``.

CPU seconds (all threads) are reported next to wall time: on a shared 2-core
machine the wall time of a parallel job depends on what else runs, the CPU time
much less.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from common import CACHE, Measurement, compare_row, measure, merge, optimize_counts

log = logging.getLogger("benchmarks.compaction")

SCALES = {"full": 200, "small": 40}
ROWS_PER_APPEND = 20_000
PARTITIONS = 4
#: pandas: pyarrow imports it lazily on some calls of the snapshot reader (~0.5 s once per process);
#: the hook modules are imported by the first commit. Start-up cost, not compaction work, so it is
#: paid before the clock like the other imports.
OURS_PRELOAD = [
    "pyarrow",
    "pyarrow.parquet",
    "pyarrow.compute",
    "numpy",
    "pandas",
    "deltalog.compaction",
    "deltalog.table",
    "deltalog.commit.post_commit",
    "deltalog.log_maintenance",
    "deltalog.log_maintenance.log_cleanup",
    "deltalog.log_maintenance.manifest",
]
THEIRS_PRELOAD = ["pyarrow", "deltalake"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark engine case (about a minute)")


# --- measured in a fresh process (see common.measure) ----------------------------------


def _summary(result: Any) -> dict[str, Any]:
    """The fields both engines' rows report, from a CompactionResult."""
    d = result.to_dict()
    return {
        "removed": d["num_files_removed"],
        "added": d["num_files_added"],
        "bytes": d["bytes_removed"],
        "ok": result.ok,
    }


def ours_local(path: str, hooks: bool = False) -> dict[str, Any]:
    from deltalog.compaction import compact

    return _summary(compact(path, run_hooks=hooks))


def ours_spark(path: str) -> dict[str, Any]:
    import resource

    from deltalog.compaction import compact

    result = compact(path, engine="spark", spark_options={"master": "local[2]"})
    d = result.to_dict()
    return {
        **_summary(result),
        "children_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "engine_s": d["engine_seconds"],
    }


def deltalake_compact(path: str, hooks: bool = False) -> dict[str, Any]:
    import deltalake

    props = None if hooks else deltalake.PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
    metrics = deltalake.DeltaTable(path).optimize.compact(post_commithook_properties=props)
    removed = metrics["filesRemoved"]
    removed = json.loads(removed) if isinstance(removed, str) else removed
    return {
        **optimize_counts(metrics),
        "bytes": removed["totalSize"],
    }


def naive_pyarrow(path: str) -> dict[str, Any]:
    """Read every file of a partition whole, concatenate, write one file: the obvious implementation."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    removed = 0
    total = 0
    for part in sorted(p for p in os.listdir(path) if p.startswith("part=")):
        d = os.path.join(path, part)
        files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".parquet"))
        total += sum(os.path.getsize(f) for f in files)
        pq.write_table(pa.concat_tables([pq.read_table(f) for f in files]), os.path.join(d, "naive.out"))
        removed += len(files)
    return {"removed": removed, "added": PARTITIONS, "bytes": total}


# --- the table ---------------------------------------------------------------------------


def build_table(path: Path, appends: int) -> dict[str, Any]:
    """200 deltalake appends of 20,000 rows, one of 4 partitions each (written fresh in this run)."""
    import numpy as np
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    shutil.rmtree(path, ignore_errors=True)
    rng = np.random.default_rng(6)
    t0 = time.perf_counter()
    for i in range(appends):
        ids = np.arange(i * ROWS_PER_APPEND, (i + 1) * ROWS_PER_APPEND, dtype=np.int64)
        data = pa.table(
            {
                "id": ids,
                "value": pa.array([f"v{j}" for j in ids]),
                "amount": rng.random(ROWS_PER_APPEND, dtype=np.float32),
                "part": pa.array([f"p{i % PARTITIONS}"] * ROWS_PER_APPEND),
            }
        )
        write_deltalake(str(path), data, mode="append", partition_by=["part"])
    dt = DeltaTable(str(path))
    size = sum(pa.table(dt.get_add_actions(flatten=True)).column("size_bytes").to_pylist())
    info = {"appends": appends, "files": len(dt.file_uris()), "bytes": size}
    log.info("built %s: %d files, %.1f MB in %.1f s", path, info["files"], size / 1e6, time.perf_counter() - t0)
    return info


def _fresh(base: Path, name: str) -> str:
    dst = base.parent / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(base, dst)
    return str(dst)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    appends = SCALES[args.scale]
    work = CACHE / "compaction"
    base = work / "base"
    work.mkdir(parents=True, exist_ok=True)
    info = build_table(base, appends)
    mb = info["bytes"] / 1e6
    ours_runs: list[Measurement] = []
    theirs_runs: list[Measurement] = []
    naive_runs: list[Measurement] = []
    for i in range(max(1, args.repeat)):
        # Interleaved, each on a fresh copy, so that a busy moment on the machine hits both sides alike.
        theirs_runs.append(
            measure(__name__, "deltalake_compact", [_fresh(base, f"theirs-{i}")], preload=THEIRS_PRELOAD)
        )
        ours_runs.append(measure(__name__, "ours_local", [_fresh(base, f"ours-{i}")], preload=OURS_PRELOAD))
        naive_runs.append(measure(__name__, "naive_pyarrow", [_fresh(base, f"naive-{i}")], preload=THEIRS_PRELOAD))
        log.info(
            "round %d: ours %.3fs, deltalake %.3fs, naive %.3fs",
            i + 1,
            ours_runs[-1].seconds,
            theirs_runs[-1].seconds,
            naive_runs[-1].seconds,
        )
    ours, theirs, naive = merge(ours_runs), merge(theirs_runs), merge(naive_runs)
    for m in (ours, theirs, naive):
        assert m.result["removed"] == info["files"] and m.result["added"] == PARTITIONS, m.result
    assert ours.result["ok"] and ours.result["bytes"] == theirs.result["bytes"] == info["bytes"]
    shape = f"{info['files']} files, {mb:.0f} MB, {PARTITIONS} partitions -> {PARTITIONS} files"
    rows = [
        compare_row(
            f"local engine: compact {shape}",
            ours,
            theirs,
            time_target=1.0,
            note=f"throughput ours {mb / ours.seconds:.0f} MB/s vs deltalake {mb / theirs.seconds:.0f} MB/s "
            f"({theirs.seconds / ours.seconds:.2f}x); runs ours {_fmt_runs(ours)}, deltalake {_fmt_runs(theirs)}",
        ),
        compare_row(
            "naive pyarrow read_table+concat+write_table (no commit), informational",
            naive,
            theirs,
            note=f"{mb / naive.seconds:.0f} MB/s; runs {_fmt_runs(naive)}",
        ),
    ]
    hooked = measure(__name__, "ours_local", [_fresh(base, "ours-hooks"), True], preload=OURS_PRELOAD)
    hooked_theirs = measure(__name__, "deltalake_compact", [_fresh(base, "theirs-hooks"), True], preload=THEIRS_PRELOAD)
    rows.append(
        compare_row(
            "local engine with default post-commit hooks (ours checkpoints at this version), informational",
            hooked,
            hooked_theirs,
            note="one run each",
        )
    )
    if not getattr(args, "no_spark", False):
        spark = measure(__name__, "ours_spark", [_fresh(base, "spark")], preload=OURS_PRELOAD, timeout=900)
        assert spark.result["ok"] and spark.result["removed"] == info["files"], spark.result
        spark.peak_mb = max(spark.peak_mb, spark.result["children_peak_mb"])
        rows.append(
            compare_row(
                f"Spark engine (spark-submit --master local[2]): compact {shape}",
                spark,
                theirs,
                note=f"{mb / spark.seconds:.1f} MB/s including JVM start-up (job {spark.result['engine_s']:.1f} s); "
                "peak = largest process (the JVM)",
            )
        )
    if args.spark:
        _delta_spark_column(rows, base, info)
    for i in range(max(1, args.repeat)):
        for name in (f"ours-{i}", f"theirs-{i}", f"naive-{i}"):
            shutil.rmtree(work / name, ignore_errors=True)
    for name in ("spark", "ours-hooks", "theirs-hooks", "delta-spark"):
        shutil.rmtree(work / name, ignore_errors=True)
    return rows


def _delta_spark_column(rows: list[dict[str, Any]], base: Path, info: dict[str, Any]) -> None:
    """Delta Spark's ``OPTIMIZE`` (local[2], session start apart) on a fresh copy, beside both of our engines."""
    import spark_side

    log.info("Delta Spark OPTIMIZE")
    mb = info["bytes"] / 1e6
    got = spark_side.add_column(rows[0], "optimize", [_fresh(base, "delta-spark")])
    if got is None:
        return
    assert got["removed"] == info["files"], got
    op_s, start_s = rows[0]["spark_s"], rows[0]["spark_start_s"]
    rows[0]["note"] += f"; Delta Spark OPTIMIZE {mb / op_s:.1f} MB/s without its session start"
    engine = next((r for r in rows if r["case"].startswith("Spark engine")), None)
    if engine is not None:
        engine.update(spark_s=op_s, spark_start_s=start_s, spark_peak_mb=rows[0]["spark_peak_mb"])
        engine["spark_time_ratio"] = engine["ours_s"] / (op_s + start_s)
        engine["spark_mem_ratio"] = engine["ours_peak_mb"] / rows[0]["spark_peak_mb"]
        engine["note"] += (
            f"; vs Delta Spark OPTIMIZE + its session start {op_s + start_s:.1f} s ({mb / (op_s + start_s):.1f} MB/s): "
            "time ours/Spark compares both end to end, JVM start included"
        )


def _fmt_runs(m: Measurement) -> str:
    return "/".join(f"{s:.2f}" for s in m.runs)
