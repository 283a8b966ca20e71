"""The Spark side of compaction: rewrite a plan's bins with plain Parquet, write a commit request.

Runs inside ``spark-submit`` (``engines/spark/compaction_main.py`` is the entry
script). Spark does the data work, deltalog keeps the commit: no Delta jars.

- Every bin is one Spark job, ``read.parquet(inputs).coalesce(1).write``
  (Delta Spark's OPTIMIZE does the same); the driver submits the bins from a
  thread pool so they run side by side on the executors.
- Reads use the table's physical schema (column-mapping names; field ids in
  ``id`` mode), so old files missing a column yield nulls and widened types
  are read as the current type. Deletion vectors are applied with Spark's
  ``_metadata.row_index`` and a broadcast anti-join on the deleted positions,
  decoded on the driver.
- Output goes to a private staging folder in the table
  (``_deltalog_staging/compaction-<id>/bin-<n>``, hidden from readers and
  vacuum), then the single data file is moved next to the bin's inputs under
  the name :func:`~deltalog.compaction.layout.output_file_name` gives it.
- Stats come from each new file's footer, read through Spark's own Hadoop
  FileSystem (so the job needs no storage credentials beyond Spark's).

The result is a commit request (``deltalog.commit_request`` format, operation
``OPTIMIZE``, ``dataChange=false``); bins that failed are reported apart.
pyspark is imported lazily so the core library never needs it.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from deltalog.compaction.commit import operation_parameters
from deltalog.compaction.dv import deleted_rows
from deltalog.compaction.layout import (
    from_log_path,
    is_absolute,
    output_dir,
    output_file_name,
    physical_data_schema_json,
)
from deltalog.compaction.plan import Bin, CompactionPlan
from deltalog.engines.spark.hadoop import STAGING_DIR, HadoopFs, hadoop_uri, is_data_file
from deltalog.errors import DeltaLogError, OperationRefusedError
from deltalog.schema import parse_schema_string
from deltalog.stats import stats_from_parquet_metadata, stats_json

log = logging.getLogger(__name__)

ROW_INDEX = "__deltalog_row_index"
#: Marks the job's one-line JSON report on stdout (bins that failed), read by the launcher.
REPORT_PREFIX = "DELTALOG_COMPACTION_REPORT "
_GLOB = re.compile(r"([\\{}\[\]*?])")

#: SparkSession settings the rewrite relies on.
SPARK_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",  # Delta timestamps are micros, never INT96
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.fieldId.write.enabled": "true",
    "spark.sql.files.ignoreMissingFiles": "false",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
}


@dataclass
class SparkRewrite:
    """What the job produced: the commit request, and the bins it could not rewrite."""

    request: dict[str, Any]
    failures: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def configure(builder: Any) -> Any:
    """Apply :data:`SPARK_CONF` to a ``SparkSession.builder``."""
    for k, v in SPARK_CONF.items():
        builder = builder.config(k, v)
    return builder


class SparkBinRewriter:
    """Rewrites the bins of one plan with one SparkSession."""

    def __init__(self, spark: Any, plan: CompactionPlan, table_uri: str) -> None:
        from pyspark.sql.types import StructType

        self.spark = spark
        self.plan = plan
        self.table = hadoop_uri(table_uri).rstrip("/")
        self.fs = HadoopFs(spark, self.table)
        self.schema = StructType.fromJson(
            physical_data_schema_json(
                plan.schema_string, plan.partition_columns, plan.column_mapping_mode, for_spark=True
            )
        )
        self.logical = parse_schema_string(plan.schema_string)
        self.staging = f"{self.table}/{STAGING_DIR}/compaction-{uuid.uuid4().hex[:12]}"
        if plan.column_mapping_mode == "id":
            spark.conf.set("spark.sql.parquet.fieldId.read.enabled", "true")

    def uri(self, log_path: str) -> str:
        path = from_log_path(log_path)
        return hadoop_uri(path) if is_absolute(log_path) else f"{self.table}/{path}"

    def _read_dv(self, path: str, absolute: bool, offset: int, length: int) -> bytes:
        return self.fs.read_range(hadoop_uri(path) if absolute else f"{self.table}/{path}", offset, length)

    def _frame(self, b: Bin) -> Any:
        """The bin's live rows as one DataFrame in the physical schema."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType, StructField, StructType

        columns = [F.col(f"`{n}`") for n in self.schema.fieldNames()]
        reader = self.spark.read.schema(self.schema)
        plain = [_GLOB.sub(r"\\\1", self.uri(f.path)) for f in b.files if not f.deletionVector]
        frames = [reader.parquet(*plain).select(*columns)] if plain else []
        for f in b.files:
            if not f.deletionVector:
                continue
            deleted = deleted_rows(f.deletionVector, self._read_dv)
            gone = self.spark.createDataFrame(
                [(int(x),) for x in deleted], StructType([StructField(ROW_INDEX, LongType(), False)])
            )
            one = reader.parquet(_GLOB.sub(r"\\\1", self.uri(f.path))).select(
                *columns, F.col("_metadata.row_index").alias(ROW_INDEX)
            )
            frames.append(one.join(F.broadcast(gone), ROW_INDEX, "left_anti").select(*columns))
        out = frames[0]
        for other in frames[1:]:
            out = out.unionByName(other)
        return out

    def rewrite(self, b: Bin) -> dict[str, Any] | None:
        """Rewrite one bin; returns the add entry of its new file (None when no row survived)."""
        self.spark.sparkContext.setJobDescription(f"deltalog compaction bin {b.id} ({len(b.files)} files)")
        staged = f"{self.staging}/bin-{b.id}"
        self._frame(b).coalesce(1).write.mode("overwrite").option("compression", self.plan.codec).parquet(staged)
        staged_path = self.fs.path(staged).toUri().getPath().rstrip("/")
        written = [p for p, _, _ in self.fs.list_files(staged) if is_data_file(posixpath.basename(p))]
        if not written:  # no row survived the deletion vectors (Spark may then write no file at all)
            self.fs.delete(staged)
            return None
        if len(written) != 1:
            raise OperationRefusedError(f"bin {b.id}: Spark wrote {len(written)} data files, expected 1")
        src = f"{staged}/{written[0][len(staged_path) + 1 :]}"
        footer = self.fs.footer(src)
        if footer.num_rows == 0:
            self.fs.delete(staged)
            return None
        rel_dir = output_dir(b.files[0].path, b.partitionValues)
        name = output_file_name(b.id, self.plan.codec)
        rel = f"{rel_dir}/{name}" if rel_dir else name
        self.fs.move(src, f"{self.table}/{rel}")
        self.fs.delete(staged)
        size, mtime = self.fs.status(f"{self.table}/{rel}")
        stats = stats_from_parquet_metadata(
            footer, self.logical, self.plan.partition_columns, configuration=self.plan.stats_configuration
        )
        return {
            "path": rel,
            "size": size,
            "partitionValues": dict(b.partitionValues),
            "modificationTime": mtime,
            "stats": stats_json(stats),
            "dataChange": False,
        }

    def run(self, max_parallel_bins: int | None = None) -> SparkRewrite:
        started = time.perf_counter()
        parallel = max_parallel_bins or max(1, int(self.spark.sparkContext.defaultParallelism))
        adds: list[dict[str, Any]] = []
        removes: list[str] = []
        failures: list[dict[str, Any]] = []

        def one(b: Bin) -> tuple[Bin, dict[str, Any] | None, str | None]:
            try:
                return b, self.rewrite(b), None
            except DeltaLogError as exc:
                return b, None, str(exc)
            except Exception as exc:  # noqa: BLE001 - a failed bin must not lose the others (Py4J/Spark errors)
                log.exception("bin %d failed", b.id)
                return b, None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

        try:
            with ThreadPoolExecutor(max_workers=min(parallel, len(self.plan.bins) or 1)) as pool:
                for b, add, error in pool.map(one, self.plan.bins):
                    if error is not None:
                        failures.append({"bin": b.id, "reason": error, "paths": [f.path for f in b.files]})
                        continue
                    if add is not None:
                        adds.append(add)
                    removes.extend(from_log_path(f.path) for f in b.files)
        finally:
            self.fs.delete(self.staging)
            self.fs.delete_if_empty(f"{self.table}/{STAGING_DIR}")
        request = {
            "operation": "OPTIMIZE",
            "operationParameters": operation_parameters(self.plan, "spark"),
            "dataChange": False,
            "add": adds,
            "remove": removes,
        }
        return SparkRewrite(request=request, failures=failures, seconds=time.perf_counter() - started)


def run_job(
    spark: Any, plan_uri: str, table_uri: str, request_uri: str, max_parallel_bins: int | None = None
) -> SparkRewrite:
    """What ``engines/spark/compaction_main.py`` runs: plan in, commit request out."""
    # The plan and the request usually live on the driver's local disk while the table
    # is on S3: each gets the Hadoop FileSystem of its own URI ("Wrong FS" otherwise).
    plan_fs = HadoopFs(spark, hadoop_uri(plan_uri))
    plan = CompactionPlan.from_json(plan_fs.read_text(hadoop_uri(plan_uri)))
    rewrite = SparkBinRewriter(spark, plan, table_uri).run(max_parallel_bins)
    doc = dict(rewrite.request)
    HadoopFs(spark, hadoop_uri(request_uri)).write_text(
        hadoop_uri(request_uri), json.dumps(doc, indent=1, sort_keys=True)
    )
    log.info(
        "compaction job: %d bins rewritten, %d failed, request at %s (%.1fs)",
        len(plan.bins) - len(rewrite.failures),
        len(rewrite.failures),
        request_uri,
        rewrite.seconds,
    )
    return rewrite
