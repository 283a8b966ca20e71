"""Planning a vacuum with the Spark engine: every check that needs the log here, the anti-join in Spark.

``plan_vacuum(table, engine="spark")`` comes here. What stays in this process is what
the local engine does before it reads the file lists, and everything that needs the
table's storage options: the protocol and retention checks, the retention window
(commit times, the commits inside it), the JSON commits after the checkpoint (a
:class:`~deltalog.log.snapshot.SnapshotHead`: the checkpoint's file actions are left
unread) and the inventory's columns. The job (:mod:`deltalog.vacuuming.spark.job`)
gets locations and numbers, reads the checkpoint's file actions and the inventory (or
lists the table) and writes the plan as Parquet; this process reads back its counts,
and the files too unless they are more than :data:`LOAD_LIMIT` (then the plan stays
spilled and deleting streams it).

The deletion is the core's either way (:func:`deltalog.vacuuming.execute_vacuum`):
re-validation against the commits since planning, hidden paths, paths leaving the
root, links, the bounded pool of workers, batch by batch.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog import errors
from deltalog._arrow_utils import column_sum
from deltalog.engines.spark.hadoop import hadoop_uri
from deltalog.engines.spark.submit import DEFAULT_MASTER, spark_submit
from deltalog.errors import EngineError, ForeignHandoffError, InvalidArgumentError, OperationRefusedError
from deltalog.log.checkpoint_reader import check_parquet_file_actions
from deltalog.log.history import format_ms
from deltalog.log.listing import LogListing
from deltalog.log.load import snapshot_head_at
from deltalog.log.snapshot import SnapshotHead
from deltalog.protocol.features import Operation
from deltalog.protocol.write_gate import check_can_write
from deltalog.storage.filesystem import Storage
from deltalog.vacuuming import paths as vacuum_paths
from deltalog.vacuuming.iceberg_guard import IcebergGuard, empty_kept, iceberg_rule
from deltalog.vacuuming.inventory import scan_inventory
from deltalog.vacuuming.links import describe, scan_links
from deltalog.vacuuming.listing import LISTING_SCHEMA, top_level
from deltalog.vacuuming.retained import VACUUM_COLUMNS, RetainedState, retained_state
from deltalog.vacuuming.retention import resolve_retention
from deltalog.vacuuming.spark.job import REPORT_PREFIX
from deltalog.vacuuming.spark.spec import JobReport, VacuumJobSpec
from deltalog.vacuuming.times import PlausibleTimes, plausible_times
from deltalog.vacuuming.vacuum_plan import (
    SPILL_BATCH_ROWS,
    VacuumPlan,
    log_plan,
    next_cursor,
    previous_cursor_of,
    without_file_lists,
)
from deltalog.vacuuming.verdict import PLAN_SCHEMA
from deltalog.write_checks.hidden_paths import HiddenRule, partition_dir_names

__all__ = ["LOAD_LIMIT", "SPARK_OPTIONS", "SPARK_VACUUM_STORES", "plan_on_spark", "vacuum_job_script"]

log = logging.getLogger(__name__)

#: Plans of up to this many files are read back into memory; larger ones stay spilled as Parquet.
LOAD_LIMIT = 1_000_000
#: The keys ``spark_options`` may hold (``spark-submit`` settings; ``session``: run in a SparkSession of
#: the caller's instead, e.g. in a notebook or a test).
#: Stores the Spark vacuum job reaches (besides local paths): S3 through s3a.
SPARK_VACUUM_STORES = ("s3", "s3a")
SPARK_OPTIONS = ("master", "spark_submit", "conf", "timeout", "session", "work_dir")


def vacuum_job_script() -> str:
    """Path of the job's ``spark-submit`` entry script."""
    return str(Path(__file__).with_name("main.py"))


def _write(table: pa.Table, path: str) -> str:
    pq.write_table(table, path)
    return "file://" + os.path.abspath(path)


def _refuse(report: JobReport) -> None:
    """Raise the job's error as the deltalog error class the task raised (a refusal if unknown)."""
    cls = getattr(errors, report.error_kind, None) or getattr(vacuum_paths, report.error_kind, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.DeltaLogError)):
        cls = OperationRefusedError
    raise cls(report.error)


