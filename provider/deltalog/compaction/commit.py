"""Committing rewritten bins: one ``OPTIMIZE`` commit with ``dataChange=false`` adds and removes.

A compaction only rearranges rows, so its commit runs at SnapshotIsolation:
concurrent blind appends never conflict with it. A concurrent commit that
removed (or re-DV'd) one of its input files does, and then only the bins that
read that file are dropped; the others still commit. Two checks make that so:

1. before committing, the latest snapshot is read once and every bin whose
   inputs are no longer live with the same deletion vector is dropped
   (cheap: one vectorised ``is_in`` on the live paths);
2. a commit that still loses a race gets ``ConcurrentDeleteDeleteError`` from
   the conflict checker, naming the paths; their bins are dropped and the
   rest retried.

The new file of a dropped bin was never referenced by the log, so it is
deleted on the spot. The table's schema, partitioning and column mapping must
be the ones the plan was made with; otherwise nothing is committed.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow.compute as pc

from deltalog.commit.conflicts import ConcurrentDeleteDeleteError, ConcurrentDeleteReadError
from deltalog.commit.transaction import Transaction
from deltalog.compaction.engine_output import BinOutput, BinSkipped
from deltalog.compaction.plan import Bin, CompactionPlan, check_compactable, compaction_operation, plan_row_tracking
from deltalog.compaction.purge import REORG_OPERATION, purge_operation
from deltalog.errors import CommitOutcomeUnknownError, OperationRefusedError
from deltalog.log.actions import dv_unique_id
from deltalog.log.listing import list_log
from deltalog.log.load import snapshot_at
from deltalog.log.replay import canonical_paths, string_array
from deltalog.log.snapshot import Snapshot
from deltalog.protocol.log_paths import canonical_path
from deltalog.protocol.parquet_layout import iceberg_compat_version
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage
from deltalog.write_checks import clustering

__all__ = ["CompactionCommit", "OPERATION", "commit_bins", "discard", "operation_parameters"]

log = logging.getLogger(__name__)

OPERATION = "OPTIMIZE"


@dataclass(frozen=True)
class CompactionCommit:
    """One landed OPTIMIZE commit."""

    version: int
    bins: list[int]
    attempts: int
    operation_metrics: dict[str, Any] = field(default_factory=dict)
    hooks: list[dict[str, Any]] = field(default_factory=list)
    #: The wait for the writers' quiet moment before it (:class:`~deltalog.compaction.quiet_moment.QuietMoment`), if any.
    writer_wait: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _percentile(sorted_sizes: list[int], q: float) -> int:
    if not sorted_sizes:
        return 0
    return sorted_sizes[min(len(sorted_sizes) - 1, int(q * (len(sorted_sizes) - 1) + 0.5))]


def operation_metrics(bins: list[Bin], outputs: list[BinOutput], dropped: int = 0) -> dict[str, Any]:
    """commitInfo.operationMetrics, with Delta's names where Delta has one (``numBinsDroppedForConflicts``:
    bins of this commit's batch a concurrent commit took inputs of, which the log shows nowhere else)."""
    sizes = sorted(int(a["size"]) for o in outputs for a in o.adds)
    removed = [f for b in bins for f in b.files]
    return {
        "numAddedFiles": len(sizes),
        "numRemovedFiles": len(removed),
        "numAddedBytes": sum(sizes),
        "numRemovedBytes": sum(f.size for f in removed),
        "minFileSize": sizes[0] if sizes else 0,
        "p25FileSize": _percentile(sizes, 0.25),
        "p50FileSize": _percentile(sizes, 0.5),
        "p75FileSize": _percentile(sizes, 0.75),
        "maxFileSize": sizes[-1] if sizes else 0,
        "numPartitionsOptimized": len({json.dumps(b.partition_values, sort_keys=True) for b in bins}),
        "numBins": len(bins),
        "numDeletionVectorsRemoved": sum(o.deletion_vectors for o in outputs),
        "numDeletionVectorRowsRemoved": sum(o.deleted_rows for o in outputs),
        "numOutputRows": sum(o.rows_out for o in outputs),
        "numBinsDroppedForConflicts": dropped,
    }


