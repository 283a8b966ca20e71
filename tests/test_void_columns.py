"""Columns of Spark's ``void`` type (NullType) (issue 30, item 3).

Delta Spark writes such columns into the schema and never into data files (PROTOCOL.md
"Void Type": writers omit them, readers read them as all null). Every command used to
refuse the log ("unknown type 'void'"). Now they read as null columns, compaction keeps
them out of the files it writes (as Delta Spark does), a commit request's file that
carries one is refused, and no data file is written for the schemas the protocol rules
out (void inside an array or map, a struct of only void fields, a table of only void
columns), while reading and log maintenance work on them.
"""

from __future__ import annotations

import json
import os
import uuid

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.compaction import compact
from deltalog.errors import DataFileMismatchError, OperationRefusedError
from deltalog.ingest import commit_request
from deltalog.log_maintenance import create_checkpoint
from deltalog.protocol.schema import void_write_problem
from deltalog.vacuuming import vacuum
from handmade_logs import add_action, field, metadata_action, write_commit

NESTED = {"type": "struct", "fields": [field("a", "long"), field("v", "void")]}
SCHEMA = {"type": "struct", "fields": [field("id", "long"), field("nothing", "void"), field("s", NESTED)]}


def _file(path: str, ids: list[int]) -> dict:
    """A data file as Delta Spark writes one for SCHEMA: no void column, none inside the struct."""
    name = f"part-{uuid.uuid4().hex}.parquet"
    data = pa.table(
        {"id": pa.array(ids, pa.int64()), "s": pa.array([{"a": i} for i in ids], pa.struct([("a", pa.int64())]))}
    )
    pq.write_table(data, os.path.join(path, name))
    nulls = {"id": 0, "nothing": len(ids), "s": {"a": 0, "v": len(ids)}}
    return add_action(path, name, {"numRecords": len(ids), "nullCount": nulls})


def void_table(path: str, schema: dict = SCHEMA, files: int = 2) -> None:
    protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
    write_commit(path, 0, [protocol, metadata_action(schema["fields"])])
    for v in range(1, files + 1):
        actions = [{"commitInfo": {"operation": "WRITE"}}]
        if schema is SCHEMA:
            actions.append(_file(path, [3 * v, 3 * v + 1, 3 * v + 2]))
        write_commit(path, v, actions)


def test_void_columns_read_as_null_columns(tmp_path):
    path = str(tmp_path / "t")
    void_table(path)
    snap = DeltaTable(path).snapshot()
    assert snap.schema.field("nothing").type == pa.null()
    assert snap.schema.field("s").type == pa.struct([("a", pa.int64()), ("v", pa.null())])
    assert snap.num_files == 2


def test_compaction_keeps_void_columns_out_of_its_files_and_the_rows_read_the_same(tmp_path):
    path = str(tmp_path / "t")
    void_table(path)
    before = deltalake.DeltaTable(path).to_pyarrow_table().sort_by("id")
    result = compact(path, target_size=1 << 20)
    assert len(result.committed_bins) == 1
    (new,) = DeltaTable(path).snapshot().file_paths()
    written = pq.read_schema(os.path.join(path, new))
    assert written.names == ["id", "s"] and written.field("s").type == pa.struct([("a", pa.int64())])
    after = deltalake.DeltaTable(path).to_pyarrow_table().sort_by("id")
    assert after.equals(before) and after.column("nothing").null_count == 6


def test_log_maintenance_and_vacuum_work_on_void_tables(tmp_path):
    path = str(tmp_path / "t")
    void_table(path)
    checkpoint = create_checkpoint(DeltaTable(path))
    assert checkpoint.version == 2 and checkpoint.num_add_files == 2
    assert len(compact(path, target_size=1 << 20).committed_bins) == 1
    deleted = vacuum(path, retention_hours=0, allow_short_retention=True)
    assert deleted.num_deleted_files == 2  # the two files compaction replaced
    assert sorted(deltalake.DeltaTable(path).to_pyarrow_table().column("id").to_pylist()) == list(range(3, 9))


