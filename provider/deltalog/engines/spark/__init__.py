"""Spark plumbing shared by deltalog's Spark jobs (the compaction job is ``deltalog.compaction.spark``).

Spark writes plain Parquet (no Delta jars on the cluster); deltalog keeps the commit.

| module | job |
|---|---|
| ``hadoop`` | Spark's Hadoop FileSystem from the driver (list, move, delete, ranged reads) and location URIs |
| ``ingest`` | write a DataFrame into a table folder and describe the files as a commit request |
| ``submit`` | run a job with ``spark-submit`` (cancel, time-out, its report line): compaction and vacuum |
| ``table_identity`` | a table's ``metaData.id`` and newest version, read through Spark's filesystem (what the jobs' hand-offs carry) |

pyspark is never imported here: callers hand in their SparkSession, so importing these
modules never needs it.
"""

from deltalog.engines.spark.ingest import IngestResult, WrittenFile, write_ingest

__all__ = ["IngestResult", "WrittenFile", "write_ingest"]