def _check_options(spark_options: dict[str, Any] | None) -> dict[str, Any]:
    options = dict(spark_options or {})
    unknown = sorted(set(options) - set(SPARK_OPTIONS))
    if unknown:
        raise InvalidArgumentError(f"unknown spark_options {unknown}: use {', '.join(SPARK_OPTIONS)}")
    return options


def _run(spec: VacuumJobSpec, options: dict[str, Any], spec_path: str, cancel: threading.Event | None) -> JobReport:
    """The job in the caller's session, or through ``spark-submit``."""
    session = options.get("session")
    if session is not None:
        from deltalog.vacuuming.spark.job import run_job

        return run_job(session, spec)
    Path(spec_path).write_text(spec.to_json())
    run = spark_submit(
        vacuum_job_script(),
        ["--spec", spec_path],
        what="Spark vacuum job",
        undone="nothing was deleted",
        report_prefix=REPORT_PREFIX,
        master=options.get("master") or DEFAULT_MASTER,
        spark_submit=options.get("spark_submit"),
        conf=options.get("conf"),
        timeout=options.get("timeout"),
        cancel=cancel,
        check=False,
    )
    if run.report:
        return JobReport.from_dict(run.report)
    raise EngineError(f"the Spark vacuum job failed (exit {run.returncode}): {run.error}; nothing was deleted")


class _Workspace:
    """The job's folder: removed once the plan no longer needs it (at once, or with a spilled plan)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._finalizer = weakref.finalize(self, shutil.rmtree, path, True)

    def remove(self) -> None:
        self._finalizer()


def _local(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri.removeprefix("file:")


def _spec(
    storage: Storage,
    head: SnapshotHead,
    retained: RetainedState,
    rule: HiddenRule,
    cutoff: int,
    inventory: str | None,
    columns: list[str],
    source: str,
    window: PlausibleTimes | None,
    work: str,
) -> tuple[VacuumJobSpec, dict[str, int]]:
    """The job's spec and its side files in ``work``; also what listing the root (here) counted."""
    decided = None
    if len(head.decided_keys):
        decided = _write(pa.table({"key": head.decided_keys}), os.path.join(work, "decided.parquet"))
    protected = _write(pa.table({"path": retained.protected}), os.path.join(work, "protected.parquet"))
    expired = _write(pa.table({"path": retained.expired_tombstones}), os.path.join(work, "expired.parquet"))
    checkpoint = [hadoop_uri(storage.full_uri(storage.relative(f.path))) for f in head.deferred]
    listing: list[list[str]] | None = None
    root_files: str | None = None
    counts: dict[str, int] = {}
    if inventory is None:
        top, subdirs = top_level(storage, rule)
        if top.links:
            raise OperationRefusedError(
                f"the table holds symbolic links ({describe(storage, top.links)}): the Spark engine does not protect "
                "files reached through links; vacuum it with the local engine (engine='local')"
            )
        listing = [[d, rel] for d, rel in subdirs]
        n = len(top.paths)
        root = pa.Table.from_arrays(
            [
                pa.array(top.paths, pa.string()),
                pa.array(top.sizes, pa.int64()) if top.sizes else pa.nulls(n, pa.int64()),
                pa.array(top.mtimes, pa.int64()) if top.mtimes else pa.nulls(n, pa.int64()),
            ],
            schema=LISTING_SCHEMA,
        )
        root_files = _write(root, os.path.join(work, "root.parquet")) if n else None
        # Root files are listed (and protected unless the job plans them); hidden entries and folders seen here.
        counts = {
            "files_listed": n,
            "files_protected": n,
            "hidden_entries_skipped": top.hidden,
            "directories_listed": len(top.dirs),
        }
    spec = VacuumJobSpec(
        table_uri=storage.uri,
        table_hadoop_uri=hadoop_uri(storage.uri),
        cutoff_ms=cutoff,
        output="file://" + os.path.abspath(os.path.join(work, "out")),
        checkpoint_files=checkpoint,
        decided_keys=decided,
        decided_count=len(head.decided_keys),
        protected=protected,
        expired=expired,
        inventory=hadoop_uri(inventory) if inventory is not None else None,
        inventory_columns=columns,
        inventory_source=source,
        listing=listing,
        root_files=root_files,
        partition_dirs=partition_dir_names(head.snapshot.metadata),
        iceberg=rule.iceberg,
        window=[window.earliest_ms, window.latest_ms, window.earliest_basis] if window is not None else None,
        table_id=head.snapshot.metadata.id,
        version=head.snapshot.version,
    )
    return spec, counts


