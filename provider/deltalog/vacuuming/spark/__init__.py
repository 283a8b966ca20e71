"""The Spark vacuum engine: the plan's anti-join as a Spark job; deltalog checks first and deletes after.

| module | job |
|---|---|
| ``driver`` | ``plan_vacuum(engine="spark")``: the checks that need the log, the job's spec, the plan read back |
| ``spec`` | the job's input and its report (two small JSON documents) |
| ``job`` | the anti-join in Spark: checkpoint references, the inventory or a listing, the verdicts (runs in ``spark-submit``) |
| ``tasks`` | what the job's Python tasks run: the local engine's rules on Arrow batches |
| ``main`` | the ``spark-submit`` entry script (``vacuum_job_script()`` is its path) |

pyspark is imported only inside the job, so importing this package never needs it.
"""

from deltalog.vacuuming.spark.driver import SPARK_OPTIONS, vacuum_job_script

__all__ = ["SPARK_OPTIONS", "vacuum_job_script"]
