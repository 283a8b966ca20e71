"""Health of many tables at once, ranked by what maintenance would gain.

Each measurement also judges the table's service-level objectives
(:mod:`deltalog.fleet.objectives`), with the maintenance history's view of the table when
the caller passes one (since when a breach lasts, the trend towards the next run).

Each table is measured on a thread pool (snapshot, health numbers, the due
verdict of :mod:`deltalog.maintenance.due`); a table that cannot be read is listed with its
error and does not stop the others. The ranking score is a plain sum, so the
reasons stay explainable:

* one point per file compaction would remove (input files minus bins),
* one point per commit a due checkpoint saves readers from replaying,
* one point per MiB a vacuum would reclaim,
* one point per expired log file,
* one point per file carrying a deletion vector when compaction is due (the
  rewrite applies the deletion vectors of the files it merges).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from deltalog._flags import require_workers
from deltalog.errors import DeltaLogError
from deltalog.fleet.discover import FoundTable
from deltalog.fleet.objectives import first_because, judge_objectives, objective_work, service_class
from deltalog.journal.compliance import ComplianceHistory
from deltalog.log.listing import LogListing
from deltalog.log.load import snapshot_at
from deltalog.maintenance.due import MaintenanceDue
from deltalog.maintenance.health import TableHealth, compute_health
from deltalog.maintenance.objectives import ObjectiveState, TableCompliance
from deltalog.maintenance.policy import FleetPolicy, TableSettings, due_under
from deltalog.storage.filesystem import Storage, canonical_uri

__all__ = ["TableReport", "fleet_health"]

log = logging.getLogger(__name__)

MIB = 1 << 20
DEFAULT_WORKERS = 8


@dataclass(frozen=True)
class TableReport:
    """One table's health, due verdict and gain score (or the error that stopped its measurement)."""

    uri: str
    version: int | None = None
    health: TableHealth | None = None
    due: MaintenanceDue | None = None
    num_dv_files: int = 0
    gain: float = 0.0
    error: str | None = None
    seconds: float = 0.0
    #: The table's metaData id (the history keeps it: it stays when the table moves).
    table_id: str | None = None
    #: The settings the table was measured with (its policy, each value explained).
    settings: TableSettings | None = None
    #: The table's service-level objectives judged on this measurement (empty: none set).
    objectives: tuple[ObjectiveState, ...] = ()

    @property
    def any_due(self) -> bool:
        return self.due is not None and self.due.any

    @property
    def service_class(self) -> int:
        """0: an objective is breached, 1: one is predicted to breach before the next run, 2: neither."""
        return service_class(self.objectives)

    @property
    def first_because(self) -> str | None:
        """Which objective ranks the table ahead of the gain order (None: none)."""
        return first_because(self.objectives)

    def objective_work(self) -> dict[str, str]:
        """Operations its breached or at-risk objectives need beyond the due verdict's (op -> why)."""
        return objective_work(self.objectives, self.due)

    def compliance(self) -> TableCompliance:
        """The table's objectives as ``deltalog objectives`` reports them (an unreadable table: its error)."""
        return TableCompliance(canonical_uri(self.uri), self.objectives, self.error)

    def summary_line(self) -> str:
        """One line for logs and the CLI: the table, its gain and what is due."""
        if self.error is not None:
            return f"{self.uri}: error: {self.error}"
        assert self.due is not None
        due = [op for op, flag in self.due.flags().items() if flag]
        state = ", ".join(due) if due else ("refused" if self.due.refused else "healthy")
        return f"{self.uri} v{self.version} gain {self.gain:.1f}: {state}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"uri": self.uri, "version": self.version, "gain": round(self.gain, 2)}
        if self.error is not None:
            out["error"] = self.error
        if self.health is not None:
            out["health"] = self.health.to_dict()
            out["health"]["num_dv_files"] = self.num_dv_files
        if self.due is not None:
            out.update(self.due.to_dict())
        if self.settings is not None:
            out["settings"] = self.settings.to_dict()
        if self.objectives:
            out["objectives"] = [
                {**o.to_dict(), "at_risk": o.at_risk, "predicted": o.predicted} for o in self.objectives
            ]
            out["first_because"] = self.first_because
        out["seconds"] = round(self.seconds, 3)
        return out


