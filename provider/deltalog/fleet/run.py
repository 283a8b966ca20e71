"""One fleet maintenance run: measure, order by service level and gain per second, maintain within the budget.

With a maintenance history, the run reads the last :data:`COMPLIANCE_HISTORY_DAYS` days of it
first: each table's objectives are judged with their breach start and trend
(:mod:`deltalog.journal.compliance`), breached tables go first, then those predicted to breach
before the next run. ``finish_by`` (the settings' ``defaults``) is a deadline too: nothing
starts after it, and the run records a ``fleet_run`` row saying whether it ended in time.

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

from deltalog.errors import DeltaLogError, HistoryWriteError, InvalidArgumentError
from deltalog.fleet.discover import FoundTable
from deltalog.fleet.maintain import (
    DEFAULT_THROUGHPUT,
    PlannedTable,
    TableOutcome,
    maintain_table,
    measured_throughput,
    order_work,
    purge_reason,
    with_service,
)
from deltalog.fleet.ranking import TableReport, fleet_health
from deltalog.journal import HistoryRecorder, JournalRow, OperationSpan, TableState, make_row, read_history
from deltalog.journal.compliance import COMPLIANCE_HISTORY_DAYS, ComplianceHistory
from deltalog.journal.record import row_for_measurement, state_of, utc_now
from deltalog.maintenance.objectives import FinishBy
from deltalog.maintenance.policy import FleetPolicy, purge_due
from deltalog.storage.filesystem import canonical_uri, is_remote

__all__ = [
    "COMPLIANCE_HISTORY_DAYS",
    "FleetRunResult",
    "compliance_views",
    "finish_by_row",
    "measurement_rows",
    "previous_throughput",
    "run_fleet",
]


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
    #: ``{"objective", "deadline", "ended_at", "met"}`` when the settings set ``finish_by``.
    finish_by: dict[str, Any] | None = None

    @property
    def stays_breached(self) -> list[dict[str, Any]]:
        """Tables breached when measured whose fixing work did not run: ``{"uri", "objectives"}``."""
        return [{"uri": o.uri, "objectives": list(o.stays_breached)} for o in self.outcomes if o.stays_breached]

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
        line = f"{head} in {self.seconds:.1f} s: {len(self.planned)} tables due; {counts or 'no tables'}"
        breached = sum(p.service == "breached" for p in self.planned)
        if breached:
            line += f"; {breached} breaching an objective, {len(self.stays_breached)} stay breached"
        if self.finish_by is not None and self.finish_by.get("met") is False:
            line += f"; missed finish_by {self.finish_by['objective']}"
        return line

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
            "stays_breached": self.stays_breached,
            "finish_by": self.finish_by,
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
        for op, why in r.objective_work().items():
            extra[op] = "; ".join(w for w in (extra.get(op), why) if w)
        rows.append(
            row_for_measurement(
                span, r.due, extra_due=extra, policy=policy, objectives=r.objectives, first_because=r.first_because
            )
        )
    return rows


def compliance_views(
    history: HistoryRecorder | None,
    tables: Sequence[str | FoundTable],
    *,
    next_run_hours: float | None = None,
    now: dt.datetime | None = None,
) -> dict[str, ComplianceHistory] | None:
    """Each table's view of the history (its last :data:`COMPLIANCE_HISTORY_DAYS` days) for its objectives;
    None without a history. A history that cannot be read is logged and left out (objectives are still
    judged on the tables, without breach start or trend)."""
    if history is None or history.uri is None:
        return None
    since = (now or utc_now()) - dt.timedelta(days=COMPLIANCE_HISTORY_DAYS)
    try:
        rows = read_history(history.uri, storage_options=history.storage_options, since=since.date())
    except (DeltaLogError, OSError) as exc:
        log.warning("fleet run: cannot read the maintenance history for objectives: %s", exc)
        return None
    uris = [t.uri if isinstance(t, FoundTable) else t for t in tables]
    return ComplianceHistory.for_tables(rows, uris, next_run=next_run_hours)


def finish_by_row(
    history: HistoryRecorder, finish_by: FinishBy, fleet: str, started: dt.datetime, ended: dt.datetime
) -> JournalRow:
    """The ``fleet_run`` row of a run with a finishing time: when it ran, its deadline and whether it met it.

    ``fleet``: what the row's ``table_uri`` names (the fleet's root, its list, or the DAG).
    """
    assert history.context is not None
    deadline = finish_by.deadline_after(started)
    met = ended <= deadline
    span = OperationSpan(history.context, fleet, "fleet_run", started, ended)
    reason = (
        None
        if met
        else f"missed finish_by {finish_by.text}: ended {ended:%Y-%m-%d %H:%M:%S} UTC, "
        + (f"{(ended - deadline).total_seconds() / 60:.0f} min after {deadline:%Y-%m-%d %H:%M:%S} UTC")
    )
    return make_row(
        span,
        "done",
        reason=reason,
        summary=f"fleet run {'met' if met else 'missed'} finish_by {finish_by.text}",
        finish_by=finish_by.text,
        finish_by_deadline=deadline,
        finish_by_met=met,
    )


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
    next_run_hours: float | None = None,
    fleet_name: str = "fleet",
) -> FleetRunResult:
    """Maintain the due tables, best gain per second first, starting nothing once the budget is spent.

    ``dry_run`` measures and orders only (nothing is written or deleted). Tables of at least
    ``spark_min_bytes`` compact with Spark (``spark_options`` of ``run_spark``), tables of at
    least ``vacuum_spark_min_files`` live files vacuum with Spark, as in
    :func:`deltalog.fleet.maintain.maintain_table`. ``settings``: the maintenance settings
    file (:mod:`deltalog.maintenance.policy`). ``history``: every table measured and every
    operation run, deferred, refused or failed is recorded there, and the history itself
    joins the fleet (compacted, checkpointed, its log cleaned like any table); a dry run
    records nothing. Objectives: see the module docstring; ``next_run_hours``: when the next run
    is due (default: the history's usual gap between runs, else a day), for the prediction;
    ``fleet_name``: the ``table_uri`` of the run's ``fleet_run`` row (with ``finish_by``).
    """
    if next_run_hours is not None and (
        isinstance(next_run_hours, bool) or not isinstance(next_run_hours, int | float) or not next_run_hours > 0
    ):
        raise InvalidArgumentError(f"the next run must be a positive number of hours away, got {next_run_hours!r}")
    if time_budget_seconds is not None and (
        isinstance(time_budget_seconds, bool)
        or not isinstance(time_budget_seconds, int | float)
        or time_budget_seconds <= 0
    ):
        raise InvalidArgumentError(f"time budget must be a positive number of seconds, got {time_budget_seconds!r}")
    if not isinstance(dry_run, bool) or not isinstance(allow_short_retention, bool):
        raise InvalidArgumentError("dry_run and allow_short_retention must be True or False")
    t0 = time.monotonic()
    run_start = utc_now()
    deadline = t0 + time_budget_seconds if time_budget_seconds is not None else None
    policy = FleetPolicy.parse(settings)  # bad settings: fail before any work
    finish_by = policy.finish_by
    if finish_by is not None and not dry_run:
        finish_at = t0 + (finish_by.deadline_after(run_start) - run_start).total_seconds()
        deadline = finish_at if deadline is None else min(deadline, finish_at)
    tables = list(tables)
    recorder = None if dry_run else history
    if recorder is not None:
        recorder.prepare()  # a bad history location fails before any work
        if reports is None:
            tables = _with_history(tables, recorder, storage_options)
    throughput = previous_throughput(previous_results) or DEFAULT_THROUGHPUT
    started_at = time.time()
    measuring = utc_now()
    if reports is None:
        views = compliance_views(recorder or history, tables, next_run_hours=next_run_hours, now=measuring)
        reports = fleet_health(tables, storage_options=storage_options, settings=policy, history=views, now=measuring)
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
                objective_work=p.objective_work,
                writer_override=p.writer_override,
            )
            history_error = outcome.history_error or history_error
            outcomes.append(with_service(outcome, p))
    finished = None
    if finish_by is not None and not dry_run:
        ended = utc_now()
        deadline_at = finish_by.deadline_after(run_start)
        finished = {
            "objective": finish_by.text,
            "deadline": deadline_at.isoformat(),
            "ended_at": ended.isoformat(),
            "met": ended <= deadline_at,
        }
        if recorder is not None:
            try:
                recorder.record([finish_by_row(recorder, finish_by, fleet_name, run_start, ended)])
            except HistoryWriteError as exc:
                history_error = str(exc)
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
        finish_by=finished,
    )
