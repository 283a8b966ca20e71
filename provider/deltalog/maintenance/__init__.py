"""What a table needs: its health numbers, its maintenance settings and, per operation, whether it is due and why.

| module | job |
|---|---|
| ``health`` | ``compute_health(snapshot, target)`` -> ``TableHealth``: small files, commits since checkpoint, ... |
| ``due`` | ``maintenance_due(table, snapshot)`` -> ``MaintenanceDue``: would each operation have work (its own planner's rules) |
| ``policy`` | ``FleetPolicy`` / ``settings_for``: a table's settings through fleet defaults, path rules, its properties and overrides, each explained; ``due_rules``: why each operation is due or not |
| ``objectives`` | service-level objectives (settings of the policy): their table properties and checks, ``FinishBy``, ``evaluate_objectives`` -> ``ObjectiveState``, ``TableCompliance`` |

Built on the operations' planners (compaction, vacuum, log cleanup), so it sits above them.
"""

from deltalog.maintenance.due import MaintenanceDue, maintenance_due
from deltalog.maintenance.health import TableHealth, compute_health
from deltalog.maintenance.objectives import (
    OBJECTIVES,
    FinishBy,
    ObjectiveSpec,
    ObjectiveState,
    TableCompliance,
    evaluate_objectives,
    parse_finish_by,
)
from deltalog.maintenance.policy import DueRule, ExplainedSetting, FleetPolicy, TableSettings, due_rules, settings_for

__all__ = [
    "OBJECTIVES",
    "DueRule",
    "FinishBy",
    "ObjectiveSpec",
    "ObjectiveState",
    "TableCompliance",
    "evaluate_objectives",
    "parse_finish_by",
    "ExplainedSetting",
    "FleetPolicy",
    "MaintenanceDue",
    "TableHealth",
    "TableSettings",
    "compute_health",
    "due_rules",
    "maintenance_due",
    "settings_for",
]
