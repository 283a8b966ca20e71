"""Fetch and cache the Spark jars the tests and jobs use (Delta Spark, s3a), by Maven coordinates.

Run by ``scripts/bootstrap.sh``; safe to re-run (a marker file per Ivy directory
skips work already done). Spark's own Ivy resolves ``spark.jars.packages`` from
Maven Central into ``~/.cache/deltalog/ivy-<versions>`` (see
``deltalog.engines.spark_packages``), so every clone on the machine shares one
download. A file lock keeps two bootstraps from resolving into the same cache at
once. Exit 0 when the jars are cached, 1 when they could not be fetched.
"""

from __future__ import annotations

import fcntl
import logging
import sys
import time

from deltalog.engines.spark_packages import ivy_dir, packages, spark_conf

log = logging.getLogger("spark_jars")

MARKER = ".deltalog-resolved"


def resolved_marker_text() -> str:
    return packages() + "\n"


def is_cached() -> bool:
    marker = ivy_dir() / MARKER
    return marker.exists() and marker.read_text() == resolved_marker_text()


def fetch() -> float:
    """Start (and stop) one local Spark session with the packages; returns the seconds it took."""
    from pyspark.sql import SparkSession

    started = time.perf_counter()
    builder = SparkSession.builder.master("local[1]").appName("deltalog-fetch-jars")
    for k, v in {**spark_conf(), "spark.ui.enabled": "false"}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    try:
        # Touch a class from each package so a partial resolution fails here, not in a test.
        loader = spark.sparkContext._jvm.java.lang.Thread.currentThread().getContextClassLoader()
        for name in ("io.delta.sql.DeltaSparkSessionExtension", "org.apache.hadoop.fs.s3a.S3AFileSystem"):
            loader.loadClass(name)
    finally:
        spark.stop()
    return time.perf_counter() - started


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="[spark_jars] %(message)s")
    target = ivy_dir()
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_cached():
            log.info("jars already cached in %s", target)
            return 0
        log.info("resolving %s into %s (first time: a few minutes)", packages(), target)
        try:
            seconds = fetch()
        except Exception as exc:  # noqa: BLE001 - report any JVM/Ivy failure as one line
            log.error("could not fetch the Spark jars: %s", str(exc).splitlines()[0] if str(exc) else exc)
            return 1
        (target / MARKER).write_text(resolved_marker_text())
        log.info("jars cached in %s (%.0f s)", target, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
