"""Delta Spark (the reference implementation) as a benchmark column (issues 19 and 20).

Each function runs in a fresh process (``common.measure``) and starts its own
``local[2]`` Delta Spark session, so the JVM's peak belongs to one operation. The
session start (JVM launch, jars on the classpath, Delta's SQL extension) is timed
apart from the operation and reported on its own: ``{"start_s", "op_s", "jvm_peak_mb", ...}``.
The jars come from the version-keyed Ivy cache of ``deltalog.engines.spark_packages``
(``scripts/spark_jars.py`` fills it), the same Delta Spark 4.4.0 / Spark 4.2.0 the
oracle tests use.

The driver gets ``DELTALOG_BENCH_SPARK_DRIVER_MEMORY`` (default ``8g``): the heap is
fixed before the JVM starts, and a failure to fit is reported, not retried.
"""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import unquote

MASTER = "local[2]"
DRIVER_MEMORY = os.environ.get("DELTALOG_BENCH_SPARK_DRIVER_MEMORY", "8g")
PRELOAD = ["pyspark", "pyspark.sql"]


def _session() -> tuple[Any, float]:
    from pyspark.sql import SparkSession

    from deltalog.engines.spark_packages import spark_conf

    t0 = time.perf_counter()
    builder = SparkSession.builder.master(MASTER).appName("deltalog-bench-delta-spark")
    conf = {
        **spark_conf(delta=True, s3a=False),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": DRIVER_MEMORY,
        "spark.databricks.delta.retentionDurationCheck.enabled": "false",
    }
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql("SELECT 1").collect()  # the SQL engine warmed up: part of the start, not of the operation
    return spark, time.perf_counter() - t0


def descendants_peak_mb() -> float:
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


def _run(op: Any) -> dict[str, Any]:
    """Start a session, time ``op(spark)``, report start, operation, JVM peak and op's result."""
    spark, start_s = _session()
    try:
        t0 = time.perf_counter()
        result = op(spark)
        op_s = time.perf_counter() - t0
        return {"start_s": start_s, "op_s": op_s, "jvm_peak_mb": descendants_peak_mb(), "result": result}
    finally:
        spark.stop()


def _delta_log(spark: Any, path: str) -> Any:
    return spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)


# --- the operations ----------------------------------------------------------------------


def snapshot_load(path: str) -> dict[str, Any]:
    """Load the latest snapshot and reconstruct its state (number of live files, as ``DESCRIBE DETAIL``)."""
    return _run(lambda spark: int(spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]["numFiles"]))


def checkpoint(path: str) -> dict[str, Any]:
    """``DeltaLog.checkpoint()`` of the latest version (the state reconstructed and written)."""

    def op(spark: Any) -> int:
        dlog = _delta_log(spark, path)
        dlog.checkpoint()
        return int(dlog.unsafeVolatileSnapshot().version())

    return _run(op)


def vacuum_dry_run(
    path: str, inventory: str | None = None, retain_hours: float | None = None, count_only: bool = False
) -> dict[str, Any]:
    """``VACUUM ... [USING INVENTORY (SELECT * FROM parquet.`inv`)] [RETAIN n HOURS] DRY RUN``: files it would delete.

    ``count_only``: count the rows its dry run returns instead of bringing them into Python (an inventory's
    files do not exist here, so no row is a directory; tens of millions of rows would not fit this process).
    """

    def op(spark: Any) -> int:
        using = f" USING INVENTORY (SELECT * FROM parquet.`{inventory}`)" if inventory else ""
        retain = "" if retain_hours is None else f" RETAIN {retain_hours:g} HOURS"
        frame = spark.sql(f"VACUUM delta.`{path}`{using}{retain} DRY RUN")
        if count_only:
            return int(frame.count())
        rows = frame.collect()
        # Its dry run lists directories too: count files only (an inventory's files need not exist here).
        return sum(1 for r in rows if not os.path.isdir(unquote(r[0].removeprefix("file:"))))

    return _run(op)


def log_cleanup(path: str) -> dict[str, Any]:
    """Delta Spark's own expired-log cleanup (``MetadataCleanup.cleanUpExpiredLogs``) on the latest snapshot."""

    def op(spark: Any) -> int:
        log_dir = os.path.join(path, "_delta_log")
        before = len(os.listdir(log_dir))
        dlog = _delta_log(spark, path)
        snap = dlog.unsafeVolatileSnapshot()  # loaded by forTable; its state is not needed here
        defaults = [getattr(dlog, f"cleanUpExpiredLogs$default${i}")() for i in (2, 3, 4)]
        dlog.cleanUpExpiredLogs(snap, *defaults)
        return before - len(os.listdir(log_dir))

    return _run(op)


def optimize(path: str) -> dict[str, Any]:
    """``OPTIMIZE`` (bin-packing compaction): files removed and added."""

    def op(spark: Any) -> dict[str, int]:
        metrics = spark.sql(f"OPTIMIZE delta.`{path}`").collect()[0]["metrics"]
        return {"removed": int(metrics["numFilesRemoved"]), "added": int(metrics["numFilesAdded"])}

    return _run(op)


# --- the column in a result row (runs in the benchmark's own process) ----------------------


def measure_op(fn: str, args: list[Any], timeout: float = 1800) -> tuple[Any, str | None]:
    """Measure ``fn`` in a fresh process: (Measurement with the operation's seconds and the JVM's peak, error)."""
    import subprocess

    from common import Measurement, measure

    try:
        m = measure("spark_side", fn, args, preload=PRELOAD, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return None, f"timed out after {exc.timeout:.0f} s (killed)"
    except RuntimeError as exc:
        lines = str(exc).strip().splitlines()
        return None, (lines[-1] if lines else repr(exc))[:300]
    r = m.result
    return Measurement(
        seconds=r["op_s"],
        peak_mb=max(m.peak_mb, r["jvm_peak_mb"]),
        base_mb=m.base_mb,
        runs=[r["op_s"]],
        result={"result": r["result"], "start_s": r["start_s"]},
    ), None


def add_column(row: dict[str, Any], fn: str, args: list[Any], timeout: float = 1800) -> Any:
    """Measure Delta Spark's ``fn`` and put it in ``row`` beside ours; returns its result (None if it failed)."""
    m, error = measure_op(fn, args, timeout)
    note = row.get("note") or ""
    if m is None:
        row["note"] = (note + "; " if note else "") + f"Delta Spark FAILED: {error}"
        return None
    row.update(spark_s=m.seconds, spark_start_s=m.result["start_s"], spark_peak_mb=m.peak_mb)
    if row.get("ours_s"):
        row["spark_time_ratio"] = row["ours_s"] / m.seconds
    if row.get("ours_peak_mb"):
        row["spark_mem_ratio"] = row["ours_peak_mb"] / m.peak_mb
    row["note"] = (note + "; " if note else "") + (
        f"Delta Spark local[2]: {m.seconds:.2f} s after a {m.result['start_s']:.1f} s session start, "
        f"JVM peak {m.peak_mb:.0f} MiB, result {m.result['result']}"
    )
    return m.result["result"]
