"""Committing rewritten bins a batch at a time: the last step of every compaction engine.

A batch's bins are rewritten (the local engine, here, just before) or already written
(an engine that runs elsewhere, such as the Spark job), then committed together in one
OPTIMIZE commit (:func:`deltalog.compaction.commit.commit_bins`, with its per-bin conflict
handling). A failed commit keeps what earlier batches committed and stops; a cancel stops
before the next batch; a passed deadline defers the batches not rewritten yet. A bin whose
input file is missing stops the run before anything more is committed: its batch's
rewritten files are deleted, later batches are not attempted, and the result (or, when
nothing was committed, the error) says which bins committed before, which file was
missing and how many bins were left.

Bins behind a writers' gate (:mod:`deltalog.compaction.writer_aware`) come in batches of their
own, one per gate, after the bins that commit at once. On the local engine a bin-packing's gated
batch is planned again, rewritten and committed inside each quiet moment of its writers
(:mod:`deltalog.compaction.quiet_batches`); any other gated batch waits, once rewritten, for a
quiet moment (:func:`deltalog.compaction.quiet_moment.wait_for_quiet_moment`). Either is
deferred, its new files deleted, when none comes in time.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

from deltalog._flags import require_bools
from deltalog.compaction.commit import commit_bins, discard
from deltalog.compaction.engine_output import BinOutput, BinSkipped
from deltalog.compaction.local import run_local
from deltalog.compaction.options import LocalOptions
from deltalog.compaction.plan import Bin, CompactionPlan
from deltalog.compaction.quiet_batches import WRITERS_DEFERRAL, commit_gated, replans
from deltalog.compaction.quiet_moment import DEFAULT_WRITER_WAIT_SECONDS, QuietMoment, wait_for_quiet_moment
from deltalog.compaction.result import CompactionProgress, CompactionResult
from deltalog.compaction.writer_aware import WriterGate
from deltalog.errors import DeltaLogError, MissingDataFileError, OperationCancelledError
from deltalog.log.snapshot import Snapshot
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage

__all__ = ["batches", "commit_outputs", "commit_work", "ready_batches"]

log = logging.getLogger(__name__)


def batches(bins: list[Bin], size: int | None, gated_size: int | None = None) -> list[list[Bin]]:
    """The bins in commit batches: those no gate holds first, ``size`` at a time (None: all), then each
    gate's bins together (``gated_size`` at a time: every wait for a quiet moment costs a writer cycle)."""
    groups: dict[str | None, list[Bin]] = {}
    for b in bins:
        groups.setdefault(b.gate, []).append(b)
    out: list[list[Bin]] = []
    for gate in sorted(groups, key=lambda g: g is not None):  # stable: the gates in plan order
        group, n = groups[gate], size if gate is None else gated_size
        out.extend([group] if not n else [group[i : i + n] for i in range(0, len(group), n)])
    return out


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
    writer_wait_seconds: float | None = None,
) -> CompactionResult:
    """Commit bins an engine has already rewritten (``outputs``), bin by bin conflict handling included.

    The last step of any engine that runs outside this process (the Spark job): a bin
    whose input a concurrent writer removed is dropped and its new file deleted, the
    others commit (``bins_per_commit`` at a time). ``skipped`` are the bins the engine
    could not rewrite; they are reported, not committed. Bins behind a writers' gate wait for a
    quiet moment of their writers, at most ``writer_wait_seconds`` (default 60) per batch.
    """
    started = time.perf_counter()
    require_bools(run_hooks=run_hooks)
    storage = table_storage(table, storage_options)
    progress = CompactionProgress(engine, skipped=list(skipped), engine_seconds=engine_seconds)
    if plan.bins:
        work = ready_batches(plan, outputs, bins_per_commit)
        commit_work(
            storage,
            plan,
            work,
            progress,
            LocalOptions(),
            snapshot=None,
            run_hooks=run_hooks,
            cancel=cancel,
            writer_wait_seconds=writer_wait_seconds,
        )
    return progress.result(storage.uri, plan, time.perf_counter() - started)


def ready_batches(
    plan: CompactionPlan, outputs: list[BinOutput], bins_per_commit: int | None
) -> list[tuple[list[Bin], list[BinOutput] | None]]:
    by_bin = {o.bin_id: o for o in outputs}
    return [
        (batch, [by_bin[b.id] for b in batch if b.id in by_bin])
        for batch in batches(plan.bins, bins_per_commit, bins_per_commit)
    ]


