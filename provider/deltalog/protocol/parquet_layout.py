"""What a data file deltalog writes must look like: physical schema, codec, log paths.

Compaction's engines (local pyarrow and Spark) must produce files that a Delta reader
resolves exactly like the files they replace, and convert and the Iceberg compatibility
checks read files by the same rules, so the rules live here once:

- columns are written under their *physical* names and, in column-mapping
  ``id`` mode, carry the Parquet ``field_id`` readers resolve them by
  (PROTOCOL.md, Column Mapping); partition columns are not written;
- types, nullability and field metadata come from the table schema, not from
  whichever input file happened to be read first;
- the codec is ``delta.parquet.compression.codec`` when set, else zstd (the
  protocol's recommended default); checkpoints honour the same property
  (``PARQUET_CODECS`` maps its values to pyarrow's codec names);
- log paths are URI-encoded (PROTOCOL.md, Add File): a file's storage path is
  the decoded log path.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any
from urllib.parse import quote, unquote, urlparse

import pyarrow as pa

from deltalog.protocol.schema import parse_schema_string, without_void

__all__ = [
    "MATERIALIZE_PARTITION_COLUMNS",
    "WRITE_PARTITION_COLUMNS",
    "CODEC_PROPERTY",
    "DEFAULT_CODEC",
    "PARQUET_CODECS",
    "PARQUET_FIELD_ID",
    "PHYSICAL_NAME",
    "compression_codec",
    "from_log_path",
    "iceberg_compat_version",
    "iceberg_data_schema",
    "iceberg_data_schema_json_for_spark",
    "is_absolute",
    "materializes_partition_columns",
    "nested_id_column",
    "physical_data_schema",
    "physical_data_schema_json",
    "to_log_path",
]

log = logging.getLogger(__name__)

PHYSICAL_NAME = "delta.columnMapping.physicalName"
COLUMN_ID = "delta.columnMapping.id"
PARQUET_FIELD_ID = b"PARQUET:field_id"
#: Spark's StructField metadata key that makes its Parquet writer emit a field id.
SPARK_FIELD_ID = "parquet.field.id"

#: Characters kept as they are when a storage path becomes a log path (RFC 2396 path characters).
_LOG_PATH_SAFE = "/=:@&+$,;!*'()~"


# --- paths ------------------------------------------------------------------------------


def to_log_path(storage_path: str) -> str:
    """The add/remove ``path`` for a file at ``storage_path`` (relative to the table root)."""
    return quote(storage_path, safe=_LOG_PATH_SAFE)


def from_log_path(log_path: str) -> str:
    """The storage path of an add/remove ``path`` (URI-decoded; relative or absolute)."""
    return unquote(log_path)


def is_absolute(log_path: str) -> bool:
    return log_path.startswith("/") or len(urlparse(log_path).scheme) > 1


# --- codec ------------------------------------------------------------------------------

CODEC_PROPERTY = "delta.parquet.compression.codec"
#: Delta's default when the property is unset (and what an unknown value falls back to).
DEFAULT_CODEC = "zstd"
#: Lower-case property value -> pyarrow ``compression`` argument.
PARQUET_CODECS = {
    "uncompressed": "none",
    "none": "none",
    "snappy": "snappy",
    "gzip": "gzip",
    "zstd": "zstd",
    "lz4": "lz4",
    "lz4_raw": "lz4",
    "brotli": "brotli",
}


def compression_codec(configuration: dict[str, str]) -> str:
    """The pyarrow codec name for new data files of a table with this configuration."""
    wanted = (configuration.get(CODEC_PROPERTY) or DEFAULT_CODEC).strip().lower()
    codec = PARQUET_CODECS.get(wanted)
    if codec is None:
        log.warning("unknown %s %r; writing %s instead", CODEC_PROPERTY, wanted, DEFAULT_CODEC)
        return DEFAULT_CODEC
    return codec


# --- schema -----------------------------------------------------------------------------


def _physical_field(field: dict[str, Any], id_mode: bool, for_spark: bool) -> dict[str, Any]:
    out = copy.deepcopy(field)
    meta = out.get("metadata") or {}
    if PHYSICAL_NAME in meta:
        out["name"] = meta[PHYSICAL_NAME]
    if for_spark:
        # Spark keeps StructField metadata on write; only the field id matters in the file.
        out["metadata"] = {SPARK_FIELD_ID: int(meta[COLUMN_ID])} if id_mode and COLUMN_ID in meta else {}
    out["type"] = _physical_type(out["type"], id_mode, for_spark)
    return out


def _physical_type(dtype: Any, id_mode: bool, for_spark: bool) -> Any:
    if not isinstance(dtype, dict):
        return dtype
    kind = dtype.get("type")
    if kind == "struct":
        return {**dtype, "fields": [_physical_field(f, id_mode, for_spark) for f in dtype.get("fields", [])]}
    if kind == "array":
        return {**dtype, "elementType": _physical_type(dtype["elementType"], id_mode, for_spark)}
    if kind == "map":
        return {
            **dtype,
            "keyType": _physical_type(dtype["keyType"], id_mode, for_spark),
            "valueType": _physical_type(dtype["valueType"], id_mode, for_spark),
        }
    return dtype


def physical_data_schema_json(
    schema_string: str,
    partition_columns: list[str],
    column_mapping_mode: str,
    *,
    for_spark: bool = False,
    materialize_partitions: bool = False,
) -> dict[str, Any]:
    """The Delta/Spark JSON schema of the data files: physical names, no void columns, and no partition
    columns unless ``materialize_partitions`` (then they follow the data columns, as Delta Spark writes them)."""
    doc = without_void(json.loads(schema_string))
    parts = set(partition_columns)
    id_mode = column_mapping_mode == "id"
    data = [f for f in doc.get("fields", []) if f["name"] not in parts]
    if materialize_partitions:
        data += [f for f in doc.get("fields", []) if f["name"] in parts]
    return {"type": "struct", "fields": [_physical_field(f, id_mode, for_spark) for f in data]}


#: The writer feature that requires partition columns in every new data file.
MATERIALIZE_PARTITION_COLUMNS = "materializePartitionColumns"
#: The best-effort table property with the same effect (protocol_rfcs/materialize-partition-columns.md).
WRITE_PARTITION_COLUMNS = "delta.writePartitionColumnsToParquet"


def materializes_partition_columns(writer_features: set[str], configuration: dict[str, str]) -> bool:
    """Whether new data files carry their partition columns: the feature requires it, the property asks for it.

    protocol_rfcs/materialize-partition-columns.md: with the writer feature writers must
    materialize them whatever the property says; without it, ``true`` asks writers to.
    Iceberg compatibility materializes them by its own rules (:func:`iceberg_data_schema`).
    """
    if MATERIALIZE_PARTITION_COLUMNS in writer_features:
        return True
    return str(configuration.get(WRITE_PARTITION_COLUMNS, "")).strip().lower() == "true"


def _with_field_ids(field: pa.Field) -> pa.Field:
    """Copy ``delta.columnMapping.id`` into the ``PARQUET:field_id`` pyarrow writes as the field id."""
    meta = dict(field.metadata or {})
    cid = meta.get(COLUMN_ID.encode())
    if cid is not None:
        meta[PARQUET_FIELD_ID] = cid
    return field.with_type(_type_with_field_ids(field.type)).with_metadata(meta)


def _type_with_field_ids(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([_with_field_ids(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_type_with_field_ids(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_type_with_field_ids(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(_type_with_field_ids(t.key_type)),
            t.item_field.with_type(_type_with_field_ids(t.item_type)),
        )
    return t


def physical_data_schema(
    schema_string: str, partition_columns: list[str], column_mapping_mode: str, *, materialize_partitions: bool = False
) -> pa.Schema:
    """The pyarrow schema new data files are written with (see the module docstring)."""
    doc = physical_data_schema_json(
        schema_string, partition_columns, column_mapping_mode, materialize_partitions=materialize_partitions
    )
    schema = parse_schema_string(json.dumps(doc))
    if column_mapping_mode == "id":
        schema = pa.schema([_with_field_ids(f) for f in schema])
    return schema


# --- Iceberg compatibility (PROTOCOL.md "Iceberg Compatibility V1/V2") ------------------------

NESTED_IDS = "delta.columnMapping.nested.ids"


def iceberg_compat_version(configuration: dict[str, str]) -> int | None:
    """The Iceberg compatibility version the table enables (its writer rules apply to new files), if any."""
    for n in (2, 1):
        if str(configuration.get(f"delta.enableIcebergCompatV{n}", "")).lower() == "true":
            return n
    return None


def _nested_ids(field: pa.Field) -> dict[str, int]:
    raw = (field.metadata or {}).get(NESTED_IDS.encode())
    if raw is None:
        return {}
    try:
        doc = json.loads(raw)
        return {str(k): int(v) for k, v in doc.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def _with_iceberg_ids(field: pa.Field, ids: dict[str, int] | None = None, key: str | None = None) -> pa.Field:
    """Field ids on every column and (V2) on list elements and map keys/values, from the nested ids of the
    nearest ancestor struct field, keyed ``<physical name>.element`` / ``.key`` / ``.value``."""
    meta = dict(field.metadata or {})
    cid = meta.get(COLUMN_ID.encode())
    if key is None:  # a struct field: its own id, and its nested ids for the lists and maps inside it
        if cid is not None:
            meta[PARQUET_FIELD_ID] = cid
        ids, key = _nested_ids(field), field.name
    elif key in (ids or {}):
        meta[PARQUET_FIELD_ID] = str((ids or {})[key]).encode()
    return field.with_type(_iceberg_type(field.type, ids or {}, key)).with_metadata(meta)


def _iceberg_type(t: pa.DataType, ids: dict[str, int], key: str) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([_with_iceberg_ids(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = _with_iceberg_ids(t.value_field, ids, f"{key}.element")
        return pa.large_list(element) if pa.types.is_large_list(t) else pa.list_(element)
    if pa.types.is_map(t):
        return pa.map_(
            _with_iceberg_ids(t.key_field, ids, f"{key}.key"), _with_iceberg_ids(t.item_field, ids, f"{key}.value")
        )
    return t


def _iceberg_ordered_fields(schema_string: str, partition_columns: list[str]) -> list[dict[str, Any]]:
    """The table's fields as Iceberg-compatible files hold them: data columns, then the partition columns."""
    fields = json.loads(schema_string).get("fields", [])
    parts = set(partition_columns)
    return [f for f in fields if f["name"] not in parts] + [f for f in fields if f["name"] in parts]


