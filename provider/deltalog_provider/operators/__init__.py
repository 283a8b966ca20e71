"""Operators: one per core operation, plus health check / branch and the objectives' check / branch / alert.

The core operation of each is imported inside ``execute``, so this package imports
even while an operation module is missing from the installed ``deltalog``.
"""

from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.operators.checkpoint import DeltaCheckpointOperator
from deltalog_provider.operators.commit import DeltaCommitOperator
from deltalog_provider.operators.compact import DeltaCompactOperator
from deltalog_provider.operators.convert import DeltaConvertOperator
from deltalog_provider.operators.create import DeltaCreateTableOperator
from deltalog_provider.operators.health import DeltaHealthBranchOperator, DeltaHealthCheckOperator
from deltalog_provider.operators.log_cleanup import DeltaLogCleanupOperator
from deltalog_provider.operators.manifest import DeltaManifestOperator
from deltalog_provider.operators.objectives import (
    DeltaObjectivesAlertOperator,
    DeltaObjectivesBranchOperator,
    DeltaObjectivesCheckOperator,
)
from deltalog_provider.operators.vacuum import DeltaVacuumOperator

__all__ = [
    "DeltaCheckpointOperator",
    "DeltaCommitOperator",
    "DeltaCompactOperator",
    "DeltaConvertOperator",
    "DeltaCreateTableOperator",
    "DeltaHealthBranchOperator",
    "DeltaHealthCheckOperator",
    "DeltaLogCleanupOperator",
    "DeltaManifestOperator",
    "DeltaObjectivesAlertOperator",
    "DeltaObjectivesBranchOperator",
    "DeltaObjectivesCheckOperator",
    "DeltaTableOperator",
    "DeltaVacuumOperator",
]
