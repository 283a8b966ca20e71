"""Sensors: a new commit on a table, or maintenance falling due."""

from deltalog_provider.sensors.delta_table import DeltaMaintenanceDueSensor, DeltaTableVersionSensor

__all__ = ["DeltaMaintenanceDueSensor", "DeltaTableVersionSensor"]
