"""Ten million files (issue 19 §2): deltalog, deltalake and Delta Spark on the same tables, same run.

Tables (``tenmillion_table.py``, cached under ``~/.cache/deltalog/bench-10m-v1-*``):

- ``classic``: 10,000,000 live files, 1,000 JSON commits of 10,000 adds, a classic
  multi-part checkpoint (10 parts) at the last version;
- ``v2``: the same files, protocol 3/7 with ``v2Checkpoint``, a V2 checkpoint with 10
  Parquet sidecars;
- ``tail``: the ``classic`` table plus 200,000 single-file JSON commits after its
  checkpoint (every fifth removes a file of the checkpoint): 10,160,000 live files.

Operations, each in a fresh process, the three engines one after the other per round
(``--repeat`` rounds, the order rotating), each on its own copy of the log where the
operation writes (log files hard-linked, ``_last_checkpoint`` copied):

- snapshot load: ``DeltaTable(path).snapshot().files`` / deltalake
  ``DeltaTable(path).get_add_actions()`` / Delta Spark ``DESCRIBE DETAIL`` (state
  reconstruction, ``numFiles``);
- checkpoint write: one more commit is appended first where the table ends on its
  checkpoint (so every engine has a new version to checkpoint): ``create_checkpoint``
  / deltalake ``create_checkpoint()`` / ``DeltaLog.checkpoint()``;
- health (ours; neither peer has one: snapshot + file-size and partition statistics);
- vacuum dry run with the inventory (10.1 million rows: the live files plus 100,000
  orphans): ``vacuum(dry_run=True, inventory=...)`` / Delta Spark ``VACUUM ... USING
  INVENTORY ... DRY RUN``; deltalake has no inventory input: its ``vacuum(dry_run=True)``
  (``full=False``) names the expired tombstones, i.e. it measures its state load + planning;
- log cleanup: ``cleanup_log`` / deltalake ``cleanup_metadata()`` / Delta Spark
  ``cleanUpExpiredLogs`` (versions before the checkpoint are expired: dated 2023).

With ``--spark``, Delta Spark runs ``local[2]`` with an 8 GiB driver (``DELTALOG_BENCH_SPARK_DRIVER_MEMORY``);
its session start is measured and shown apart. Peak memory is the measuring process's
``VmHWM`` (for Spark: the JVM's).

``--files N`` builds smaller tables of the same shape (``--files 100000`` for development).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from common import Measurement, measure, merge, ratio

log = logging.getLogger("benchmarks.tenmillion")

OURS_PRELOAD = [
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.parquet",
    "pyarrow.json",
    "pandas",
    "deltalog.table",
    "deltalog.log_maintenance",
    "deltalog.vacuuming",
    "deltalog.log_maintenance.log_cleanup",
    "deltalog.maintenance.health",
]
THEIRS_PRELOAD = ["pyarrow", "pandas", "deltalake"]
OPERATIONS = ("snapshot", "checkpoint", "health", "vacuum", "cleanup")
TABLES = ("classic", "v2", "tail")
#: Seconds one Delta Spark operation may take (session start included) before it is reported as failed.
SPARK_TIMEOUT = float(os.environ.get("DELTALOG_BENCH_SPARK_TIMEOUT", 1800))


# --- measured in a fresh process (see common.measure) ----------------------------------


def ours_snapshot(path: str) -> dict[str, Any]:
    from deltalog.table import DeltaTable

    files = DeltaTable(path).snapshot().files
    return {"files": files.num_rows, "arrow_bytes": files.nbytes}


def deltalake_snapshot(path: str) -> dict[str, Any]:
    import deltalake

    return {"files": deltalake.DeltaTable(path).get_add_actions(flatten=False).num_rows}


def ours_checkpoint(path: str) -> dict[str, Any]:
    from deltalog.log_maintenance import create_checkpoint

    r = create_checkpoint(path)
    return {"version": r.version, "kind": r.kind}


def deltalake_checkpoint(path: str) -> dict[str, Any]:
    import deltalake

    dt = deltalake.DeltaTable(path)
    dt.create_checkpoint()
    return {"version": dt.version()}


def ours_health(path: str) -> dict[str, Any]:
    from deltalog.table import DeltaTable

    h = DeltaTable(path).health()
    return {"files": h.num_files, "partitions": h.num_partitions}


def ours_vacuum(path: str, inventory: str) -> dict[str, Any]:
    from deltalog.vacuuming import vacuum

    return {"files": vacuum(path, dry_run=True, inventory=inventory).plan.files.num_rows}


def ours_spark_vacuum(path: str, inventory: str) -> dict[str, Any]:
    """Our Spark engine (``spark-submit``, ``local[2]``): the job plans, this process keeps the plan's counts.

    The job's JVM is this process's child: its peak is the largest child's (``RUSAGE_CHILDREN``).
    """
    import resource

    from deltalog.vacuuming import vacuum

    conf = {"spark.driver.memory": os.environ.get("DELTALOG_BENCH_SPARK_DRIVER_MEMORY", "8g")}
    result = vacuum(
        path, dry_run=True, inventory=inventory, engine="spark", spark_options={"master": "local[2]", "conf": conf}
    )
    return {
        "files": result.plan.num_files,
        "spilled": bool(result.plan.files_location),
        "jvm_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def deltalake_vacuum(path: str, inventory: str) -> dict[str, Any]:
    import deltalake

    return {"files": len(deltalake.DeltaTable(path).vacuum(dry_run=True))}


def ours_cleanup(path: str) -> dict[str, Any]:
    from deltalog.log_maintenance.log_cleanup import cleanup_log

    before = len(os.listdir(os.path.join(path, "_delta_log")))
    cleanup_log(path)
    return {"deleted": before - len(os.listdir(os.path.join(path, "_delta_log")))}


def deltalake_cleanup(path: str) -> dict[str, Any]:
    import deltalake

    before = len(os.listdir(os.path.join(path, "_delta_log")))
    deltalake.DeltaTable(path).cleanup_metadata()
    return {"deleted": before - len(os.listdir(os.path.join(path, "_delta_log")))}


# --- copies of the cached tables ---------------------------------------------------------


def fresh_copy(table: Path, work: Path, extra_commit: bool = False) -> str:
    """The table's log, hard-linked (``_last_checkpoint`` copied: writers replace it); no data files exist.

    ``extra_commit`` appends one single-file commit, so that a checkpoint writer has a
    version without a checkpoint to write.
    """
    dest = Path(tempfile.mkdtemp(prefix="t-", dir=work))
    src_log, dst_log = table / "_delta_log", dest / "_delta_log"
    shutil.copytree(src_log, dst_log, copy_function=os.link, ignore=shutil.ignore_patterns("_last_checkpoint"))
    shutil.copy2(src_log / "_last_checkpoint", dst_log / "_last_checkpoint")
    if extra_commit:
        import tenmillion_table as gen

        version = max(int(n[:20]) for n in os.listdir(dst_log) if n.endswith(".json") and n[:20].isdigit()) + 1
        add = {
            "path": f"part=p000/extra-{version}.parquet",
            "partitionValues": {"part": "p000"},
            "size": 100,
            "modificationTime": gen.ts_of(version),
            "dataChange": True,
        }
        (dst_log / f"{version:020d}.json").write_text(
            json.dumps({"commitInfo": {"timestamp": gen.ts_of(version), "operation": "WRITE"}})
            + "\n"
            + json.dumps({"add": add})
            + "\n"
        )
    return str(dest)


# --- the benchmark ---------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--files", type=int, default=10_000_000, help="live files per table (default 10 million)")
    parser.add_argument("--tail", type=int, default=200_000, help="JSON commits after the checkpoint (tail table)")
    parser.add_argument("--table", choices=TABLES, action="append", help="only these tables (repeatable)")
    parser.add_argument("--op", choices=OPERATIONS, action="append", help="only these operations (repeatable)")
    parser.add_argument("--no-deltalake", action="store_true", help="leave out the deltalake column")
    parser.add_argument("--no-ours", action="store_true", help="leave out our local engine")
    parser.add_argument(
        "--ours-spark", action="store_true", help="vacuum: add our Spark engine (spark-submit, local[2]) as a column"
    )
    parser.add_argument(
        "--inventory-objects",
        type=int,
        default=0,
        help="vacuum: an inventory of this many objects (the table's files plus orphans) instead of 10.1 million",
    )


def _tables(args: argparse.Namespace) -> dict[str, tuple[Path, dict[str, Any]]]:
    import tenmillion_table as gen

    small = args.scale == "small"
    files = 100_000 if small and args.files == 10_000_000 else args.files
    tail = 2_000 if small and args.tail == 200_000 else args.tail
    adds = min(10_000, files // 10)
    part_rows = max(adds, files // 10)
    out = {}
    for name in args.table or TABLES:
        kind = "v2" if name == "v2" else "classic"
        table, info = gen.build(
            kind, files, tail=tail if name == "tail" else 0, adds_per_commit=adds, part_rows=part_rows
        )
        if args.inventory_objects:
            big = gen.big_inventory(table, info, args.inventory_objects)
            info = dict(info, inventory=str(big), inventory_rows=args.inventory_objects)
        out[name] = (table, info)
    return out


def _spark(op: str, path: str, inventory: str) -> Measurement:
    import spark_side

    fn, args = {
        "snapshot": ("snapshot_load", [path]),
        "checkpoint": ("checkpoint", [path]),
        "vacuum": ("vacuum_dry_run", [path, inventory, None, True]),
        "cleanup": ("log_cleanup", [path]),
    }[op]
    m, error = spark_side.measure_op(fn, args, timeout=SPARK_TIMEOUT)
    if m is None:
        raise RuntimeError(error)
    return m


def _one(engine: str, op: str, table: Path, info: dict[str, Any], work: Path) -> Measurement | None:
    writes = op in ("checkpoint", "cleanup")
    path = fresh_copy(table, work, extra_commit=op == "checkpoint" and info["tail"] == 0) if writes else str(table)
    inventory = info["inventory"]
    try:
        if engine != "ours" and op == "health":
            return None  # neither peer has a health report
        if engine == "spark":
            return _spark(op, path, inventory)
        if engine == "ours_spark":
            if op != "vacuum":
                return None
            m = measure(__name__, "ours_spark_vacuum", [path, inventory], preload=OURS_PRELOAD, timeout=7200)
            return m
        fn = {"ours": "ours_", "deltalake": "deltalake_"}[engine] + op
        args = [path, inventory] if op == "vacuum" else [path]
        preload = OURS_PRELOAD if engine == "ours" else THEIRS_PRELOAD
        return measure(__name__, fn, args, preload=preload, timeout=7200)
    finally:
        if writes:
            shutil.rmtree(path, ignore_errors=True)


def _describe(name: str, info: dict[str, Any]) -> str:
    files = f"{info['live_files']:,} live files"
    if name == "classic":
        return f"{files}, classic multi-part checkpoint"
    if name == "v2":
        return f"{files}, V2 checkpoint + sidecars"
    return f"{files}, classic checkpoint + {info['tail']:,} JSON commits"


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    tables = _tables(args)
    engines = (
        ([] if args.no_ours else ["ours"])
        + (["ours_spark"] if args.ours_spark else [])
        + ([] if args.no_deltalake else ["deltalake"])
        + (["spark"] if args.spark else [])
    )
    ops = args.op or list(OPERATIONS)
    rows = []
    for name, (table, info) in tables.items():
        work = Path(tempfile.mkdtemp(prefix="work-", dir=table.parent))
        try:
            for op in ops:
                runs: dict[str, list[Measurement]] = {e: [] for e in engines}
                errors: dict[str, str] = {}
                loads = [os.getloadavg()[0]]
                for i in range(max(1, args.repeat)):
                    order = engines[i % len(engines) :] + engines[: i % len(engines)]
                    for engine in order:
                        if engine in errors:
                            continue
                        try:
                            m = _one(engine, op, table, info, work)
                        except (RuntimeError, subprocess.TimeoutExpired) as exc:  # a peer failing is a result
                            text = str(exc).strip()
                            if isinstance(exc, subprocess.TimeoutExpired):
                                text = f"timed out after {exc.timeout:.0f} s (killed)"
                            errors[engine] = text.splitlines()[-1][:300] if text else repr(exc)
                            log.warning("%s %s on %s failed: %s", engine, op, name, errors[engine])
                            continue
                        if m is not None:
                            runs[engine].append(m)
                            log.info(
                                "%s %s on %s: %.2f s, %.0f MiB, %s", engine, op, name, m.seconds, m.peak_mb, m.result
                            )
                        loads.append(os.getloadavg()[0])
                rows.append(_row(name, op, info, runs, errors, loads))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return rows


def _row(
    name: str,
    op: str,
    info: dict[str, Any],
    runs: dict[str, list[Measurement]],
    errors: dict[str, str],
    loads: list[float],
) -> dict[str, Any]:
    got = {e: merge(ms) for e, ms in runs.items() if ms}
    ours, theirs, spark = got.get("ours"), got.get("deltalake"), got.get("spark")
    on_spark = got.get("ours_spark")
    row: dict[str, Any] = {"case": f"{op}: {_describe(name, info)}"}
    if ours:
        row.update(
            ours_s=ours.seconds, ours_cpu_s=ours.cpu_seconds, ours_peak_mb=ours.peak_mb, ours_base_mb=ours.base_mb
        )
    if theirs:
        row.update(deltalake_s=theirs.seconds, deltalake_cpu_s=theirs.cpu_seconds, deltalake_peak_mb=theirs.peak_mb)
        if ours:
            row.update(time_ratio=ratio(ours.seconds, theirs.seconds), mem_ratio=ratio(ours.peak_mb, theirs.peak_mb))
    if on_spark:
        row.update(
            ours_spark_s=on_spark.seconds,
            ours_spark_cpu_s=on_spark.cpu_seconds,
            ours_spark_driver_mb=on_spark.peak_mb,
            ours_spark_jvm_mb=on_spark.result.get("jvm_peak_mb"),
        )
    if spark:
        row.update(spark_s=spark.seconds, spark_start_s=spark.result["start_s"], spark_peak_mb=spark.peak_mb)
        if ours:
            row.update(
                spark_time_ratio=ratio(ours.seconds, spark.seconds), spark_mem_ratio=ratio(ours.peak_mb, spark.peak_mb)
            )
    notes = []
    results = {e: (m.result.get("result", m.result) if e == "spark" else m.result) for e, m in got.items()}
    if op == "vacuum":
        notes.append(f"inventory of {info['inventory_rows']:,} objects")
    notes.append("results " + json.dumps(results, separators=(",", ":")))
    if ours and op == "snapshot":
        per_file = ours.result["arrow_bytes"] / max(1, ours.result["files"])
        row["state_bytes_per_file"] = per_file
        notes.append(
            f"live file list in Arrow {ours.result['arrow_bytes'] / 2**20:,.0f} MiB ({per_file:.0f} B/file); "
            f"ours peak {ours.peak_mb / max(1.0, ours.result['arrow_bytes'] / 2**20):.2f}x of it"
        )
    for e, msg in errors.items():
        notes.append(f"{e} FAILED: {msg}")
    if op == "vacuum":
        notes.append(
            "deltalake: no inventory input; its dry run (full=False) names the expired tombstones, "
            "there being no data files to list"
        )
    notes.append(f"load average {min(loads):.1f}-{max(loads):.1f}")
    row["note"] = "; ".join(notes)
    row["target"] = "ours peak ≤ 8 GiB"
    row["met"] = bool(ours and ours.peak_mb <= 8 * 1024)
    return row
