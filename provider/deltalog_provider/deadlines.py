"""A task's time budget: the DAG's Deadline Alert minus a margin, or ``execution_timeout`` where there are none.

``DeltaCompactOperator(deadline_margin=...)`` stops starting bins once the budget is spent,
so a long compaction commits what it finished before the run misses its deadline (or the
task is killed) and the next run plans the rest.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from deltalog.errors import InvalidArgumentError
from deltalog_provider.version_compat import dag_deadline_alerts, degraded, queued_at_interval

__all__ = ["check_margin", "work_deadline"]


def check_margin(margin: Any) -> timedelta | None:
    """``deadline_margin`` as given: a ``timedelta`` or None."""
    if margin is not None and not isinstance(margin, timedelta):
        raise InvalidArgumentError(f"deadline_margin must be a timedelta, got {margin!r}")
    return margin


def work_deadline(task: Any, margin: timedelta | None, context: Any, log: logging.Logger | Any) -> float | None:
    """The DAG's run deadline minus ``margin``, as a ``time.monotonic()`` value (or None: no budget).

    Counted from the run's queue time when the context has it, else its start. On an
    Airflow without Deadline Alerts (3.0) the budget is the task's ``execution_timeout``
    minus the margin instead, counted from the task's start (one logged line says so),
    so the work still stops between steps before the task is killed.
    """
    if margin is None or not task.has_dag():
        return None
    alerts = dag_deadline_alerts(task.dag)
    get = context.get if hasattr(context, "get") else (lambda _key: None)
    if alerts is None:
        return _execution_timeout_budget(task.execution_timeout, margin, get("ti"), log)
    intervals = [i for i in (queued_at_interval(a) for a in alerts) if i is not None]
    dag_run = get("dag_run")
    start = getattr(dag_run, "queued_at", None) or getattr(dag_run, "start_date", None)
    if not intervals or start is None:
        return None
    left = (start + min(intervals) - margin - datetime.now(UTC)).total_seconds()
    log.info("time budget: %.0f s left before the run's deadline minus %s", left, margin)
    return time.monotonic() + left


def _execution_timeout_budget(timeout: timedelta | None, margin: timedelta, ti: Any, log: Any) -> float | None:
    """Where Airflow has no Deadline Alerts: ``execution_timeout`` minus the margin, from the task's start."""
    degraded(
        "deadline-budget",
        "no Deadline Alerts before Airflow 3.1: the compaction's time budget is the task's "
        f"execution_timeout ({timeout}) minus deadline_margin",
    )
    if timeout is None:
        return None
    start = getattr(ti, "start_date", None) or datetime.now(UTC)
    left = (start + timeout - margin - datetime.now(UTC)).total_seconds()
    log.info("time budget: %.0f s left before execution_timeout minus %s", left, margin)
    return time.monotonic() + left
