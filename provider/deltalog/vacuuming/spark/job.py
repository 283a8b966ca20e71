"""The Spark side of vacuum: the plan's anti-join at any size, written as Parquet.

Runs inside ``spark-submit`` (``vacuuming/spark/main.py``) or in a session the caller
owns (:func:`run_job`). The driver of the plan (``plan_vacuum(engine="spark")``) has
read the log's commits and checked everything that needs them; this job reads what
grows with the table and with storage:

1. the checkpoint's file actions (Parquet parts and sidecars, the columns vacuum needs)
   -> file keys, less those the commits after the checkpoint decided (an anti-join) ->
   the protected paths (adds, unexpired tombstones, their deletion vectors) and the
   expired tombstones, made table-relative; written to ``refs/``;
2. what is on storage: the inventory (Parquet), or a listing of the table, one task per
   top-level directory;
3. those files anti-joined with every protected path (the driver's from the commits of
   the retention window included), one row per path (an object listed twice keeps its
   newest row), each judged by its modification time (in-flight files newer than the
   cutoff and implausible times are kept) and given a reason; written to ``plan/`` with
   a ``class`` column, of which ``delete`` rows are the plan.

The per-batch rules are the local engine's (:mod:`deltalog.vacuuming.spark.tasks`); an
error in a task comes back as the report's ``error`` and the plan is not used.
Deleting stays with deltalog (:func:`deltalog.vacuuming.execute_vacuum`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any

from deltalog.vacuuming.spark import tasks
from deltalog.vacuuming.spark.spec import JobReport, VacuumJobSpec
from deltalog.vacuuming.times import PlausibleTimes
from deltalog.write_checks.hidden_paths import HiddenRule

__all__ = ["REPORT_PREFIX", "SPARK_CONF", "configure", "run_job"]

log = logging.getLogger(__name__)

#: Marks the job's one-line JSON report on stdout, read by the launcher.
REPORT_PREFIX = "DELTALOG_VACUUM_REPORT "

#: SparkSession settings the job relies on.
SPARK_CONF = {
    "spark.sql.session.timeZone": "UTC",
    # Arrow batches of this many rows go to the Python tasks (the default 10,000 costs a round trip each).
    "spark.sql.execution.arrow.maxRecordsPerBatch": "131072",
    "spark.sql.files.ignoreMissingFiles": "false",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    # The anti-join of tens of millions of paths: hash each shuffled partition's protected paths
    # rather than sort both sides (sorting strings dominated a sort-merge join here).
    "spark.sql.join.preferSortMergeJoin": "false",
}

#: Up to this many file keys decided by the commits after the checkpoint go to the tasks (an exact
#: set lookup per batch); more are anti-joined in Spark.
BROADCAST_KEYS = 100_000

_DV = "struct<storageType:string,pathOrInlineDv:string,offset:int>"
#: The checkpoint columns read: what vacuum needs of add and remove, nothing else.
CHECKPOINT_SCHEMA = (
    f"add struct<path:string,modificationTime:bigint,deletionVector:{_DV}>, "
    f"remove struct<path:string,deletionTimestamp:bigint,deletionVector:{_DV}>"
)


def configure(builder: Any) -> Any:
    """Apply :data:`SPARK_CONF` to a ``SparkSession.builder``."""
    for k, v in SPARK_CONF.items():
        builder = builder.config(k, v)
    return builder


def _ddl(schema: Any) -> str:
    """A pyarrow schema of strings and longs as Spark DDL."""
    names = {"string": "string", "int64": "bigint", "bool": "boolean"}
    return ", ".join(f"`{f.name}` {names[str(f.type)]}" for f in schema)


class _Job:
    def __init__(self, spark: Any, spec: VacuumJobSpec) -> None:
        from deltalog.vacuuming.spark.tasks import Counters

        self.spark = spark
        self.spec = spec
        self.rule = HiddenRule(spec.partition_dirs, spec.iceberg)
        self.counters = spark.sparkContext.accumulator({}, Counters())
        for k, v in SPARK_CONF.items():
            if k.startswith("spark.sql."):
                spark.conf.set(k, v)

    def error(self) -> tuple[str, str]:
        value = self.counters.value
        return str(value.get("error") or ""), str(value.get("error_kind") or "")

    def refs(self) -> Any:
        """Step 1: the checkpoint's live references, table-relative (``refs/``); None without a checkpoint."""
        spec, spark = self.spec, self.spark
        if not spec.checkpoint_files:
            return None
        from pyspark.sql import functions as F

        counters, uri, cutoff = self.counters, spec.table_uri, spec.cutoff_ms
        rows = spark.read.schema(CHECKPOINT_SCHEMA).parquet(*spec.checkpoint_files)
        refs_ddl = _ddl(tasks.REFS_SCHEMA)
        if spec.decided_count > BROADCAST_KEYS:
            # Many keys decided since the checkpoint (a long tail of commits): an exact anti-join in Spark.
            raw = rows.mapInArrow(lambda b: tasks.checkpoint_refs(b, counters), _ddl(tasks.RAW_REFS_SCHEMA))
            raw = raw.join(spark.read.parquet(spec.decided_keys), "key", "left_anti")
            refs = raw.mapInArrow(lambda b: tasks.resolve_refs(b, uri, cutoff, counters), refs_ddl)
        else:
            decided = _ipc(spark.read.parquet(spec.decided_keys).select("key")) if spec.decided_count else None
            shared = spark.sparkContext.broadcast(decided)
            refs = rows.mapInArrow(
                lambda b: tasks.checkpoint_refs_resolved(b, uri, cutoff, shared.value, counters), refs_ddl
            )
        # Protected paths are kept as 64-bit fingerprints (Spark's xxhash64): the anti-join shuffles longs, not
        # strings. Equal paths hash alike, so a collision can only keep a file, never delete one.
        refs = refs.select(
            F.when(F.col("kind") == "p", F.xxhash64("path")).alias("h"),
            F.when(F.col("kind") == "e", F.col("path")).alias("path"),
            "kind",
        )
        target = f"{spec.output}/refs"
        refs.write.mode("overwrite").parquet(target)
        # With the schema: a job that found nothing writes no file to infer one from.
        return spark.read.schema(f"h bigint, {refs_ddl}").parquet(target)

    def listed(self, window: PlausibleTimes | None) -> Any:
        """Step 2: the table's files on storage (``path``, ``size``, ``modificationTime``)."""
        spec, spark, counters, rule, uri = self.spec, self.spark, self.counters, self.rule, self.spec.table_uri
        listing = _ddl(tasks.LISTING_SCHEMA)
        if spec.inventory:
            frame = spark.read.parquet(spec.inventory).select(*[f"`{c}`" for c in spec.inventory_columns])
            source = spec.inventory_source or spec.inventory
            return frame.mapInArrow(lambda b: _inventory(b, uri, source, rule, window, counters), listing)
        dirs = spark.createDataFrame(spec.listing or [], "dir string, rel string")
        dirs = dirs.repartition(max(1, min(len(spec.listing or []), 4 * spark.sparkContext.defaultParallelism)))
        files = dirs.mapInArrow(lambda b: tasks.list_directories(b, uri, rule, counters), listing)
        if spec.root_files:
            files = files.unionByName(spark.read.parquet(spec.root_files))
        return files

    def _links(self) -> list[str]:
        """Local tables: links in a folder holding a protected file (the tasks report the folders) make the plan
        unsafe here, as the local engine protects files through them; the census runs on the driver."""
        value = self.counters.value
        if value.get("parents_overflow"):
            self.counters.add(
                {
                    "error": f"more than {tasks.MAX_PARENTS:,} folders of this local table hold referenced files: too "
                    "many to look for symbolic links in; vacuum it with the local engine (engine='local')",
                    "error_kind": "OperationRefusedError",
                }
            )
            return []
        return _links_in(self.spec.table_uri, list(value.get("parents") or []))

    def run(self) -> JobReport:
        from pyspark.sql import functions as F

        started = time.perf_counter()
        spec, spark = self.spec, self.spark
        refs = self.refs()
        log.info("vacuum job: the checkpoint's references written (%.1f s)", time.perf_counter() - started)
        error, kind = self.error()
        if error:
            return JobReport(error=error, error_kind=kind, seconds=time.perf_counter() - started)
        window = PlausibleTimes(*spec.window) if spec.window else None

        protected = [refs.filter(F.col("kind") == "p").select("h")] if refs is not None else []
        expired = [refs.filter(F.col("kind") == "e").select("path")] if refs is not None else []
        if spec.protected:
            protected.append(spark.read.parquet(spec.protected).select(F.xxhash64("path").alias("h")))
        if spec.expired:
            expired.append(spark.read.parquet(spec.expired).select("path"))

        if refs is not None and spec.table_uri.startswith("file:"):
            links = self._links()
            log.info("vacuum job: link census of the referenced folders (%.1f s)", time.perf_counter() - started)
            if links:
                return _links_refused(links, started)
            error, kind = self.error()
            if error:
                return JobReport(error=error, error_kind=kind, seconds=time.perf_counter() - started)
        unreferenced = self.listed(window)
        if protected:
            every = protected[0]
            for p in protected[1:]:
                every = every.unionByName(p)
            unreferenced = unreferenced.withColumn("h", F.xxhash64("path")).join(every, "h", "left_anti").drop("h")
        # One row per path: the same object listed twice (merged inventory shards) keeps its newest row.
        unreferenced = unreferenced.groupBy("path").agg(
            F.max("size").alias("size"),
            F.max("modificationTime").alias("modificationTime"),
            F.count("*").alias("copies"),
        )
        if not spec.inventory and spec.table_uri.startswith("file:"):
            uri, counters = spec.table_uri, self.counters
            schema = "path string, size bigint, modificationTime bigint, copies bigint"
            unreferenced = unreferenced.select("path", "size", "modificationTime").mapInArrow(
                lambda b: tasks.fill_times(b, uri, counters), schema
            )
        gone = None
        for e in expired:
            gone = e if gone is None else gone.unionByName(e)
        if gone is not None:
            gone = gone.distinct().withColumn("expired", F.lit(True))
            unreferenced = unreferenced.join(gone, "path", "left")
        else:
            unreferenced = unreferenced.withColumn("expired", F.lit(None).cast("boolean"))
        cutoff = spec.cutoff_ms
        classified = unreferenced.mapInArrow(lambda b: tasks.classify(b, cutoff), _ddl(tasks.CLASSIFIED_SCHEMA))
        target = f"{spec.output}/plan"
        classified.write.mode("overwrite").partitionBy("class").parquet(target)
        log.info("vacuum job: unreferenced files judged and written (%.1f s)", time.perf_counter() - started)
        error, kind = self.error()
        if error:
            return JobReport(error=error, error_kind=kind, seconds=time.perf_counter() - started)
        return self._report(target, started)

    def _report(self, target: str, started: float) -> JobReport:
        from pyspark.sql import functions as F

        value = self.counters.value
        nulls = {k.split(":", 1)[1]: v for k, v in value.items() if k.startswith("nulls:")}
        if nulls:
            column, n = sorted(nulls.items())[0]
            return JobReport(
                error=f"inventory {self.spec.inventory_source}: column {column!r} has {n} empty value(s)",
                error_kind="InvalidArgumentError",
                seconds=time.perf_counter() - started,
            )
        plan = self.spark.read.schema(_ddl(tasks.CLASSIFIED_SCHEMA)).parquet(target)
        by_class = {
            r["class"]: (int(r["n"]), int(r["copies"] or 0), int(r["size"] or 0))
            for r in plan.groupBy("class")
            .agg(F.count("*").alias("n"), F.sum("copies").alias("copies"), F.sum("size").alias("size"))
            .collect()
        }
        examples = [
            r["path"] for r in plan.filter(F.col("class") == tasks.IMPLAUSIBLE).orderBy("path").limit(5).collect()
        ]
        unreferenced_rows = sum(c for _, c, _ in by_class.values())
        listed = int(value.get("listed", 0))
        stats = {
            "files_listed": listed,
            "files_protected": listed - unreferenced_rows,
            "files_too_new": by_class.get(tasks.TOO_NEW, (0, 0, 0))[0],
            "files_without_modification_time": by_class.get(tasks.NO_TIME, (0, 0, 0))[0],
            "files_with_implausible_time": by_class.get(tasks.IMPLAUSIBLE, (0, 0, 0))[0],
            "hidden_entries_skipped": int(value.get("hidden_entries_skipped", 0)),
            "rows_outside_table": int(value.get("rows_outside_table", 0)),
            "directories_listed": int(value.get("directories_listed", 0)),
            "links_skipped": len(value.get("links") or []),
        }
        if value.get("links"):
            return _links_refused(value["links"], started)
        count, _, size = by_class.get(tasks.DELETE, (0, 0, 0))
        return JobReport(
            plan=target,
            num_files=count,
            size=size,
            stats=stats,
            implausible_examples=examples,
            oldest_live_ms=value.get("oldest_live_ms"),
            seconds=time.perf_counter() - started,
        )


