"""Compaction (OPTIMIZE): plan bins of small files, rewrite them with an engine, commit with dataChange=false.

``compact()`` ties the three steps together::

    plan = plan_compaction(table)           # nothing written; JSON-able
    outputs = engine(plan)                  # local pyarrow, or a Spark job
    commit_bins(table, plan, outputs)       # OPTIMIZE commit(s), per-bin conflict handling

``plan_only=True`` is the dry run. With ``bins_per_commit`` a long run commits
as it goes (local engine: rewrite a batch of bins, commit it, next batch), so a
crash loses at most one batch of work.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from deltalog._flags import require_bools, require_workers
from deltalog.compaction.commit import CompactionCommit, commit_bins, discard
from deltalog.compaction.local import LocalOptions, run_local
from deltalog.compaction.outcome import BinOutput, BinSkipped
from deltalog.compaction.plan import Bin, CompactionPlan, check_compactable, plan_compaction, plan_from_snapshot
from deltalog.compaction.purge import check_share
from deltalog.compaction.result import CompactionProgress, CompactionResult
from deltalog.errors import DeltaLogError, InvalidArgumentError, OperationCancelledError
from deltalog.log.load import snapshot_at
from deltalog.log.snapshot import Snapshot
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage

__all__ = [
    "Bin",
    "BinOutput",
    "BinSkipped",
    "CompactionCommit",
    "CompactionPlan",
    "CompactionResult",
    "LocalOptions",
    "commit_outputs",
    "compact",
    "plan_compaction",
]

log = logging.getLogger(__name__)

ENGINES = ("local", "spark")


def _batches(bins: list[Bin], size: int | None) -> list[list[Bin]]:
    if not size:
        return [bins]
    return [bins[i : i + size] for i in range(0, len(bins), size)]


def compact(
    table: TableRef,
    *,
    target_size: int | str | None = None,
    where: str | None = None,
    engine: str = "local",
    plan_only: bool = False,
    min_files: int = 2,
    max_bins: int | None = None,
    small_file_threshold: int | str | None = None,
    plan: CompactionPlan | None = None,
    bins_per_commit: int | None = None,
    max_workers: int | None = None,
    local_options: LocalOptions | None = None,
    spark_options: dict[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
    run_hooks: bool = True,
    deadline: float | None = None,
    cancel: threading.Event | None = None,
    purge_deletion_vectors: bool = False,
    min_deleted_share: float | None = None,
    zorder_by: list[str] | None = None,
    full: bool = False,
) -> CompactionResult:
    """Compact the table's small files (see the module docstring).

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
    a deadline and no ``bins_per_commit``, every bin is its own commit.

    ``plan`` runs a plan made earlier (planning arguments are then ignored).
    ``spark_options`` go to :func:`deltalog.engines.spark.submit.run_spark`
    (``master``, ``spark_submit``, ``conf``, ``timeout``). ``run_hooks=False``
    leaves the post-commit hooks (checkpoint, log cleanup) to a separate task.
    ``cancel`` (set from another thread, e.g. an Airflow ``on_kill``) stops the run at
    the next bin: bins already committed stay, the rest is reported as aborted (or
    ``OperationCancelledError`` when nothing was committed).
    """
    started = time.perf_counter()
    require_bools(plan_only=plan_only, run_hooks=run_hooks, purge_deletion_vectors=purge_deletion_vectors, full=full)
    purge_share = _purge_share(purge_deletion_vectors, min_deleted_share, engine)
    if max_workers is not None:
        require_workers(max_workers)
    if engine not in ENGINES:
        raise InvalidArgumentError(f"unknown compaction engine {engine!r}: use one of {', '.join(ENGINES)}")
    if bins_per_commit is not None and (not isinstance(bins_per_commit, int) or bins_per_commit < 1):
        raise InvalidArgumentError(f"bins_per_commit must be a positive integer, got {bins_per_commit!r}")
    if deadline is not None and engine != "local":
        raise InvalidArgumentError("a time budget (deadline) stops between bins of the local engine only")
    storage = table_storage(table, storage_options)
    snapshot = None
    if plan is None:
        snapshot = snapshot_at(storage)
        plan = plan_from_snapshot(
            snapshot,
            storage.uri,
            target_size,
            where,
            min_files,
            max_bins,
            small_file_threshold,
            engine=engine,
            purge_min_deleted_share=purge_share,
            zorder_by=zorder_by,
            full=full,
        )
    else:
        # A plan made elsewhere: check this engine may compact the table before any file is written.
        check_compactable(snapshot_at(storage), engine)
    progress = CompactionProgress(engine)
    if plan_only or not plan.bins:
        return progress.result(storage.uri, plan, time.perf_counter() - started, plan_only=plan_only)
    options = local_options or LocalOptions(max_workers=max_workers)
    if deadline is not None and bins_per_commit is None:
        bins_per_commit = 1
    if engine == "spark":
        # The Spark engine is imported here only, when asked for: pyspark is optional.
        from deltalog.engines.spark.compaction_job import check_spark_can_rewrite
        from deltalog.engines.spark.submit import run_spark

        check_spark_can_rewrite(plan)
        t0 = time.perf_counter()
        outputs, skipped = run_spark(storage, plan, cancel=cancel, **(spark_options or {}))
        progress.engine_seconds = time.perf_counter() - t0
        progress.skipped.extend(skipped)
        work = _ready_batches(plan, outputs, bins_per_commit)
    else:
        work = [(batch, None) for batch in _batches(plan.bins, bins_per_commit)]
    _commit_work(
        storage, plan, work, progress, options, snapshot=snapshot, run_hooks=run_hooks, cancel=cancel, deadline=deadline
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


def _purge_share(purge: bool, min_deleted_share: float | None, engine: str) -> float | None:
    """The purge threshold when purging (default 0: any DV); refuses what a purge cannot mean."""
    if not purge:
        if min_deleted_share is not None:
            raise InvalidArgumentError("min_deleted_share applies to a deletion-vector purge only")
        return None
    return check_share(0.0 if min_deleted_share is None else min_deleted_share)


def commit_outputs(
    table: TableRef,
    plan: CompactionPlan,
    outputs: list[BinOutput],
    skipped: list[BinSkipped] | tuple[BinSkipped, ...] = (),
    *,
    engine: str,
    bins_per_commit: int | None = None,
    run_hooks: bool = True,
    cancel: threading.Event | None = None,
    engine_seconds: float = 0.0,
    storage_options: dict[str, Any] | None = None,
) -> CompactionResult:
    """Commit bins an engine has already rewritten (``outputs``), bin by bin conflict handling included.

    The last step of any engine that runs outside this process (the Spark job): a bin
    whose input a concurrent writer removed is dropped and its new file deleted, the
    others commit (``bins_per_commit`` at a time). ``skipped`` are the bins the engine
    could not rewrite; they are reported, not committed.
    """
    started = time.perf_counter()
    require_bools(run_hooks=run_hooks)
    storage = table_storage(table, storage_options)
    progress = CompactionProgress(engine, skipped=list(skipped), engine_seconds=engine_seconds)
    if plan.bins:
        work = _ready_batches(plan, outputs, bins_per_commit)
        _commit_work(storage, plan, work, progress, LocalOptions(), snapshot=None, run_hooks=run_hooks, cancel=cancel)
    return progress.result(storage.uri, plan, time.perf_counter() - started)


def _ready_batches(
    plan: CompactionPlan, outputs: list[BinOutput], bins_per_commit: int | None
) -> list[tuple[list[Bin], list[BinOutput] | None]]:
    by_bin = {o.bin_id: o for o in outputs}
    return [(batch, [by_bin[b.id] for b in batch if b.id in by_bin]) for batch in _batches(plan.bins, bins_per_commit)]


def _commit_work(
    storage: Storage,
    plan: CompactionPlan,
    work: list[tuple[list[Bin], list[BinOutput] | None]],
    result: CompactionProgress,
    options: LocalOptions,
    *,
    snapshot: Snapshot | None,
    run_hooks: bool,
    cancel: threading.Event | None,
    deadline: float | None = None,
) -> None:
    """Rewrite (local engine: ``None`` outputs) and commit each batch in turn, into ``result``.

    A failed commit keeps what earlier batches committed and stops; a cancel stops before
    the next batch (the bins of a batch already rewritten are still committed first); a
    passed ``deadline`` defers the batches not rewritten yet to the next run.
    """
    for i, (batch, ready) in enumerate(work):
        if ready is None and deadline is not None and time.monotonic() >= deadline:
            later = [b for bins, _ in work[i:] for b in bins]
            result.skipped.extend(BinSkipped(b.id, "deferred: the time budget is spent", "deferred") for b in later)
            log.info("compaction of %s: time budget spent, %d bins deferred to the next run", storage.uri, len(later))
            return
        if cancel is not None and cancel.is_set():
            _stop(storage, work, i, result, "cancelled before this bin was committed")
            if not result.commits:
                raise OperationCancelledError(f"compaction of {storage.uri} was cancelled; nothing was committed")
            result.error = "cancelled"
            return
        if ready is None:
            t0 = time.perf_counter()
            ready, skipped = run_local(storage, plan, batch, options, cancel=cancel)
            result.engine_seconds += time.perf_counter() - t0
            result.skipped.extend(skipped)
        if not ready:
            continue
        try:
            record, lost = commit_bins(
                storage, plan, ready, engine=result.engine, snapshot=snapshot, run_hooks=run_hooks
            )
            snapshot = None  # after our own commit the table has moved on
        except DeltaLogError as exc:
            # Nothing of this batch landed; later batches are not attempted.
            if not result.commits:
                discard(storage, [o for _, outs in work[i + 1 :] if outs for o in outs])
                raise
            _stop(storage, work, i, result, f"not committed: {exc}", include_current=True)
            result.error = str(exc)
            return
        result.skipped.extend(lost)
        if record is not None:
            result.commits.append(record)
            result.outputs.extend(o for o in ready if o.bin_id in record.bins)


def _stop(
    storage: Storage,
    work: list[tuple[list[Bin], list[BinOutput] | None]],
    i: int,
    result: CompactionProgress,
    reason: str,
    *,
    include_current: bool = False,
) -> None:
    """Give up on batches ``i`` onwards: delete their rewritten files, report their bins as aborted."""
    discard(storage, [o for _, outs in work[i + 1 :] if outs for o in outs])
    if not include_current:
        discard(storage, work[i][1] or [])
    aborted = [b for later, _ in work[i:] for b in later]
    result.skipped.extend(BinSkipped(b.id, reason, "aborted") for b in aborted)
