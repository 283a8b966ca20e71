"""The one result contract, written down where the tests (and readers) can find it.

Every result an operation returns is a frozen dataclass with ``to_dict()`` (what the CLI
prints with ``--json`` and the Airflow operators push to XCom) and ``summary_line()``
(the one human line both print). Work that fills a result in step by step keeps a
mutable draft of its own and builds the frozen result at the end.

Every key a result chooses is snake_case. Values that are Delta protocol data keep the
protocol's own field names (``minReaderVersion``, ``partitionValues``, ``numRecords``
...), and keys inside user data are the user's: such values sit under the keys of
:data:`VERBATIM_KEYS` and are passed through as they are. Three classes are protocol
data themselves and keep the protocol's names at the top level: ``Protocol`` (the
protocol action), ``HistoryEntry`` (a commitInfo) and the commit request
(``CommitRequest``, ``AddSpec``: an input document shaped like the actions it becomes).
``tests/test_results.py`` holds every result class to this.
"""

from __future__ import annotations

__all__ = ["PROTOCOL_DATA_CLASSES", "VERBATIM_KEYS"]

#: Keys whose values are protocol data or user data, passed through verbatim (their inner
#: keys keep the protocol's or the user's spelling), and why.
VERBATIM_KEYS: dict[str, str] = {
    "protocol": "the protocol action",
    "metadata": "the metaData action",
    "schema": "Delta schema fields",
    "configuration": "table properties, by property name",
    "operation_metrics": "commitInfo.operationMetrics, Delta's metric names",
    "partition_values": "partition values by column name",
    "deletion_vector": "a deletion vector descriptor of the log",
    "files": "file names, or per file the log's own fields (path, size, modificationTime, partitionValues)",
    "operations": "a feature's support, by operation name; a commit range's commits, by commitInfo operation",
    "writers": "a commit range's commits, by commitInfo engineInfo (the writer's own spelling)",
}

#: Classes with ``to_dict()`` that are protocol data (or an input document), not results.
PROTOCOL_DATA_CLASSES: frozenset[str] = frozenset(
    {
        "deltalog.protocol.table_protocol.Protocol",
        "deltalog.log.history.HistoryEntry",
        "deltalog.ingest.CommitRequest",
        "deltalog.ingest.AddSpec",
    }
)
