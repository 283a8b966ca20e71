"""The table features ``materializePartitionColumns`` and ``geospatial`` (issue 30, item 3).

Both were refused by every operation. ``materializePartitionColumns`` (writer,
protocol_rfcs/materialize-partition-columns.md) requires new data files to carry their
partition columns: compaction writes them after the data columns (as Delta Spark
does, no statistics for them), a commit request's file must carry them, and
``delta.writePartitionColumnsToParquet=true`` asks the same without the feature.
``geospatial`` (reader-writer, Delta Spark's geometry/geography types): reads, checkpoints,
log cleanup, vacuum and manifests work without understanding the type; local compaction
rewrites top-level such columns with the Parquet GEOMETRY/GEOGRAPHY logical type of the
column's Delta type (pyarrow's geoarrow.wkb extension); a commit request's file must carry
that logical type (kind, CRS, edges); nested ones and the Spark engine are refused with the reason. Delta Spark 4.4 writes both: the spark tests build them.
"""

from __future__ import annotations

import json
import os
import uuid

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corrupt_log_helpers import fingerprint
from deltalog import DeltaTable
from deltalog.compaction import compact
from deltalog.errors import DataFileMismatchError, UnsupportedProtocolError
from deltalog.ingest import commit_request
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.log_maintenance.manifest import generate_manifest
from deltalog.vacuuming import vacuum
from handmade_logs import add_action, field, metadata_action, write_commit


def table_with(
    path: str, fields: list[dict], partition_by: list[str], protocol: dict, config: dict | None = None
) -> None:
    create = {"commitInfo": {"operation": "CREATE TABLE"}}
    write_commit(path, 0, [create, {"protocol": protocol}, metadata_action(fields, partition_by, config)])


MATERIALIZE = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["materializePartitionColumns"]}
PLAIN = {"minReaderVersion": 1, "minWriterVersion": 2}


def partitioned(path: str, protocol: dict, config: dict | None = None, materialized_inputs: bool = True) -> None:
    """(part, id, v) partitioned by part; two commits of one file per partition, partition column in the files."""
    table_with(path, [field("part", "string"), field("id", "long"), field("v", "double")], ["part"], protocol, config)
    for version in (1, 2):
        actions: list[dict] = [{"commitInfo": {"operation": "WRITE"}}]
        for p in ("p0", "p1"):
            rel = f"part={p}/part-{uuid.uuid4().hex}.parquet"
            os.makedirs(os.path.join(path, f"part={p}"), exist_ok=True)
            ids = [version * 10 + i for i in range(3)]
            data = {"id": pa.array(ids, pa.int64()), "v": pa.array([i * 1.5 for i in ids])}
            if materialized_inputs:
                data["part"] = pa.array([p] * 3)
            pq.write_table(pa.table(data), os.path.join(path, rel))
            stats = {"numRecords": 3, "minValues": {"id": ids[0]}, "maxValues": {"id": ids[-1]}, "nullCount": {"id": 0}}
            actions.append(add_action(path, rel, stats, partitionValues={"part": p}))
        write_commit(path, version, actions)


def rows(path: str) -> list[tuple]:
    t = deltalake.DeltaTable(path).to_pyarrow_table()
    return sorted(zip(t.column("part").to_pylist(), t.column("id").to_pylist(), t.column("v").to_pylist()))


@pytest.mark.parametrize(
    ("protocol", "config", "materialized"),
    [
        (MATERIALIZE, None, True),
        (MATERIALIZE, {"delta.writePartitionColumnsToParquet": "false"}, True),  # the feature wins
        (PLAIN, {"delta.writePartitionColumnsToParquet": "true"}, True),
        (PLAIN, None, False),
    ],
)
def test_compaction_materializes_partition_columns_when_the_table_asks(tmp_path, protocol, config, materialized):
    path = str(tmp_path / "t")
    partitioned(path, protocol, config)
    before = rows(path)
    result = compact(path, target_size=1 << 20)
    assert len(result.committed_bins) == 2
    snap = DeltaTable(path).snapshot()
    for add in snap.files.to_pylist():
        file = pq.read_table(os.path.join(path, add["path"]))
        value = dict(add["partitionValues"])["part"]
        if materialized:
            assert file.column_names == ["id", "v", "part"]  # after the data columns, as Delta Spark writes them
            assert set(file.column("part").to_pylist()) == {value}
        else:
            assert file.column_names == ["id", "v"]
        stats = json.loads(add["stats"])
        assert "part" not in stats["minValues"] and "part" not in stats["nullCount"]
    assert rows(path) == before


