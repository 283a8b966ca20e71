"""One fleet maintenance run: measure, order by gain per second, maintain within the budget.

The run's result (``FleetRunResult.to_dict()``) is what the CLI writes with
``--results`` and what the fleet DAG returns; the next run reads the compaction
throughput measured here from it (``previous_results``), so the time estimates learn
without any file in ``_delta_log``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from deltalog.errors import HistoryWriteError, InvalidArgumentError
from deltalog.fleet.discover import FoundTable
from deltalog.fleet.maintain import (
    DEFAULT_THROUGHPUT,
    PlannedTable,
    TableOutcome,
    maintain_table,
    measured_throughput,
    order_work,
    purge_reason,
)
from deltalog.fleet.ranking import TableReport, fleet_health
from deltalog.journal import HistoryRecorder, JournalRow, OperationSpan, TableState
from deltalog.journal.record import row_for_measurement, state_of, utc_now
from deltalog.maintenance.policy import FleetPolicy, purge_due
from deltalog.storage.filesystem import canonical_uri, is_remote

__all__ = ["FleetRunResult", "measurement_rows", "previous_throughput", "run_fleet"]

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
    #: The maintenance history the run recorded into (None: none), and why some rows are missing from it.
    history: str | None = None
    history_error: str | None = None

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            out[o.status] = out.get(o.status, 0) + 1
        out["healthy"] = out.get("healthy", 0) + len(self.healthy)
        out["unreadable"] = len(self.unreadable)
        return out

    @property
    def exit_code(self) -> int:
        """The status ``deltalog maintain`` exits with (docs/cli.md): the worst table decides.

        2 when a table failed (an operation raised: storage, corrupt log, conflict, engine) or
        could not be read; else 1 when a table was refused (a safety check said no before
        anything changed: a feature deltalog does not implement, a store without an atomic
        create); else 0 (done, partial, deferred by the budget, healthy, busy). A dry run
        exits 0, as every dry run does: it only plans.
        """
        if self.dry_run:
            return 0
        counts = self.counts()
        if counts.get("failed") or counts.get("unreadable"):
            return 2
        return 1 if counts.get("refused") else 0

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
            "history": self.history,
            "history_error": self.history_error,
        }


def previous_throughput(previous_results: dict[str, Any] | None) -> float | None:
    """The compaction throughput a previous run's result recorded, if any."""
    if not isinstance(previous_results, dict):
        return None
    value = previous_results.get("throughput_bytes_per_second")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _report_state(r: TableReport) -> TableState | None:
    """The history's health figures of a measured table (the numbers of its report)."""
    if r.health is None or r.due is None:
        return None
    return state_of(r.health, r.due.dv_hidden_share, r.table_id)


def measurement_rows(reports: Sequence[TableReport], history: HistoryRecorder, started: Any = None) -> list[JournalRow]:
    """One ``measure`` row per measured table: its state, what is due and why, its settings; refused
    and unreadable tables included (``refused``, ``failed``). ``started``: when the measuring began."""
    assert history.context is not None
    begin = started or utc_now()
    rows = []
    for r in reports:
        state = _report_state(r)
        span = OperationSpan(
            history.context,
            canonical_uri(r.uri),
            "measure",
            begin,
            begin + dt.timedelta(seconds=r.seconds),
            state,
            state,
        )
        policy = r.settings.policy_json() if r.settings is not None else None
        if r.error is not None:
            rows.append(row_for_measurement(span, error=r.error, policy=policy))
            continue
        extra = {}
        if r.due is not None and r.settings is not None and purge_due(r.due, r.settings):
            extra["purge"] = purge_reason(r.due, r.settings)
        rows.append(row_for_measurement(span, r.due, extra_due=extra, policy=policy))
    return rows


def _with_history(
    tables: list[str | FoundTable], history: HistoryRecorder, storage_options: Any
) -> list[str | FoundTable]:
    """The fleet's tables and the history itself (maintained like the rest) when the fleet's storage reaches it."""
    if history.uri is None:  # rows for a listener only: no table to maintain
        return tables
    uris = {canonical_uri(t.uri if isinstance(t, FoundTable) else t) for t in tables}
    same_store = not is_remote(history.uri) or (history.storage_options or {}) == (storage_options or {})
    if canonical_uri(history.uri) in uris or not same_store:
        return tables
    return [*tables, history.uri]


