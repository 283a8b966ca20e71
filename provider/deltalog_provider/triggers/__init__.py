"""Triggers for the deferrable sensors (library calls run in threads, never on the event loop)."""

from deltalog_provider.triggers.delta_table import DeltaMaintenanceDueTrigger, DeltaTableVersionTrigger

__all__ = ["DeltaMaintenanceDueTrigger", "DeltaTableVersionTrigger"]
