"""Delta log actions: Arrow types of the file actions and the metaData record.

File actions (add/remove) are kept as Arrow columns end to end because tables
have hundreds of thousands of them; the rare actions (metaData, protocol, txn,
domainMetadata) are small Python objects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa

from deltalog.protocol.log_paths import canonical_path
from deltalog.protocol.schema import parse_schema_string

__all__ = [
    "ADD_FIELDS",
    "ADD_SCHEMA",
    "ADD_TYPE",
    "ALL_FILE_COLUMNS",
    "FileColumns",
    "Metadata",
    "REMOVE_FIELDS",
    "REMOVE_SCHEMA",
    "REMOVE_TYPE",
    "STRING_MAP",
    "as_dict",
    "dv_unique_id",
    "file_key",
    "to_json_line",
]

STRING_MAP = pa.map_(pa.string(), pa.string())

DELETION_VECTOR = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
        ("maxRowIndex", pa.int64()),
    ]
)

#: Columns of :attr:`Snapshot.files` (the live ``add`` actions).
ADD_FIELDS: list[tuple[str, pa.DataType]] = [
    ("path", pa.string()),
    ("partitionValues", STRING_MAP),
    ("size", pa.int64()),
    ("modificationTime", pa.int64()),
    ("dataChange", pa.bool_()),
    ("stats", pa.string()),
    ("tags", STRING_MAP),
    ("deletionVector", DELETION_VECTOR),
    ("baseRowId", pa.int64()),
    ("defaultRowCommitVersion", pa.int64()),
    ("clusteringProvider", pa.string()),
]
ADD_TYPE = pa.struct(ADD_FIELDS)
ADD_SCHEMA = pa.schema(ADD_FIELDS)

#: Columns of :attr:`Snapshot.tombstones` (``remove`` actions not superseded).
REMOVE_FIELDS: list[tuple[str, pa.DataType]] = [
    ("path", pa.string()),
    ("deletionTimestamp", pa.int64()),
    ("dataChange", pa.bool_()),
    ("extendedFileMetadata", pa.bool_()),
    ("partitionValues", STRING_MAP),
    ("size", pa.int64()),
    ("tags", STRING_MAP),
    ("deletionVector", DELETION_VECTOR),
    ("baseRowId", pa.int64()),
    ("defaultRowCommitVersion", pa.int64()),
    ("stats", pa.string()),
]
REMOVE_TYPE = pa.struct(REMOVE_FIELDS)
REMOVE_SCHEMA = pa.schema(REMOVE_FIELDS)

#: Fields every projection keeps: a file action is reconciled by its path and deletion vector.
_KEY_FIELDS = ("path", "deletionVector")


@dataclass(frozen=True)
class FileColumns:
    """Which fields of the add and remove actions a snapshot holds (a projection of the full schemas).

    An operation that needs only some fields (vacuum: paths, deletion vectors, times)
    loads a snapshot without decoding the rest: at ten million files the statistics,
    partition values and tags are two thirds of the state. Checkpoints read only these
    columns; JSON commits are parsed in full (they are checked line by line either way)
    and projected once reconciled. ``path`` and ``deletionVector`` are always kept: they
    are the reconciliation key.
    """

    add: pa.Schema = ADD_SCHEMA
    remove: pa.Schema = REMOVE_SCHEMA

    @classmethod
    def of(cls, add: tuple[str, ...], remove: tuple[str, ...]) -> FileColumns:
        """The projection keeping ``add`` / ``remove`` fields (plus the key fields), in the full schemas' order."""
        for names, schema in ((add, ADD_SCHEMA), (remove, REMOVE_SCHEMA)):
            unknown = set(names) - set(schema.names)
            if unknown:
                raise ValueError(f"unknown file action field(s): {sorted(unknown)}")
        keep_add = set(add) | set(_KEY_FIELDS)
        keep_remove = set(remove) | set(_KEY_FIELDS)
        return cls(
            pa.schema([f for f in ADD_SCHEMA if f.name in keep_add]),
            pa.schema([f for f in REMOVE_SCHEMA if f.name in keep_remove]),
        )

    @property
    def is_full(self) -> bool:
        return self.add.equals(ADD_SCHEMA) and self.remove.equals(REMOVE_SCHEMA)

    @property
    def add_type(self) -> pa.StructType:
        return pa.struct(list(self.add))

    @property
    def remove_type(self) -> pa.StructType:
        return pa.struct(list(self.remove))


#: Every field: what ``DeltaTable.snapshot()`` holds.
ALL_FILE_COLUMNS = FileColumns()


def dv_unique_id(dv: dict[str, Any] | None) -> str | None:
    """The deletion vector's unique id per PROTOCOL.md (storageType + pathOrInlineDv [+ @offset])."""
    if not dv:
        return None
    uid = f"{dv.get('storageType', '')}{dv.get('pathOrInlineDv', '')}"
    if dv.get("offset") is not None:
        uid += f"@{dv['offset']}"
    return uid


def file_key(path: str, dv: dict[str, Any] | None) -> str:
    """Reconciliation key of a logical file: its canonical path plus its deletion vector id."""
    path = canonical_path(path)
    uid = dv_unique_id(dv)
    return path if uid is None else f"{path}\x00{uid}"


def as_dict(value: Any) -> dict[str, Any]:
    """A JSON object or an Arrow map (a list of key/value pairs, as Parquet checkpoints hold them) as a dict."""
    if not value:
        return {}
    return dict(value) if isinstance(value, dict) else {k: v for k, v in value}


@dataclass(frozen=True)
class Metadata:
    """The ``metaData`` action."""

    id: str
    schema_string: str
    partition_columns: list[str] = field(default_factory=list)
    configuration: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    description: str | None = None
    format_provider: str = "parquet"
    format_options: dict[str, str] = field(default_factory=dict)
    created_time: int | None = None

    @classmethod
    def from_action(cls, action: dict[str, Any]) -> Metadata:
        fmt = action.get("format") or {}
        return cls(
            id=action.get("id") or "",
            schema_string=action.get("schemaString") or "",
            partition_columns=list(action.get("partitionColumns") or []),
            configuration=as_dict(action.get("configuration")),
            name=action.get("name"),
            description=action.get("description"),
            format_provider=fmt.get("provider") or "parquet",
            format_options=as_dict(fmt.get("options")),
            created_time=action.get("createdTime"),
        )

    def to_action(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "format": {"provider": self.format_provider, "options": dict(self.format_options)},
            "schemaString": self.schema_string,
            "partitionColumns": list(self.partition_columns),
            "configuration": dict(self.configuration),
        }
        if self.name is not None:
            out["name"] = self.name
        if self.description is not None:
            out["description"] = self.description
        if self.created_time is not None:
            out["createdTime"] = self.created_time
        return out

    @cached_property
    def schema(self) -> pa.Schema:
        """The table's logical schema as pyarrow (parsed on first use)."""
        return parse_schema_string(self.schema_string)

    @property
    def column_mapping_mode(self) -> str:
        return self.configuration.get("delta.columnMapping.mode", "none")


def to_json_line(action: dict[str, Any]) -> str:
    return json.dumps(action, separators=(",", ":"), ensure_ascii=False)
