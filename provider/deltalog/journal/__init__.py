"""The maintenance history: every operation deltalog runs, one row each, in a Delta table.

Not to be confused with :mod:`deltalog.log.history` (a table's own commitInfo history): this
is a table of its own, at a URI the user chooses, that deltalog appends to after each
maintenance operation, committed with our own transaction so any Delta reader reads it
(protocol (1, 2); tested with Delta Spark, deltalake, DuckDB). Its columns are a stable, versioned contract
(:mod:`deltalog.journal.schema`, docs/history.md).

* :func:`append_rows` (``write.py``): create on first use, append idempotently.
* :class:`HistoryRecorder` (``record.py``; its ``row_*`` builders are for the fleet): results to rows.
* :func:`read_history`, :func:`fleet_overview`, :func:`rows_for_table` (``read.py``): what
  queries read; :func:`table_rows`, :func:`history_row`: a page of rows, one row.
* :class:`RollupStore` (``rollup_store.py``), :func:`merge_rollups` (``rollup.py``),
  :func:`table_summaries` and :func:`day_figures` (``summary.py``): the history in aggregate,
  per day, table and operation, kept beside it; what the Airflow page reads.
* :func:`breached_since`, :class:`ComplianceHistory`, :func:`compliance_changes` (``compliance.py``):
  the service-level objectives over time: since when a breach lasts, trends, what an alert says.
"""

from __future__ import annotations

from deltalog.journal.compliance import (
    COMPLIANCE_HISTORY_DAYS,
    BreachChange,
    BreachReport,
    ComplianceHistory,
    breached_since,
    compliance_changes,
    next_run_hours,
)
from deltalog.journal.read import (
    TableOverview,
    fleet_overview,
    history_row,
    history_table_uri,
    read_history,
    rows_for_table,
    table_rows,
)
from deltalog.journal.record import HistoryRecorder, table_state
from deltalog.journal.rollup import BREACH_RUNS, MEASURES, Measure, merge_rollups, rollup_rows
from deltalog.journal.rollup_store import DayRollup, RollupStore, RollupWindow
from deltalog.journal.row import JournalRow, OperationSpan, RunContext, TableState, TriggeredBy, make_row
from deltalog.journal.schema import COLUMNS, HISTORY_SCHEMA, SCHEMA_VERSION, SCHEMA_VERSION_PROPERTY, WORK_COLUMNS
from deltalog.journal.summary import COMPLIANCE_STATES, FIGURES, TABLE_STATUSES, Figure, day_figures, table_summaries
from deltalog.journal.write import AppendResult, append_arrow, append_rows, check_history_table

__all__ = [
    "BREACH_RUNS",
    "COLUMNS",
    "COMPLIANCE_STATES",
    "COMPLIANCE_HISTORY_DAYS",
    "BreachChange",
    "BreachReport",
    "ComplianceHistory",
    "FIGURES",
    "HISTORY_SCHEMA",
    "MEASURES",
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_PROPERTY",
    "TABLE_STATUSES",
    "WORK_COLUMNS",
    "AppendResult",
    "DayRollup",
    "Figure",
    "HistoryRecorder",
    "JournalRow",
    "Measure",
    "OperationSpan",
    "RollupStore",
    "RollupWindow",
    "RunContext",
    "TableOverview",
    "TableState",
    "TriggeredBy",
    "append_arrow",
    "append_rows",
    "breached_since",
    "compliance_changes",
    "check_history_table",
    "day_figures",
    "fleet_overview",
    "history_row",
    "history_table_uri",
    "make_row",
    "next_run_hours",
    "merge_rollups",
    "read_history",
    "rollup_rows",
    "rows_for_table",
    "table_rows",
    "table_state",
    "table_summaries",
]
