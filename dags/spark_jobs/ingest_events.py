"""Spark job: one day of synthetic click-stream events into a Delta table's folder.

Submitted by ``SparkSubmitOperator`` in the ``deltalog_ingest`` DAG (or by hand:
``spark-submit --master local[2] dags/spark_jobs/ingest_events.py --table ... --date 2026-11-21
--run-id manual --request .../request.json``). It writes plain Parquet files into the
table folder (hive-style ``event_date=YYYY-MM-DD`` directories, no Delta jars) and a
commit request JSON that the ``DeltaCommitOperator`` turns into one Delta commit.
All the file handling lives in ``deltalog.engines.spark.ingest``; this script only
builds the DataFrame. To ingest your own data, replace ``generate_events`` with a
``spark.read...`` of your source that yields the same columns.

Only DataFrame expressions are used (no Python UDFs), so the executors never start
Python workers and their Python version does not have to match the driver's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
from typing import Any

from deltalog.engines.spark.ingest import write_ingest

PARTITION_BY = ["event_date"]
EVENT_TYPES = ["view", "click", "add_to_cart", "purchase"]
#: The table's columns in Spark DDL; ``deltalog_example.EVENTS_SCHEMA`` is the same in Arrow.
EVENTS_DDL = "event_id BIGINT, event_time TIMESTAMP, user_id BIGINT, event_type STRING, amount DOUBLE, event_date DATE"
#: Event ids are ``day number * ID_STRIDE + n``, so ids never collide across days.
ID_STRIDE = 1_000_000_000


def generate_events(spark: Any, day: dt.date, rows: int, files: int, seed: int = 0) -> Any:
    """A deterministic day of events (same inputs, same rows) spread over ``files`` Spark partitions."""
    from pyspark.sql import functions as F

    if rows < 1 or rows >= ID_STRIDE:
        raise ValueError(f"rows must be between 1 and {ID_STRIDE - 1}, got {rows}")
    if files < 1:
        raise ValueError(f"files must be at least 1, got {files}")
    day_number = (day - dt.date(1970, 1, 1)).days
    ids = spark.range(0, rows, 1, numPartitions=min(files, rows))
    h1 = F.xxhash64(F.col("id"), F.lit(seed), F.lit(day_number))
    h2 = F.xxhash64(F.col("id"), F.lit(seed + 1), F.lit(day_number))
    h3 = F.xxhash64(F.col("id"), F.lit(seed + 2), F.lit(day_number))
    types = F.array(*[F.lit(t) for t in EVENT_TYPES])
    return ids.select(
        (F.lit(day_number).cast("long") * F.lit(ID_STRIDE) + F.col("id")).alias("event_id"),
        F.timestamp_seconds(F.lit(day_number * 86400) + F.floor(F.col("id") * F.lit(86400) / F.lit(rows))).alias(
            "event_time"
        ),
        (F.pmod(h1, F.lit(5000)) + F.lit(1)).cast("long").alias("user_id"),
        F.element_at(types, (F.pmod(h2, F.lit(len(EVENT_TYPES))) + F.lit(1)).cast("int")).alias("event_type"),
        F.round(F.pmod(h3, F.lit(100_000)) / F.lit(100.0), 2).alias("amount"),
        F.lit(day.isoformat()).cast("date").alias("event_date"),
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", required=True, help="table location: a local path, file:// or s3:// URI")
    p.add_argument("--date", required=True, type=dt.date.fromisoformat, help="the day to ingest, YYYY-MM-DD")
    p.add_argument("--run-id", required=True, help="unique per run (Airflow: the run id); names the staging folder")
    p.add_argument("--request", required=True, help="where to write the commit request JSON")
    p.add_argument("--rows", type=int, default=20_000, help="number of events (default 20000)")
    p.add_argument("--files", type=int, default=8, help="number of data files to write (default 8)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.appName(f"deltalog-ingest-events-{args.date}")
        .config("spark.sql.session.timeZone", "UTC")
        # Delta readers expect INT64 microsecond timestamps, not Spark's legacy INT96.
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .getOrCreate()
    )
    try:
        df = generate_events(spark, args.date, args.rows, args.files, args.seed)
        result = write_ingest(
            spark,
            df,
            table_uri=args.table,
            request_uri=args.request,
            run_id=args.run_id,
            partition_by=PARTITION_BY,
            user_metadata=f"ingest_events {args.date} ({args.rows} rows)",
        )
    finally:
        spark.stop()
    summary = {k: v for k, v in result.to_dict().items() if k != "files"}
    print("DELTALOG_INGEST_RESULT " + json.dumps(summary, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
