"""A batch behind a writers' gate, on the local engine: planned, rewritten and committed inside their quiet moment.

The bins a plan made for a partition where DML writers work are stale by the time their quiet
moment comes: the commit that opens it is a writer's, and it may have removed or re-marked the
bins' inputs (a DELETE by key over a deletion-vector table marks every file; a copy-on-write
UPDATE rewrites them). Rewritten before the wait, such bins would be dropped at the commit; so on
the local engine a gated batch of a bin-packing plan waits first, then:

1. plans its partition (or the table, for writers that read all of it) again from the snapshot
   after the writer's commit, the same options as the plan;
2. keeps as many of the new bins as the quiet moment leaves time to rewrite (its lower-decile
   gap, less the time already passed, at the rewrite rate measured so far: at least one bin);
3. rewrites them, checks the moment is still quiet (else deletes the new files and waits for the
   next one), and commits;

then the next quiet moment takes the next bins, until the partition has none left, the wait
(``writer_wait_seconds``) runs out or the run's deadline passes: more, smaller commits, each
landed right after it was planned. The plan's own bins of the batch are reported as
``replanned``; the bins planned at the quiet moment are added to the result's plan.

A Z-order, a clustering or a purge (their bins are whole partitions or single files chosen by
other rules) and the Spark engine (its outputs are written before the commit step) wait for the
quiet moment with the bins they have, as :mod:`deltalog.compaction.batches` does.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from deltalog.compaction.commit import commit_bins, discard
from deltalog.compaction.engine_output import BinSkipped
from deltalog.compaction.local import run_local
from deltalog.compaction.options import CompactionOptions, LocalOptions
from deltalog.compaction.plan import Bin, CompactionPlan, plan_from_snapshot
from deltalog.compaction.quiet_moment import UNKNOWN_QUIET_MS, QuietMoment, still_quiet, wait_for_quiet_moment
from deltalog.compaction.result import CompactionProgress
from deltalog.compaction.writer_aware import WriterGate, lead_ms
from deltalog.log.load import snapshot_at
from deltalog.storage.filesystem import Storage

__all__ = ["MAX_QUIET_ROUNDS", "REWRITE_BYTES_PER_SECOND", "WRITERS_DEFERRAL", "commit_gated", "replans"]

log = logging.getLogger(__name__)

#: How a batch deferred because its writers left no quiet moment in time is reported (kind ``deferred``).
WRITERS_DEFERRAL = "deferred for the writers"
#: The rewrite rate assumed until this run has measured one (bytes of input per second).
REWRITE_BYTES_PER_SECOND = 20 * 1024 * 1024
#: Quiet moments one gated batch takes at most (each commits one small batch).
MAX_QUIET_ROUNDS = 50


def replans(plan: CompactionPlan) -> bool:
    """Whether a gated batch of ``plan`` is planned again at its quiet moment (a local bin-packing)."""
    return plan.purge_min_deleted_share is None and not plan.zorder_by and plan.clustering is None


def _budget_bytes(gate: WriterGate, moment: QuietMoment, local: bool, rate: float) -> float:
    """Input bytes the rest of the quiet moment leaves time to rewrite (half of it: the commit must land inside)."""
    quiet = gate.cadence.quiet_ms()
    window: float = UNKNOWN_QUIET_MS
    if quiet is not None and moment.offset_ms is not None:
        window = quiet - moment.offset_ms - lead_ms(local)
    return max(0.0, window) / 1000 * rate / 2


def _fresh_bins(
    storage: Storage, plan: CompactionPlan, batch: list[Bin], first_id: int
) -> tuple[CompactionPlan, list[Bin]]:
    """The plan again, from the latest snapshot, and its bins in the batch's partitions (ids from ``first_id``)."""
    snapshot = snapshot_at(storage)
    options = CompactionOptions(
        target_size=plan.target_size,
        small_file_threshold=plan.small_file_threshold,
        min_files=plan.min_files,
        where=plan.where,
        engine="local",
        writer_aware=False,  # the writers are why this runs now: their partition is the point
    )
    fresh = plan_from_snapshot(snapshot, plan.table_uri, options)
    wanted = [dict(b.partition_values) for b in batch]
    mine = [b for b in fresh.bins if dict(b.partition_values) in wanted]
    renumbered = [dataclasses.replace(b, id=first_id + i, gate=batch[0].gate) for i, b in enumerate(mine)]
    return dataclasses.replace(plan, snapshot_version=snapshot.version, bins=renumbered), renumbered


def commit_gated(
    storage: Storage,
    plan: CompactionPlan,
    batch: list[Bin],
    gate: WriterGate,
    progress: CompactionProgress,
    options: LocalOptions,
    *,
    run_hooks: bool,
    cancel: threading.Event | None,
    deadline: float | None,
    wait_s: float,
    force: bool,
) -> None:
    """Compact ``batch``'s partitions one quiet moment at a time (see the module docstring), into ``progress``."""
    started = time.monotonic()
    current = plan
    next_id = max([b.id for b in plan.bins] + [b.id for b in progress.extra_bins], default=-1) + 1
    rounds = committed = 0
    local = storage.is_local
    outcome = "no quiet moment came"
    while rounds < MAX_QUIET_ROUNDS:
        if cancel is not None and cancel.is_set():
            outcome = "cancelled"
            break
        rounds += 1
        left = max(0.0, wait_s - (time.monotonic() - started))
        moment = wait_for_quiet_moment(storage, current, gate, max_wait_s=left, deadline=deadline, force=force)
        if not moment.ok:
            log.info("compaction of %s, %s: %s", storage.uri, gate.key, moment.reason)
            if not committed:
                progress.skipped.extend(
                    BinSkipped(b.id, f"{WRITERS_DEFERRAL}: {moment.reason}", "deferred") for b in batch
                )
                return
            outcome = f"no quiet moment in time ({moment.reason})"
            break
        current, fresh = _fresh_bins(storage, plan, batch, next_id)
        if not fresh:
            outcome = "nothing left to compact there"
            break
        rate = progress.rewrite_rate() or REWRITE_BYTES_PER_SECOND
        budget, size = _budget_bytes(gate, moment, local, rate), 0
        take: list[Bin] = []
        for b in fresh:
            if take and size + b.size > budget:
                break
            take.append(b)
            size += b.size
        next_id += len(fresh)
        t0 = time.perf_counter()
        outputs, skipped = run_local(storage, current, take, options, cancel=cancel)
        progress.engine_seconds += time.perf_counter() - t0
        progress.rewritten_bytes += sum(o.bytes_in for o in outputs)
        progress.skipped.extend(skipped)
        if not outputs:
            break
        if not force and not still_quiet(gate, moment, local):
            discard(storage, outputs)
            log.info(
                "compaction of %s, %s: the quiet moment passed while rewriting: the next one", storage.uri, gate.key
            )
            continue
        record, lost = commit_bins(storage, current, outputs, engine=progress.engine, run_hooks=run_hooks)
        progress.extra_bins.extend(take)
        progress.skipped.extend(lost)
        if record is not None:
            committed += 1
            progress.commits.append(dataclasses.replace(record, writer_wait=moment.to_dict()))
            progress.outputs.extend(o for o in outputs if o.bin_id in record.bins)
    reason = f"planned again at the writers' quiet moments ({committed} commits; then {outcome})"
    progress.skipped.extend(BinSkipped(b.id, reason, "replanned") for b in batch)
