"""The one place that names the Spark line and the jars deltalog's Spark parts need.

The product's Spark jobs, the Delta Spark oracle in the tests, the compose file's
``spark.jars.packages`` and the Dockerfile all use the versions below (the tests
check the compose file against them), so a user's cluster that runs Delta Spark
runs our jobs unchanged:

- Spark 4.2.0 (pip ``pyspark==4.2.0``), the newest line Delta Spark 4.4.0 supports
  (``delta-spark`` pins ``pyspark<=4.2.0``).
- Delta Spark 4.4.0, Maven ``io.delta:delta-spark_4.2_2.13`` (the Spark-line suffixed
  artifact ``configure_spark_with_delta_pip`` picks; ``delta-spark_2.13:4.4.x`` is not
  published).
- The s3a connector ``org.apache.hadoop:hadoop-aws`` at the version of the Hadoop
  client inside pyspark 4.2.0 (3.5.0); its POM brings the matching AWS SDK bundle.

Jars are resolved from Maven coordinates only, by Spark's own Ivy
(``spark.jars.packages``), into a cache keyed by the versions under
``~/.cache/deltalog`` so every clone on the machine reuses one download.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DELTA_SQL_CONF", "ivy_dir", "jar_list_file", "packages", "spark_conf"]

SPARK_VERSION = "4.2.0"
SCALA_BINARY_VERSION = "2.13"
DELTA_SPARK_VERSION = "4.4.0"
#: The Hadoop client bundled in pyspark 4.2.0 (jars/hadoop-client-api-3.5.0.jar).
HADOOP_VERSION = "3.5.0"

_SPARK_LINE = ".".join(SPARK_VERSION.split(".")[:2])
DELTA_SPARK_PACKAGE = f"io.delta:delta-spark_{_SPARK_LINE}_{SCALA_BINARY_VERSION}:{DELTA_SPARK_VERSION}"
HADOOP_AWS_PACKAGE = f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}"

#: Spark settings that turn a session into a Delta Spark session.
DELTA_SQL_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def cache_root() -> Path:
    """``$DELTALOG_CACHE`` or ``~/.cache/deltalog``: expensive downloads and corpora, shared by clones."""
    return Path(os.environ.get("DELTALOG_CACHE") or Path.home() / ".cache" / "deltalog")


def ivy_dir() -> Path:
    """The Ivy directory (``spark.jars.ivy``), keyed by the versions; one for every subset of the packages."""
    return cache_root() / f"ivy-spark{SPARK_VERSION}-delta{DELTA_SPARK_VERSION}-hadoop{HADOOP_VERSION}"


def packages(*, delta: bool = True, s3a: bool = True) -> str:
    """The ``spark.jars.packages`` value (comma-separated Maven coordinates)."""
    names = ([DELTA_SPARK_PACKAGE] if delta else []) + ([HADOOP_AWS_PACKAGE] if s3a else [])
    return ",".join(names)


def jar_list_file(*, delta: bool, s3a: bool) -> Path:
    """Where ``scripts/spark_jars.py`` records the jars Ivy resolved for one package set."""
    return ivy_dir() / f"jars-{'delta' if delta else ''}{'-' if delta and s3a else ''}{'s3a' if s3a else ''}.txt"


def spark_conf(*, delta: bool = True, s3a: bool = True) -> dict[str, str]:
    """Spark settings that put the packages on the classpath (+ the Delta SQL extension when ``delta``).

    Once ``scripts/spark_jars.py`` has resolved a package set, its jars are named
    directly (``spark.jars``: no Ivy resolution, no network, no lock at session
    start); before that, ``spark.jars.packages`` with the cache as ``spark.jars.ivy``.
    """
    conf: dict[str, str] = {}
    if delta or s3a:
        listed = jar_list_file(delta=delta, s3a=s3a)
        jars = listed.read_text().split() if listed.exists() else []
        if jars and all(os.path.exists(j) for j in jars):
            conf["spark.jars"] = ",".join(jars)
        else:
            conf = {"spark.jars.packages": packages(delta=delta, s3a=s3a), "spark.jars.ivy": str(ivy_dir())}
    if delta:
        conf.update(DELTA_SQL_CONF)
    return conf


def s3a_conf(endpoint: str, access_key: str, secret_key: str, region: str = "us-east-1") -> dict[str, str]:
    """s3a settings for an S3-compatible endpoint (MinIO, a local test server) with static keys."""
    return {
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower(),
        "spark.hadoop.fs.s3a.access.key": access_key,
        "spark.hadoop.fs.s3a.secret.key": secret_key,
        "spark.hadoop.fs.s3a.endpoint.region": region,
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
