"""The maintenance history: every operation deltalog runs, one row each, in a Delta table.

Not to be confused with :mod:`deltalog.log.history` (a table's own commitInfo history): this
is a table of its own, at a URI the user chooses, that deltalog appends to after each
maintenance operation, committed with our own transaction so any Delta reader reads it
(protocol (1, 2); tested with Delta Spark, deltalake, DuckDB). Its columns are a stable, versioned contract
(:mod:`deltalog.journal.schema`, docs/history.md).

* :func:`append_rows` (``write.py``): create on first use, append idempotently.
* :class:`HistoryRecorder` (``record.py``; its ``row_*`` builders are for the fleet): results to rows.
* :func:`read_history`, :func:`fleet_overview`, :func:`rows_for_table` (``read.py``): what the
  Airflow page and queries read.
* :func:`breached_since`, :class:`ComplianceHistory`, :func:`compliance_changes` (``compliance.py``):
  the service-level objectives over time: since when a breach lasts, trends, what an alert says.
"""

from __future__ import annotations

from deltalog.journal.compliance import (
    BreachChange,
    BreachReport,
    ComplianceHistory,
    breached_since,
    compliance_changes,
    next_run_hours,
)
from deltalog.journal.read import TableOverview, fleet_overview, read_history, rows_for_table
from deltalog.journal.record import HistoryRecorder, table_state
from deltalog.journal.row import JournalRow, OperationSpan, RunContext, TableState, make_row
from deltalog.journal.schema import COLUMNS, HISTORY_SCHEMA, SCHEMA_VERSION, SCHEMA_VERSION_PROPERTY
from deltalog.journal.write import AppendResult, append_rows

__all__ = [
    "COLUMNS",
    "BreachChange",
    "BreachReport",
    "ComplianceHistory",
    "HISTORY_SCHEMA",
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_PROPERTY",
    "AppendResult",
    "HistoryRecorder",
    "JournalRow",
    "OperationSpan",
    "RunContext",
    "TableOverview",
    "TableState",
    "append_rows",
    "breached_since",
    "compliance_changes",
    "fleet_overview",
    "make_row",
    "next_run_hours",
    "read_history",
    "rows_for_table",
    "table_state",
]
