"""The JVM options of the tests' Spark JVMs (one place: conftest.py sets them, delta_spark.py keeps them off its session).

``SHORT_JVM_OPTIONS`` is what conftest.py puts in ``SPARK_SUBMIT_OPTS`` (unless the caller set it) for every
JVM started through spark-submit: the Spark engines' jobs and the pyspark sessions, which live seconds to a
minute. C1 only and a serial collector spent about a third less CPU there (the Spark compaction and
vacuum jobs: 80 -> 52 CPU s), with the same code and results. The Delta Spark oracle's session lives the
whole run and was slower with them (80 -> 103 s on six corpus tables): it starts without them.
"""

__all__ = ["SHORT_JVM_OPTIONS"]

SHORT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
