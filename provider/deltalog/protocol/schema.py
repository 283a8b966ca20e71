"""Delta schema JSON (``metaData.schemaString``) to and from pyarrow schemas."""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa

from deltalog.errors import CorruptLogError, InvalidArgumentError

__all__ = [
    "VOID",
    "arrow_field_to_delta",
    "arrow_schema_to_schema_string",
    "arrow_type_to_delta",
    "delta_type_to_arrow",
    "geospatial_columns",
    "is_geospatial_type",
    "has_timestamp_ntz",
    "parse_schema_string",
    "void_write_problem",
    "without_void",
]

_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "void": pa.null(),
}
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
#: Geospatial types (the ``geospatial`` feature): ``geometry(OGC:CRS84)``, ``geography(OGC:CRS84, SPHERICAL)``.
_GEO = re.compile(r"(geometry|geography)\([^()]+\)")


def delta_type_to_arrow(dtype: Any) -> pa.DataType:
    if isinstance(dtype, str):
        if dtype in _PRIMITIVES:
            return _PRIMITIVES[dtype]
        m = _DECIMAL.fullmatch(dtype)
        if m:
            precision, scale = int(m.group(1)), int(m.group(2))
            return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
        if dtype == "variant":
            return pa.struct([pa.field("value", pa.binary(), False), pa.field("metadata", pa.binary(), False)])
        if _GEO.fullmatch(dtype):
            return pa.binary()  # well-known binary (WKB), as Parquet's GEOMETRY/GEOGRAPHY columns store it
        raise CorruptLogError(f"unknown data type {dtype!r} in the table schema")
    if isinstance(dtype, dict):
        kind = dtype.get("type")
        if kind == "struct":
            return pa.struct([delta_field_to_arrow(f) for f in dtype.get("fields", [])])
        if kind == "array":
            item = pa.field("element", delta_type_to_arrow(dtype["elementType"]), dtype.get("containsNull", True))
            return pa.list_(item)
        if kind == "map":
            key = pa.field("key", delta_type_to_arrow(dtype["keyType"]), False)
            value = pa.field("value", delta_type_to_arrow(dtype["valueType"]), dtype.get("valueContainsNull", True))
            return pa.map_(key, value)
    raise CorruptLogError(f"unknown data type {json.dumps(dtype)[:100]} in the table schema")


def delta_field_to_arrow(field: dict[str, Any]) -> pa.Field:
    metadata = {k: json.dumps(v) if not isinstance(v, str) else v for k, v in (field.get("metadata") or {}).items()}
    return pa.field(
        field["name"], delta_type_to_arrow(field["type"]), field.get("nullable", True), metadata=metadata or None
    )


def parse_schema_string(schema_string: str) -> pa.Schema:
    """The pyarrow schema of a Delta ``schemaString`` (logical names, field metadata kept)."""
    try:
        doc = json.loads(schema_string)
        if doc.get("type") != "struct":
            raise CorruptLogError("the table schema is not a struct")
        return pa.schema([delta_field_to_arrow(f) for f in doc.get("fields", [])])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptLogError(f"the table schema (metaData.schemaString) is invalid: {exc}") from None


def arrow_type_to_delta(dtype: pa.DataType) -> Any:
    if pa.types.is_null(dtype):
        return "void"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_string_view(dtype):
        return "string"
    if pa.types.is_dictionary(dtype):
        return arrow_type_to_delta(dtype.value_type)
    simple = {
        pa.int64(): "long",
        pa.int32(): "integer",
        pa.int16(): "short",
        pa.int8(): "byte",
        pa.uint8(): "short",
        pa.uint16(): "integer",
        pa.uint32(): "long",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.bool_(): "boolean",
        pa.date32(): "date",
    }
    if dtype in simple:
        return simple[dtype]
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype) or pa.types.is_fixed_size_binary(dtype):
        return "binary"
    if pa.types.is_timestamp(dtype):
        return "timestamp" if dtype.tz is not None else "timestamp_ntz"
    if pa.types.is_date64(dtype):
        return "date"
    if pa.types.is_decimal(dtype):
        return f"decimal({dtype.precision},{dtype.scale})"
    if pa.types.is_struct(dtype):
        return {"type": "struct", "fields": [arrow_field_to_delta(dtype.field(i)) for i in range(dtype.num_fields)]}
    if pa.types.is_map(dtype):
        return {
            "type": "map",
            "keyType": arrow_type_to_delta(dtype.key_type),
            "valueType": arrow_type_to_delta(dtype.item_type),
            "valueContainsNull": dtype.item_field.nullable,
        }
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype):
        return {
            "type": "array",
            "elementType": arrow_type_to_delta(dtype.value_type),
            "containsNull": dtype.value_field.nullable,
        }
    raise InvalidArgumentError(f"the Arrow type {dtype} has no Delta equivalent")