def commit_work(
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
    writer_wait_seconds: float | None = None,
) -> None:
    """Rewrite (local engine: ``None`` outputs) and commit each batch in turn, into ``result``.

    A failed commit keeps what earlier batches committed and stops; a cancel stops before
    the next batch (the bins of a batch already rewritten are still committed first); a
    passed ``deadline`` defers the batches not rewritten yet to the next run. A batch behind a
    writers' gate waits for their quiet moment once rewritten (at most ``writer_wait_seconds``,
    never past ``deadline``), and is deferred when none comes.
    """
    for i, (batch, ready) in enumerate(work):
        if _stop_for_missing_input(storage, work, i, result):
            return
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
        gate = _gate(plan, batch)
        if ready is None and gate is not None and replans(plan):
            assert plan.writers is not None
            commit_gated(
                storage,
                plan,
                batch,
                gate,
                result,
                options,
                run_hooks=run_hooks,
                cancel=cancel,
                deadline=deadline,
                wait_s=DEFAULT_WRITER_WAIT_SECONDS if writer_wait_seconds is None else writer_wait_seconds,
                force=plan.writers.overriding_objective is not None,
            )
            snapshot = None
            continue
        if ready is None:
            t0 = time.perf_counter()
            ready, skipped = run_local(storage, plan, batch, options, cancel=cancel)
            result.engine_seconds += time.perf_counter() - t0
            result.rewritten_bytes += sum(o.bytes_in for o in ready)
            result.skipped.extend(skipped)
            if any(s.kind == "missing" for s in skipped):
                work[i] = (batch, ready)
                _stop_for_missing_input(storage, work, i, result)
                return
        if not ready:
            continue
        moment = _quiet_moment(storage, plan, batch, deadline, writer_wait_seconds)
        if moment is not None and not moment.ok:
            discard(storage, ready)
            result.skipped.extend(BinSkipped(b.id, f"{WRITERS_DEFERRAL}: {moment.reason}", "deferred") for b in batch)
            log.info("compaction of %s: %d bins deferred: %s", storage.uri, len(batch), moment.reason)
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
            if moment is not None:
                record = dataclasses.replace(record, writer_wait=moment.to_dict())
            result.commits.append(record)
            result.outputs.extend(o for o in ready if o.bin_id in record.bins)


def _gate(plan: CompactionPlan, batch: list[Bin]) -> WriterGate | None:
    """The writers' gate a batch is behind (None: it commits at once)."""
    key = batch[0].gate if batch else None
    return plan.writers.gates.get(key) if plan.writers is not None and key is not None else None


def _quiet_moment(
    storage: Storage, plan: CompactionPlan, batch: list[Bin], deadline: float | None, wait_s: float | None
) -> QuietMoment | None:
    """The wait of a batch behind a writers' gate (None: the batch waits for nothing)."""
    gate = _gate(plan, batch)
    if gate is None or plan.writers is None:
        return None
    moment = wait_for_quiet_moment(
        storage,
        plan,
        gate,
        max_wait_s=DEFAULT_WRITER_WAIT_SECONDS if wait_s is None else wait_s,
        deadline=deadline,
        force=plan.writers is not None and plan.writers.overriding_objective is not None,
    )
    log.info("compaction of %s, %s: %s", storage.uri, gate.key, moment.reason)
    return moment


def _stop_for_missing_input(
    storage: Storage,
    work: list[tuple[list[Bin], list[BinOutput] | None]],
    i: int,
    result: CompactionProgress,
) -> bool:
    """Stop before batch ``i`` is committed when a bin's input is missing: report exactly, raise if nothing landed.

    The bin found missing is already in ``result.skipped`` (kind ``missing``). Every bin of
    batches ``i`` onwards that is not reported yet is reported as not committed, and the
    files rewritten for them are deleted.
    """
    missing = [s for s in result.skipped if s.kind == "missing"]
    if not missing:
        return False
    reported = {s.bin_id for s in result.skipped}
    first = missing[0]
    rewritten = {o.bin_id for o in work[i][1] or []}
    discard(storage, [o for _, outs in work[i:] if outs for o in outs])
    left = [b for later, _ in work[i:] for b in later if b.id not in reported]
    for b in left:
        reason = (
            "rewritten but not committed" if b.id in rewritten else "not attempted"
        ) + f": bin {first.bin_id}'s input is missing"
        result.skipped.append(BinSkipped(b.id, reason, "aborted"))
    others = sum(len(later) for later, _ in work[i:]) - 1
    versions = [c.version for c in result.commits]
    committed = sorted(b for c in result.commits for b in c.bins)
    if not committed:
        message = (
            f"compaction of {storage.uri} stopped at bin {first.bin_id} and committed nothing: {first.reason}; "
            f"{others} other bin(s) not committed"
        )
        log.warning(message)
        raise MissingDataFileError(message)
    result.error = (
        f"bin {first.bin_id}: {first.reason}; {len(committed)} bin(s) committed before it in version(s) "
        f"{versions}; {others} other bin(s) not committed"
    )
    log.warning("compaction of %s stopped: %s", storage.uri, result.error)
    return True


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
