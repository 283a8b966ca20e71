"""A writer with no deltalog code: ``spark-submit delta_spark_append.py TABLE COMMITS FIRST_ID``.

Delta Spark appends ``COMMITS`` commits of ten rows each to the example events table (its columns,
partitioned by ``event_date``), one ``WRITE`` each, as a user's Spark job would. Used by the real
deployment's test (tests/test_system.py) to show that a foreign commit starts deltalog's maintenance.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main(table: str, commits: int, first_id: int) -> None:
    spark = SparkSession.builder.appName("foreign-delta-spark-writer").getOrCreate()
    try:
        for i in range(commits):
            start = first_id + 10 * i
            rows = spark.range(start, start + 10).select(
                F.col("id").alias("event_id"),
                F.current_timestamp().alias("event_time"),
                (F.col("id") % 7).alias("user_id"),
                F.lit("spark").alias("event_type"),
                (F.col("id") * 1.5).alias("amount"),
                F.current_date().alias("event_date"),
            )
            rows.coalesce(1).write.format("delta").mode("append").save(table)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