def nested_id_column(schema_string: str) -> str | None:
    """The first top-level column holding an array or a map (whose element/key/value need V2 nested ids)."""

    def nested(dtype: Any) -> bool:
        if not isinstance(dtype, dict):
            return False
        if dtype.get("type") in ("array", "map"):
            return True
        return any(nested(f["type"]) for f in dtype.get("fields", []))

    for f in json.loads(schema_string).get("fields", []):
        if nested(f["type"]):
            return str(f["name"])
    return None


def iceberg_data_schema_json_for_spark(schema_string: str, partition_columns: list[str]) -> dict[str, Any]:
    """The Spark JSON schema of an Iceberg-compatible data file: physical names, a Parquet field id on every
    struct field, the partition columns after the data columns. Spark's writer cannot put ids on list elements
    and map keys/values (V2 nested ids): :func:`nested_id_column` finds the tables that need them."""
    ordered = _iceberg_ordered_fields(schema_string, partition_columns)
    return {"type": "struct", "fields": [_physical_field(f, True, True) for f in ordered]}


def iceberg_data_schema(schema_string: str, partition_columns: list[str]) -> pa.Schema:
    """Data files of an Iceberg-compatible table: physical names, field ids everywhere (nested ones from
    ``delta.columnMapping.nested.ids``), and the partition columns materialised after the data columns."""
    ordered = _iceberg_ordered_fields(schema_string, partition_columns)
    physical = {"type": "struct", "fields": [_physical_field(f, True, False) for f in ordered]}
    schema = parse_schema_string(json.dumps(physical))
    return pa.schema([_with_iceberg_ids(f) for f in schema])
