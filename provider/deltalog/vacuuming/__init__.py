"""VACUUM: delete the files no reader may still need, and provably never one it may.

``plan_vacuum`` runs every safety check and says what would go and why;
``vacuum`` (or ``execute_vacuum`` with a plan) re-validates the plan against the
latest log and deletes. Modules: ``retention`` (how long and the cutoff),
``paths`` (log paths vs physical paths, the hidden rule, deletion vector files),
``listing`` / ``inventory`` (what is on storage), ``retained`` (what the retained
versions reference), ``plan``, ``execute`` (re-validation, START/END commits),
``delete`` (the bounded worker pool) and ``result``.
"""

from deltalog.vacuuming.execute import execute_vacuum, vacuum
from deltalog.vacuuming.plan import LiteVacuumUnavailableError, VacuumPlan, plan_vacuum
from deltalog.vacuuming.result import VacuumResult

__all__ = [
    "LiteVacuumUnavailableError",
    "VacuumPlan",
    "VacuumResult",
    "execute_vacuum",
    "plan_vacuum",
    "vacuum",
]
