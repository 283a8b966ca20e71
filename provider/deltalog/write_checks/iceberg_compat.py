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

import pyarrow as pa

from deltalog.errors import DataFileMismatchError, DeltaLogError, OperationRefusedError
from deltalog.log.actions import Metadata
from deltalog.protocol.parquet_layout import PARQUET_FIELD_ID, iceberg_compat_version, iceberg_data_schema
from deltalog.protocol.uniform import iceberg_schema_problem

__all__ = ["check_iceberg_file", "check_iceberg_schema", "iceberg_compat_version"]


def check_iceberg_schema(
    schema_string: str,
    partition_columns: list[str],
    version: int | None,
    error: type[DeltaLogError] = OperationRefusedError,
) -> None:
    """Refuse a schema Iceberg compatibility ``version`` does not allow, naming the column (see module doc)."""
    problem = iceberg_schema_problem(schema_string, partition_columns, version)
    if problem:
        raise error(problem)


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
