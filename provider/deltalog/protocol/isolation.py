"""Delta's isolation levels (``commitInfo.isolationLevel``): the names transactions and conflict rules share."""

from __future__ import annotations

__all__ = ["ISOLATION_LEVELS", "SERIALIZABLE", "SNAPSHOT_ISOLATION", "WRITE_SERIALIZABLE"]

SERIALIZABLE = "Serializable"
WRITE_SERIALIZABLE = "WriteSerializable"
SNAPSHOT_ISOLATION = "SnapshotIsolation"
ISOLATION_LEVELS = (SERIALIZABLE, WRITE_SERIALIZABLE, SNAPSHOT_ISOLATION)
