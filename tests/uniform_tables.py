"""UniForm tables for the tests: created by deltalog, appended to with files in the Iceberg-compatible layout,
and read back by Iceberg readers (pyiceberg) and by deltalake, version by version.

Kept free of pytest so the Spark tests and the S3 test share it.
"""

from __future__ import annotations

import json
import posixpath
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog import DeltaTable
from deltalog.create import create_table
from deltalog.ingest import commit_request
from deltalog.protocol.parquet_layout import iceberg_data_schema, to_log_path

UNIFORM = {
    "delta.enableIcebergCompatV2": "true",
    "delta.universalFormat.enabledFormats": "iceberg",
    "delta.checkpointInterval": "4",
}

#: A schema with the types UniForm tables hold: integers of every width, decimal, date, timestamps, a list,
#: a map and a struct.
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("n", pa.int32()),
        pa.field("small", pa.int16()),
        pa.field("amount", pa.decimal128(10, 2)),
        pa.field("name", pa.string()),
        pa.field("day", pa.date32()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("attrs", pa.map_(pa.string(), pa.int64())),
        pa.field("point", pa.struct([pa.field("x", pa.float64()), pa.field("y", pa.float64())])),
        pa.field("part", pa.string()),
    ]
)


def rows(start: int, count: int, part: str) -> pa.Table:
    """``count`` deterministic rows (logical column names) with ids from ``start``."""
    import datetime as dt
    import decimal

    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "n": pa.array([i % 7 for i in ids], pa.int32()),
            "small": pa.array([i % 5 for i in ids], pa.int16()),
            "amount": pa.array([decimal.Decimal(i) / 4 for i in ids], pa.decimal128(10, 2)),
            "name": pa.array([None if i % 9 == 0 else f"name-{i}" for i in ids]),
            "day": pa.array([dt.date(2024, 1, 1 + i % 28) for i in ids], pa.date32()),
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i, microseconds=i) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "tags": pa.array([[f"t{i % 3}"] if i % 4 else None for i in ids], pa.list_(pa.string())),
            "attrs": pa.array([[("k", i)] for i in ids], pa.map_(pa.string(), pa.int64())),
            "point": pa.array([{"x": i * 1.5, "y": -i * 0.5} for i in ids], SCHEMA.field("point").type),
            "part": pa.array([part] * count),
        }
    )


def create_uniform(
    uri: str,
    *,
    schema: pa.Schema = SCHEMA,
    partition_by: list[str] | None = None,
    configuration: dict[str, str] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> DeltaTable:
    """A UniForm table (icebergCompatV2, column mapping by name) created by deltalog: version 0 and Iceberg v1."""
    create_table(
        uri,
        schema,
        partition_by=["part"] if partition_by is None else partition_by,
        configuration={**UNIFORM, **(configuration or {})},
        storage_options=storage_options,
    )
    return DeltaTable(uri, storage_options)


def _physical(table: DeltaTable) -> tuple[dict[str, str], str, list[str]]:
    md = table.snapshot().metadata
    fields = json.loads(md.schema_string)["fields"]
    names = {f["name"]: f["metadata"]["delta.columnMapping.physicalName"] for f in fields}
    return names, md.schema_string, md.partition_columns


def _with_physical_names(data: pa.Table, target: pa.Schema, names: dict[str, str]) -> pa.Table:
    """``data`` (logical names) as a file of the table holds it: physical names, field ids, partition columns last."""
    by_physical = {names[c]: data.column(c) for c in data.column_names}
    columns = []
    for f in target:
        column = by_physical[f.name]
        columns.append(_retyped(column, f.type))
    return pa.Table.from_arrays(columns, schema=target)


def _retyped(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """Cast through the same shape: nested fields are renamed to their physical names by position."""
    if pa.types.is_struct(target):
        chunks = []
        for chunk in column.chunks:
            children = [
                _retyped(pa.chunked_array([chunk.field(i)]), target.field(i).type).combine_chunks()
                for i in range(target.num_fields)
            ]
            chunks.append(pa.StructArray.from_arrays(children, fields=list(target), mask=chunk.is_null()))
        return pa.chunked_array(chunks, target)
    return column.cast(target)


def write_file(table: DeltaTable, data: pa.Table, part: str | None) -> str:
    """Write ``data`` as one Iceberg-compatible data file of ``table``; returns its log path."""
    names, schema_string, partition_columns = _physical(table)
    target = iceberg_data_schema(schema_string, partition_columns)
    physical = _with_physical_names(data, target, names)
    folder = f"{names['part']}={part}" if partition_columns else ""
    rel = posixpath.join(folder, f"part-{uuid.uuid4().hex}.parquet") if folder else f"part-{uuid.uuid4().hex}.parquet"
    storage = table.storage
    storage.makedirs(storage.join(folder) if folder else storage.root)
    with storage.fs.open(storage.join(rel), "wb") as fh:
        pq.write_table(physical, fh)
    return to_log_path(rel)


def append(table: DeltaTable, data: pa.Table, part: str | None = None, **kw: Any) -> Any:
    """One commit request adding one file of ``data`` (all rows of partition ``part``)."""
    part = part if part is not None else data.column("part")[0].as_py()
    rel = write_file(table, data, part)
    add: dict[str, Any] = {"path": rel}
    names, _, partition_columns = _physical(table)
    if partition_columns:
        add["partitionValues"] = {names["part"]: part}
    return commit_request(table, {"operation": "WRITE", "add": [add]}, **kw)


def normalised(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows as sorted tuples of plain Python values (maps as sorted item lists), for comparing readers."""

    def plain(value: Any) -> Any:
        if isinstance(value, list) and value and isinstance(value[0], tuple):
            return tuple(sorted(value))
        if isinstance(value, dict):
            return tuple(sorted((k, plain(v)) for k, v in value.items()))
        if isinstance(value, list):
            return tuple(plain(v) for v in value)
        return value

    names = sorted(table.column_names)
    columns = [table.column(n).to_pylist() for n in names]
    return sorted((tuple(plain(v) for v in row) for row in zip(*columns)), key=repr)


def iceberg_rows(location: str, *, snapshot_id: int | None = None, properties: dict[str, str] | None = None) -> Any:
    """What pyiceberg reads from the table's Iceberg metadata (the newest version by its hint)."""
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(location, properties or {})
    return normalised(table.scan(snapshot_id=snapshot_id).to_arrow())


def deltalake_rows(uri: str, version: int, storage_options: dict[str, str] | None = None) -> Any:
    """What deltalake (delta-rs) reads at ``version``."""
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    table = RsTable(uri, version=version, storage_options=storage_options)
    return normalised(pa.table(QueryBuilder().register("t", table).execute("select * from t").read_all()))


def snapshots_by_delta_version(location: str, properties: dict[str, str] | None = None) -> dict[int, int]:
    """Delta version -> the Iceberg snapshot written for it (from each snapshot's summary)."""
    from pyiceberg.table import StaticTable

    metadata = StaticTable.from_metadata(location, properties or {}).metadata
    out = {}
    for snapshot in metadata.snapshots:
        assert snapshot.summary is not None
        out[int(snapshot.summary["delta-version"])] = snapshot.snapshot_id
    return out


def iceberg_snapshot_for(by_version: dict[int, int], version: int) -> int | None:
    """The snapshot an Iceberg reader time-travels to for Delta ``version``: the newest at or before it."""
    older = [v for v in by_version if v <= version]
    return by_version[max(older)] if older else None