def test_a_commit_request_file_must_carry_the_partition_columns(tmp_path):
    path = str(tmp_path / "t")
    partitioned(path, MATERIALIZE)
    os.makedirs(os.path.join(path, "part=p0"), exist_ok=True)
    pq.write_table(pa.table({"id": pa.array([99], pa.int64()), "v": [1.0]}), os.path.join(path, "part=p0/bare.parquet"))
    with pytest.raises(DataFileMismatchError, match="partition column part is not in the file, and the table's "):
        commit_request(path, {"add": [{"path": "part=p0/bare.parquet", "partitionValues": {"part": "p0"}}]})
    data = pa.table({"id": pa.array([99], pa.int64()), "v": [1.0], "part": ["p0"]})
    pq.write_table(data, os.path.join(path, "part=p0/full.parquet"))
    commit_request(path, {"add": [{"path": "part=p0/full.parquet", "partitionValues": {"part": "p0"}}]})
    assert "part=p0/full.parquet" in DeltaTable(path).snapshot().file_paths()


def test_every_other_operation_works_on_a_materializing_table(tmp_path):
    path = str(tmp_path / "t")
    partitioned(path, MATERIALIZE)
    create_checkpoint(DeltaTable(path))
    generate_manifest(path)
    cleanup_log(path)
    compact(path, target_size=1 << 20)
    vacuum(path, retention_hours=0, allow_short_retention=True)
    assert len(rows(path)) == 12


# --- geospatial ---------------------------------------------------------------------------------------

GEO = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["geospatial"], "writerFeatures": ["geospatial"]}
POINT = bytes.fromhex("0101000000000000000000F03F0000000000000040")  # WKB POINT (1 2)


def geo_table(path: str, geo: bool = True) -> None:
    fields = [field("id", "long")]
    if geo:
        fields += [field("g", "geometry(OGC:CRS84)"), field("h", "geography(OGC:CRS84, SPHERICAL)")]
    table_with(path, fields, [], GEO)
    for version in (1, 2):
        rel = f"part-{uuid.uuid4().hex}.parquet"
        data = {"id": pa.array([version], pa.int64())}
        if geo:
            data |= {"g": pa.array([POINT]), "h": pa.array([POINT])}
        pq.write_table(pa.table(data), os.path.join(path, rel))
        stats = {"numRecords": 1, "minValues": {"id": version}, "maxValues": {"id": version}, "nullCount": {"id": 0}}
        write_commit(path, version, [{"commitInfo": {}}, add_action(path, rel, stats)])


def test_a_geospatial_table_is_read_and_maintained_without_writing_data(tmp_path):
    path = str(tmp_path / "t")
    geo_table(path)
    snap = DeltaTable(path).snapshot()
    assert snap.schema.field("g").type == pa.binary() and snap.num_files == 2
    create_checkpoint(DeltaTable(path))
    generate_manifest(path)
    cleanup_log(path)
    vacuum(path, retention_hours=0, allow_short_retention=True)
    assert DeltaTable(path).snapshot().segment.checkpoint is not None


def test_local_compaction_keeps_geometry_and_geography_annotated(tmp_path):
    path = str(tmp_path / "t")
    geo_table(path)  # inputs written as plain binary: the output takes the logical type from the table schema
    result = compact(path, target_size=1 << 20)
    assert result.ok and len(result.committed_bins) == 1, result.to_dict()
    (add,) = DeltaTable(path).snapshot().files.to_pylist()
    pf = pq.ParquetFile(os.path.join(path, add["path"]))
    schema = pf.schema
    types = {schema.column(i).name: str(schema.column(i).logical_type) for i in range(len(schema))}
    assert types["g"].startswith("Geometry(") and types["h"] == "Geography(crs=, algorithm=spherical)", types
    table = pf.read()
    assert table.column("g").to_pylist() == [POINT, POINT] and table.column("h").to_pylist() == [POINT, POINT]
    stats = json.loads(add["stats"])
    # No bounds for WKB, as Delta Spark; pyarrow writes no null count for these columns, so none is claimed.
    assert stats["numRecords"] == 2 and set(stats["minValues"]) == set(stats["nullCount"]) == {"id"}


