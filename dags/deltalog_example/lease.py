"""The per-table maintenance lease around the single-table DAGs' rewriting tasks.

``deltalog_fleet_maintenance`` holds ``deltalog.fleet.lease`` for a table while it maintains
it; the single-table DAGs take the same lease around each task that rewrites or deletes
(compaction, the Spark commit, vacuum), so a fleet run and a single-table run never work
on one table at the same moment, whichever started first. A pool cannot do this: the fleet
would need one pool per table. The task waits up to ``WAIT_SECONDS`` for the lease, then
fails (and retries); the lease lasts the task's ``execution_timeout`` at most and is
released when the task ends, succeeded or not.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

log = logging.getLogger(__name__)

WAIT_SECONDS = 15 * 60
_held: dict[tuple[str, str, str, int], Any] = {}


def _key(context: Any) -> tuple[str, str, str, int]:
    ti = context["ti"]
    return (ti.dag_id, ti.run_id, ti.task_id, getattr(ti, "map_index", -1))


def table_lease(table: str, conn_id: str, ttl: timedelta) -> dict[str, Any]:
    """Operator arguments that hold the table's maintenance lease for the task's duration."""

    def take(context: Any) -> None:
        from deltalog.fleet.lease import acquire_lease
        from deltalog_provider.hooks.delta_table import DeltaTableHook

        ti = context["ti"]
        dtable = DeltaTableHook(deltalog_conn_id=conn_id).get_table(table)
        _held[_key(context)] = acquire_lease(
            dtable, f"{ti.dag_id}/{ti.run_id}/{ti.task_id}", ttl.total_seconds(), wait_seconds=WAIT_SECONDS
        )

    def give_back(context: Any, *_: Any) -> None:
        lease = _held.pop(_key(context), None)
        if lease is not None:
            lease.release()

    return {
        "pre_execute": take,
        "post_execute": give_back,
        "on_failure_callback": give_back,
        "on_retry_callback": give_back,
    }
