"""What a table needs: its health numbers and, per maintenance operation, whether it is due and why.

| module | job |
|---|---|
| ``health`` | ``compute_health(snapshot, target)`` -> ``TableHealth``: small files, commits since checkpoint, ... |
| ``due`` | ``maintenance_due(table, snapshot)`` -> ``MaintenanceDue``: would each operation have work (its own planner's rules) |

Built on the operations' planners (compaction, vacuum, log cleanup), so it sits above them.
"""

from deltalog.maintenance.due import MaintenanceDue, maintenance_due
from deltalog.maintenance.health import TableHealth, compute_health

__all__ = ["MaintenanceDue", "TableHealth", "compute_health", "maintenance_due"]
