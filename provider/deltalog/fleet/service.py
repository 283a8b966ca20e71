"""Service levels of many tables: are their objectives met now, and what changed since the last run.

* :func:`check_objectives`: every table measured, its objectives judged, with breach start
  and trend from the maintenance history when there is one (``deltalog objectives``, the
  provider's objective check and branch operators).
* :func:`breach_alert`: a run's closing judgement compared with the history
  (:func:`deltalog.journal.compliance.compliance_changes`): what one alert message lists, and
  the ``measure`` rows that record the closing judgement (so the next run compares with it).
* :func:`breach_message`: that report as a subject, a text body and an HTML body.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from deltalog.errors import DeltaLogError, NotADeltaTableError
from deltalog.fleet.discover import FoundTable
from deltalog.fleet.ranking import TableReport, fleet_health
from deltalog.fleet.run import COMPLIANCE_HISTORY_DAYS, measurement_rows
from deltalog.journal import HistoryRecorder, JournalRow, read_history
from deltalog.journal.compliance import BreachReport, ComplianceHistory, compliance_changes
from deltalog.maintenance.objectives import TableCompliance
from deltalog.maintenance.policy import FleetPolicy
from deltalog.storage.filesystem import canonical_uri

__all__ = ["BreachAlert", "BreachMessage", "breach_alert", "breach_message", "check_objectives"]


def _history_rows(uri: str, storage_options: dict[str, Any] | None, now: dt.datetime) -> Any:
    since = (now - dt.timedelta(days=COMPLIANCE_HISTORY_DAYS)).date()
    try:
        return read_history(uri, storage_options=storage_options, since=since)
    except NotADeltaTableError as exc:
        raise NotADeltaTableError(f"the maintenance history {uri} cannot be read: {exc}") from None


def _measure(
    tables: Sequence[str | FoundTable],
    *,
    storage_options: dict[str, Any] | None,
    settings: FleetPolicy | dict[str, Any] | None,
    rows: Any,
    next_run_hours: float | None,
    now: dt.datetime,
    max_workers: int,
) -> list[TableReport]:
    uris = [t.uri if isinstance(t, FoundTable) else t for t in tables]
    views = ComplianceHistory.for_tables(rows, uris, next_run=next_run_hours) if rows is not None else None
    reports = fleet_health(
        tables, storage_options=storage_options, settings=settings, history=views, now=now, max_workers=max_workers
    )
    order = {u: i for i, u in enumerate(uris)}
    return sorted(reports, key=lambda r: order.get(r.uri, len(order)))


def check_objectives(
    tables: Sequence[str | FoundTable],
    *,
    storage_options: dict[str, Any] | None = None,
    settings: FleetPolicy | dict[str, Any] | None = None,
    history: str | None = None,
    history_storage_options: dict[str, Any] | None = None,
    next_run_hours: float | None = None,
    now: dt.datetime | None = None,
    max_workers: int = 8,
) -> list[TableCompliance]:
    """Every table's objectives judged now, in the order given.

    ``history``: the maintenance history's URI: each breach's start (``breached_since``) and the
    last successful vacuum come from its last :data:`COMPLIANCE_HISTORY_DAYS` days; without it
    ``breached_since`` is null. An unreadable table is reported with its error (not met).
    """
    policy = FleetPolicy.parse(settings)  # bad settings: refused before any table is read
    now = now or dt.datetime.now(dt.UTC)
    rows = None
    if history is not None:
        rows = _history_rows(history, history_storage_options or storage_options, now)
    reports = _measure(
        tables,
        storage_options=storage_options,
        settings=policy,
        rows=rows,
        next_run_hours=next_run_hours,
        now=now,
        max_workers=max_workers,
    )
    return [r.compliance() for r in reports]


@dataclass(frozen=True)
class BreachAlert:
    """A run's closing judgement and what its alert lists (``report``); ``rows``: the closing ``measure``
    rows, for the history (appended after the message went out, so a failed delivery is retried whole)."""

    report: BreachReport
    tables: tuple[TableCompliance, ...] = ()
    rows: tuple[JournalRow, ...] = field(default_factory=tuple)
    #: The fleet run's finishing time, when it was missed: ``{"objective", "deadline", "ended_at"}``.
    missed_finish_by: dict[str, Any] | None = None

    @property
    def should_notify(self) -> bool:
        """Whether there is anything to tell: a breach (new, open or resolved), an unreadable table, a late run."""
        return not self.report.empty or self.missed_finish_by is not None

    def summary_line(self) -> str:
        """``objectives: 1 new breach, 2 still open, 0 resolved`` (and a missed finishing time)."""
        late = f"; missed finish_by {self.missed_finish_by['objective']}" if self.missed_finish_by else ""
        return f"objectives: {self.report.summary_line()}{late}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "report": self.report.to_dict(),
            "tables": [t.to_dict() for t in self.tables],
            "missed_finish_by": self.missed_finish_by,
            "should_notify": self.should_notify,
        }


def breach_alert(
    tables: Sequence[str | FoundTable],
    *,
    history: HistoryRecorder,
    storage_options: dict[str, Any] | None = None,
    settings: FleetPolicy | dict[str, Any] | None = None,
    next_run_hours: float | None = None,
    now: dt.datetime | None = None,
    missed_finish_by: dict[str, Any] | None = None,
) -> BreachAlert:
    """The tables judged now (the run's closing judgement) against the history: new, still-open and
    resolved breaches (:func:`deltalog.journal.compliance.compliance_changes`), for the run of
    ``history.context``. Nothing is written: record ``alert.rows`` once the message went out."""
    if history.uri is None or history.context is None:
        raise DeltaLogError("a breach alert compares with the maintenance history: give its URI")
    policy = FleetPolicy.parse(settings)
    now = now or dt.datetime.now(dt.UTC)
    rows = _history_rows(history.uri, history.storage_options, now)
    reports = _measure(
        tables,
        storage_options=storage_options,
        settings=policy,
        rows=rows,
        next_run_hours=next_run_hours,
        now=now,
        max_workers=8,
    )
    judged = tuple(r.compliance() for r in reports)
    report = compliance_changes(rows, judged, history.context.run_id)
    # The closing judgement of the tables that set objectives (what the next run compares with).
    closing = measurement_rows([r for r in reports if r.objectives], history, now)
    return BreachAlert(report, judged, tuple(closing), missed_finish_by)


@dataclass(frozen=True)
class BreachMessage:
    """One alert: a subject line, a plain-text body and an HTML body (what notifiers template)."""

    subject: str
    text: str
    html: str

    def summary_line(self) -> str:
        """The subject line."""
        return self.subject

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "text": self.text, "html": self.html}


def _since(when: dt.datetime | None) -> str:
    return f" (breached since {when.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC)" if when else ""


def breach_message(alert: BreachAlert, run: str = "") -> BreachMessage:
    """The alert as one message: new breaches, still-open ones, resolved ones, unreadable tables and a
    missed finishing time, each table by its URI."""
    r = alert.report
    tables = r.tables()
    counts = []
    if r.new:
        counts.append(f"{len(r.new)} new")
    if r.still_open:
        counts.append(f"{len(r.still_open)} still open")
    if r.resolved:
        counts.append(f"{len(r.resolved)} resolved")
    if r.unreadable:
        counts.append(f"{len(r.unreadable)} unreadable")
    if alert.missed_finish_by:
        counts.append("finish_by missed")
    names = ", ".join(canonical_uri(t).rstrip("/").rsplit("/", 1)[-1] for t in tables[:5])
    more = f" and {len(tables) - 5} more" if len(tables) > 5 else ""
    subject = f"deltalog objectives: {', '.join(counts) or 'all met'}" + (f" ({names}{more})" if names else "")
    sections: list[tuple[str, list[str]]] = [
        ("New breaches", [f"{c.table_uri}: {c.describe}" for c in r.new]),
        ("Still open", [f"{c.table_uri}: {c.describe}" for c in r.still_open]),
        ("Resolved", [f"{c.table_uri}: {c.describe}{_since(c.breached_since)}" for c in r.resolved]),
        ("Unreadable", [f"{uri}: {error}" for uri, error in r.unreadable]),
    ]
    if alert.missed_finish_by:
        m = alert.missed_finish_by
        sections.append(
            (
                "Finishing time",
                [f"the run missed finish_by {m['objective']}: deadline {m['deadline']}, ended {m['ended_at']}"],
            )
        )
    head = f"deltalog service-level objectives{f' after run {run}' if run else ''}: {alert.report.summary_line()}"
    text = [head, ""]
    body = [f"<p>{html.escape(head)}</p>"]
    for title, lines in sections:
        if not lines:
            continue
        text += [f"{title}:", *(f"  - {line}" for line in lines), ""]
        body.append(
            f"<h3>{html.escape(title)}</h3><ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in lines) + "</ul>"
        )
    return BreachMessage(subject, "\n".join(text).rstrip() + "\n", "".join(body))
