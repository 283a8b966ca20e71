"""A Delta table's schema, partitioning and properties as Iceberg metadata, by Delta's converter's rules.

Delta's UniForm converter (``IcebergSchemaUtils``, ``IcebergTransactionUtils``,
``DeltaToIcebergConvert`` in delta-io/delta's ``iceberg`` module) is followed:

- every field keeps its logical name and its column mapping id (``delta.columnMapping.id``)
  as the Iceberg field id; list elements and map keys/values take theirs from
  ``delta.columnMapping.nested.ids`` (keys ``<physical name>.element``, ``.key``, ``.value``,
  nested ones ``<physical name>.element.element``...), the ids the Parquet files carry, so
  Iceberg readers match columns by id whatever the physical names;
- byte and short are Iceberg ``int``, timestamp is ``timestamptz``, timestamp_ntz is
  ``timestamp``; a field is required when Delta says it is not nullable; comments are docs;
- the partition spec is an identity transform of each partition column (spec 0, partition
  field ids from 1000, named as the column);
- the properties: every ``delta.universalformat.config.iceberg.*`` property with its prefix
  stripped, ``history.expire.max-snapshot-age-ms`` as the smaller of the log and deleted-file
  retentions when that is below Iceberg's default of five days, and
  ``schema.name-mapping.default`` (the name mapping of the schema).

Iceberg format version 2 is written for icebergCompatV1 and V2 alike (Delta's ``icebergFormatVersion``).
"""

from __future__ import annotations

import json
from typing import Any

from pyiceberg.partitioning import PARTITION_FIELD_ID_START, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import create_mapping_from_schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from deltalog.errors import OperationRefusedError
from deltalog.protocol.properties import DEFAULT_DELETED_FILE_RETENTION, DEFAULT_LOG_RETENTION, config_interval_ms

__all__ = [
    "ICEBERG_FORMAT_VERSION",
    "MAX_SNAPSHOT_AGE_PROPERTY",
    "NAME_MAPPING_PROPERTY",
    "UniformSchemaError",
    "iceberg_properties",
    "iceberg_schema",
    "partition_spec",
    "physical_field_ids",
    "snapshot_retention_ms",
]

#: What icebergCompatV1 and V2 write (Delta's ``IcebergCompatBase.icebergFormatVersion``).
ICEBERG_FORMAT_VERSION = 2
NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
MAX_SNAPSHOT_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"
#: Iceberg's default of ``history.expire.max-snapshot-age-ms`` (five days).
ICEBERG_DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
#: Delta table properties copied into the Iceberg properties, prefix stripped (Delta lower-cases it).
COPIED_PREFIX = "delta.universalformat.config.iceberg."

_ID = "delta.columnMapping.id"
_PHYSICAL = "delta.columnMapping.physicalName"
_NESTED_IDS = "delta.columnMapping.nested.ids"

_PRIMITIVES: dict[str, IcebergType] = {
    "string": StringType(),
    "long": LongType(),
    "integer": IntegerType(),
    "short": IntegerType(),
    "byte": IntegerType(),
    "float": FloatType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
    "binary": BinaryType(),
    "date": DateType(),
    "timestamp": TimestamptzType(),
    "timestamp_ntz": TimestampType(),
}


class UniformSchemaError(OperationRefusedError):
    """The Delta schema cannot be expressed as an Iceberg schema (a type, or a missing column mapping id)."""


def _primitive(dtype: str, where: str) -> IcebergType:
    if dtype.startswith("decimal(") and dtype.endswith(")"):
        precision, _, scale = dtype[len("decimal(") : -1].partition(",")
        return DecimalType(int(precision), int(scale))
    found = _PRIMITIVES.get(dtype)
    if found is None:
        raise UniformSchemaError(f"column {where} has type {dtype}, which Iceberg metadata cannot express")
    return found


class _Converter:
    """Delta schema JSON -> Iceberg types, with the ids of column mapping."""

    def __init__(self) -> None:
        self.max_id = 0

    def _seen(self, field_id: int) -> int:
        self.max_id = max(self.max_id, field_id)
        return field_id

    def struct(self, dtype: dict[str, Any], where: str) -> StructType:
        fields = []
        for f in dtype.get("fields", []):
            meta = f.get("metadata") or {}
            name = f["name"]
            column = f"{where}.{name}" if where else name
            if not isinstance(meta.get(_ID), int):
                raise UniformSchemaError(
                    f"column {column} has no column mapping id ({_ID}): Iceberg metadata needs one per field"
                )
            physical = meta.get(_PHYSICAL) or name
            nested = meta.get(_NESTED_IDS) or {}
            fields.append(
                NestedField(
                    field_id=self._seen(int(meta[_ID])),
                    name=name,
                    field_type=self.type(f["type"], column, physical, nested),
                    required=not f.get("nullable", True),
                    doc=meta.get("comment") if isinstance(meta.get("comment"), str) else None,
                )
            )
        return StructType(*fields)

    def _nested_id(self, nested: dict[str, Any], key: str, column: str) -> int:
        value = nested.get(key)
        if not isinstance(value, int):
            raise UniformSchemaError(
                f"column {column} has no nested field id {key!r} in {_NESTED_IDS}: Iceberg metadata needs the ids "
                "of list elements and map keys/values (icebergCompatV2 assigns them)"
            )
        return self._seen(value)

    def type(self, dtype: Any, column: str, path: str, nested: dict[str, Any]) -> IcebergType:
        if isinstance(dtype, str):
            return _primitive(dtype, column)
        kind = dtype.get("type") if isinstance(dtype, dict) else None
        if kind == "struct":
            return self.struct(dtype, column)
        if kind == "array":
            key = f"{path}.element"
            return ListType(
                element_id=self._nested_id(nested, key, column),
                element_type=self.type(dtype["elementType"], f"{column}.element", key, nested),
                element_required=not dtype.get("containsNull", True),
            )
        if kind == "map":
            key, value = f"{path}.key", f"{path}.value"
            return MapType(
                key_id=self._nested_id(nested, key, column),
                key_type=self.type(dtype["keyType"], f"{column}.key", key, nested),
                value_id=self._nested_id(nested, value, column),
                value_type=self.type(dtype["valueType"], f"{column}.value", value, nested),
                value_required=not dtype.get("valueContainsNull", True),
            )
        raise UniformSchemaError(f"column {column} has type {kind or dtype!r}, which Iceberg metadata cannot express")


