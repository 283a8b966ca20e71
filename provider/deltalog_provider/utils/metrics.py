"""Per table and operation metrics, through Airflow's own metrics system (StatsD, DogStatsD or OpenTelemetry).

Every maintenance history row a task records (an operator's operation, a fleet task's
measurements and steps) is also sent to whatever ``[metrics]`` backend the deployment
configured, through Airflow's ``Stats`` facade (the version-compat seam), so the numbers
reach the dashboards the deployment already has, with Airflow's prefix
(``[metrics] statsd_prefix``, ``airflow`` by default), allow and block lists.

StatsD has no tags, so the table is the last part of each name (as Airflow puts the DAG id
in ``dagrun.duration.success.<dag_id>``): ``<table>`` is the table's location without its
scheme, every character other than letters, digits, ``_`` and ``-`` made ``_`` (e.g.
``s3://lake/sales/orders`` -> ``lake_sales_orders``). Backends with tags (OpenTelemetry,
DogStatsD) also get ``table`` (the URI), ``operation`` and ``status``.

| metric | kind | value |
|---|---|---|
| ``deltalog.<operation>.duration.<table>`` | timer | the operation's wall-clock time |
| ``deltalog.<operation>.<status>.<table>`` | counter | 1 per operation that ended so (done, nothing_due, deferred, refused, failed) |
| ``deltalog.<operation>.files_read.<table>``, ``bytes_read`` | counter | data files (bytes) compaction or a purge rewrote |
| ``deltalog.<operation>.files_written.<table>``, ``bytes_written`` | counter | files (bytes) written |
| ``deltalog.<operation>.files_removed.<table>``, ``bytes_removed`` | counter | files (bytes) removed from the table or deleted by vacuum |
| ``deltalog.<operation>.bytes_reclaimed.<table>`` | counter | storage freed (vacuum, log cleanup) |
| ``deltalog.<operation>.log_files_removed.<table>`` | counter | ``_delta_log`` files deleted |
| ``deltalog.table.live_files.<table>``, ``small_files``, ``bytes``, ``versions_since_checkpoint``, ``log_files`` | gauge | the table after the operation (or when measured) |
| ``deltalog.table.dv_share.<table>`` | gauge | share of rows deletion vectors hide (0 to 1) |
| ``deltalog.table.due_operations.<table>`` | gauge | measurements: how many operations are due |

``<operation>`` is the history's (``measure``, ``compaction``, ``purge``, ``checkpoint``,
``vacuum``, ``log_cleanup``, ``manifest``, ``commit``, ``convert``). Counters are sent only
when not zero.
"""

from __future__ import annotations

import re
from typing import Any

from deltalog import JournalRow
from deltalog.journal import WORK_COLUMNS
from deltalog_provider.version_compat import Stats

__all__ = ["COUNTED", "STATE_GAUGES", "emit_row_metrics", "table_stat_key"]

#: Row columns sent as counters (when not zero): the history's counters of work done.
COUNTED = WORK_COLUMNS
#: Gauge name -> the row column of the table's state after the operation.
STATE_GAUGES = {
    "live_files": "live_files_after",
    "small_files": "small_files_after",
    "bytes": "table_bytes_after",
    "versions_since_checkpoint": "versions_since_checkpoint_after",
    "log_files": "log_files_after",
    "dv_share": "dv_share_after",
}
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
#: StatsD names stay well under Airflow's 250-character limit with this much of a table's location.
MAX_KEY = 120


def table_stat_key(uri: str) -> str:
    """The table's part of a metric name: its location without scheme, unsafe characters as ``_``."""
    location = uri.split("://", 1)[-1]
    key = _UNSAFE.sub("_", location).strip("_") or "table"
    return key[-MAX_KEY:].lstrip("_")


def emit_row_metrics(row: JournalRow) -> None:
    """Send one history row's numbers (see the module docstring)."""
    key = table_stat_key(row.table_uri)
    op = row.operation
    tags: dict[str, Any] = {"table": row.table_uri, "operation": op, "status": row.status}
    Stats.timing(f"deltalog.{op}.duration.{key}", row.duration_s * 1000.0, tags=tags)
    Stats.incr(f"deltalog.{op}.{row.status}.{key}", tags=tags)
    for column in COUNTED:
        value = getattr(row, column)
        if value:
            Stats.incr(f"deltalog.{op}.{column}.{key}", count=int(value), tags=tags)
    for name, column in STATE_GAUGES.items():
        value = getattr(row, column)
        if value is not None:
            Stats.gauge(f"deltalog.table.{name}.{key}", float(value), tags=tags)
    if op == "measure" and row.due_operations is not None:
        Stats.gauge(f"deltalog.table.due_operations.{key}", float(len(row.due_operations)), tags=tags)
