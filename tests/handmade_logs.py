"""Logs written line by line, as outside writers leave them (the outside-table tests of issue 30).

Tables whose logs deltalog would never write itself (a placeholder metaData, a path
spelled two ways, void columns, catalog-managed staged commits, newer features) are
built here action by action: one commit file per call, actions exactly as given.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any


def write_commit(table_path: str, version: int | str, actions: list[dict[str, Any]]) -> str:
    """Write ``actions`` as commit ``version`` (or as the ``_delta_log``-relative file name given); its path."""
    name = f"{version:020d}.json" if isinstance(version, int) else version
    full = os.path.join(table_path, "_delta_log", name)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")
    return full


def field(name: str, dtype: Any) -> dict[str, Any]:
    """A nullable field of a Delta schema."""
    return {"name": name, "type": dtype, "nullable": True, "metadata": {}}


def metadata_action(
    fields: list[dict[str, Any]] | None,
    partition_by: list[str] | None = None,
    configuration: dict[str, str] | None = None,
    table_id: str | None = None,
) -> dict[str, Any]:
    """A ``metaData`` action; ``fields=None`` leaves the schema null (a placeholder some services write)."""
    return {
        "metaData": {
            "id": table_id or str(uuid.uuid4()),
            "format": {"provider": "parquet", "options": {}},
            "schemaString": None if fields is None else json.dumps({"type": "struct", "fields": fields}),
            "partitionColumns": list(partition_by or []),
            "configuration": dict(configuration or {}),
            "createdTime": 1,
        }
    }


def add_action(table_path: str, rel: str, stats: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """An ``add`` of the file at ``rel`` (already written), with its size and ``stats``."""
    size = os.path.getsize(os.path.join(table_path, rel))
    add = {"path": rel, "partitionValues": {}, "size": size, "modificationTime": 1, "dataChange": True, **extra}
    if stats is not None:
        add["stats"] = json.dumps(stats)
    return {"add": add}


#: What Delta Spark 4.4 writes as its ``engineInfo``.
SPARK_ENGINE = "Apache-Spark/4.2.0 Delta-Lake/4.4.0"


def commit_info(
    operation: str,
    *,
    read_version: int | None = None,
    timestamp: int = 1,
    parameters: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    blind: bool = False,
    engine: str = SPARK_ENGINE,
) -> dict[str, Any]:
    """A ``commitInfo`` action as Delta Spark writes it (parameters and metrics as strings)."""
    info: dict[str, Any] = {
        "timestamp": timestamp,
        "operation": operation,
        "operationParameters": {k: v if isinstance(v, str) else json.dumps(v) for k, v in (parameters or {}).items()},
        "isolationLevel": "Serializable",
        "isBlindAppend": blind,
        "engineInfo": engine,
    }
    if read_version is not None:
        info["readVersion"] = read_version
    if metrics:
        info["operationMetrics"] = {k: str(v) for k, v in metrics.items()}
    return {"commitInfo": info}


def file_action(
    kind: str, path: str, partition: dict[str, str] | None = None, data_change: bool = True
) -> dict[str, Any]:
    """An ``add`` or ``remove`` of ``path`` (no file is written: for logs read by the writer-activity rules)."""
    body: dict[str, Any] = {
        "path": path,
        "partitionValues": dict(partition or {}),
        "size": 1,
        "dataChange": data_change,
    }
    if kind == "add":
        body["modificationTime"] = 1
    else:
        body["deletionTimestamp"] = 1
    return {kind: body}


def set_commit_time(table_path: str, version: int, ms: int) -> None:
    """Give commit ``version`` the modification time ``ms`` (what a commit's timestamp is read from without ICT)."""
    full = os.path.join(table_path, "_delta_log", f"{version:020d}.json")
    os.utime(full, (ms / 1000, ms / 1000))