def operation_parameters(plan: CompactionPlan, engine: str) -> dict[str, Any]:
    if plan.purge_min_deleted_share is not None:
        return {
            **purge_operation(plan.predicate)[1],
            "minDeletedShare": str(plan.purge_min_deleted_share),
            "engine": engine,
        }
    if plan.clustering is not None:  # Delta Spark's OPTIMIZE of a clustered table
        return {
            "predicate": json.dumps(plan.predicate),
            "targetSize": str(plan.target_size),
            "zOrderBy": "[]",
            "clusterBy": json.dumps(plan.clustering.columns),
            "isFull": str(plan.clustering.full).lower(),
            "auto": "false",
            "engine": engine,
        }
    return {
        "predicate": json.dumps(plan.predicate),
        "targetSize": str(plan.target_size),
        "zOrderBy": json.dumps(plan.zorder_by),
        "auto": "false",
        "minFiles": str(plan.min_files),
        "engine": engine,
    }


def remove_actions(b: Bin, now: int) -> list[dict[str, Any]]:
    out = []
    for f in b.files:
        r: dict[str, Any] = {
            "path": f.path,
            "deletionTimestamp": now,
            "dataChange": False,
            "extendedFileMetadata": True,
            "partitionValues": dict(b.partition_values),
            "size": f.size,
        }
        if f.deletion_vector:
            r["deletionVector"] = dict(f.deletion_vector)
        out.append(r)
    return out


def check_table_matches(snapshot: Snapshot, plan: CompactionPlan, engine: str = "local") -> None:
    """Refuse to commit a plan made for another table or another schema/partitioning."""
    md = snapshot.metadata
    if md.id != plan.table_id:
        raise OperationRefusedError(
            f"the table at {plan.table_uri} now has id {md.id}, the plan was made for {plan.table_id}; nothing committed"
        )
    changed = [
        what
        for what, now, then in (
            ("schema", md.schema_string, plan.schema_string),
            ("partition columns", md.partition_columns, plan.partition_columns),
            ("column mapping mode", md.column_mapping_mode, plan.column_mapping_mode),
            ("row tracking", plan_row_tracking(snapshot), plan.row_tracking),
            ("iceberg compatibility", iceberg_compat_version(md.configuration), plan.iceberg_compat),
        )
        if now != then
    ]
    if changed:
        raise OperationRefusedError(
            f"the table's {' and '.join(changed)} changed after the plan was made at version "
            f"{plan.snapshot_version}; nothing committed (plan again)"
        )
    check_compactable(snapshot, engine)


def live_keys(snapshot: Snapshot, paths: list[str]) -> dict[str, str | None]:
    """path -> DV unique id of the live files among ``paths`` (absent = not live)."""
    files = snapshot.files
    if not files.num_rows or not paths:
        return {}
    wanted = {canonical_path(p): p for p in paths}  # one file spelled two ways is one file
    mask = pc.is_in(canonical_paths(files.column("path")), value_set=string_array(list(wanted)))
    hit = files.filter(mask)
    return {
        wanted[canonical_path(p)]: dv_unique_id({k: v for k, v in dv.items() if v is not None} if dv else None)
        for p, dv in zip(hit.column("path").to_pylist(), hit.column("deletionVector").to_pylist())
    }


def discard(storage: Storage, outputs: list[BinOutput]) -> None:
    """Delete new files that will never be referenced by the log."""
    for o in outputs:
        for path in o.storage_paths:
            storage.delete(path)


