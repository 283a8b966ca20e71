"""``compact()``: plan, rewrite with an engine, commit with dataChange=false, in one call.

::

    plan = plan_compaction(table)           # nothing written; JSON-able
    outputs = engine(plan)                  # local pyarrow, or a Spark job
    commit_bins(table, plan, outputs)       # OPTIMIZE commit(s), per-bin conflict handling

``plan_only=True`` is the dry run. With ``bins_per_commit`` a long run commits
as it goes (local engine: rewrite a batch of bins, commit it, next batch), so a
crash loses at most one batch of work. What to plan and how to run it are the
fields of :class:`~deltalog.compaction.options.CompactionOptions`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

from deltalog.compaction.batches import batches, commit_work, ready_batches
from deltalog.compaction.options import CompactionOptions, LocalOptions
from deltalog.compaction.plan import CompactionPlan, compaction_operation, plan_from_snapshot
from deltalog.compaction.plan_owner import check_plan_owner
from deltalog.compaction.result import CompactionProgress, CompactionResult
from deltalog.log.load import snapshot_at
from deltalog.protocol.write_gate import check_can_write
from deltalog.storage.table_ref import TableRef, table_storage

__all__ = ["compact"]

log = logging.getLogger(__name__)


def compact(
    table: TableRef,
    *,
    options: CompactionOptions | None = None,
    plan: CompactionPlan | None = None,
    cancel: threading.Event | None = None,
    storage_options: dict[str, Any] | None = None,
    **option_values: Any,
) -> CompactionResult:
    """Compact the table's small files (see the module docstring and :class:`CompactionOptions`).

    ``options`` says what to compact and how; its fields may also be given as keyword
    arguments (``compact(t, target_size="64m", engine="spark")``), which replace those of
    ``options``. A name that is no option is a TypeError.

    ``purge_deletion_vectors=True`` rewrites instead the files whose deletion vector hides
    more than ``min_deleted_share`` of their rows (default 0: any DV), applying it, in a
    ``REORG`` commit as Delta Spark's ``REORG TABLE ... APPLY (PURGE)``.
    ``zorder_by`` (column names) rewrites every file of each partition along a Z curve of
    those columns, cut into target-size files (``OPTIMIZE ... ZORDER BY``).
    On a table with liquid clustering compaction clusters instead of bin-packing
    (:mod:`deltalog.compaction.liquid`); ``full=True`` also re-clusters files clustered by
    other columns (``OPTIMIZE ... FULL``). All three run on both engines.

    ``deadline`` (a ``time.monotonic()`` value; local engine) stops the work between
    batches once passed: every finished batch is committed, the bins not started are
    reported as skipped with kind ``"deferred"`` (the next run plans them again). With
    a deadline and no ``bins_per_commit``, every bin is its own commit (the bins behind a
    writers' gate still commit together, once per quiet moment).

    ``writer_aware`` (default True) minds the DELETE/UPDATE/MERGE writers of the table's recent
    log (:mod:`deltalog.compaction.writer_aware`): files where none works compact first, in
    their own commits; each batch where one works is rewritten, then committed at a quiet
    moment of that writer (waiting at most ``writer_wait_seconds``, default 60, else deferred);
    files a writer is working on, or where writers leave no quiet moment, are deferred. The
    plan, the result and the history say which files were deferred and why.

    ``plan`` runs a plan made earlier (the planning options are then ignored).
    ``spark_options`` go to :func:`deltalog.compaction.spark.submit.run_spark`
    (``master``, ``spark_submit``, ``conf``, ``timeout``). ``run_hooks=False``
    leaves the post-commit hooks (checkpoint, log cleanup) to a separate task.
    ``cancel`` (set from another thread, e.g. an Airflow ``on_kill``) stops the run at
    the next bin: bins already committed stay, the rest is reported as aborted (or
    ``OperationCancelledError`` when nothing was committed).
    """
    started = time.perf_counter()
    opts = CompactionOptions.of(options, option_values, "compact")
    engine = opts.engine or "local"
    storage = table_storage(table, storage_options)
    # The gate, before any data file is read or written: this engine may compact the table's
    # protocol and, unless this is a dry run, the storage can commit the result.
    latest = snapshot_at(storage)
    check_can_write(
        storage,
        latest.protocol,
        "compact",
        compaction_operation(engine),
        latest.metadata.configuration,
        commits=not opts.plan_only,
        schema_string=latest.metadata.schema_string,
        partition_columns=latest.metadata.partition_columns,
    )
    snapshot = None
    progress = CompactionProgress(engine)
    if plan is None:
        snapshot = latest
        plan = plan_from_snapshot(snapshot, storage.uri, opts, engine=engine)
        runnable = plan
    else:
        # A plan made elsewhere: this table's (id, version, its own files) or refused, before any bin is read.
        progress.skipped.extend(check_plan_owner(storage, plan, latest))
        gone = {s.bin_id for s in progress.skipped}
        runnable = dataclasses.replace(plan, bins=[b for b in plan.bins if b.id not in gone]) if gone else plan
    if opts.plan_only or not runnable.bins:
        return progress.result(storage.uri, plan, time.perf_counter() - started, plan_only=opts.plan_only)
    local = opts.local_options or LocalOptions(max_workers=opts.max_workers)
    bins_per_commit = opts.bins_per_commit
    if opts.deadline is not None and bins_per_commit is None:
        bins_per_commit = 1
    if engine == "spark":
        # The Spark engine is imported here only, when asked for: pyspark is optional.
        from deltalog.compaction.spark.job import check_spark_can_rewrite
        from deltalog.compaction.spark.submit import run_spark

        check_spark_can_rewrite(runnable)
        t0 = time.perf_counter()
        outputs, skipped = run_spark(storage, runnable, cancel=cancel, **(opts.spark_options or {}))
        progress.engine_seconds = time.perf_counter() - t0
        progress.skipped.extend(skipped)
        work = ready_batches(runnable, outputs, bins_per_commit)
    else:
        work = [(batch, None) for batch in batches(runnable.bins, bins_per_commit, opts.bins_per_commit)]
    commit_work(
        storage,
        runnable,
        work,
        progress,
        local,
        snapshot=snapshot,
        run_hooks=opts.run_hooks,
        cancel=cancel,
        deadline=opts.deadline,
        writer_wait_seconds=opts.writer_wait_seconds,
    )
    result = progress.result(storage.uri, plan, time.perf_counter() - started)
    log.info(
        "compaction of %s: %d commit(s), %d of %d bins committed, %d skipped in %.2fs",
        storage.uri,
        len(result.commits),
        len(result.committed_bins),
        len(plan.bins),
        len(result.skipped),
        result.seconds,
    )
    return result
