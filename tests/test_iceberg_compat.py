"""Iceberg compatibility (UniForm): local compaction writes files by the icebergCompatV1/V2 writer rules."""

from __future__ import annotations

import json
import os
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog import DeltaTable
from deltalog.compaction import compact
from deltalog.protocol import Protocol

PROTOCOL = Protocol(2, 7, None, ("columnMapping", "icebergCompatV2", "invariants", "appendOnly"))


def _field(name: str, dtype, cid: int, extra: dict | None = None) -> dict:
    meta = {"delta.columnMapping.id": cid, "delta.columnMapping.physicalName": f"col-{name}"}
    meta.update(extra or {})
    return {"name": name, "type": dtype, "nullable": True, "metadata": meta}


SCHEMA = {
    "type": "struct",
    "fields": [
        _field("id", "long", 1),
        _field(
            "tags",
            {"type": "array", "elementType": "string", "containsNull": True},
            2,
            {"delta.columnMapping.nested.ids": {"col-tags.element": 100}},
        ),
        _field(
            "attrs",
            {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True},
            3,
            {"delta.columnMapping.nested.ids": {"col-attrs.key": 101, "col-attrs.value": 102}},
        ),
        _field("p", "date", 4),
    ],
}


def _commit(path: str, version: int, actions: list[dict]) -> None:
    os.makedirs(os.path.join(path, "_delta_log"), exist_ok=True)
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")


def _data_file(path: str, start: int) -> dict:
    """A file as Delta Spark writes it for the table: physical names, partition column materialised."""
    data = pa.table(
        {
            "col-id": pa.array([start, start + 1], pa.int64()),
            "col-tags": pa.array([["a"], None], pa.list_(pa.string())),
            "col-attrs": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64())),
            "col-p": pa.array([pa.scalar(19000, pa.date32()).as_py()] * 2, pa.date32()),
        }
    )
    rel = f"col-p=2022-01-08/part-{uuid.uuid4().hex}.parquet"
    full = os.path.join(path, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    pq.write_table(data, full)
    stats = {"numRecords": 2, "minValues": {"col-id": start}, "maxValues": {"col-id": start + 1}, "nullCount": {}}
    return {
        "path": rel,
        "partitionValues": {"col-p": "2022-01-08"},
        "size": os.path.getsize(full),
        "modificationTime": int(time.time() * 1000),
        "dataChange": True,
        "stats": json.dumps(stats),
    }


def test_compaction_writes_iceberg_compatible_files(tmp_path):
    path = str(tmp_path / "t")
    config = {
        "delta.columnMapping.mode": "name",
        "delta.columnMapping.maxColumnId": "4",
        "delta.enableIcebergCompatV2": "true",
        "delta.universalFormat.enabledFormats": "iceberg",
    }
    meta = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(SCHEMA),
    }
    meta.update(partitionColumns=["p"], configuration=config, createdTime=0)
    _commit(
        path, 0, [{"commitInfo": {"operation": "CREATE TABLE"}}, {"protocol": PROTOCOL.to_dict()}, {"metaData": meta}]
    )
    for v, start in ((1, 0), (2, 2), (3, 4)):
        _commit(path, v, [{"commitInfo": {"operation": "WRITE"}}, {"add": _data_file(path, start)}])
    before = sorted(
        r
        for f in DeltaTable(path).snapshot().files.column("path").to_pylist()
        for r in pq.read_table(os.path.join(path, f)).column("col-id").to_pylist()
    )
    compact(path, target_size=1 << 30)
    snap = DeltaTable(path).snapshot()
    (out,) = snap.files.to_pylist()
    pf = pq.ParquetFile(os.path.join(path, out["path"]))
    schema = pf.schema_arrow
    # Partition column materialised, after the data columns; field ids on every column and nested field.
    assert schema.names == ["col-id", "col-tags", "col-attrs", "col-p"]
    ids = {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in schema}
    assert ids == {"col-id": 1, "col-tags": 2, "col-attrs": 3, "col-p": 4}
    assert int(schema.field("col-tags").type.value_field.metadata[b"PARQUET:field_id"]) == 100
    attrs = schema.field("col-attrs").type
    assert int(attrs.key_field.metadata[b"PARQUET:field_id"]) == 101
    assert int(attrs.item_field.metadata[b"PARQUET:field_id"]) == 102
    table = pf.read()
    assert sorted(table.column("col-id").to_pylist()) == before
    assert set(table.column("col-p").to_pylist()) == {pa.scalar(19000, pa.date32()).as_py()}
    assert json.loads(out["stats"])["numRecords"] == 6 and out.get("deletionVector") is None


def _iceberg_table(path: str) -> None:
    config = {
        "delta.columnMapping.mode": "name",
        "delta.enableIcebergCompatV2": "true",
        "delta.universalFormat.enabledFormats": "iceberg",
    }
    meta = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(SCHEMA),
    }
    meta.update(partitionColumns=["p"], configuration=config, createdTime=0)
    _commit(
        path, 0, [{"commitInfo": {"operation": "CREATE TABLE"}}, {"protocol": PROTOCOL.to_dict()}, {"metaData": meta}]
    )


def _write(path: str, name: str, with_ids: bool = True, with_partition: bool = True) -> str:
    from deltalog.compaction.layout import iceberg_data_schema

    schema = iceberg_data_schema(json.dumps(SCHEMA), ["p"])
    if not with_ids:
        schema = pa.schema([f.with_metadata(None) for f in schema])
    data = {
        "col-id": [1, 2],
        "col-tags": [["a"], None],
        "col-attrs": [[("k", 1)], []],
        "col-p": [pa.scalar(19000, pa.date32()).as_py()] * 2,
    }
    table = pa.table(data, schema=schema)
    if not with_partition:
        table = table.drop_columns(["col-p"])
    rel = f"col-p=2022-01-08/{name}.parquet"
    os.makedirs(os.path.join(path, "col-p=2022-01-08"), exist_ok=True)
    pq.write_table(table, os.path.join(path, rel))
    return rel


def test_commit_requests_follow_the_iceberg_writer_rules(tmp_path):
    import pytest

    from deltalog.commit_request import commit_request
    from deltalog.errors import DataFileMismatchError

    path = str(tmp_path / "t")
    _iceberg_table(path)
    ok = _write(path, "good")
    assert commit_request(path, {"operation": "WRITE", "add": [{"path": ok}]}, run_hooks=False).version == 1
    bad = _write(path, "no-ids", with_ids=False)
    with pytest.raises(
        DataFileMismatchError, match="col-id has Parquet field id None, the table's column mapping says 1"
    ):
        commit_request(path, {"operation": "WRITE", "add": [{"path": bad}]}, run_hooks=False)
    bad = _write(path, "no-partition", with_partition=False)
    with pytest.raises(DataFileMismatchError, match="partition column 'col-p' is not materialised"):
        commit_request(path, {"operation": "WRITE", "add": [{"path": bad}]}, run_hooks=False)
    assert DeltaTable(path).snapshot().version == 1
