"""Spark plumbing: the versions and jars of the Spark line (``spark_packages``) and what deltalog's Spark jobs share
(``spark/``: Spark's Hadoop FileSystem, the ingest job). The compaction engines themselves live in
``deltalog.compaction`` (``local`` and ``spark/``)."""

__all__: list[str] = []