def _plan_files(report: JobReport) -> tuple[pa.Table, str | None]:
    """The planned files in memory (sorted by path), or where they stay when there are more than :data:`LOAD_LIMIT`."""
    location = os.path.join(_local(report.plan), "class=delete")
    if report.num_files == 0 or not os.path.isdir(location):
        return PLAN_SCHEMA.empty_table(), None
    if report.num_files > LOAD_LIMIT:
        return PLAN_SCHEMA.empty_table(), location
    import pyarrow.dataset as ds

    files = ds.dataset(location, format="parquet").to_table(columns=PLAN_SCHEMA.names)
    return files.cast(PLAN_SCHEMA).sort_by("path"), None


def _without_iceberg_files(location: str, iceberg: IcebergGuard, work: str) -> tuple[str, tuple[int, int], pa.Table]:
    """A spilled plan less the files Iceberg readers may still need: streamed a batch at a time into a new
    folder of the workspace; returns it, its (count, bytes) and the files kept."""
    import pyarrow.dataset as ds

    target = os.path.join(work, "plan-without-iceberg")
    os.makedirs(target, exist_ok=True)
    count = size = 0
    kept: list[pa.Table] = []
    dataset = ds.dataset(location, format="parquet")
    for i, batch in enumerate(dataset.to_batches(columns=PLAN_SCHEMA.names, batch_size=SPILL_BATCH_ROWS)):
        if not batch.num_rows:
            continue
        rest, keep = iceberg.split(pa.Table.from_batches([batch]).cast(PLAN_SCHEMA))
        if keep.num_rows:
            kept.append(keep)
        if rest.num_rows:
            pq.write_table(rest, os.path.join(target, f"part-{i:05d}.parquet"))
            count += rest.num_rows
            size += column_sum(rest, "size")
    return target, (count, size), (pa.concat_tables(kept) if kept else empty_kept())


