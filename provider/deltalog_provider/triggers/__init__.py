"""Triggers: the deferrable sensors' and the log watcher's (library calls run in threads, never on the event loop)."""

from deltalog_provider.triggers.delta_log import DeltaLogEventTrigger
from deltalog_provider.triggers.delta_table import DeltaMaintenanceDueTrigger, DeltaTableVersionTrigger

__all__ = ["DeltaLogEventTrigger", "DeltaMaintenanceDueTrigger", "DeltaTableVersionTrigger"]
