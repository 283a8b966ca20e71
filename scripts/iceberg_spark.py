"""Set up Spark with the Iceberg runtime, the Iceberg reader of the UniForm tests, cached by version.

Iceberg publishes its Spark runtime per Spark line; the newest, ``iceberg-spark-runtime-4.1_2.13``
1.12.0, is compiled against Spark 4.1 and fails on the Spark 4.2 of the lock (Spark 4.2 turned
``CatalogManager`` and the connector ``View`` into interfaces: ``IncompatibleClassChangeError``
on the first read), and no 4.2 runtime is published. So the Iceberg reads run in their own
Spark 4.1 (PyPI ``pyspark==4.1.4``) with the runtime from Maven coordinates, in a venv and an
Ivy directory under ``~/.cache/deltalog/iceberg-spark<pyspark>-iceberg<iceberg>`` shared by
every clone: ``tests/iceberg_spark_reader.py`` runs there, one JVM per test session.

Run by ``scripts/bootstrap.sh`` (a no-op once cached) and by the tests' fixture when the
cache is missing. Exit 0 when ready, 1 when it could not be set up.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

PYSPARK_VERSION = "4.1.4"
ICEBERG_VERSION = "1.12.0"
#: The Spark line and Scala version of the runtime, matching PYSPARK_VERSION.
RUNTIME_PACKAGE = f"org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:{ICEBERG_VERSION}"

log = logging.getLogger("iceberg_spark")

_RESOLVE = """
import sys
from pyspark.sql import SparkSession
builder = SparkSession.builder.master("local[1]").appName("deltalog-iceberg-jars")
conf = {"spark.jars.packages": sys.argv[1], "spark.jars.ivy": sys.argv[2], "spark.jars.ivySettings": sys.argv[4]}
for k, v in {**conf, "spark.ui.enabled": "false"}.items():
    builder = builder.config(k, v)
spark = builder.getOrCreate()
spark.sparkContext._jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(
    "org.apache.iceberg.spark.SparkCatalog"
)
jars = [j.removeprefix("file://").removeprefix("file:") for j in spark.conf.get("spark.jars").split(",") if j]
spark.stop()
open(sys.argv[3], "w").write("\\n".join(jars) + "\\n")
"""


def home() -> Path:
    root = Path(os.environ.get("DELTALOG_CACHE") or Path.home() / ".cache" / "deltalog")
    return root / f"iceberg-spark{PYSPARK_VERSION}-iceberg{ICEBERG_VERSION}"


def python() -> Path:
    """The interpreter of the Iceberg reader's venv."""
    return home() / "venv" / "bin" / "python"


def jars_file() -> Path:
    return home() / "jars.txt"


def ready() -> bool:
    listed = jars_file()
    return (
        python().exists()
        and listed.exists()
        and all(os.path.exists(j) for j in listed.read_text().split())
        and bool(listed.read_text().split())
    )


def _venv() -> None:
    venv = home() / "venv"
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if os.path.exists(uv):
        subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
        subprocess.run(
            [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), f"pyspark=={PYSPARK_VERSION}"],
            check=True,
        )
    else:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"pyspark=={PYSPARK_VERSION}"], check=True
        )


def _central_only() -> str:
    """The Ivy settings that resolve from Maven Central alone (no warnings about a second repository)."""
    from deltalog.engines.spark_packages import ivy_settings_file

    return str(ivy_settings_file())


def ensure() -> Path:
    """Build the venv and resolve the runtime once; returns the cache directory."""
    target = home()
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready():
            return target
        if not python().exists():
            log.info("creating the Iceberg reader's venv (pyspark %s) in %s", PYSPARK_VERSION, target)
            _venv()
        log.info("resolving %s into %s", RUNTIME_PACKAGE, target / "ivy")
        subprocess.run(
            [str(python()), "-c", _RESOLVE, RUNTIME_PACKAGE, str(target / "ivy"), str(jars_file()), _central_only()],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return target


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="[iceberg_spark] %(message)s")
    try:
        where = ensure()
    except (OSError, subprocess.CalledProcessError) as exc:
        log.error("could not set up Spark with the Iceberg runtime: %s", exc)
        return 1
    log.info("Spark %s with the Iceberg %s runtime is ready in %s", PYSPARK_VERSION, ICEBERG_VERSION, where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
