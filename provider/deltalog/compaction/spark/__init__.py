"""The Spark compaction engine: deltalog's Spark job rewrites a plan's bins; deltalog commits them.

Spark writes plain Parquet (no Delta jars on the cluster); deltalog keeps the commit.

| module | job |
|---|---|
| ``job`` | rewrite a compaction plan's bins in Spark (runs inside ``spark-submit``) |
| ``main`` | the ``spark-submit`` entry script of the job (``spark_job_script()`` is its path) |
| ``curve`` | the Z-order / clustering curve key in plain Spark SQL |
| ``submit`` | run the job with a local ``spark-submit`` (``compact(engine="spark")``, the CLI) |
| ``handoff`` | the job submitted by someone else (Airflow's ``SparkSubmitHook``): plan file, request, commit |
| ``commit`` | map the job's commit request back onto the plan and commit it bin by bin |

Whoever submits the job (``compact``, an Airflow ``SparkSubmitHook``, a person), the
last step is :func:`commit_spark_result`. pyspark is imported only inside the job, so
importing this package never needs it.
"""

from deltalog.compaction.spark.commit import commit_spark_result, read_spark_request
from deltalog.compaction.spark.handoff import SparkHandoff, compact_with_spark_job, write_compaction_plan
from deltalog.compaction.spark.submit import DEFAULT_CONF, spark_job_script

__all__ = [
    "DEFAULT_CONF",
    "SparkHandoff",
    "commit_spark_result",
    "compact_with_spark_job",
    "read_spark_request",
    "spark_job_script",
    "write_compaction_plan",
]
