"""Maintaining a fleet within a time budget: what to do first, and doing it table by table.

Work is ordered by expected gain per second: the gain score of
:mod:`deltalog.fleet.ranking` over an estimate of the seconds the table's due work
takes (a fixed cost per operation plus the bytes to rewrite at the compaction
throughput measured on earlier runs, which the caller keeps in the previous run's
results, never in ``_delta_log``). Each table runs the sequence of the
single-table DAG (compaction, checkpoint, vacuum, log cleanup, manifest when the
table asks for one) under its maintenance lease, and only the operations that are
due. Past the deadline nothing new starts; a compaction already running stops
between bins with every finished bin committed. What was not done is reported as
deferred, with the reason, and is what the next run picks up first.

Compaction runs on the engine the single-table DAG would choose: the local pyarrow
engine, or Spark (``spark-submit``, ``spark_options`` of
:func:`deltalog.compaction.spark.submit.run_spark`) when the table holds at least
``spark_min_bytes``. A Spark job is one unit: it starts only while budget is left and
is not stopped between bins. Vacuum likewise runs its plan as a Spark job
(:mod:`deltalog.vacuuming.spark`) when the table holds at least ``vacuum_spark_min_files``
live files: its cost grows with the number of files, not with their bytes.

Per-table settings: an entry of the settings mapping (by table URI, else by the
table folder's name) wins over the table's own properties (``delta.targetFileSize``,
``delta.deletedFileRetentionDuration``), which win over the defaults. Layout settings
exist only in the mapping: ``zorder_by`` (columns) makes a due compaction a Z-order of
the table's partitions, ``max_dv_hidden_share`` makes a deletion-vector purge due (and
run, on the files whose DV hides more than that share) once deletion vectors hide more
than that share of the table's rows. A table with liquid clustering is always clustered
by its own clustering columns; a ``zorder_by`` for it is refused (the table's failure).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any

from deltalog._flags import require_bools
from deltalog.compaction.run import compact
from deltalog.errors import DeltaLogError, InvalidArgumentError, MaintenanceLeaseHeldError
from deltalog.fleet.lease import acquire_lease
from deltalog.fleet.ranking import TableReport
from deltalog.log.load import snapshot_at
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.log_maintenance.manifest import ENABLED_PROPERTY, generate_manifest
from deltalog.maintenance.due import MaintenanceDue, maintenance_due
from deltalog.maintenance.health import compute_health
from deltalog.protocol.properties import config_bool
from deltalog.storage.filesystem import Storage
from deltalog.vacuuming import vacuum

__all__ = [
    "DEFAULT_THROUGHPUT",
    "PlannedTable",
    "TableOutcome",
    "TableSettings",
    "maintain_table",
    "measured_throughput",
    "order_work",
    "settings_for",
    "table_name",
]

log = logging.getLogger(__name__)

#: Compaction throughput assumed before any run has measured one (bytes rewritten per second).
DEFAULT_THROUGHPUT = 20 * 1024 * 1024
#: Fixed seconds per due operation (listing, snapshot, commit) in the time estimate.
OPERATION_OVERHEAD_SECONDS = 0.5
SETTING_KEYS = ("target_file_size", "vacuum_retention_hours", "zorder_by", "max_dv_hidden_share")


@dataclass(frozen=True)
class TableSettings:
    """Per-table overrides; None leaves the decision to the table's properties, then the defaults."""

    target_file_size: int | str | None = None
    vacuum_retention_hours: float | None = None
    #: Z-order columns: a due compaction rewrites the partitions along their curve instead of bin-packing.
    zorder_by: list[str] | None = None
    #: Share of rows hidden by deletion vectors above which a purge is due (None: never).
    max_dv_hidden_share: float | None = None
    source: str = "defaults"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def settings_for(uri: str, mapping: dict[str, Any] | None) -> TableSettings:
    """The mapping's entry for ``uri`` (exact URI first, then the folder name), validated."""
    if not mapping:
        return TableSettings()
    if not isinstance(mapping, dict):
        raise InvalidArgumentError("per-table settings must be a mapping of table URI or name to settings")
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    entry = mapping.get(uri.rstrip("/"), mapping.get(name))
    if entry is None:
        return TableSettings()
    if not isinstance(entry, dict) or set(entry) - set(SETTING_KEYS):
        raise InvalidArgumentError(
            f"settings for {uri} must be a mapping with keys among {', '.join(SETTING_KEYS)}, got {entry!r}"
        )
    hours = entry.get("vacuum_retention_hours")
    if hours is not None and (isinstance(hours, bool) or not isinstance(hours, int | float) or hours < 0):
        raise InvalidArgumentError(f"vacuum_retention_hours for {uri} must be a non-negative number, got {hours!r}")
    zorder = entry.get("zorder_by")
    if zorder is not None and (
        not isinstance(zorder, list) or not zorder or not all(isinstance(c, str) and c for c in zorder)
    ):
        raise InvalidArgumentError(f"zorder_by for {uri} must be a non-empty list of column names, got {zorder!r}")
    share = entry.get("max_dv_hidden_share")
    if share is not None and (isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share < 1):
        raise InvalidArgumentError(f"max_dv_hidden_share for {uri} must be a number from 0 to below 1, got {share!r}")
    return TableSettings(
        entry.get("target_file_size"),
        hours,
        zorder_by=list(zorder) if zorder is not None else None,
        max_dv_hidden_share=None if share is None else float(share),
        source="settings mapping",
    )


