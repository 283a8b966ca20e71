"""Deadline-alert callback for maintenance DAGs (runs in the triggerer).

Airflow 3.1+ Deadline Alerts replace the removed SLA feature: the scheduler notices a
run that is still going past its deadline and hands this coroutine to the triggerer,
which imports it by its dotted path. It lives in the installed provider, not in the
DAGs folder, because the triggerer does not put the DAGs folder on ``sys.path``.
Use it with ``deltalog_provider.version_compat.deadline_kwargs`` (which leaves the
alert out on Airflow 3.0), or swap in a notifier (Slack, e-mail, PagerDuty).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("deltalog.maintenance.deadline")

__all__ = ["deadline_message", "log_missed_deadline"]


def _field(record: Any, *names: str) -> Any:
    """The first of ``names`` that ``record`` (a dict or an object) has a value for."""
    for name in names:
        value = record.get(name) if isinstance(record, dict) else getattr(record, name, None)
        if value:
            return value
    return None


def deadline_message(table: str, minutes: int, context: dict[str, Any] | None = None) -> str:
    """One line naming the table, the run and the deadline it missed.

    Airflow 3.3's scheduler hands the triggerer ``context["dag_run"]`` as the REST API's
    ``DAGRunResponse`` dumped to JSON, where the run id is ``dag_run_id``; ``run_id`` is
    read too, for a DagRun object or an older payload.
    """
    dag_run = (context or {}).get("dag_run") or {}
    run_id = _field(dag_run, "dag_run_id", "run_id")
    dag_id = (context or {}).get("dag_id") or _field(dag_run, "dag_id")
    return (
        f"deltalog maintenance of {table} missed its deadline: run {run_id or '?'} of {dag_id or 'deltalog_maintenance'} "
        f"still not finished {minutes} minutes after it was queued"
    )


async def log_missed_deadline(table: str, minutes: int, context: dict[str, Any] | None = None, **_: Any) -> str:
    """Log (at WARNING) that a maintenance run is late; returns the message for the callback record."""
    message = deadline_message(table, minutes, context)
    log.warning("%s", message)
    return message
