"""A Spark Structured Streaming query into a Delta table through Delta Spark's sink, run as its own process.

``tests/test_streaming_exactly_once.py`` starts it, SIGKILLs it mid-batch and starts it
again, while deltalog compacts, checkpoints and cleans the table's log. One JSON argument
(the spec) says where everything is:

- ``table``, ``input``, ``checkpoint``: the Delta table, the directory of JSON input
  files (a file source, one file per micro-batch: ``maxFilesPerTrigger=1``), the query's
  checkpoint location (its offsets and commits logs; the query id the sink records as
  the txn's ``appId``);
- ``stop``: when this file appears the query is stopped; its content, a JSON list of table
  versions, asks for the rows of each read back with Delta Spark (time travel) into
  ``result``, so the last run doubles as the Delta Spark reader (no second JVM);
- ``ready``: written once the query runs (its id inside).

Nothing here decides what the test checks: the sink's log (``DeltaSink`` at INFO on
stderr, see :data:`LOG4J2`) says which batch it committed and which it skipped.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

#: log4j2 for the driver: errors only, but the Delta sink's "Committed transaction, batchId=N" and
#: "Skipping already complete epoch N" lines (the evidence a re-run batch was skipped by its txn).
LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
logger.sink.name = org.apache.spark.sql.delta.sources.DeltaSink
logger.sink.level = info
"""

SCHEMA = "id BIGINT, batch INT, payload STRING"

#: Small and quiet, like the oracle's session (tests/delta_spark.py), for a query of a few hundred rows.
CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.memory": "512m",
    "spark.sql.session.timeZone": "UTC",
    # Time travel to every retained version, however old its files (the oracle's read policy).
    "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration": "false",
}


def main(spec_json: str) -> int:
    spec = json.loads(spec_json)
    from pyspark.sql import SparkSession

    from deltalog.engines.spark_packages import spark_conf

    builder = SparkSession.builder.master("local[1]").appName("deltalog-streaming-writer")
    for k, v in {**spark_conf(delta=True, s3a=False), **CONF}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    stream = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(spec["input"])
        .writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", spec["checkpoint"])
        .trigger(processingTime="500 milliseconds")
        .start(spec["table"])
    )
    Path(spec["ready"]).write_text(json.dumps({"query_id": stream.id}))
    stop = Path(spec["stop"])
    while stream.isActive and not stop.exists():
        stream.awaitTermination(0.2)
    if not stream.isActive:  # the query failed: say why, the test shows it
        print(f"query ended: {stream.exception()}", file=sys.stderr)
        return 1
    stream.stop()
    versions = json.loads(stop.read_text() or "[]")
    result: dict[str, list[int]] = {}
    for v in versions:
        df = spark.read.format("delta").option("versionAsOf", v).load(spec["table"])
        result[str(v)] = sorted(r[0] for r in df.select("id").collect())
    staging = Path(spec["result"] + ".tmp")
    staging.write_text(json.dumps(result))
    os.replace(staging, spec["result"])
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