def purge_due(due: MaintenanceDue | None, settings: TableSettings) -> bool:
    """Deletion vectors hide more than the table's ``max_dv_hidden_share`` of its rows."""
    if due is None or due.refused or settings.max_dv_hidden_share is None:
        return False
    return due.rows_hidden_by_dvs > 0 and due.dv_hidden_share > settings.max_dv_hidden_share


# --- ordering ------------------------------------------------------------------------


def estimated_seconds(report: TableReport, throughput: float) -> float:
    """Seconds the table's due work should take: a fixed cost per operation plus the rewrite."""
    due = report.due
    if due is None or not due.any:
        return 0.0
    ops = sum(due.flags().values())
    return ops * OPERATION_OVERHEAD_SECONDS + due.compaction_input_bytes / max(throughput, 1.0)


@dataclass(frozen=True)
class PlannedTable:
    uri: str
    gain: float
    estimated_seconds: float
    gain_per_second: float
    due: dict[str, bool]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def order_work(
    reports: list[TableReport], throughput: float = DEFAULT_THROUGHPUT, settings: dict[str, Any] | None = None
) -> list[PlannedTable]:
    """The due tables, highest expected gain per second first (``settings``: the per-table mapping,
    whose ``max_dv_hidden_share`` makes a purge due)."""
    planned = []
    for r in reports:
        if r.error is not None:
            continue
        purge = purge_due(r.due, settings_for(r.uri, settings))
        if not r.any_due and not purge:
            continue
        assert r.due is not None
        seconds = estimated_seconds(r, throughput) + (OPERATION_OVERHEAD_SECONDS if purge else 0.0)
        flags = {**r.due.flags(), "purge": purge}
        planned.append(PlannedTable(r.uri, r.gain, round(seconds, 3), r.gain / max(seconds, 1e-3), flags))
    return sorted(planned, key=lambda p: (-p.gain_per_second, p.uri))


# --- one table ------------------------------------------------------------------------


@dataclass(frozen=True)
class TableOutcome:
    """What maintenance did to one table (a row of the fleet summary)."""

    uri: str
    status: str = "done"  # done | partial | deferred | refused | failed | healthy | busy
    version_before: int | None = None
    version_after: int | None = None
    small_files_before: int | None = None
    small_files_after: int | None = None
    files_before: int | None = None
    files_after: int | None = None
    bytes_reclaimed: int = 0
    log_files_deleted: int = 0
    ran: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    compaction_bytes: int = 0
    compaction_seconds: float = 0.0
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return (
            self.version_after is not None
            and self.version_after != self.version_before
            or bool(self.bytes_reclaimed or self.log_files_deleted)
        )

    def summary_line(self) -> str:
        """One line for logs: the table, how it ended, what ran and what was put off."""
        ran = ", ".join(self.ran) or "nothing"
        deferred = f"; deferred {', '.join(self.deferred)}" if self.deferred else ""
        error = f"; {self.error}" if self.error else ""
        return f"{self.uri}: {self.status} (ran {ran}{deferred}){error}"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["changed"] = self.changed
        return out


