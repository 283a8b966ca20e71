"""The Spark engine: every piece of deltalog that runs Spark, in one package.

Spark writes plain Parquet (no Delta jars on the cluster); deltalog keeps the commit.

| module | job |
|---|---|
| ``hadoop`` | Spark's Hadoop FileSystem from the driver (list, move, delete, ranged reads) and location URIs |
| ``ingest`` | write a DataFrame into a table folder and describe the files as a commit request |
| ``compaction_job`` | rewrite a compaction plan's bins in Spark (runs inside ``spark-submit``) |
| ``compaction_main`` | the ``spark-submit`` entry script of the compaction job |
| ``submit`` | run the compaction job with a local ``spark-submit`` (``compact(engine="spark")``, the CLI) |
| ``result`` | map the job's commit request back onto the plan and commit it bin by bin |

The package builds on the compaction contract (``deltalog.compaction.plan``, ``layout``,
``outcome``, ``dv``, ``commit``); pyspark is imported only inside the job, so importing
these modules never needs it.
"""
