"""Fetch and cache the Spark jars the tests and jobs use (Delta Spark, s3a, Azure, GCS), by Maven coordinates.

Run by ``scripts/bootstrap.sh``; safe to re-run (a marker file per Ivy directory
skips work already done). Spark's own Ivy resolves ``spark.jars.packages`` from
Maven Central alone (``spark.jars.ivySettings``) into ``~/.cache/deltalog/ivy-<versions>``
(see ``deltalog.engines.spark_packages``), so every clone on the machine shares one
download. The package sets resolve side by side (Ivy locks each artifact in the cache),
each in its own process with its output in ``resolve-<set>.log`` beside the cache; this
prints one line per set. A file lock keeps two bootstraps from resolving into the same
cache at once. Exit 0 when the jars are cached, 1 when they could not be fetched.
"""

from __future__ import annotations

import fcntl
import logging
import subprocess
import sys
import time
from pathlib import Path

from deltalog.engines.spark_packages import (
    DELTA_SQL_CONF,
    GCS_CONNECTOR_PACKAGE,
    HADOOP_AZURE_PACKAGE,
    azure_jar_list_file,
    gcs_jar_list_file,
    ivy_dir,
    ivy_settings_file,
    jar_list_file,
    packages,
    resolve_conf,
)

#: The package sets resolved, by the flag of the child process that resolves each (its own classpath: a
#: Delta session does not need the AWS SDK): Maven coordinates, a class that proves the resolution is
#: complete, where the jar list goes, and whether the Delta SQL extension is loaded.
SETS: dict[str, tuple[str, str, Path, bool]] = {
    "--delta": (
        packages(delta=True, s3a=False),
        "io.delta.sql.DeltaSparkSessionExtension",
        jar_list_file(delta=True, s3a=False),
        True,
    ),
    "--s3a": (
        packages(delta=False, s3a=True),
        "org.apache.hadoop.fs.s3a.S3AFileSystem",
        jar_list_file(delta=False, s3a=True),
        False,
    ),
    "--azure": (
        HADOOP_AZURE_PACKAGE,
        "org.apache.hadoop.fs.azurebfs.AzureBlobFileSystem",
        azure_jar_list_file(),
        False,
    ),
    "--gcs": (
        GCS_CONNECTOR_PACKAGE,
        "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
        gcs_jar_list_file(),
        False,
    ),
}

log = logging.getLogger("spark_jars")

MARKER = ".deltalog-resolved"


def resolved_marker_text() -> str:
    """The marker's text: Delta and s3a's coordinates, as every clone sharing the cache writes it (the GCS
    connector's list file, named by its version, says on its own that it is resolved)."""
    return packages() + "\n"


def is_cached() -> bool:
    marker = ivy_dir() / MARKER
    lists = [listed for _, _, listed, _ in SETS.values()]
    return marker.exists() and marker.read_text() == resolved_marker_text() and all(p.exists() for p in lists)


def fetch(flag: str) -> float:
    """Resolve one package set in a throw-away local session and record its jars; returns the seconds."""
    from pyspark.sql import SparkSession

    coordinates, probe, listed, delta = SETS[flag]
    started = time.perf_counter()
    conf = resolve_conf(coordinates)
    if delta:
        conf.update(DELTA_SQL_CONF)
    builder = SparkSession.builder.master("local[1]").appName("deltalog-fetch-jars")
    for k, v in {**conf, "spark.ui.enabled": "false"}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    try:
        loader = spark.sparkContext._jvm.java.lang.Thread.currentThread().getContextClassLoader()
        loader.loadClass(probe)
        jars = [j.removeprefix("file://").removeprefix("file:") for j in spark.conf.get("spark.jars").split(",") if j]
    finally:
        spark.stop()
    listed.write_text("\n".join(jars) + "\n")
    return time.perf_counter() - started


def fetch_one(flag: str) -> int:
    """Child process: resolve one package set (``--delta``, ``--s3a``, ``--azure`` or ``--gcs``)."""
    try:
        seconds = fetch(flag)
        log.info("%s resolved in %.0f s", SETS[flag][0], seconds)
    except Exception as exc:  # noqa: BLE001 - report any JVM/Ivy failure as one line
        log.error("could not fetch the Spark jars (%s): %s", flag, (str(exc).splitlines() or [repr(exc)])[0])
        return 1
    return 0


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="[spark_jars] %(message)s")
    if len(sys.argv) > 1:
        return fetch_one(sys.argv[1])
    target = ivy_dir()
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ivy_settings_file()  # Maven Central alone, for every resolution (here and in the jobs)
        if is_cached():
            log.info("jars already cached in %s", target)
            return 0
        log.info("resolving %d package sets side by side into %s (first time: a few minutes)", len(SETS), target)
        started = time.perf_counter()
        # One process per set (a Python process keeps its first JVM, whose classpath is fixed), all at once:
        # most of the time goes to fetching POMs one by one. Ivy's output goes to a log per set.
        running = {}
        for flag in SETS:
            log_path = target / f"resolve{flag.replace('--', '-')}.log"
            with open(log_path, "wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, __file__, flag], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
            running[flag] = (proc, log_path, time.perf_counter())
        failed = []
        for flag, (proc, log_path, began) in running.items():
            rc = proc.wait()
            coordinates, _, listed, _ = SETS[flag]
            if rc == 0:
                count = len(listed.read_text().split())
                log.info("%s: %d jars (%.0f s)", coordinates, count, time.perf_counter() - began)
            else:
                failed.append(flag)
                log.error(
                    "%s could not be resolved (exit %d); the end of %s:\n%s", coordinates, rc, log_path, _tail(log_path)
                )
        if failed:
            return 1
        seconds = time.perf_counter() - started
        (target / MARKER).write_text(resolved_marker_text())
        log.info("jars cached in %s (%.0f s)", target, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
