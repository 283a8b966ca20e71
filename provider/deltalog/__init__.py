"""deltalog: the Delta Lake transaction-log protocol in Python (pyarrow + fsspec).

The entry points::

    from deltalog import DeltaTable
    table = DeltaTable("s3://bucket/events", storage_options={...})
    table.snapshot(); table.history(limit=10); table.health()
    table.compact(target_size="128m"); table.create_checkpoint(); table.vacuum(dry_run=True)
    table.cleanup_log(); table.generate_manifest(); table.transaction(operation="WRITE")

and the same operations as functions taking a table (a ``DeltaTable`` or a path/URI; every
option keyword-only, ``storage_options`` included): ``compact``, ``plan_compaction``,
``plan_vacuum``, ``execute_vacuum``, ``create_checkpoint``, ``cleanup_log``,
``generate_manifest``, ``create_table``, ``convert_to_delta`` (``vacuum`` and
``commit_request`` are in the modules of those names). Errors are ``deltalog.errors``
classes (``DeltaLogError``).

No Airflow import anywhere in this package: the Airflow provider lives in
``deltalog_provider`` and only calls into here.
"""

from __future__ import annotations

import importlib
from typing import Any

from deltalog._version import __version__
from deltalog.errors import DeltaLogError
from deltalog.log.snapshot import Snapshot
from deltalog.table import DeltaTable

#: Public names imported from their modules on first use (``import deltalog`` stays cheap).
_LAZY = {
    "plan_vacuum": "deltalog.vacuuming",
    "execute_vacuum": "deltalog.vacuuming",
    "compact": "deltalog.compaction",
    "plan_compaction": "deltalog.compaction",
    "CompactionOptions": "deltalog.compaction",
    "create_checkpoint": "deltalog.log_maintenance",
    "cleanup_log": "deltalog.log_maintenance.log_cleanup",
    "generate_manifest": "deltalog.log_maintenance.manifest",
    "create_table": "deltalog.create",
    "convert_to_delta": "deltalog.convert",
    "Transaction": "deltalog.commit.transaction",
    "CommitResult": "deltalog.commit.result",
    "PostCommitHook": "deltalog.commit.post_commit",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'deltalog' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["DeltaLogError", "DeltaTable", "Snapshot", "__version__", *_LAZY]
