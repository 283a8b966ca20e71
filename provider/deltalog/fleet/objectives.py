"""Judging a table's service-level objectives when it is measured, and the work a breach asks for.

:func:`judge_objectives` turns one measurement (the table's snapshot, health and due verdict)
and, when there is one, the maintenance history's view of the table
(:class:`deltalog.journal.compliance.ComplianceHistory`) into the table's
:class:`deltalog.maintenance.objectives.ObjectiveState` list: the value of each objective set,
met or breached, since when, and whether it is predicted to breach before the next run.

Days since the last successful vacuum are the newest of the table's own log (its last
``VACUUM END`` with status ``COMPLETED``, written by Delta Spark and by deltalog, in the last
:data:`deltalog.log.activity.VACUUM_TIME_LOOKBACK` commits) and the history's newest
``vacuum`` row that is ``done`` or ``nothing_due``. The log is read only for tables that set
``max_days_since_vacuum``. Such a breach began the target's length after that vacuum (or the table's
creation), by definition; the others' starts come from the history, of the table the URI holds now
only (:meth:`deltalog.journal.compliance.ComplianceHistory.incarnation`).

:func:`objective_work` says which operation each breached or at-risk objective needs: a
checkpoint, a vacuum or a purge runs for it even when the due verdict would not have run it
(a vacuum that finds nothing to delete still records that the table was vacuumed); a
compaction only when its planner finds a bin (nothing else would lower the count).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from deltalog.journal.compliance import ComplianceHistory
from deltalog.log.activity import last_vacuum
from deltalog.log.snapshot import Snapshot
from deltalog.maintenance.due import MaintenanceDue
from deltalog.maintenance.health import TableHealth
from deltalog.maintenance.objectives import (
    ObjectiveState,
    days_since_vacuum,
    evaluate_objectives,
    objective_spec,
    objective_values,
    vacuum_breached_since,
)
from deltalog.maintenance.policy import TableSettings

__all__ = ["first_because", "judge_objectives", "objective_work", "service_class", "states_to_dicts"]


def _ms(ms: int | None) -> dt.datetime | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def judge_objectives(
    snapshot: Snapshot,
    settings: TableSettings,
    health: TableHealth,
    due: MaintenanceDue,
    *,
    history: ComplianceHistory | None = None,
    now: dt.datetime | None = None,
) -> tuple[ObjectiveState, ...]:
    """The table's objectives judged on this measurement (empty when it sets none)."""
    targets = settings.objective_targets()
    if not targets:
        return ()
    now = dt.datetime.now(dt.UTC) if now is None else now.replace(tzinfo=now.tzinfo or dt.UTC).astimezone(dt.UTC)
    if history is not None:  # only what the history says of the table this URI holds now
        history = history.incarnation(snapshot.metadata.id)
    notes: dict[str, str] = {}
    days = None
    counted_from: dt.datetime | None = None
    if any(name == "max_days_since_vacuum" for name, _, _ in targets):
        seen = last_vacuum(snapshot.storage, snapshot.segment.listing, snapshot.metadata.configuration)
        candidates = [t for t in (_ms(seen.vacuum_ms), history.last_vacuum if history else None) if t is not None]
        vacuumed = max(candidates) if candidates else None
        days, how = days_since_vacuum(now, vacuumed, oldest_seen=_ms(seen.oldest_ms), log_complete=seen.reached_start)
        counted_from = vacuumed or _ms(seen.oldest_ms)
        notes["max_days_since_vacuum"] = how
    values = objective_values(
        small_files=health.num_small_files,
        versions_since_checkpoint=health.commits_since_checkpoint,
        days_since_vacuum=days,
        dv_share=due.dv_hidden_share,
    )
    states = tuple(
        # Days since the last vacuum are breached since the target's length after it, by definition.
        replace(s, breached_since=vacuum_breached_since(counted_from, s.target))
        if s.name == "max_days_since_vacuum" and s.breached
        else s
        for s in evaluate_objectives(targets, values, notes)
    )
    return history.annotate(states, now) if history is not None else states


def objective_work(states: Sequence[ObjectiveState], due: MaintenanceDue | None) -> dict[str, str]:
    """Operation -> why, for each breached or at-risk objective whose operation can bring it back.

    Compaction only when the verdict found a bin; the others (checkpoint, vacuum, purge) always:
    each changes the value it is judged on. A purge needs rows hidden by deletion vectors.
    """
    work: dict[str, str] = {}
    for s in states:
        if not (s.breached or s.at_risk):
            continue
        op = objective_spec(s.name).operation
        if op == "compaction" and not (due is not None and due.compaction):
            continue
        if op == "purge" and not (due is not None and due.rows_hidden_by_dvs > 0):
            continue
        why = f"objective {s.describe()}"
        work[op] = "; ".join(w for w in (work.get(op), why) if w)
    return work


def service_class(states: Sequence[ObjectiveState]) -> int:
    """0: an objective is breached; 1: one is predicted to breach before the next run; 2: neither."""
    if any(s.breached for s in states):
        return 0
    if any(s.at_risk for s in states):
        return 1
    return 2


def first_because(states: Sequence[ObjectiveState]) -> str | None:
    """Which objective puts the table ahead of the gain order (None: none does)."""
    breached = [s for s in states if s.breached]
    if breached:
        return "breached " + "; ".join(s.describe() for s in breached)
    risky = [s for s in states if s.at_risk]
    if risky:
        return "predicted to breach before the next run: " + "; ".join(s.describe() for s in risky)
    return None


def states_to_dicts(states: Sequence[ObjectiveState]) -> list[dict[str, Any]]:
    """The states with their prediction (what the fleet's results keep beyond the objectives JSON)."""
    return [{**s.to_dict(), "at_risk": s.at_risk, "predicted": s.predicted, "note": s.note} for s in states]