def iceberg_schema(schema_string: str, schema_id: int = 0) -> tuple[Schema, int]:
    """The Iceberg schema of a Delta schema (column mapping ids as field ids), and its highest field id."""
    converter = _Converter()
    struct = converter.struct(json.loads(schema_string), "")
    return Schema(*struct.fields, schema_id=schema_id), converter.max_id


def partition_spec(schema: Schema, partition_columns: list[str], spec_id: int = 0) -> PartitionSpec:
    """Identity partitioning on each partition column (Delta's ``createPartitionSpec``)."""
    fields = []
    for i, column in enumerate(partition_columns):
        source = schema.find_field(column)
        fields.append(
            PartitionField(
                source_id=source.field_id,
                field_id=PARTITION_FIELD_ID_START + i,
                transform=IdentityTransform(),
                name=column,
            )
        )
    return PartitionSpec(*fields, spec_id=spec_id)


def physical_field_ids(schema_string: str) -> dict[tuple[str, ...], tuple[int, Any]]:
    """Path of physical names (as Delta statistics are keyed) -> (field id, Delta type) of each leaf of the
    nested structs; lists and maps have no statistics."""
    out: dict[tuple[str, ...], tuple[int, Any]] = {}

    def walk(dtype: dict[str, Any], prefix: tuple[str, ...]) -> None:
        for f in dtype.get("fields", []):
            meta = f.get("metadata") or {}
            path = (*prefix, meta.get(_PHYSICAL) or f["name"])
            if isinstance(f["type"], dict) and f["type"].get("type") == "struct":
                walk(f["type"], path)
            elif isinstance(meta.get(_ID), int):
                out[path] = (int(meta[_ID]), f["type"] if "__COLLATIONS" not in meta else "collated")

    walk(json.loads(schema_string), ())
    return out


def snapshot_retention_ms(configuration: dict[str, str]) -> int:
    """How long Iceberg snapshots are kept: the smaller of the table's log retention and deleted-file
    retention (Delta's ``RetentionPeriodComputer``), or a smaller ``history.expire.max-snapshot-age-ms``
    given through ``delta.universalformat.config.iceberg.*``."""
    retention = min(
        config_interval_ms(configuration, "delta.logRetentionDuration", DEFAULT_LOG_RETENTION),
        config_interval_ms(configuration, "delta.deletedFileRetentionDuration", DEFAULT_DELETED_FILE_RETENTION),
    )
    given = _copied(configuration).get(MAX_SNAPSHOT_AGE_PROPERTY)
    if given is not None:
        try:
            retention = min(retention, int(given))
        except ValueError:
            raise UniformSchemaError(
                f"table property {COPIED_PREFIX}{MAX_SNAPSHOT_AGE_PROPERTY} must be milliseconds, got {given!r}"
            ) from None
    return retention


def _copied(configuration: dict[str, str]) -> dict[str, str]:
    return {
        key[len(COPIED_PREFIX) :]: str(value)
        for key, value in configuration.items()
        if key.lower().startswith(COPIED_PREFIX) and len(key) > len(COPIED_PREFIX)
    }


def iceberg_properties(configuration: dict[str, str], schema: Schema) -> dict[str, str]:
    """The Iceberg table properties Delta's converter derives from the Delta properties (see module doc)."""
    props = _copied(configuration)
    retention = snapshot_retention_ms(configuration)
    if MAX_SNAPSHOT_AGE_PROPERTY in props or retention < ICEBERG_DEFAULT_MAX_SNAPSHOT_AGE_MS:
        props[MAX_SNAPSHOT_AGE_PROPERTY] = str(retention)  # never longer than Delta keeps the files
    props.pop("format-version", None)  # a reserved property: the metadata's own field says it
    props[NAME_MAPPING_PROPERTY] = create_mapping_from_schema(schema).model_dump_json()
    return props
