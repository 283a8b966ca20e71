"""Write a Spark DataFrame into a Delta table's folder as plain Parquet, plus a commit request.

Why not write Delta from Spark directly: that needs the delta-spark jars on the
cluster and gives the Spark job the commit. Here Spark only does what it is good
at (producing many Parquet files in parallel); the commit, with its conflict
checks and its idempotent application transaction, stays with deltalog (the
``DeltaCommitOperator`` turns the request into exactly one Delta commit).

How the files are found without racing other writers: Spark writes the
DataFrame into a private staging folder inside the table
(``_deltalog_staging/<run id>/``, hidden from Delta readers and vacuum because
it starts with ``_``), the driver lists exactly that folder, moves each data
file to its hive-style partition directory under the table root and records
its size and partition values. Nothing depends on what else is in the table
folder, so concurrent ingests and compactions cannot confuse each other.

All file-system work goes through Spark's own Hadoop FileSystem (``file:``,
``s3a:`` ...) via the JVM gateway, so the job needs no credentials beyond the
Spark configuration it already has. pyspark is never imported here: callers
pass their ``SparkSession``.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import unquote

from deltalog.engines.spark.hadoop import STAGING_DIR, HadoopFs, hadoop_uri, is_data_file
from deltalog.engines.spark.table_identity import table_identity
from deltalog.errors import InvalidArgumentError, StorageError

__all__ = ["IngestResult", "WrittenFile", "safe_run_id", "write_ingest"]

log = logging.getLogger(__name__)

#: Spark's (Hive's) marker for a null partition value in a directory name.
HIVE_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
_SAFE_RUN_ID = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class WrittenFile:
    """One data file now in the table folder, as the commit request lists it."""

    #: Path relative to the table root, as on storage (not URI-encoded).
    path: str
    size: int
    partition_values: dict[str, str | None]
    modification_time: int

    def to_request(self) -> dict[str, Any]:
        """The commit-request form of this file (stats are left to deltalog, which reads footers)."""
        return {
            "path": self.path,
            "size": self.size,
            "partitionValues": dict(self.partition_values),
            "modificationTime": self.modification_time,
        }


@dataclass(frozen=True)
class IngestResult:
    """What one ingest run wrote: the files and where their commit request is."""

    table_uri: str
    request_uri: str
    run_id: str
    files: list[WrittenFile] = field(default_factory=list)

    @property
    def num_files(self) -> int:
        return len(self.files)

    @property
    def num_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def summary_line(self) -> str:
        """One line for logs: how much was written and where its commit request is."""
        return (
            f"ingest run {self.run_id}: {self.num_files} files ({self.num_bytes} bytes) written to {self.table_uri}; "
            f"commit request at {self.request_uri}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "table_uri": self.table_uri,
            "request_uri": self.request_uri,
            "run_id": self.run_id,
            "num_files": self.num_files,
            "num_bytes": self.num_bytes,
            "files": [asdict(f) for f in self.files],
        }


def safe_run_id(run_id: str) -> str:
    """Airflow run ids hold ``:`` and ``+``; keep them out of object names."""
    cleaned = _SAFE_RUN_ID.sub("_", str(run_id)).strip("._")
    if not cleaned:
        raise InvalidArgumentError(f"run id {run_id!r} has no usable characters")
    return cleaned


def parse_partition_dirs(rel_dir: str, partition_by: list[str]) -> dict[str, str | None]:
    """Partition values from hive-style directories (``k=v/...``), unescaped as Spark escaped them."""
    parts = [p for p in rel_dir.split("/") if p]
    if len(parts) != len(partition_by):
        raise StorageError(f"data file directory {rel_dir!r} does not match partition columns {partition_by}")
    values: dict[str, str | None] = {}
    for part, column in zip(parts, partition_by, strict=True):
        key, sep, raw = part.partition("=")
        if not sep or unquote(key) != column:
            raise StorageError(f"directory {part!r} is not a partition directory of column {column!r}")
        values[column] = None if raw == HIVE_NULL_PARTITION else unquote(raw)
    return values


def build_commit_request(
    files: list[WrittenFile],
    operation: str = "WRITE",
    operation_parameters: dict[str, Any] | None = None,
    user_metadata: str | None = None,
    *,
    table_id: str | None = None,
    read_version: int | None = None,
) -> dict[str, Any]:
    """The commit request document ``deltalog.ingest`` reads (a blind append of ``files``), naming the table it
    was made for (``tableId``, ``readVersion``: the commit refuses it for any other table)."""
    request: dict[str, Any] = {
        "operation": operation,
        "operationParameters": dict(operation_parameters or {"mode": "Append"}),
        "add": [f.to_request() for f in files],
    }
    if table_id is not None:
        request["tableId"] = table_id
    if read_version is not None:
        request["readVersion"] = read_version
    if user_metadata:
        request["userMetadata"] = user_metadata
    return request


def write_ingest(
    spark: Any,
    df: Any,
    table_uri: str,
    request_uri: str,
    run_id: str,
    partition_by: list[str] | None = None,
    operation: str = "WRITE",
    user_metadata: str | None = None,
) -> IngestResult:
    """Write ``df`` as Parquet data files into the table folder and a commit request for them.

    Re-running with the same ``run_id`` (an Airflow retry) starts from a clean staging
    folder and writes a fresh request; files a failed attempt already moved are never
    committed and are removed by vacuum once past the retention window. The table must
    exist: its id and version, read first through Spark's filesystem, go into the request
    (``tableId``, ``readVersion``), so the commit refuses the request for any other table.
    """
    partition_by = list(partition_by or [])
    missing = [c for c in partition_by if c not in df.columns]
    if missing:
        raise InvalidArgumentError(f"partition columns {missing} are not columns of the DataFrame")
    run = safe_run_id(run_id)
    identity = table_identity(spark, table_uri)  # before a file is written: a location that is no table stops here
    table = hadoop_uri(table_uri).rstrip("/")
    request = hadoop_uri(request_uri)
    staging = f"{table}/{STAGING_DIR}/{run}"
    hfs = HadoopFs(spark, table)

    log.info("writing data files to staging folder %s", staging)
    writer = df.write.mode("overwrite")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.parquet(staging)

    staging_path = hfs.path(staging).toUri().getPath().rstrip("/")
    table_path = hfs.path(table).toUri().getPath().rstrip("/")
    files: list[WrittenFile] = []
    for path, _size, _mtime in sorted(hfs.list_files(staging)):
        rel = path[len(staging_path) + 1 :]
        rel_dir, _, name = rel.rpartition("/")
        if not is_data_file(name):
            continue
        values = parse_partition_dirs(rel_dir, partition_by)
        target_rel = rel
        hfs.move(f"{staging}/{rel}", f"{table}/{target_rel}")
        size, mtime = hfs.status(f"{table}/{target_rel}")
        files.append(WrittenFile(path=target_rel, size=size, partition_values=values, modification_time=mtime))
    hfs.delete(staging)
    hfs.delete_if_empty(f"{table}/{STAGING_DIR}")
    log.info("moved %d data files (%d bytes) into %s", len(files), sum(f.size for f in files), table_path)

    doc = build_commit_request(
        files,
        operation=operation,
        user_metadata=user_metadata,
        table_id=identity.table_id,
        read_version=identity.version,
    )
    hfs.write_text(request, json.dumps(doc, indent=1, sort_keys=True))
    log.info("commit request for %d files written to %s", len(files), request)
    return IngestResult(table_uri=table_uri, request_uri=request_uri, run_id=run, files=files)