def plan_on_spark(
    storage: Storage,
    listing: LogListing,
    *,
    mode: str,
    retention_hours: float | None,
    allow_short_retention: bool,
    now_ms: int | None,
    inventory: str | pa.Table | None,
    spark_options: dict[str, Any] | None,
    cancel: threading.Event | None = None,
    started: float | None = None,
) -> VacuumPlan:
    """Plan a full vacuum of ``storage`` with the Spark job (see the module's docstring); the checks of
    :func:`deltalog.vacuuming.plan_vacuum` come first, in the same order."""
    t0 = started if started is not None else time.perf_counter()
    options = _check_options(spark_options)
    if not (storage.is_local or storage.protocol in SPARK_VACUUM_STORES):
        raise OperationRefusedError(
            f"the Spark vacuum engine runs on local and S3 tables, not on {storage.protocol}:// ones yet "
            "(its job gets no Azure or GCS connector settings); vacuum this table with engine='local'"
        )
    if mode != "full":
        raise InvalidArgumentError(
            "the Spark engine plans full vacuums (listing or inventory); lite mode reads only the commits since "
            "the last vacuum and runs on the local engine (engine='local')"
        )
    if isinstance(inventory, pa.Table):
        raise InvalidArgumentError("the Spark engine reads an inventory from storage: give its path, not a table")
    if isinstance(inventory, str) and inventory.lower().endswith((".csv", ".csv.gz", ".csv.bz2")):
        raise InvalidArgumentError("the Spark engine reads Parquet inventories; give a Parquet one, or engine='local'")
    head = snapshot_head_at(storage, listing, VACUUM_COLUMNS)
    snapshot = head.snapshot
    check_can_write(
        storage, snapshot.protocol, "vacuum", Operation.VACUUM, snapshot.metadata.configuration, commits=False
    )
    # The job reads the checkpoint's add/remove rows itself: the checks a snapshot load makes on
    # them (paths, sizes, deletion-vector descriptors) run here first, so a malformed log is
    # refused before anything is submitted, as every other command refuses it.
    check_parquet_file_actions(storage, [f.path for f in head.deferred])
    retention = resolve_retention(snapshot.metadata.configuration, retention_hours, allow_short_retention, now_ms)
    # What Iceberg readers need is read here, before the job: a refusal submits nothing, and the job's
    # verdicts are filtered through it (the local engine's rule, after the same verdicts).
    iceberg = IcebergGuard.load(storage, retention.cutoff_ms)
    rule = iceberg_rule(snapshot.metadata, iceberg)
    cutoff = retention.cutoff_ms
    log.info(
        "planning full vacuum of %s at version %d on Spark: retention %.4g hours, cutoff %s, %d checkpoint files",
        storage.uri,
        snapshot.version,
        retention.retention_hours,
        format_ms(cutoff),
        len(head.deferred),
    )
    # What the commits after the checkpoint (and the window's commits) protect: the local engine's rule.
    retained = retained_state(snapshot, listing, cutoff)
    warnings = list(retention.warnings) + retained.warnings
    if storage.is_local:
        links = scan_links(storage, retained.protected)
        if links:
            raise OperationRefusedError(
                f"the table holds symbolic links ({describe(storage, links)}): the Spark engine does not protect "
                "files reached through links; vacuum it with the local engine (engine='local')"
            )
    window = plausible_times() if inventory is not None else None
    columns: list[str] = []
    source = ""
    if inventory is not None:
        scan = scan_inventory(storage, inventory, rule, window)  # its columns, checked before any job runs
        columns = ["path", scan.size_name, "modificationTime"] + (["isDir"] if "isDir" in scan.schema.names else [])
        source = scan.source

    work = tempfile.mkdtemp(prefix="deltalog-vacuum-", dir=options.get("work_dir"))
    workspace = _Workspace(work)
    try:
        spec, root_counts = _spec(storage, head, retained, rule, cutoff, inventory, columns, source, window, work)
        report = _run(spec, options, os.path.join(work, "spec.json"), cancel)
        if report.error:
            _refuse(report)
        if (report.table_id, report.version) != (spec.table_id, spec.version):
            raise ForeignHandoffError(
                f"the Spark vacuum job's report answers table {report.table_id or '?'} at version {report.version}, "
                f"not the plan of {storage.uri} (table {spec.table_id}, version {spec.version}); nothing was deleted"
            )
        stats = dict(report.stats)
        # The root was listed here (its files joined in the job): its files, hidden entries and folders count too.
        for key, n in root_counts.items():
            stats[key] = stats.get(key, 0) + n
        files, location = _plan_files(report)
        kept = empty_kept()
        spilled = (report.num_files, report.size)
        if iceberg is not None:
            if location is None:
                files, kept = iceberg.split(files)
            else:
                location, spilled, kept = _without_iceberg_files(location, iceberg, work)
            stats.update(iceberg.stats(), files_kept_for_iceberg=kept.num_rows)
            warnings.extend(iceberg.references.warnings)
    except BaseException:
        workspace.remove()
        raise
    if location is None:
        workspace.remove()
    if report.implausible_examples:
        warnings.append(
            f"{stats['files_with_implausible_time']} unreferenced file(s) have a modification time before 2000 "
            f"(e.g. {', '.join(report.implausible_examples)}); such a time is not believable, so they are kept"
        )
    stats["commits_read_for_window"] = retained.commits_read
    previous_cursor = previous_cursor_of(storage, snapshot.version, warnings)
    plan = VacuumPlan(
        table_uri=storage.uri,
        mode="full",
        version=snapshot.version,
        retention=retention,
        fully_readable_from=retained.fully_readable_from,
        window_start=retained.window_start,
        files=files,
        directories=[],
        source="inventory" if inventory is not None else "listing",
        cursor=next_cursor(retained.window_start, previous_cursor),
        previous_cursor=previous_cursor,
        stats=stats,
        warnings=warnings,
        planning_seconds=time.perf_counter() - t0,
        snapshot=without_file_lists(snapshot),
        engine="spark",
        files_location=location,
        spilled=spilled if location else (0, 0),
        workspace=workspace if location else None,
        kept_for_iceberg=kept,
        iceberg=iceberg,
    )
    log_plan(plan, report.seconds)
    return plan
