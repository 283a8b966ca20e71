"""Spark with the Iceberg runtime as a reader process: one JVM, reads answered one JSON line at a time.

Runs in the venv of ``scripts/iceberg_spark.py`` (Spark 4.1 and ``iceberg-spark-runtime-4.1``,
which Spark 4.2 cannot load), never in the project's: it imports nothing of deltalog. Each
request line on stdin, ``{"location": ..., "snapshot_id": N | null}``, is answered on stdout
with ``{"rows": [...]}`` (each row ``to_json(struct(*))`` as Spark SQL writes it, sorted) or
``{"error": "..."}``. The table is loaded by its path (Iceberg's file-system tables:
``metadata/version-hint.text`` and ``v<N>.metadata.json``), as any Spark user without a
catalog would; ``snapshot_id`` time-travels (Spark's ``versionAsOf``: an Iceberg snapshot id).
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, struct, to_json

    jars = open(sys.argv[1]).read().split()
    builder = SparkSession.builder.master("local[1]").appName("deltalog-iceberg-reader")
    conf = {
        "spark.jars": ",".join(jars),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "1",
        "spark.default.parallelism": "1",
        "spark.driver.memory": "1g",
        "spark.sql.session.timeZone": "UTC",
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(json.dumps({"ready": spark.version}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            reader = spark.read.format("iceberg")
            if request.get("snapshot_id") is not None:
                reader = reader.option("versionAsOf", str(request["snapshot_id"]))
            frame = reader.load(request["location"])
            exact = {
                "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
                "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
            }
            rows = sorted(
                r[0] for r in frame.select(to_json(struct(*[col(c) for c in frame.columns]), exact)).collect()
            )
            answer = {"rows": rows, "columns": frame.columns}
        except Exception as exc:  # noqa: BLE001 - the test reads the error
            answer = {"error": str(exc).splitlines()[0] if str(exc) else repr(exc)}
        print(json.dumps(answer), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
