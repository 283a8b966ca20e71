"""One fleet maintenance run: measure, order by gain per second, maintain within the budget.

The run's result (``FleetRunResult.to_dict()``) is what the CLI writes with
``--results`` and what the fleet DAG returns; the next run reads the compaction
throughput measured here from it (``previous_results``), so the time estimates learn
without any file in ``_delta_log``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from deltalog.errors import InvalidArgumentError
from deltalog.fleet.discover import FoundTable
from deltalog.fleet.maintain import (
    DEFAULT_THROUGHPUT,
    PlannedTable,
    TableOutcome,
    maintain_table,
    measured_throughput,
    order_work,
    settings_for,
)
from deltalog.fleet.ranking import TableReport, fleet_health

__all__ = ["FleetRunResult", "previous_throughput", "run_fleet"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FleetRunResult:
    """Every table of the run: maintained (outcomes), healthy, unreadable; plus the budget and throughput."""

    started_at: float
    time_budget_seconds: float | None
    planned: list[PlannedTable] = field(default_factory=list)
    outcomes: list[TableOutcome] = field(default_factory=list)
    healthy: list[str] = field(default_factory=list)
    unreadable: list[dict[str, str]] = field(default_factory=list)
    throughput_bytes_per_second: float = DEFAULT_THROUGHPUT
    seconds: float = 0.0
    dry_run: bool = False

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            out[o.status] = out.get(o.status, 0) + 1
        out["healthy"] = out.get("healthy", 0) + len(self.healthy)
        out["unreadable"] = len(self.unreadable)
        return out

    def summary_line(self) -> str:
        """One line for logs and the CLI: how many tables ended how."""
        counts = ", ".join(f"{n} {status}" for status, n in sorted(self.counts().items()) if n)
        head = "fleet dry run" if self.dry_run else "fleet run"
        return f"{head} in {self.seconds:.1f} s: {len(self.planned)} tables due; {counts or 'no tables'}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "time_budget_seconds": self.time_budget_seconds,
            "seconds": round(self.seconds, 3),
            "dry_run": self.dry_run,
            "counts": self.counts(),
            "throughput_bytes_per_second": round(self.throughput_bytes_per_second, 1),
            "planned": [p.to_dict() for p in self.planned],
            "tables": [o.to_dict() for o in self.outcomes],
            "healthy": self.healthy,
            "unreadable": self.unreadable,
        }


def previous_throughput(previous_results: dict[str, Any] | None) -> float | None:
    """The compaction throughput a previous run's result recorded, if any."""
    if not isinstance(previous_results, dict):
        return None
    value = previous_results.get("throughput_bytes_per_second")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def run_fleet(
    tables: Sequence[str | FoundTable],
    *,
    storage_options: dict[str, Any] | None = None,
    time_budget_seconds: float | None = None,
    settings: dict[str, Any] | None = None,
    previous_results: dict[str, Any] | None = None,
    owner: str = "deltalog fleet",
    dry_run: bool = False,
    allow_short_retention: bool = False,
    reports: list[TableReport] | None = None,
    spark_min_bytes: int | None = None,
    spark_options: dict[str, Any] | None = None,
    vacuum_spark_min_files: int | None = None,
) -> FleetRunResult:
    """Maintain the due tables, best gain per second first, starting nothing once the budget is spent.

    ``dry_run`` measures and orders only (nothing is written or deleted). Tables of at least
    ``spark_min_bytes`` compact with Spark (``spark_options`` of ``run_spark``), tables of at
    least ``vacuum_spark_min_files`` live files vacuum with Spark, as in
    :func:`deltalog.fleet.maintain.maintain_table`.
    """
    if time_budget_seconds is not None and (
        isinstance(time_budget_seconds, bool)
        or not isinstance(time_budget_seconds, int | float)
        or time_budget_seconds <= 0
    ):
        raise InvalidArgumentError(f"time budget must be a positive number of seconds, got {time_budget_seconds!r}")
    if not isinstance(dry_run, bool) or not isinstance(allow_short_retention, bool):
        raise InvalidArgumentError("dry_run and allow_short_retention must be True or False")
    t0 = time.monotonic()
    deadline = t0 + time_budget_seconds if time_budget_seconds is not None else None
    for t in tables:
        settings_for(t.uri if isinstance(t, FoundTable) else t, settings)  # bad settings: fail before any work
    throughput = previous_throughput(previous_results) or DEFAULT_THROUGHPUT
    started_at = time.time()
    reports = reports if reports is not None else fleet_health(tables, storage_options=storage_options)
    refused = [r for r in reports if r.error is None and r.due is not None and r.due.refused]
    planned = order_work(reports, throughput, settings)
    outcomes = [
        TableOutcome(uri=r.uri, status="refused", error=r.due.refused if r.due else None, version_before=r.version)
        for r in refused
    ]
    log.info(
        "fleet run: %d tables, %d due, budget %s s, throughput %.0f B/s",
        len(reports),
        len(planned),
        time_budget_seconds,
        throughput,
    )
    if not dry_run:
        for p in planned:
            outcomes.append(
                maintain_table(
                    p.uri,
                    storage_options=storage_options,
                    settings=settings_for(p.uri, settings),
                    deadline=deadline,
                    owner=owner,
                    allow_short_retention=allow_short_retention,
                    spark_min_bytes=spark_min_bytes,
                    spark_options=spark_options,
                    vacuum_spark_min_files=vacuum_spark_min_files,
                )
            )
    return FleetRunResult(
        started_at=started_at,
        time_budget_seconds=time_budget_seconds,
        planned=planned,
        outcomes=outcomes,
        healthy=[r.uri for r in reports if r.error is None and not r.any_due and not (r.due and r.due.refused)],
        unreadable=[{"uri": r.uri, "error": r.error or ""} for r in reports if r.error is not None],
        throughput_bytes_per_second=measured_throughput(outcomes, throughput),
        seconds=time.monotonic() - t0,
        dry_run=dry_run,
    )
