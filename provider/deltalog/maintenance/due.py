"""Is maintenance due? One answer per operation, from the same rules the operations use.

Health numbers alone mislead: a partitioned table with one small file per
partition has a high small-file share, yet the compaction planner finds no bin
(a bin needs two files of one partition), so a "due" computed from the share
sends every daily run down the maintenance path for nothing. Here an operation
is due only when it would actually have work:

* compaction: the compaction planner (:func:`plan_from_snapshot`) finds at least one bin, minding
  the table's DELETE/UPDATE/MERGE writers as compaction does (the files it would leave them are
  counted apart, with why, and what the recent log shows of them is kept in ``writers``);
* checkpoint: ``delta.checkpointInterval`` commits (default 10) have passed since the
  last checkpoint;
* vacuum: tombstones removed before the retention cutoff
  (``delta.deletedFileRetentionDuration``), after the previous vacuum's cutoff
  (``_delta_log/_last_vacuum_info``'s time minus the retention), outside vacuum's
  protected set (:func:`retained_state`: every file a version inside the window
  references) and not kept for Iceberg readers (a UniForm table's Iceberg snapshots still
  referencing them: :class:`~deltalog.vacuuming.iceberg_guard.IcebergGuard`, vacuum's own
  rule) name files a vacuum would delete. The table is not listed, so files no
  commit ever referenced (failed writes) are only found by a full vacuum's listing;
* log cleanup: the log cleanup planner (a dry run of :func:`cleanup_log`) finds expired
  files; it is only asked when the oldest log file is older than the cutoff.

The CLI's ``health --json``, the health operators, the maintenance-due sensor and
the fleet ranking all read this one result.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog._arrow_utils import column_sum
from deltalog.compaction.plan import CompactionPlan, plan_from_snapshot
from deltalog.compaction.purge import deletion_vector_health
from deltalog.errors import DeltaLogError, UnsupportedProtocolError
from deltalog.log.load import snapshot_at
from deltalog.log.snapshot import Snapshot
from deltalog.log_maintenance.log_cleanup import cleanup_log, log_expiry_cutoff
from deltalog.protocol.features import Operation
from deltalog.protocol.properties import checkpoint_interval as table_checkpoint_interval
from deltalog.protocol.properties import config_bool
from deltalog.protocol.table_protocol import check_writable
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage
from deltalog.uniform.iceberg_references import ForeignIcebergMetadataError, IcebergMetadataError
from deltalog.vacuuming.iceberg_guard import IcebergGuard
from deltalog.vacuuming.paths import PathResolver
from deltalog.vacuuming.plan import LAST_VACUUM_INFO
from deltalog.vacuuming.retained import retained_state
from deltalog.vacuuming.retention import resolve_retention

__all__ = ["MaintenanceDue", "maintenance_due"]

#: The operations a due verdict covers, in the order maintenance runs them.
OPERATIONS = ("compaction", "checkpoint", "vacuum", "log_cleanup")
#: Their columns in the feature table (maintenance compacts with the local engine).
_FEATURE_OPERATIONS = {
    "compaction": Operation.COMPACTION_LOCAL,
    "checkpoint": Operation.CHECKPOINT,
    "vacuum": Operation.VACUUM,
    "log_cleanup": Operation.LOG_CLEANUP,
}


#: How a refusal names each operation ("refusing to <verb>: ...").
_VERBS = {
    "compaction": "compact",
    "checkpoint": "write a checkpoint",
    "vacuum": "vacuum",
    "log_cleanup": "clean up the log",
}


@dataclass(frozen=True)
class MaintenanceDue:
    """Which operations would have work, why, and how much (the numbers the fleet ranks by)."""

    compaction: bool = False
    checkpoint: bool = False
    vacuum: bool = False
    log_cleanup: bool = False
    reasons: tuple[str, ...] = ()
    #: Set when the table's protocol needs a feature deltalog refuses to write: nothing is due then.
    refused: str | None = None
    compaction_bins: int = 0
    compaction_input_files: int = 0
    compaction_input_bytes: int = 0
    commits_since_checkpoint: int = 0
    checkpoint_interval: int = 0
    reclaimable_files: int = 0
    reclaimable_bytes: int = 0
    expired_log_files: int = 0
    #: Rows deletion vectors hide (what ``compact(purge_deletion_vectors=True)`` reclaims), the files
    #: holding DVs, hidden rows over all rows (stats), and the largest share of one file.
    rows_hidden_by_dvs: int = 0
    files_with_dvs: int = 0
    dv_hidden_share: float = 0.0
    dv_max_file_share: float = 0.0
    #: Files past the retention a vacuum keeps because a UniForm table's Iceberg snapshots still reference them.
    files_kept_for_iceberg: int = 0
    bytes_kept_for_iceberg: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    #: Small files the compaction plan leaves to the table's writers for now, and the commonest reason.
    compaction_deferred_files: int = 0
    compaction_deferred_reason: str | None = None
    #: What the table's recent log shows of its writers
    #: (:meth:`deltalog.log.writer_activity.WriterActivity.to_dict`; None: not looked at).
    writers: dict[str, Any] | None = None

    @property
    def any(self) -> bool:
        return self.compaction or self.checkpoint or self.vacuum or self.log_cleanup

    def flags(self) -> dict[str, bool]:
        """``{"compaction": bool, "checkpoint": bool, "vacuum": bool, "log_cleanup": bool}``."""
        return {op: bool(getattr(self, op)) for op in OPERATIONS}

    def summary_line(self) -> str:
        """One line for logs and the CLI: what is due (or why nothing may run)."""
        if self.refused:
            return f"refused: {self.refused}"
        due = [op for op, flag in self.flags().items() if flag]
        return "due: " + (", ".join(due) if due else "nothing")

    def to_dict(self) -> dict[str, Any]:
        return {
            "due": self.flags(),
            "reasons": list(self.reasons),
            "refused": self.refused,
            "work": {
                "compaction_bins": self.compaction_bins,
                "compaction_input_files": self.compaction_input_files,
                "compaction_input_bytes": self.compaction_input_bytes,
                "commits_since_checkpoint": self.commits_since_checkpoint,
                "checkpoint_interval": self.checkpoint_interval,
                "reclaimable_files": self.reclaimable_files,
                "reclaimable_bytes": self.reclaimable_bytes,
                "expired_log_files": self.expired_log_files,
                "rows_hidden_by_dvs": self.rows_hidden_by_dvs,
                "files_with_dvs": self.files_with_dvs,
                "dv_hidden_share": self.dv_hidden_share,
                "dv_max_file_share": self.dv_max_file_share,
                "compaction_deferred_files": self.compaction_deferred_files,
                "files_kept_for_iceberg": self.files_kept_for_iceberg,
                "bytes_kept_for_iceberg": self.bytes_kept_for_iceberg,
            },
            "writers": self.writers,
        }


def _last_vacuum_ms(snapshot: Snapshot) -> int | None:
    for f in snapshot.segment.listing.other:
        if f.name == LAST_VACUUM_INFO:
            try:
                return f.modification_time
            except FileNotFoundError:
                return None
    return None


def _oldest_log_file_ms(snapshot: Snapshot) -> int | None:
    listing = snapshot.segment.listing
    files = [f for f in listing.commits.values()]
    files += [f for cps in listing.checkpoints.values() for cp in cps for f in cp.files]
    times = []
    for f in files:
        try:
            times.append(f.modification_time)
        except FileNotFoundError:
            continue
    return min(times) if times else None


def _size_distribution(snapshot: Snapshot, plan: CompactionPlan) -> str:
    """How the live files' sizes sit against the target: the share under the small-file threshold, the median."""
    sizes = snapshot.files.column("size") if snapshot.files.num_rows else None
    if sizes is None:
        return "no live files"
    small = int(pc.sum(pc.less(sizes, plan.small_file_threshold)).as_py() or 0)
    median = int(pc.quantile(sizes, q=0.5, interpolation="lower")[0].as_py() or 0)
    return (
        f"{small} of {len(sizes)} live files are under the small-file threshold of {plan.small_file_threshold} "
        f"bytes (median file {median} bytes, target {plan.target_size})"
    )


