"""Fleet mode: many tables at once (discovery, ranked health, budgeted maintenance, summaries).

| module | job |
|---|---|
| ``discover`` | ``discover_tables``: every Delta table under a root (or in a list file) |
| ``ranking`` | ``fleet_health``: every table measured at once, ranked by what maintenance would gain |
| ``lease`` | the per-table maintenance lease (``_deltalog_maintenance.lease`` in the table root) |
| ``maintain`` | ``maintain_table``: one table's due operations under its lease; the work order: breached first, then at risk, then by gain per second |
| ``objectives`` | ``judge_objectives``: a measured table's objectives (met, breached since, at risk); ``objective_work``: what a breach asks for |
| ``service`` | ``check_objectives`` (``deltalog objectives``), ``breach_alert`` / ``breach_message``: one alert per run from the history |
| ``run`` | ``run_fleet``: the ranked tables maintained within a time budget, recorded in the maintenance history |
| ``report`` | the run's text and HTML summary |

See ``docs/fleet.md``.
"""

from deltalog.fleet.discover import DiscoveryResult, FoundTable, discover_tables
from deltalog.fleet.lease import Lease, acquire_lease
from deltalog.fleet.maintain import PlannedTable, TableOutcome, maintain_table
from deltalog.fleet.ranking import TableReport, fleet_health
from deltalog.fleet.run import FleetRunResult, finish_by_row, measurement_rows, run_fleet
from deltalog.fleet.service import BreachAlert, BreachMessage, breach_alert, breach_message, check_objectives

__all__ = [
    "BreachAlert",
    "BreachMessage",
    "DiscoveryResult",
    "FleetRunResult",
    "FoundTable",
    "Lease",
    "PlannedTable",
    "TableOutcome",
    "TableReport",
    "acquire_lease",
    "breach_alert",
    "breach_message",
    "check_objectives",
    "discover_tables",
    "finish_by_row",
    "fleet_health",
    "maintain_table",
    "measurement_rows",
    "run_fleet",
]
