"""spark-submit entry point: execute a compaction plan with Spark and write a commit request.

    spark-submit --master local[2] provider/deltalog/compaction/spark/main.py \\
        --plan PLAN.json --table TABLE --output-request REQUEST.json

The plan comes from ``deltalog compact TABLE --plan-only --json`` (or
``plan_compaction(...).to_json()``); the request is committed by deltalog
(``compact(engine="spark")`` does all three steps). Plain Parquet only: no
Delta jars. The last stdout line is ``DELTALOG_COMPACTION_REPORT {json}`` with
the bins that failed, so the caller can report them. Exit status: 0 when the
request was written (even if some bins failed), 2 on bad arguments or plan,
1 when the job itself failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Rewrite the bins of a deltalog compaction plan with Spark.")
    parser.add_argument("--plan", required=True, help="compaction plan JSON (path or URI)")
    parser.add_argument("--table", required=True, help="table path or URI")
    parser.add_argument("--output-request", required=True, help="where to write the commit request JSON")
    parser.add_argument("--max-parallel-bins", type=int, default=None, help="bins rewritten at once")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from pyspark.sql import SparkSession

    from deltalog.compaction.spark.job import REPORT_PREFIX, configure, run_job
    from deltalog.errors import DeltaLogError

    spark = configure(SparkSession.builder.appName("deltalog-compaction")).getOrCreate()
    try:
        rewrite = run_job(spark, args.plan, args.table, args.output_request, args.max_parallel_bins)
    except DeltaLogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        spark.stop()
    report = {"failures": rewrite.failures, "seconds": round(rewrite.seconds, 3)}
    print(REPORT_PREFIX + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