def gain_score(due: MaintenanceDue, health: TableHealth, num_dv_files: int) -> float:
    """The ranking score of the module docstring (0 when nothing is due)."""
    score = 0.0
    if due.compaction:
        score += due.compaction_input_files - due.compaction_bins + num_dv_files
    if due.checkpoint:
        score += due.commits_since_checkpoint
    if due.vacuum:
        score += due.reclaimable_bytes / MIB
    if due.log_cleanup:
        score += due.expired_log_files
    return score


def measure_table(
    uri: str,
    storage_options: dict[str, Any] | None = None,
    *,
    target_size: int | str | None = None,
    listing: LogListing | None = None,
    policy: FleetPolicy | None = None,
    history: ComplianceHistory | None = None,
    now: dt.datetime | None = None,
) -> TableReport:
    """Health and due verdict of one table; any deltalog or storage error becomes the report's ``error``.

    ``listing`` (from discovery) saves listing the log again. ``policy``: the table's settings
    (target size, checkpoint interval, vacuum retention) come from it, resolved against the
    table's properties; ``target_size`` still wins (a run's explicit override). ``history``: the
    maintenance history's view of the table, for its objectives' breach start and trend.
    """
    t0 = time.perf_counter()
    try:
        storage = Storage(uri, storage_options)
        snapshot = snapshot_at(storage, listing=listing)
        settings = (policy or FleetPolicy()).resolve(storage.uri, snapshot.metadata.configuration)
        target = target_size if target_size is not None else settings.target_file_size
        health = compute_health(snapshot, target=target)
        due = due_under(settings, storage, snapshot, target_size=target)
        dv = snapshot.files.column("deletionVector") if snapshot.files.num_rows else None
        num_dv = int(pc.sum(pc.is_valid(dv)).as_py() or 0) if dv is not None else 0
        objectives = judge_objectives(snapshot, settings, health, due, history=history, now=now)
    except (DeltaLogError, OSError) as exc:
        return TableReport(uri=uri, error=f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - t0)
    return TableReport(
        uri=uri,
        version=snapshot.version,
        health=health,
        due=due,
        num_dv_files=num_dv,
        gain=gain_score(due, health, num_dv),
        seconds=time.perf_counter() - t0,
        table_id=snapshot.metadata.id,
        settings=settings,
        objectives=objectives,
    )


def fleet_health(
    tables: Sequence[str | FoundTable],
    *,
    storage_options: dict[str, Any] | None = None,
    target_size: int | str | None = None,
    max_workers: int = DEFAULT_WORKERS,
    settings: FleetPolicy | dict[str, Any] | None = None,
    history: Mapping[str, ComplianceHistory] | None = None,
    now: dt.datetime | None = None,
) -> list[TableReport]:
    """Every table (URIs, or discovered tables with their listings) measured concurrently.

    Ranked by gain (highest first), unreadable tables last. ``settings``: the maintenance
    settings file (:mod:`deltalog.maintenance.policy`) each table is measured with;
    ``history``: the maintenance history's view of each table, by canonical URI
    (:meth:`ComplianceHistory.for_tables`), for its objectives.
    """
    policy = FleetPolicy.parse(settings)
    views = dict(history or {})
    when = now or dt.datetime.now(dt.UTC)

    def one(t: str | FoundTable) -> TableReport:
        uri = t.uri if isinstance(t, FoundTable) else t
        view = views.get(canonical_uri(uri)) if views else None
        listing = t.listing if isinstance(t, FoundTable) else None
        return measure_table(
            uri, storage_options, target_size=target_size, listing=listing, policy=policy, history=view, now=when
        )

    require_workers(max_workers)  # the one rule for worker counts: 0 is refused, not quietly made 1
    with ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="deltalog-health") as pool:
        reports = list(pool.map(one, tables))
    log.info(
        "fleet health: %d tables, %d due, %d unreadable",
        len(reports),
        sum(r.any_due for r in reports),
        sum(r.error is not None for r in reports),
    )
    return sorted(reports, key=lambda r: (r.error is not None, -r.gain, r.uri))
