"""Iceberg compatibility on commit requests (PROTOCOL.md "Iceberg Compatibility V1/V2").

A file a commit request adds to a table with ``delta.enableIcebergCompatV1/V2`` must
already be what Delta Spark's writer would have produced, since UniForm later hands
the same Parquet files to Iceberg readers: the partition columns materialised in the
file, the Parquet field id of every column equal to its column mapping id (and, for
V2, list elements and map keys/values carrying the ids of
``delta.columnMapping.nested.ids``), and ``numRecords`` in the stats. The expected
layout is the one local compaction writes (:func:`iceberg_data_schema`), so the two
cannot drift apart. Only the footer is read.

The table's schema itself must stay within what Iceberg can hold
(:func:`check_iceberg_schema`): V1 blocks map, array and void columns, V2 allows only
its type allow-list (byte, short, integer, long, float, double, decimal, string,
binary, boolean, timestamp, timestamp_ntz, date, array, map, struct; partition
columns only its primitive part). A commit request or create on a table that breaks
it is refused naming the column, as Delta Spark's ``CheckTypeInV2AllowList`` /
``CheckNoListMapNullType`` refuse the write.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from deltalog.errors import DataFileMismatchError, DeltaLogError, OperationRefusedError
from deltalog.log.actions import Metadata
from deltalog.protocol.parquet_layout import PARQUET_FIELD_ID, iceberg_compat_version, iceberg_data_schema

__all__ = ["check_iceberg_file", "check_iceberg_schema", "iceberg_compat_version"]

#: PROTOCOL.md "Writer Requirements for IcebergCompatV2": the primitive types of the allow-list.
V2_PRIMITIVES = frozenset(
    {"byte", "short", "integer", "long", "float", "double", "string", "binary", "boolean", "timestamp"}
    | {"timestamp_ntz", "date"}
)
#: Nested types of the V2 allow-list (V1 blocks array and map).
V2_NESTED = frozenset({"array", "map", "struct"})


def _disallowed(dtype: Any, version: int, path: str) -> tuple[str, str] | None:
    """(column path, type name) of the first type ``version`` does not allow inside ``dtype``, if any."""
    if isinstance(dtype, str):
        name = "decimal" if dtype.startswith("decimal") else dtype
        if name in V2_PRIMITIVES or name == "decimal":
            return None
        if version == 1 and name not in ("void", "null"):
            return None  # V1 has no allow-list; it blocks void (and array/map below)
        return path, dtype
    kind = dtype.get("type") if isinstance(dtype, dict) else None
    if kind not in V2_NESTED:
        return path, str(kind)
    if version == 1 and kind != "struct":
        return path, kind
    if kind == "struct":
        for f in dtype.get("fields", []):
            hit = _disallowed(f["type"], version, f"{path}.{f['name']}" if path else f["name"])
            if hit:
                return hit
        return None
    if kind == "array":
        return _disallowed(dtype["elementType"], version, f"{path}.element")
    return _disallowed(dtype["keyType"], version, f"{path}.key") or _disallowed(
        dtype["valueType"], version, f"{path}.value"
    )


def check_iceberg_schema(
    schema_string: str,
    partition_columns: list[str],
    version: int | None,
    error: type[DeltaLogError] = OperationRefusedError,
) -> None:
    """Refuse a schema Iceberg compatibility ``version`` does not allow, naming the column (see module doc)."""
    if not version:
        return
    doc = json.loads(schema_string)
    hit = _disallowed(doc, version, "")
    if hit is not None:
        column, type_name = hit
        allowed = "map, array and void are blocked" if version == 1 else "only its type allow-list is allowed"
        raise error(
            f"column {column} has type {type_name}, which icebergCompatV{version} does not allow ({allowed}; "
            "PROTOCOL.md 'Iceberg Compatibility')"
        )
    if version >= 2:
        for f in doc.get("fields", []):
            dtype = f["type"]
            name = "decimal" if isinstance(dtype, str) and dtype.startswith("decimal") else dtype
            if f["name"] in partition_columns and not (
                isinstance(name, str) and (name in V2_PRIMITIVES or name == "decimal")
            ):
                raise error(
                    f"partition column {f['name']} has type {json.dumps(dtype)}, which icebergCompatV{version} "
                    "does not allow as a partition column (primitive types of its allow-list only)"
                )


def _fid(field: pa.Field) -> int | None:
    raw = (field.metadata or {}).get(PARQUET_FIELD_ID)
    return None if raw is None else int(raw)


def _children(t: pa.DataType) -> list[pa.Field]:
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [t.value_field]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    return []


def _compare(rel: str, want: pa.Field, got: pa.Field, path: str) -> None:
    wanted, found = _fid(want), _fid(got)
    if wanted is not None and wanted != found:
        raise DataFileMismatchError(
            f"data file {rel!r} does not follow Iceberg compatibility: {path} has Parquet field id {found}, "
            f"the table's column mapping says {wanted}"
        )
    got_children = {c.name: c for c in _children(got.type)}
    want_children = _children(want.type)
    positional = not pa.types.is_struct(want.type)  # list element / map key and value: by position
    for i, child in enumerate(want_children):
        if positional:
            match = _children(got.type)[i] if i < len(_children(got.type)) else None
        else:
            match = got_children.get(child.name)
        if match is not None:
            _compare(rel, child, match, f"{path}.{child.name}")


def check_iceberg_file(rel: str, file_schema: pa.Schema, metadata: Metadata, stats: str | None) -> None:
    """Refuse a file that breaks the Iceberg compatibility writer rules (one error naming the rule)."""
    expected = iceberg_data_schema(metadata.schema_string, metadata.partition_columns)
    fields = json.loads(metadata.schema_string).get("fields", [])
    partition_physical = [
        (f.get("metadata") or {}).get("delta.columnMapping.physicalName") or f["name"]
        for f in fields
        if f["name"] in metadata.partition_columns
    ]
    names = set(file_schema.names)
    missing = [p for p in partition_physical if p not in names]
    if missing:
        raise DataFileMismatchError(
            f"data file {rel!r} does not follow Iceberg compatibility: partition column {missing[0]!r} is not "
            "materialised in the file"
        )
    for want in expected:
        if want.name in names:
            _compare(rel, want, file_schema.field(want.name), want.name)
    try:
        records = json.loads(stats or "{}").get("numRecords")
    except ValueError:
        records = None
    if not isinstance(records, int):
        raise DataFileMismatchError(
            f"data file {rel!r} does not follow Iceberg compatibility: its stats carry no numRecords"
        )
