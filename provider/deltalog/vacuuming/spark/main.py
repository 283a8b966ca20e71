"""spark-submit entry point: plan a vacuum's anti-join with Spark and print its report.

    spark-submit --master local[2] provider/deltalog/vacuuming/spark/main.py --spec SPEC.json

The spec comes from ``plan_vacuum(table, engine="spark")``, which runs this (and reads
the plan back). Plain Spark only: no Delta jars. The last stdout line is
``DELTALOG_VACUUM_REPORT {json}``: the plan's location and counts, or the error that
stopped it (exit 0 either way: the error is the planner's to raise). Exit status 2 on
a bad spec, 1 when the job itself failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Plan a deltalog vacuum's anti-join with Spark.")
    parser.add_argument("--spec", required=True, help="the job's spec (JSON, a local path)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from pyspark.sql import SparkSession

    from deltalog.vacuuming.spark.job import REPORT_PREFIX, configure, run_job
    from deltalog.vacuuming.spark.spec import VacuumJobSpec

    try:
        spec = VacuumJobSpec.from_json(Path(args.spec).read_text())
    except (OSError, ValueError, TypeError) as exc:
        print(f"error: unreadable vacuum job spec {args.spec}: {exc}", file=sys.stderr)
        return 2
    spark = configure(SparkSession.builder.appName("deltalog-vacuum")).getOrCreate()
    try:
        report = run_job(spark, spec)
    finally:
        spark.stop()
    print(REPORT_PREFIX + report.to_json(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
