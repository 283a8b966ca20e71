"""The Spark side of compaction: rewrite a plan's bins with plain Parquet, write a commit request.

Runs inside ``spark-submit`` (``compaction/spark/main.py`` is the entry
script). Spark does the data work, deltalog keeps the commit: no Delta jars.

- Every bin is one Spark job, ``read.parquet(inputs).coalesce(1).write``
  (Delta Spark's OPTIMIZE does the same); the driver submits the bins from a
  thread pool so they run side by side on the executors.
- Reads use the table's physical schema (column-mapping names; field ids in
  ``id`` mode), so old files missing a column yield nulls and widened types
  are read as the current type. Deletion vectors are applied with Spark's
  ``_metadata.row_index`` and a broadcast anti-join on the deleted positions,
  decoded on the driver.
- Row tracking enabled: each input file is read on its own and every row's stable row
  ID (materialised value, else ``baseRowId`` + ``_metadata.row_index``) and row commit
  version (materialised value, else ``defaultRowCommitVersion``) are written into the
  table's ``delta.rowTracking.materialized*`` columns, as Delta Spark's OPTIMIZE does.
- Iceberg compatibility: a Parquet field id on every struct field and the partition
  values materialised after the data columns; V2 tables with arrays or maps are refused
  (:func:`check_spark_can_rewrite`: Spark cannot write their nested ids).
- Variant columns are read shredded or not, and always written unshredded.
- Output goes to a private staging folder in the table
  (``_deltalog_staging/compaction-<id>/bin-<n>``, hidden from readers and
  vacuum), then the single data file is moved next to the bin's inputs under
  the name :func:`~deltalog.compaction.file_names.output_file_name` gives it.
- Stats come from each new file's footer, read through Spark's own Hadoop
  FileSystem (so the job needs no storage credentials beyond Spark's).

Layout modes (:mod:`deltalog.compaction.spark.curve`): a Z-order or liquid clustering plan
range-partitions each bin's rows by a curve key (sampled range ids of the columns, bits
interleaved) into ``ceil(bin bytes / target size)`` files, sorted within each; clustered
outputs carry ``clusteringProvider`` and the ZCube tags. A deletion-vector purge plan is a
plain rewrite of single-file bins (DVs applied as always).

The result is a commit request (``deltalog.ingest`` format, operation
``OPTIMIZE`` or ``REORG`` for a purge, ``dataChange=false``); bins that failed are reported apart.
pyspark is imported lazily so the core library never needs it.
"""

from __future__ import annotations

import json
import logging
import math
import posixpath
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from deltalog.compaction.commit import OPERATION, operation_parameters
from deltalog.compaction.file_names import output_dir, output_file_name
from deltalog.compaction.liquid import PROVIDER, ZCUBE_ID, ZCUBE_ZORDER_BY
from deltalog.compaction.plan import Bin, CompactionPlan, PlanFile
from deltalog.compaction.purge import REORG_OPERATION
from deltalog.compaction.spark.curve import SAMPLE_ROWS, bits_for, interleave_expr, range_id, sample_boundaries
from deltalog.engines.spark.hadoop import STAGING_DIR, HadoopFs, hadoop_uri, is_data_file
from deltalog.engines.spark.table_identity import table_identity
from deltalog.errors import DeltaLogError, OperationRefusedError
from deltalog.protocol.deletion_vectors import deleted_rows
from deltalog.protocol.file_stats import stats_from_parquet_metadata, stats_json
from deltalog.protocol.parquet_layout import (
    PHYSICAL_NAME,
    from_log_path,
    iceberg_data_schema_json_for_spark,
    is_absolute,
    nested_id_column,
    physical_data_schema_json,
)
from deltalog.protocol.schema import parse_schema_string
from deltalog.write_checks.handoffs import check_made_at, check_table_id

__all__ = ["REPORT_PREFIX", "check_spark_can_rewrite", "configure", "run_job"]

log = logging.getLogger(__name__)

ROW_INDEX = "__deltalog_row_index"
CURVE_KEY = "__deltalog_curve_key"
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
    # Variant columns: shredded inputs are read, every output is unshredded (allowed in any table,
    # PROTOCOL.md "Variant Shredding"; a table that does not enable shredding must get nothing else).
    "spark.sql.variant.allowReadingShredded": "true",
    "spark.sql.variant.writeShredding.enabled": "false",
}