def _left(deadline: float | None) -> float:
    return float("inf") if deadline is None else deadline - time.monotonic()


def maintain_table(
    uri: str,
    *,
    storage_options: dict[str, Any] | None = None,
    settings: TableSettings | None = None,
    deadline: float | None = None,
    owner: str = "deltalog",
    lease_ttl_seconds: float = 3600.0,
    allow_short_retention: bool = False,
    spark_min_bytes: int | None = None,
    spark_options: dict[str, Any] | None = None,
    vacuum_spark_min_files: int | None = None,
) -> TableOutcome:
    """Run the table's due operations in order, under its lease, until ``deadline`` (monotonic).

    ``spark_min_bytes``: tables at least this large compact with Spark (None: always local).
    ``vacuum_spark_min_files``: tables with at least this many live files vacuum with Spark
    (None: always local); both Spark jobs take ``spark_options``.

    Never raises for the table's own problems: a refusal, a held lease or a failed
    operation becomes the outcome's status and error line (a fleet run goes on).
    """
    t0 = time.perf_counter()
    require_bools(allow_short_retention=allow_short_retention)  # the caller's mistake, not the table's: raise
    for name, value in (("spark_min_bytes", spark_min_bytes), ("vacuum_spark_min_files", vacuum_spark_min_files)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InvalidArgumentError(f"{name} must be a non-negative integer, got {value!r}")
    settings = settings or TableSettings()
    # The outcome's fields, filled in as the steps run; frozen into a TableOutcome at the end.
    out = SimpleNamespace(**asdict(TableOutcome(uri=uri, settings=settings.to_dict())))
    if _left(deadline) <= 0:
        out.status, out.reasons = "deferred", ["the time budget was spent before this table started"]
        return TableOutcome(**vars(out))
    try:
        storage = Storage(uri, storage_options)
        lease = acquire_lease(storage, owner, lease_ttl_seconds)
    except MaintenanceLeaseHeldError as exc:
        out.status, out.error = "busy", str(exc)
        return TableOutcome(**vars(out))
    except DeltaLogError as exc:
        out.status, out.error = "failed", f"{type(exc).__name__}: {exc}"
        return TableOutcome(**vars(out))
    try:
        engine = _Engine(spark_min_bytes, dict(spark_options or {}), vacuum_spark_min_files)
        _run_steps(storage, settings, deadline, out, allow_short_retention, engine)
    except DeltaLogError as exc:
        out.status = "refused" if getattr(exc, "exit_code", 2) == 1 and not exc.retryable else "failed"
        out.error = f"{type(exc).__name__}: {exc}"
    except OSError as exc:
        out.status, out.error = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        lease.release()
        out.seconds = round(time.perf_counter() - t0, 3)
    log.info("fleet maintenance of %s: %s (ran %s, deferred %s)", uri, out.status, out.ran, out.deferred)
    return TableOutcome(**vars(out))


@dataclass(frozen=True)
class _Engine:
    """Where compaction runs (Spark from ``spark_min_bytes`` of table size on) and where vacuum plans
    (Spark from ``vacuum_min_files`` live files on); else locally."""

    spark_min_bytes: int | None
    spark_options: dict[str, Any]
    vacuum_min_files: int | None = None

    def for_size(self, size: int) -> str:
        return "spark" if self.spark_min_bytes is not None and size >= self.spark_min_bytes else "local"

    def vacuum_for_files(self, files: int) -> str:
        return "spark" if self.vacuum_min_files is not None and files >= self.vacuum_min_files else "local"


def _run_steps(
    storage: Storage,
    settings: TableSettings,
    deadline: float | None,
    out: SimpleNamespace,
    allow_short: bool,
    engine: _Engine = _Engine(None, {}),
) -> None:
    """Run the due steps, recording into ``out`` (the draft of a :class:`TableOutcome`) as they go."""
    snapshot = snapshot_at(storage)
    before = compute_health(snapshot, settings.target_file_size)
    out.version_before = out.version_after = snapshot.version
    out.small_files_before, out.files_before = before.num_small_files, before.num_files
    due = maintenance_due(storage, snapshot, target_size=settings.target_file_size)
    out.reasons = list(due.reasons)
    if due.refused:
        out.status = "refused"
        out.error = due.refused
        out.small_files_after, out.files_after = out.small_files_before, out.files_before
        return
    manifest = config_bool(snapshot.metadata.configuration, ENABLED_PROPERTY, False)
    steps = [op for op, flag in due.flags().items() if flag]
    if purge_due(due, settings):  # after compaction (which applies the DVs of the files it rewrites)
        steps.insert(1 if steps[:1] == ["compaction"] else 0, "purge")
    if not steps:
        out.status = "healthy"
        out.small_files_after, out.files_after = out.small_files_before, out.files_before
        return
    for step in steps:
        if _left(deadline) <= 0:
            out.deferred.append(step)
            continue
        if step == "compaction":
            started = time.perf_counter()
            # A Z-order runs on the local engine only; otherwise the engine follows the table's size.
            where = "local" if settings.zorder_by else engine.for_size(before.size_in_bytes)
            if where == "spark":  # one job: it cannot stop between bins, so no deadline is passed down
                result = compact(
                    storage,
                    target_size=settings.target_file_size,
                    engine="spark",
                    spark_options=engine.spark_options,
                    run_hooks=False,
                )
            else:
                result = compact(
                    storage,
                    target_size=settings.target_file_size,
                    deadline=deadline,
                    run_hooks=False,
                    zorder_by=settings.zorder_by,
                )
            out.compaction_seconds = round(time.perf_counter() - started, 3)
            out.compaction_bytes = int(result.to_dict()["bytes_removed"])
            if not result.ok:
                raise DeltaLogError(result.error or "compaction failed: " + "; ".join(s.reason for s in result.skipped))
            if any(s.kind == "deferred" for s in result.skipped):
                out.deferred.append(
                    f"compaction: {sum(s.kind == 'deferred' for s in result.skipped)} of {len(result.plan.bins)} bins"
                )
            if result.commits:
                label = "compaction" if where == "local" else "compaction (spark)"
                out.ran.append(f"{label}: {len(result.committed_bins)} bins")
        elif step == "purge":
            pr = compact(
                storage,
                purge_deletion_vectors=True,
                min_deleted_share=settings.max_dv_hidden_share,
                target_size=settings.target_file_size,
                deadline=deadline,
                run_hooks=False,
            )
            if not pr.ok:
                raise DeltaLogError(pr.error or "purge failed: " + "; ".join(s.reason for s in pr.skipped))
            out.ran.append(f"purge: {len(pr.committed_bins)} bins")
        elif step == "checkpoint":
            create_checkpoint(storage)
            out.ran.append("checkpoint")
        elif step == "vacuum":
            where = engine.vacuum_for_files(before.num_files)
            vr = vacuum(
                storage,
                retention_hours=settings.vacuum_retention_hours,
                allow_short_retention=allow_short,
                engine=where,
                spark_options=engine.spark_options if where == "spark" else None,
            )
            out.bytes_reclaimed += vr.size_of_data_to_delete if vr.num_deleted_files else 0
            label = "vacuum" if where == "local" else "vacuum (spark)"
            out.ran.append(f"{label}: {vr.num_deleted_files} files")
        elif step == "log_cleanup":
            lr = cleanup_log(storage)
            out.log_files_deleted = lr.num_deleted
            out.ran.append(f"log_cleanup: {lr.num_deleted} files")
    if manifest and _left(deadline) > 0 and out.ran:
        generate_manifest(storage)
        out.ran.append("manifest")
    after = compute_health(snapshot_at(storage), settings.target_file_size)
    out.version_after = after.version
    out.small_files_after, out.files_after = after.num_small_files, after.num_files
    out.status = "partial" if out.deferred and out.ran else ("deferred" if out.deferred else "done")
    if out.deferred:
        out.reasons.append("deferred: the time budget was spent")


def measured_throughput(outcomes: Sequence[TableOutcome], previous: float | None = None) -> float:
    """Bytes rewritten per second by this run's compactions (else the previous run's, else the default)."""
    total_bytes = sum(o.compaction_bytes for o in outcomes)
    total_seconds = sum(o.compaction_seconds for o in outcomes)
    if total_bytes > 0 and total_seconds > 0:
        return total_bytes / total_seconds
    return previous or DEFAULT_THROUGHPUT


def table_name(uri: str) -> str:
    return os.path.basename(uri.rstrip("/")) or uri