def _without_iceberg_files(
    storage: Storage, expired: pa.Table, cutoff_ms: int, values: dict[str, Any]
) -> tuple[pa.Table, str | None]:
    """The expired tombstones less the files Iceberg readers may still need (vacuum keeps them: a UniForm
    table's Iceberg snapshots inside their retention still list them), and the reason line saying so.

    Iceberg metadata that cannot be read makes vacuum refuse (it cannot know what its readers need): then
    vacuum is not due either (``values["vacuum_refused"]``), and the reason says why.
    """
    try:
        guard = IcebergGuard.load(storage, cutoff_ms)
    except (IcebergMetadataError, ForeignIcebergMetadataError) as exc:
        values["vacuum_refused"] = True
        return expired, f"vacuum: not judged: {exc}"
    if guard is None:
        return expired, None
    paths = expired.column("path").combine_chunks()
    kept, why = guard.keeps(paths)  # plain relative log paths are the physical paths
    special = PathResolver.needs_resolving(paths).to_numpy(zero_copy_only=False)
    if special.any():  # percent-encoded, absolute or dotted log paths: vacuum's one path rule, one by one
        resolver = PathResolver(storage)
        for i in special.nonzero()[0]:
            forms = pa.array(resolver.resolve_one(paths[int(i)].as_py()), pa.string())
            hit, more = guard.keeps(forms)
            kept[i] = bool(hit.any())
            why = sorted({*why, *more})
    if not kept.any():
        return expired, None
    mask = pa.array(kept)
    held = expired.filter(mask)
    values["files_kept_for_iceberg"] = held.num_rows
    values["bytes_kept_for_iceberg"] = column_sum(held, "size")
    rest = expired.filter(pc.invert(mask))
    return rest, (
        f"vacuum: {held.num_rows} files ({values['bytes_kept_for_iceberg']} bytes) past the retention are kept "
        f"for Iceberg readers ({'; '.join(why)})" + ("" if rest.num_rows else ": a vacuum would delete none of them")
    )