def test_a_commit_request_file_carrying_a_void_column_is_refused(tmp_path):
    path = str(tmp_path / "t")
    void_table(path)
    good = pa.table({"id": pa.array([100], pa.int64()), "s": pa.array([{"a": 1}], pa.struct([("a", pa.int64())]))})
    pq.write_table(good, os.path.join(path, "good.parquet"))
    commit_request(path, {"add": [{"path": "good.parquet"}]})
    bad = good.append_column("nothing", pa.array([None], pa.int32()))
    pq.write_table(bad, os.path.join(path, "bad.parquet"))
    with pytest.raises(
        DataFileMismatchError, match="column nothing is of type void in the table, and writers must omit"
    ):
        commit_request(path, {"add": [{"path": "bad.parquet"}]})
    assert DeltaTable(path).snapshot().num_files == 3


UNWRITABLE = {
    "void in an array": {"type": "array", "elementType": "void", "containsNull": True},
    "void in a map": {"type": "map", "keyType": "string", "valueType": "void", "valueContainsNull": True},
    "a struct of only void": {"type": "struct", "fields": [field("x", "void")]},
}


@pytest.mark.parametrize("case", [*UNWRITABLE, "only void columns"])
def test_schemas_no_data_file_can_be_written_for_are_read_but_never_written(tmp_path, case):
    path = str(tmp_path / "t")
    if case == "only void columns":
        schema = {"type": "struct", "fields": [field("a", "void"), field("b", "void")]}
    else:
        schema = {"type": "struct", "fields": [field("id", "long"), field("c", UNWRITABLE[case])]}
    assert void_write_problem(schema)
    void_table(path, schema, files=1)
    assert DeltaTable(path).snapshot().num_files == 0  # read
    create_checkpoint(DeltaTable(path))  # log maintenance
    vacuum(path, dry_run=True)
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), os.path.join(path, "f.parquet"))
    with pytest.raises(OperationRefusedError, match="PROTOCOL.md 'Void Type'"):
        commit_request(path, {"add": [{"path": "f.parquet"}]})
    with pytest.raises(OperationRefusedError, match="refusing to compact: .*PROTOCOL.md 'Void Type'"):
        compact(path)


def test_writable_void_shapes_pass_the_rule():
    assert void_write_problem(SCHEMA) is None
    deep = {
        "type": "struct",
        "fields": [field("id", "long"), field("s", {"type": "struct", "fields": [field("t", NESTED)]})],
    }
    assert void_write_problem(deep) is None


@pytest.mark.slow
@pytest.mark.spark
def test_a_delta_spark_void_table_compacted_by_us_reads_the_same_in_delta_spark_and_deltalake(tmp_path, delta_spark):
    path = str(tmp_path / "void")
    t = f"delta.`{path}`"
    delta_spark.sql(
        f"CREATE TABLE {t} USING delta AS SELECT id, NULL AS nothing, named_struct('a', id, 'v', NULL) AS s FROM range(4)"
    )
    for start in (4, 8):
        delta_spark.sql(
            f"INSERT INTO {t} SELECT id, NULL, named_struct('a', id, 'v', NULL) FROM range({start}, {start + 4})"
        )
    schema = json.loads(DeltaTable(path).snapshot().metadata.schema_string)
    assert [f["type"] for f in schema["fields"]][1] == "void"

    def spark_rows() -> list:
        delta_spark.catalog.clearCache()
        return sorted((r.id, r.nothing, r.s.a, r.s.v) for r in delta_spark.read.format("delta").load(path).collect())

    before = spark_rows()
    assert len(before) == 12 and all(r[1] is None and r[3] is None for r in before)
    result = compact(path, target_size=1 << 20)
    assert result.ok and len(result.committed_bins) == 1
    (new,) = DeltaTable(path).snapshot().file_paths()
    assert "nothing" not in pq.read_schema(os.path.join(path, new)).names
    assert spark_rows() == before
    theirs = deltalake.DeltaTable(path).to_pyarrow_table()
    assert sorted(theirs.column("id").to_pylist()) == [r[0] for r in before]
    assert theirs.column("nothing").null_count == 12
    create_checkpoint(DeltaTable(path))
    assert spark_rows() == before
    # Delta Spark's own OPTIMIZE keeps the void columns out of its files as well
    delta_spark.sql(f"INSERT INTO {t} SELECT id, NULL, named_struct('a', id, 'v', NULL) FROM range(12, 14)")
    delta_spark.sql(f"OPTIMIZE {t}")
    snap = DeltaTable(path).snapshot()
    for p in snap.file_paths():
        assert "nothing" not in pq.read_schema(os.path.join(path, p)).names