def check_spark_can_rewrite(plan: CompactionPlan) -> None:
    """Refuse a plan whose new files Spark's plain Parquet writer cannot make as the table requires.

    Iceberg compatibility V2 wants Parquet field ids on list elements and map keys/values
    (``delta.columnMapping.nested.ids``); Spark's writer puts ids on struct fields only.
    """
    if plan.iceberg_compat and plan.iceberg_compat >= 2:
        column = nested_id_column(plan.schema_string)
        if column is not None:
            raise OperationRefusedError(
                f"column {column} holds an array or a map: icebergCompatV2 requires Parquet field ids on its "
                "list elements and map keys/values, which Spark's Parquet writer cannot write; use the local engine"
            )


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
        from pyspark.sql.types import LongType, StructField, StructType

        check_spark_can_rewrite(plan)
        self.spark = spark
        self.plan = plan
        self.table = hadoop_uri(table_uri).rstrip("/")
        self.fs = HadoopFs(spark, self.table)
        if plan.iceberg_compat:
            # Iceberg compatibility: field ids on every column and the partition values materialised last.
            written = StructType.fromJson(
                iceberg_data_schema_json_for_spark(plan.schema_string, plan.partition_columns)
            )
        else:
            written = StructType.fromJson(
                physical_data_schema_json(
                    plan.schema_string,
                    plan.partition_columns,
                    plan.column_mapping_mode,
                    for_spark=True,
                    materialize_partitions=plan.materialize_partitions,
                )
            )
        #: Partition columns written into the file (physical name -> logical name): Iceberg compatibility, or
        #: the materializePartitionColumns feature / delta.writePartitionColumnsToParquet.
        self.materialized: dict[str, str] = {}
        if plan.iceberg_compat or plan.materialize_partitions:
            for f in json.loads(plan.schema_string).get("fields", []):
                if f["name"] in plan.partition_columns:
                    physical = (f.get("metadata") or {}).get(PHYSICAL_NAME) or f["name"]
                    self.materialized[physical] = f["name"]
        self.written = written
        #: Row tracking enabled: every row's stable row ID and commit version go into these columns, last.
        self.rt_columns: tuple[str, str] | None = None
        if plan.row_tracking:
            self.rt_columns = (plan.row_tracking["row_id_column"], plan.row_tracking["row_commit_version_column"])
        data = [f for f in written.fields if f.name not in self.materialized]
        extra = [StructField(c, LongType(), True) for c in self.rt_columns or ()]
        #: What is read from the input files: the data columns, and the materialised row tracking columns.
        self.schema = StructType(data + extra)
        self.data_names = [f.name for f in data]
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
        """The bin's live rows as one DataFrame, in the order the new file holds its columns.

        Files without a deletion vector are read together unless row tracking is enabled:
        then each file is read alone, since its rows' default row IDs are its ``baseRowId``
        plus the row's position in that file (``_metadata.row_index``, taken before deleted
        rows are dropped), as Delta Spark's OPTIMIZE materialises them.
        """
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType, StructField, StructType

        columns = [F.col(f"`{n}`") for n in self.data_names]
        tracked = [F.col(f"`{n}`") for n in self.rt_columns or ()]
        reader = self.spark.read.schema(self.schema)
        together = [f for f in b.files if not f.deletion_vector and self.rt_columns is None]
        plain = [_GLOB.sub(r"\\\1", self.uri(f.path)) for f in together]
        frames = [reader.parquet(*plain).select(*columns)] if plain else []
        for f in b.files:
            if not f.deletion_vector and self.rt_columns is None:
                continue
            one = reader.parquet(_GLOB.sub(r"\\\1", self.uri(f.path))).select(
                *columns, *tracked, F.col("_metadata.row_index").alias(ROW_INDEX)
            )
            if self.rt_columns is not None:
                one = self._stable_row_tracking(one, f)
            if f.deletion_vector:
                deleted = deleted_rows(f.deletion_vector, self._read_dv)
                gone = self.spark.createDataFrame(
                    [(int(x),) for x in deleted], StructType([StructField(ROW_INDEX, LongType(), False)])
                )
                one = one.join(F.broadcast(gone), ROW_INDEX, "left_anti")
            frames.append(one.select(*columns, *tracked))
        out = frames[0]
        for other in frames[1:]:
            out = out.unionByName(other)
        if self.materialized:
            out = out.select(*columns, *self._partition_literals(b), *tracked)
        return out

    def _stable_row_tracking(self, frame: Any, f: PlanFile) -> Any:
        """Each row's stable row ID and row commit version (PROTOCOL.md "Reader Requirements for Row Tracking"):
        the materialised value where the file has one, else ``baseRowId`` + row position and the file's
        ``defaultRowCommitVersion``."""
        from pyspark.sql import functions as F

        if f.base_row_id is None or f.default_row_commit_version is None:
            raise OperationRefusedError(
                f"{f.path}: row tracking is enabled but the file has no baseRowId/defaultRowCommitVersion; "
                "its rows' IDs cannot be preserved"
            )
        assert self.rt_columns is not None
        row_id, version = self.rt_columns
        fresh_id = F.lit(f.base_row_id).cast("long") + F.col(ROW_INDEX)
        fresh_version = F.lit(f.default_row_commit_version).cast("long")
        return frame.withColumn(row_id, F.coalesce(F.col(f"`{row_id}`"), fresh_id)).withColumn(
            version, F.coalesce(F.col(f"`{version}`"), fresh_version)
        )

    def _partition_literals(self, b: Bin) -> list[Any]:
        """The bin's partition values as columns (Iceberg compatibility), typed and with their field ids."""
        from pyspark.sql import functions as F

        out = []
        for column in self.written.fields:
            if column.name not in self.materialized:
                continue
            # partitionValues are keyed by physical name under column mapping.
            pv = b.partition_values
            value = pv.get(column.name, pv.get(self.materialized[column.name]))
            out.append(F.lit(value).cast(column.dataType).alias(column.name, metadata=dict(column.metadata)))
        return out

    def _key_paths(self) -> list[list[str]]:
        """The curve columns' physical paths (Z-order columns or the clustering columns), else none."""
        if self.plan.clustering is not None:
            return [list(p) for p in self.plan.clustering.paths]
        logical = {f.name: f for f in self.logical}
        return [
            [(logical[c].metadata or {}).get(b"delta.columnMapping.physicalName", c.encode()).decode()]
            for c in self.plan.zorder_by
        ]

    def _along_curve(self, frame: Any, b: Bin, keys: list[list[str]]) -> Any:
        """The bin's rows range-partitioned by the curve key into its output files, sorted within each."""
        from pyspark.sql import functions as F

        cols = [F.col(".".join(f"`{p}`" for p in path)) for path in keys]
        bits = bits_for(len(cols))
        keyed = frame.select(*[c.alias(f"k{i}") for i, c in enumerate(cols)])
        n = keyed.count()
        if n == 0:
            return frame
        sample = keyed.sample(False, min(1.0, 2 * SAMPLE_ROWS / n), seed=b.id).limit(SAMPLE_ROWS).collect()
        ids = [range_id(c, sample_boundaries([r[i] for r in sample], bits)) for i, c in enumerate(cols)]
        runs = max(1, min(n, math.ceil(b.size / self.plan.target_size)))
        return (
            frame.withColumn(CURVE_KEY, interleave_expr(ids, bits))
            .repartitionByRange(runs, F.col(CURVE_KEY))
            .sortWithinPartitions(CURVE_KEY)
            .drop(CURVE_KEY)
        )

    def rewrite(self, b: Bin) -> list[dict[str, Any]]:
        """Rewrite one bin; returns the add entries of its new files (none when no row survived)."""
        self.spark.sparkContext.setJobDescription(f"deltalog compaction bin {b.id} ({len(b.files)} files)")
        staged = f"{self.staging}/bin-{b.id}"
        keys = self._key_paths()
        frame = self._frame(b)
        frame = self._along_curve(frame, b, keys) if keys else frame.coalesce(1)
        frame.write.mode("overwrite").option("compression", self.plan.codec).parquet(staged)
        staged_path = self.fs.path(staged).toUri().getPath().rstrip("/")
        written = sorted(p for p, _, _ in self.fs.list_files(staged) if is_data_file(posixpath.basename(p)))
        if not keys and len(written) > 1:
            raise OperationRefusedError(f"bin {b.id}: Spark wrote {len(written)} data files, expected 1")
        cube = str(uuid.uuid4())
        adds = []
        for path in written:
            src = f"{staged}/{path[len(staged_path) + 1 :]}"
            footer = self.fs.footer(src)
            if footer.num_rows == 0:  # no row survived the deletion vectors, or an empty range
                continue
            rel_dir = output_dir(b.files[0].path, b.partition_values)
            name = output_file_name(b.id, self.plan.codec)
            rel = f"{rel_dir}/{name}" if rel_dir else name
            self.fs.move(src, f"{self.table}/{rel}")
            size, mtime = self.fs.status(f"{self.table}/{rel}")
            stats = stats_from_parquet_metadata(
                footer, self.logical, self.plan.partition_columns, configuration=self.plan.stats_configuration
            )
            add: dict[str, Any] = {
                "path": rel,
                "size": size,
                "partitionValues": dict(b.partition_values),
                "modificationTime": mtime,
                "stats": stats_json(stats),
                "dataChange": False,
            }
            if self.plan.clustering is not None:
                add["tags"] = {ZCUBE_ID: cube, ZCUBE_ZORDER_BY: self.plan.clustering.zorder_by_tag}
                add["clusteringProvider"] = PROVIDER
            adds.append(add)
        self.fs.delete(staged)
        return adds

    def run(self, max_parallel_bins: int | None = None) -> SparkRewrite:
        started = time.perf_counter()
        parallel = max_parallel_bins or max(1, int(self.spark.sparkContext.defaultParallelism))
        adds: list[dict[str, Any]] = []
        removes: list[str] = []
        failures: list[dict[str, Any]] = []

        def one(b: Bin) -> tuple[Bin, list[dict[str, Any]], str | None]:
            try:
                return b, self.rewrite(b), None
            except DeltaLogError as exc:
                return b, [], str(exc)
            except Exception as exc:  # noqa: BLE001 - a failed bin must not lose the others (Py4J/Spark errors)
                log.exception("bin %d failed", b.id)
                return b, [], f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

        try:
            with ThreadPoolExecutor(max_workers=min(parallel, len(self.plan.bins) or 1)) as pool:
                for b, new, error in pool.map(one, self.plan.bins):
                    if error is not None:
                        failures.append({"bin": b.id, "reason": error, "paths": [f.path for f in b.files]})
                        continue
                    adds.extend(new)
                    removes.extend(from_log_path(f.path) for f in b.files)
        finally:
            self.fs.delete(self.staging)
            self.fs.delete_if_empty(f"{self.table}/{STAGING_DIR}")
        request = {
            # Whose request it is: the commit refuses it for any other table, or another plan's state.
            "tableId": self.plan.table_id,
            "readVersion": self.plan.snapshot_version,
            "operation": REORG_OPERATION if self.plan.purge_min_deleted_share is not None else OPERATION,
            "operationParameters": operation_parameters(self.plan, "spark"),
            "dataChange": False,
            "add": adds,
            "remove": removes,
        }
        return SparkRewrite(request=request, failures=failures, seconds=time.perf_counter() - started)


def run_job(
    spark: Any, plan_uri: str, table_uri: str, request_uri: str, max_parallel_bins: int | None = None
) -> SparkRewrite:
    """What ``compaction/spark/main.py`` runs: plan in, commit request out."""
    # The plan and the request usually live on the driver's local disk while the table
    # is on S3: each gets the Hadoop FileSystem of its own URI ("Wrong FS" otherwise).
    plan_fs = HadoopFs(spark, hadoop_uri(plan_uri))
    plan = CompactionPlan.from_json(plan_fs.read_text(hadoop_uri(plan_uri)))
    # The plan is this table's, or the job stops before a bin is read or a file written.
    identity = table_identity(spark, table_uri)
    check_table_id("the compaction plan", "table_id", plan.table_id, identity.table_id, table_uri)
    check_made_at("the compaction plan", "snapshot_version", plan.snapshot_version, identity.version, table_uri)
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