def maintenance_due(
    table: TableRef,
    snapshot: Snapshot | None = None,
    *,
    target_size: int | str | None = None,
    checkpoint_interval: int | None = None,
    retention_hours: float | None = None,
    now_ms: int | None = None,
    storage_options: dict[str, Any] | None = None,
    writer_aware: bool = True,
) -> MaintenanceDue:
    """Which maintenance operations would have work on ``table`` now (see the module docstring).

    Reads nothing beyond the snapshot, except the log cleanup planner when the oldest
    log file is past the log retention. An operation the table's features refuse (the
    feature table in :mod:`deltalog.protocol.features`) is never due and a reason says why; when
    every operation is refused, nothing is due and ``refused`` says why.

    ``target_size``, ``checkpoint_interval`` and ``retention_hours`` replace the table's
    ``delta.targetFileSize``, ``delta.checkpointInterval`` and
    ``delta.deletedFileRetentionDuration`` (a maintenance policy's values, see
    :mod:`deltalog.maintenance.policy`); None reads the table's own. ``writer_aware``: the
    compaction plan minds the table's writers, as compaction would (False: as if none were there).
    """
    storage = table_storage(table, storage_options)
    snapshot = snapshot or snapshot_at(storage)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    conf = snapshot.metadata.configuration
    reasons: list[str] = []
    values: dict[str, Any] = {}
    refusals: dict[str, str] = {}
    for name, op in _FEATURE_OPERATIONS.items():
        try:
            check_writable(snapshot.protocol, _VERBS[name], op, conf)
        except UnsupportedProtocolError as exc:
            refusals[name] = str(exc)
    if len(refusals) == len(_FEATURE_OPERATIONS):
        # Nothing may run: one refusal says why (they share the protocol's reason).
        first = refusals[OPERATIONS[0]]
        return MaintenanceDue(reasons=(f"refused: {first}",), refused=first)
    reasons.extend(f"{name}: refused: {why}" for name, why in refusals.items())

    if "compaction" not in refusals:
        plan = plan_from_snapshot(
            snapshot, storage.uri, target_size=target_size, engine="local", writer_aware=writer_aware
        )
        values["compaction_bins"] = len(plan.bins)
        values["compaction_input_files"] = plan.num_input_files
        values["compaction_input_bytes"] = plan.input_bytes
        values["compaction"] = bool(plan.bins)
        writers = plan.writers
        values["writers"] = writers.activity if writers is not None else None
        deferred = ""
        if writers is not None and writers.deferred:
            values["compaction_deferred_files"] = len(writers.deferred)
            values["compaction_deferred_reason"] = writers.reasons()[0]
            deferred = f"; {len(writers.deferred)} small files are left to the writers for now ({writers.reasons()[0]})"
        if plan.bins:
            reasons.append(
                f"compaction: {plan.num_input_files} small files ({plan.input_bytes} bytes) make "
                f"{len(plan.bins)} bins of up to {plan.target_size} bytes; {_size_distribution(snapshot, plan)}"
                f"{deferred}"
            )
        elif deferred:
            reasons.append(f"writers: no bin to compact{deferred}")

    dvs = deletion_vector_health(snapshot)
    values["rows_hidden_by_dvs"], values["files_with_dvs"] = dvs.rows_hidden, dvs.files_with_dvs
    values["dv_hidden_share"], values["dv_max_file_share"] = dvs.hidden_share, dvs.max_file_share
    if dvs.rows_hidden:
        reasons.append(
            f"deletion vectors: {dvs.rows_hidden} rows hidden in {dvs.files_with_dvs} files "
            f"(share {dvs.hidden_share:g}, largest per file {dvs.max_file_share:g}); a purge would reclaim them"
        )

    cps = [v for v in snapshot.segment.listing.checkpoints if v <= snapshot.version]
    since = snapshot.version - max(cps) if cps else snapshot.version + 1
    interval = table_checkpoint_interval(conf) if checkpoint_interval is None else checkpoint_interval
    values["commits_since_checkpoint"], values["checkpoint_interval"] = since, interval
    values["checkpoint"] = since >= interval and "checkpoint" not in refusals
    if values["checkpoint"]:
        last = f"checkpoint {max(cps)}" if cps else "any checkpoint"
        reasons.append(f"checkpoint: {since} commits since {last} (interval {interval})")

    retention = None
    if "vacuum" not in refusals:  # a refused vacuum is not judged (its reason is already given)
        try:
            # A policy's shorter retention is judged as given: a vacuum refuses it without the explicit override.
            retention = resolve_retention(conf, retention_hours, retention_hours is not None, now_ms=now)
        except DeltaLogError as exc:
            reasons.append(f"vacuum: not judged: {exc}")
    if retention is not None:
        tomb = snapshot.tombstones
        if tomb.num_rows:
            ts = pc.fill_null(tomb.column("deletionTimestamp"), 0)
            mask = pc.less(ts, retention.cutoff_ms)
            last_vacuum = _last_vacuum_ms(snapshot)
            if last_vacuum is not None:
                mask = pc.and_(mask, pc.greater_equal(ts, last_vacuum - retention.retention_ms))
            expired = tomb.filter(mask)
            if expired.num_rows:
                # Vacuum's own rule: a file any version inside the retention window references stays.
                retained = retained_state(snapshot, snapshot.segment.listing, retention.cutoff_ms)
                expired = expired.filter(pc.invert(pc.is_in(expired.column("path"), value_set=retained.protected)))
            if expired.num_rows:
                expired, iceberg_why = _without_iceberg_files(storage, expired, retention.cutoff_ms, values)
                if iceberg_why:
                    reasons.append(iceberg_why)
            values["reclaimable_files"] = expired.num_rows
            values["reclaimable_bytes"] = column_sum(expired, "size")
        values["vacuum"] = values.get("reclaimable_files", 0) > 0 and not values.get("vacuum_refused")
        values.pop("vacuum_refused", None)
        if values["vacuum"]:
            reasons.append(
                f"vacuum: {values['reclaimable_files']} files ({values['reclaimable_bytes']} bytes) removed before "
                f"the retention cutoff ({retention.retention_hours:g} hours)"
                + (" and after the previous vacuum" if _last_vacuum_ms(snapshot) is not None else "")
                + f"; {snapshot.tombstones.num_rows} tombstones in all"
            )

    if "log_cleanup" not in refusals and config_bool(conf, "delta.enableExpiredLogCleanup", True):
        log_cutoff = log_expiry_cutoff(conf, now)
        oldest = _oldest_log_file_ms(snapshot)
        if oldest is not None and oldest < log_cutoff:
            dry = cleanup_log(storage, dry_run=True, now_ms=now)
            values["expired_log_files"] = dry.num_files
            values["log_cleanup"] = dry.num_files > 0
            if dry.num_files:
                reasons.append(
                    f"log_cleanup: {dry.num_files} log files before checkpoint {dry.cutoff_checkpoint} are past "
                    f"the log retention ({dry.log_retention})"
                )
    return MaintenanceDue(reasons=tuple(reasons), **values)