def test_the_spark_engine_refuses_geospatial_columns_with_the_reason(tmp_path):
    path = str(tmp_path / "t")
    geo_table(path)
    before = fingerprint(path)
    with pytest.raises(UnsupportedProtocolError, match="column 'g' is a geospatial column; refused while"):
        compact(path, engine="spark")
    assert fingerprint(path) == before


def _geo_file(path: str, name: str, g_meta: bytes, h_meta: bytes, annotated: bool = True) -> None:
    from deltalog.protocol import geoarrow

    geoarrow.register()
    g, h = pa.array([POINT]), pa.array([POINT])
    if annotated:
        g = pa.ExtensionArray.from_storage(geoarrow.WkbType(g_meta), g)
        h = pa.ExtensionArray.from_storage(geoarrow.WkbType(h_meta), h)
    pq.write_table(pa.table({"id": pa.array([9], pa.int64()), "g": g, "h": h}), os.path.join(path, name))


def test_a_commit_request_adds_a_file_whose_geospatial_columns_carry_their_logical_type(tmp_path):
    path = str(tmp_path / "t")
    geo_table(path)
    _geo_file(path, "new.parquet", b'{"crs":"OGC:CRS84"}', b'{"crs":"OGC:CRS84","edges":"spherical"}')
    result = commit_request(path, {"add": [{"path": "new.parquet"}]})
    assert result.version == 3 and "new.parquet" in DeltaTable(path).snapshot().file_paths()


@pytest.mark.parametrize(
    ("g_meta", "h_meta", "annotated", "found"),
    [
        (b"{}", b"{}", False, "column g is binary in the file but geometry(OGC:CRS84)"),
        (b'{"crs":"OGC:CRS84"}', b'{"crs":"OGC:CRS84","edges":"planar"}', True, "column h is geometry(OGC:CRS84) in"),
        (b'{"crs":"EPSG:3857"}', b'{"crs":"OGC:CRS84","edges":"spherical"}', True, "column g is geometry(EPSG:3857)"),
    ],
)
def test_a_commit_request_file_without_the_columns_logical_type_is_refused(tmp_path, g_meta, h_meta, annotated, found):
    path = str(tmp_path / "t")
    geo_table(path)
    _geo_file(path, "new.parquet", g_meta, h_meta, annotated)
    before = fingerprint(path)
    with pytest.raises(DataFileMismatchError, match=found.replace("(", r"\(").replace(")", r"\)")):
        commit_request(path, {"add": [{"path": "new.parquet"}]})
    assert fingerprint(path) == before


def test_a_nested_geospatial_column_refuses_local_compaction(tmp_path):
    path = str(tmp_path / "t")
    nested = {"type": "struct", "fields": [field("g", "geometry(OGC:CRS84)")]}
    table_with(path, [field("id", "long"), field("s", nested)], [], GEO)
    for version in (1, 2):
        rel = f"part-{version}.parquet"
        s = pa.array([{"g": POINT}], pa.struct([pa.field("g", pa.binary())]))
        pq.write_table(pa.table({"id": pa.array([version], pa.int64()), "s": s}), os.path.join(path, rel))
        write_commit(path, version, [{"commitInfo": {}}, add_action(path, rel, {"numRecords": 1})])
    before = fingerprint(path)
    with pytest.raises(UnsupportedProtocolError, match="column 's.g' is a geospatial column inside a struct"):
        compact(path, target_size=1 << 20)
    assert fingerprint(path) == before


def test_a_geospatial_table_without_geospatial_columns_is_written_as_any_other(tmp_path):
    path = str(tmp_path / "t")
    geo_table(path, geo=False)
    result = compact(path, target_size=1 << 20)
    assert len(result.committed_bins) == 1
    (new,) = DeltaTable(path).snapshot().file_paths()  # deltalake 1.6 does not read the geospatial feature
    assert sorted(pq.read_table(os.path.join(path, new)).column("id").to_pylist()) == [1, 2]
