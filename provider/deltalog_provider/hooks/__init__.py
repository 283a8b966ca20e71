"""Hooks: ``DeltaTableHook`` resolves tables and storage options from a ``deltalog`` connection.

| module | job |
|---|---|
| ``delta_table`` | ``DeltaTableHook``: the connection (fetched once), tables, reads under the retry policy |
| ``connection`` | a connection as table root + storage options, and the connections it names |
| ``retry_policy`` | which errors are transient or refusals, how many retries, how long apart |
| ``spark_submit`` | deltalog's Spark compaction job through the apache-spark provider's ``SparkSubmitHook`` |
"""

from deltalog_provider.hooks.delta_table import DeltaTableHook

__all__ = ["DeltaTableHook"]