def _ipc(frame: Any) -> bytes:
    """A one-column DataFrame as Arrow IPC stream bytes (what a broadcast carries to the tasks)."""
    import pyarrow as pa

    table = frame.toArrow()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _links_refused(links: list[str], started: float) -> JobReport:
    return JobReport(
        error=f"the table holds symbolic links ({', '.join(links[:5])}): the Spark engine does not protect files "
        "reached through links; vacuum it with the local engine (engine='local')",
        error_kind="OperationRefusedError",
        seconds=time.perf_counter() - started,
    )


def _links_in(table_uri: str, dirs: list[str]) -> list[str]:
    """Symbolic links in these table-relative folders (local tables: the job runs beside the files)."""
    import pyarrow as pa

    from deltalog.storage.filesystem import Storage
    from deltalog.vacuuming.links import scan_links

    return scan_links(Storage(table_uri), pa.array([f"{d}/x" if d else "x" for d in dirs], pa.string()))


def _inventory(batches: Any, uri: str, source: str, rule: HiddenRule, window: Any, counters: Any) -> Any:
    """The inventory task: the batches' own schema is the scan's (Spark hands over the selected columns)."""
    first = next(batches, None)
    if first is None:
        return iter(())

    def chained() -> Any:
        yield first
        yield from batches

    return tasks.inventory_rows(chained(), uri, first.schema, source, rule, window, counters)


def run_job(spark: Any, spec: VacuumJobSpec) -> JobReport:
    """Plan the vacuum ``spec`` describes in ``spark`` (a session the caller owns); the plan is in ``report.plan``."""
    log.info(
        "vacuum job for %s: cutoff %d, %d checkpoint files", spec.table_uri, spec.cutoff_ms, len(spec.checkpoint_files)
    )
    spark.sparkContext.setJobDescription(f"deltalog vacuum plan of {os.path.basename(spec.table_uri.rstrip('/'))}")
    report = _Job(spark, spec).run()
    return dataclasses.replace(report, table_id=spec.table_id, version=spec.version)
