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
from deltalog.protocol.table_protocol import Protocol

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
    _iceberg_table(path, {"delta.columnMapping.maxColumnId": "4"})
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


def _iceberg_table(path: str, extra_config: dict[str, str] | None = None) -> None:
    """Version 0 of an IcebergCompatV2 table (column mapping by name) partitioned by ``p``."""
    config = {
        "delta.columnMapping.mode": "name",
        "delta.enableIcebergCompatV2": "true",
        "delta.universalFormat.enabledFormats": "iceberg",
        **(extra_config or {}),
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
    from deltalog.protocol.parquet_layout import iceberg_data_schema

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

    from deltalog.errors import DataFileMismatchError
    from deltalog.ingest import commit_request

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


def _schema_with(extra: dict) -> dict:
    return {"type": "struct", "fields": [*SCHEMA["fields"], extra]}


def test_the_v2_type_allow_list_refuses_commit_requests_naming_the_column(tmp_path):
    """PROTOCOL.md 'Writer Requirements for IcebergCompatV2': only the allow-list's types; V1 blocks map/array."""
    import pytest

    from deltalog.errors import OperationRefusedError
    from deltalog.ingest import commit_request

    path = str(tmp_path / "t")
    _iceberg_table(path)
    ok = _write(path, "good")
    # The table's schema changes under our feet (as another writer would leave it): a variant nested in a struct.
    bad = _schema_with(
        _field("doc", {"type": "struct", "fields": [{"name": "v", "type": "variant", "nullable": True}]}, 5)
    )
    meta = {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(bad)}
    meta.update(
        partitionColumns=["p"],
        configuration={"delta.columnMapping.mode": "name", "delta.enableIcebergCompatV2": "true"},
        createdTime=0,
    )
    _commit(path, 1, [{"commitInfo": {"operation": "SET TBLPROPERTIES"}}, {"metaData": meta}])
    with pytest.raises(OperationRefusedError, match=r"column doc\.v has type variant, which icebergCompatV2"):
        commit_request(path, {"operation": "WRITE", "add": [{"path": ok}]}, run_hooks=False)
    assert DeltaTable(path).snapshot().version == 1


def test_allow_list_rules():
    import pytest

    from deltalog.errors import InvalidArgumentError, OperationRefusedError
    from deltalog.write_checks.iceberg_compat import check_iceberg_schema

    allowed = json.dumps(SCHEMA)
    check_iceberg_schema(allowed, ["p"], 2)  # arrays, maps, structs, long, string, date
    check_iceberg_schema(allowed, ["p"], None)  # not enabled: nothing to check
    with pytest.raises(OperationRefusedError, match=r"column tags has type array, which icebergCompatV1"):
        check_iceberg_schema(allowed, ["p"], 1)
    nested = _schema_with(
        _field("m", {"type": "map", "keyType": "string", "valueType": "variant", "valueContainsNull": True}, 6)
    )
    with pytest.raises(OperationRefusedError, match=r"column m\.value has type variant"):
        check_iceberg_schema(json.dumps(nested), [], 2)
    flat = {"type": "struct", "fields": [_field("v", "variant", 1), _field("x", "void", 2)]}
    check_iceberg_schema(json.dumps({"type": "struct", "fields": [flat["fields"][0]]}), [], 1)  # V1: no allow-list
    with pytest.raises(InvalidArgumentError, match="column x has type void, which icebergCompatV1"):
        check_iceberg_schema(json.dumps({"type": "struct", "fields": [flat["fields"][1]]}), [], 1, InvalidArgumentError)
    part = {"type": "struct", "fields": [_field("id", "long", 1), _field("s", {"type": "struct", "fields": []}, 2)]}
    with pytest.raises(OperationRefusedError, match="partition column s has type"):
        check_iceberg_schema(json.dumps(part), ["s"], 2)


def test_create_refuses_a_disallowed_type_naming_the_column(tmp_path):
    import pytest

    from deltalog.create import create_table
    from deltalog.errors import InvalidArgumentError, UnsupportedProtocolError

    schema = pa.schema([pa.field("id", pa.int64()), pa.field("tags", pa.list_(pa.string()))])
    config = {"delta.columnMapping.mode": "name", "delta.enableIcebergCompatV1": "true"}
    with pytest.raises(InvalidArgumentError, match="column tags has type array, which icebergCompatV1"):
        create_table(str(tmp_path / "a"), schema, configuration=config)
    assert not os.path.exists(tmp_path / "a")
    # An allowed schema creates an Iceberg-compatible table: V2 gives the list element its nested id.
    config = {"delta.enableIcebergCompatV2": "true"}
    create_table(str(tmp_path / "b"), schema, configuration=config)
    md = DeltaTable(str(tmp_path / "b")).snapshot().metadata
    tags = json.loads(md.schema_string)["fields"][1]["metadata"]
    assert md.configuration["delta.columnMapping.mode"] == "name"  # set for it, as Delta does
    assert tags["delta.columnMapping.nested.ids"] == {f"{tags['delta.columnMapping.physicalName']}.element": 3}
    assert md.configuration["delta.columnMapping.maxColumnId"] == "3"
    with pytest.raises(UnsupportedProtocolError, match="icebergCompatV3"):
        create_table(str(tmp_path / "c"), schema, configuration={"delta.enableIcebergCompatV3": "true"})