def arrow_field_to_delta(field: pa.Field) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for k, v in (field.metadata or {}).items():
        key, text = k.decode(), v.decode()
        if key.startswith("PARQUET:"):
            continue
        try:
            metadata[key] = json.loads(text)
        except ValueError:
            metadata[key] = text
    return {
        "name": field.name,
        "type": arrow_type_to_delta(field.type),
        "nullable": field.nullable,
        "metadata": metadata,
    }


def arrow_schema_to_schema_string(schema: pa.Schema) -> str:
    return json.dumps({"type": "struct", "fields": [arrow_field_to_delta(f) for f in schema]}, separators=(",", ":"))


def has_timestamp_ntz(schema: pa.Schema) -> bool:
    def walk(t: pa.DataType) -> bool:
        if pa.types.is_timestamp(t):
            return t.tz is None
        if pa.types.is_struct(t):
            return any(walk(t.field(i).type) for i in range(t.num_fields))
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return walk(t.value_type)
        if pa.types.is_map(t):
            return walk(t.key_type) or walk(t.item_type)
        return False

    return any(walk(f.type) for f in schema)


# --- void (Spark's NullType; PROTOCOL.md "Void Type") -----------------------------------------

VOID = "void"


def without_void(dtype: Any) -> Any:
    """``dtype`` (a Delta type) without its ``void`` fields, at any struct depth: the type data files hold.

    Writers must omit void columns from data files; readers read them as all-null
    columns, as they read any column a file lacks. A struct left without fields, or a
    void inside an array or map, cannot be written at all (:func:`void_write_problem`).
    """
    if not isinstance(dtype, dict):
        return dtype
    kind = dtype.get("type")
    if kind == "struct":
        return {**dtype, "fields": [_without_void_field(f) for f in dtype.get("fields", []) if f.get("type") != VOID]}
    return dtype


def _without_void_field(field: dict[str, Any]) -> dict[str, Any]:
    return {**field, "type": without_void(field["type"])}


def void_write_problem(schema: dict[str, Any]) -> str | None:
    """Why no data file can be written for a table of this schema (a Delta struct), or None.

    PROTOCOL.md "Void Type": writers must reject operations that would write new data
    files when the schema holds a void inside an array or a map, a struct whose fields
    are all void, or only void columns.
    """
    fields = schema.get("fields") or []
    if fields and all(f.get("type") == VOID for f in fields):
        return "every column of the table is of type void"

    def walk(dtype: Any, at: str, container: bool) -> str | None:
        if dtype == VOID:
            return f"{at} is of type void inside an array or a map" if container else None
        if not isinstance(dtype, dict):
            return None
        kind = dtype.get("type")
        if kind == "struct":
            children = dtype.get("fields") or []
            if children and all(c.get("type") == VOID for c in children):
                return f"every field of the struct {at} is of type void"
            for c in children:
                problem = walk(c.get("type"), f"{at}.{c.get('name')}", container)
                if problem:
                    return problem
        elif kind == "array":
            return walk(dtype.get("elementType"), f"{at} (elements)", True)
        elif kind == "map":
            return walk(dtype.get("keyType"), f"{at} (keys)", True) or walk(
                dtype.get("valueType"), f"{at} (values)", True
            )
        return None

    for f in fields:
        problem = walk(f.get("type"), f"column {f.get('name')!r}", False)
        if problem:
            return problem
    return None


def is_geospatial_type(dtype: Any) -> bool:
    """Whether ``dtype`` (a Delta type) is ``geometry(<crs>)`` or ``geography(<crs>, <edges>)``."""
    return isinstance(dtype, str) and _GEO.fullmatch(dtype) is not None


def geospatial_columns(schema: dict[str, Any]) -> list[str]:
    """The columns (dotted paths) of a Delta struct schema that hold a geometry or geography value, at any depth."""
    out: list[str] = []

    def walk(dtype: Any, at: str) -> None:
        if isinstance(dtype, str):
            if is_geospatial_type(dtype):
                out.append(at)
            return
        if not isinstance(dtype, dict):
            return
        kind = dtype.get("type")
        if kind == "struct":
            for f in dtype.get("fields") or []:
                walk(f.get("type"), f"{at}.{f.get('name')}" if at else str(f.get("name")))
        elif kind == "array":
            walk(dtype.get("elementType"), at)
        elif kind == "map":
            walk(dtype.get("keyType"), at)
            walk(dtype.get("valueType"), at)

    walk(schema, "")
    return out