def run_fleet(
    tables: Sequence[str | FoundTable],
    *,
    storage_options: dict[str, Any] | None = None,
    time_budget_seconds: float | None = None,
    settings: FleetPolicy | dict[str, Any] | None = None,
    previous_results: dict[str, Any] | None = None,
    owner: str = "deltalog fleet",
    dry_run: bool = False,
    allow_short_retention: bool = False,
    reports: list[TableReport] | None = None,
    spark_min_bytes: int | None = None,
    spark_options: dict[str, Any] | None = None,
    history: HistoryRecorder | None = None,
    vacuum_spark_min_files: int | None = None,
) -> FleetRunResult:
    """Maintain the due tables, best gain per second first, starting nothing once the budget is spent.

    ``dry_run`` measures and orders only (nothing is written or deleted). Tables of at least
    ``spark_min_bytes`` compact with Spark (``spark_options`` of ``run_spark``), tables of at
    least ``vacuum_spark_min_files`` live files vacuum with Spark, as in
    :func:`deltalog.fleet.maintain.maintain_table`. ``settings``: the maintenance settings
    file (:mod:`deltalog.maintenance.policy`). ``history``: every table measured and every
    operation run, deferred, refused or failed is recorded there, and the history itself
    joins the fleet (compacted, checkpointed, its log cleaned like any table); a dry run
    records nothing.
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
    policy = FleetPolicy.parse(settings)  # bad settings: fail before any work
    tables = list(tables)
    recorder = None if dry_run else history
    if recorder is not None:
        recorder.prepare()  # a bad history location fails before any work
        if reports is None:
            tables = _with_history(tables, recorder, storage_options)
    throughput = previous_throughput(previous_results) or DEFAULT_THROUGHPUT
    started_at = time.time()
    measuring = utc_now()
    reports = reports if reports is not None else fleet_health(tables, storage_options=storage_options, settings=policy)
    history_error = None
    if recorder is not None:
        try:
            recorder.record(measurement_rows(reports, recorder, measuring))
            recorder.flush()
        except HistoryWriteError as exc:
            log.error("fleet run: %s", exc)
            history_error = str(exc)
    refused = [r for r in reports if r.error is None and r.due is not None and r.due.refused]
    planned = order_work(reports, throughput, policy)
    by_uri = {r.uri: r for r in reports}
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
            report = by_uri.get(p.uri)
            outcome = maintain_table(
                p.uri,
                storage_options=storage_options,
                settings=report.settings if report is not None and report.settings is not None else policy,
                deadline=deadline,
                owner=owner,
                allow_short_retention=allow_short_retention,
                spark_min_bytes=spark_min_bytes,
                spark_options=spark_options,
                history=recorder,
                due_operations=[op for op, flag in p.due.items() if flag],
                vacuum_spark_min_files=vacuum_spark_min_files,
            )
            history_error = outcome.history_error or history_error
            outcomes.append(outcome)
    if recorder is not None:
        try:
            recorder.flush()  # rows an earlier append could not write, sent again under their own ids
            history_error = None
        except HistoryWriteError as exc:
            history_error = str(exc)
    due_uris = {p.uri for p in planned}
    return FleetRunResult(
        started_at=started_at,
        time_budget_seconds=time_budget_seconds,
        planned=planned,
        outcomes=outcomes,
        healthy=[
            r.uri
            for r in reports
            if r.error is None and r.uri not in due_uris and not r.any_due and not (r.due and r.due.refused)
        ],
        unreadable=[{"uri": r.uri, "error": r.error or ""} for r in reports if r.error is not None],
        throughput_bytes_per_second=measured_throughput(outcomes, throughput),
        seconds=time.monotonic() - t0,
        dry_run=dry_run,
        history=recorder.uri if recorder is not None else None,
        history_error=history_error,
    )