def commit_bins(
    table: TableRef,
    plan: CompactionPlan,
    outputs: list[BinOutput],
    *,
    engine: str = "local",
    max_conflict_retries: int | None = None,
    snapshot: Snapshot | None = None,
    run_hooks: bool = True,
) -> tuple[CompactionCommit | None, list[BinSkipped]]:
    """Commit ``outputs`` in one OPTIMIZE commit; bins that lost a race are returned as skipped.

    ``snapshot`` (the one the plan was made from) is reused when the table is
    still at its version, saving a log replay. Raises (after deleting every
    output file) when the table no longer matches the plan or the commit fails
    for a reason other than a concurrent delete. ``run_hooks=False`` skips the
    post-commit hooks (checkpoint, log cleanup) for callers that schedule them apart.
    """
    storage = table_storage(table)
    bins_by_id = {b.id: b for b in plan.bins}
    pending = {o.bin_id: o for o in outputs}
    skipped: list[BinSkipped] = []

    def drop(bin_ids: list[int], reason: str, paths_by_bin: dict[int, list[str]]) -> None:
        for bid in bin_ids:
            out = pending.pop(bid)
            discard(storage, [out])
            skipped.append(BinSkipped(bid, reason, "conflict", paths_by_bin.get(bid, [])))

    try:
        listing = list_log(storage)
        if snapshot is not None and listing.latest_version == snapshot.version:
            latest = snapshot
        else:
            latest = snapshot_at(storage, listing=listing)
        check_table_matches(latest, plan, engine)
        if clustering.is_clustered(latest.protocol):
            columns = clustering.clustering_columns(latest.domain_metadata)
            clustering.check_clustering_stats([a for o in pending.values() for a in o.adds], columns)
        all_paths = [f.path for bid in pending for f in bins_by_id[bid].files]
        live = live_keys(latest, all_paths)
        gone: dict[int, list[str]] = {}
        for bid in list(pending):
            lost = [
                f.path
                for f in bins_by_id[bid].files
                if f.path not in live or live[f.path] != dv_unique_id(f.deletion_vector)
            ]
            if lost:
                gone[bid] = lost
        if gone:
            drop(
                list(gone),
                f"input files were removed or changed by a commit after version {plan.snapshot_version}",
                gone,
            )
            log.info("dropping %d bin(s) whose input files are no longer live", len(gone))
        retries = max_conflict_retries if max_conflict_retries is not None else len(pending) + 1
        while pending:
            bins = [bins_by_id[bid] for bid in sorted(pending)]
            outs = [pending[bid] for bid in sorted(pending)]
            now = int(time.time() * 1000)
            txn = Transaction(
                storage,
                latest,
                operation=REORG_OPERATION if plan.purge_min_deleted_share is not None else OPERATION,
                operation_parameters=operation_parameters(plan, engine),
                run_hooks=run_hooks,
                feature_operation=compaction_operation(engine),
            )
            txn.add([a for o in outs for a in o.adds])
            txn.remove([r for b in bins for r in remove_actions(b, now)])
            metrics = operation_metrics(bins, outs, dropped=sum(1 for s in skipped if s.kind == "conflict"))
            try:
                result = txn.commit(metrics)
            except (ConcurrentDeleteDeleteError, ConcurrentDeleteReadError) as exc:
                taken = set(exc.paths)
                hit = {bid: [f.path for f in bins_by_id[bid].files if f.path in taken] for bid in pending}
                hit = {bid: paths for bid, paths in hit.items() if paths}
                if not hit or retries <= 0:
                    raise
                retries -= 1
                drop(list(hit), f"a concurrent commit (version {exc.winning_version}) removed input files", hit)
                log.info("version %d removed inputs of %d bin(s); committing the rest", exc.winning_version, len(hit))
                continue
            record = CompactionCommit(
                version=result.version,
                bins=sorted(pending),
                attempts=result.attempts,
                operation_metrics=metrics,
                hooks=[h.to_dict() for h in result.hooks],
            )
            log.info("OPTIMIZE committed version %d with %d bin(s)", result.version, len(pending))
            return record, skipped
        return None, skipped
    except CommitOutcomeUnknownError:
        raise  # the commit may have landed and reference the new files: keep them
    except BaseException:
        discard(storage, list(pending.values()))
        raise
