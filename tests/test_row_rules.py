"""CHECK constraints, invariants, generated columns and defaults on commit requests, evaluated by DuckDB."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltalog import DeltaTable
from deltalog.create import create_table
from deltalog.errors import OperationRefusedError
from deltalog.ingest import commit_request
from deltalog.protocol.table_protocol import Protocol
from deltalog.write_checks.row_rules import spark_to_duckdb
from helpers import make_table, write_data_file


def _versions(path: str) -> int:
    return DeltaTable(path).snapshot().version


def _commit(path: str, data: pa.Table, partition: dict[str, str] | None = None):
    add = write_data_file(path, data, partition)
    return commit_request(path, {"operation": "WRITE", "add": [{"path": add["path"]}]}, run_hooks=False)


def test_null_violates_a_check_constraint_as_in_delta_spark(tmp_path):
    path = str(tmp_path / "t")
    make_table(
        path,
        schema=pa.schema([("v", pa.int64())]),
        configuration={"delta.constraints.pos": "v > 0"},
        protocol=Protocol(1, 3),
    )
    with pytest.raises(OperationRefusedError, match=r"CHECK constraint pos \(v > 0\): 1 row\(s\)"):
        _commit(path, pa.table({"v": pa.array([1, None], pa.int64())}))
    assert _versions(path) == 0


def test_spark_sql_with_backticks_functions_and_partition_columns(tmp_path):
    path = str(tmp_path / "t")
    schema = pa.schema([("event time", pa.timestamp("us", tz="UTC")), ("name", pa.string()), ("day", pa.date32())])
    config = {
        "delta.constraints.same_day": "CAST(`event time` AS DATE) = day",
        "delta.constraints.short_name": "length(name) <= 5 AND lower(name) = name",
    }
    make_table(path, schema=schema, partition_by=["day"], configuration=config, protocol=Protocol(1, 3))
    import datetime as dt

    ts = dt.datetime(2026, 1, 2, 10, tzinfo=dt.UTC)
    good = pa.table({"event time": pa.array([ts], pa.timestamp("us", tz="UTC")), "name": ["abc"]})
    assert _commit(path, good, {"day": "2026-01-02"}).version == 1
    with pytest.raises(OperationRefusedError, match="CHECK constraint same_day"):
        _commit(path, good, {"day": "2026-01-03"})  # the partition value is part of the row
    with pytest.raises(OperationRefusedError, match="CHECK constraint short_name"):
        bad = pa.table({"event time": pa.array([ts], pa.timestamp("us", tz="UTC")), "name": ["ABC"]})
        _commit(path, bad, {"day": "2026-01-02"})


def test_an_expression_duckdb_cannot_evaluate_is_refused_naming_it(tmp_path):
    path = str(tmp_path / "t")
    config = {"delta.constraints.odd": "spark_only_function(v) > 0"}
    make_table(path, schema=pa.schema([("v", pa.int64())]), configuration=config, protocol=Protocol(1, 3))
    with pytest.raises(OperationRefusedError, match=r"CHECK constraint odd .*DuckDB cannot evaluate"):
        _commit(path, pa.table({"v": pa.array([1], pa.int64())}))
    assert _versions(path) == 0


def test_generated_column_is_null_safe_and_column_mapped(tmp_path):
    path = str(tmp_path / "t")
    meta = {"delta.generationExpression": "a + 1"}
    schema = pa.schema([("a", pa.int64()), pa.field("b", pa.int64(), metadata=meta)])
    create_table(path, schema, configuration={"delta.columnMapping.mode": "name"})
    fields = json.loads(DeltaTable(path).snapshot().metadata.schema_string)["fields"]
    phys = {f["name"]: f["metadata"]["delta.columnMapping.physicalName"] for f in fields}
    ok = pa.table({phys["a"]: pa.array([1, None], pa.int64()), phys["b"]: pa.array([2, None], pa.int64())})
    assert _commit(path, ok).version == 1
    bad = pa.table({phys["a"]: pa.array([1], pa.int64()), phys["b"]: pa.array([None], pa.int64())})
    with pytest.raises(OperationRefusedError, match=r"generated column b \(a \+ 1\)"):
        _commit(path, bad)


def test_a_file_without_a_defaulted_column_is_refused(tmp_path):
    path = str(tmp_path / "t")
    schema = pa.schema(
        [
            ("id", pa.int64()),
            pa.field("s", pa.string(), metadata={"CURRENT_DEFAULT": "'x'"}),
            pa.field("n", pa.string(), metadata={"CURRENT_DEFAULT": "NULL"}),
        ]
    )
    make_table(path, schema=schema, protocol=Protocol(1, 7, None, ("allowColumnDefaults",)))
    with pytest.raises(OperationRefusedError, match="column 's' has the default 'x' but the file does not carry it"):
        _commit(path, pa.table({"id": pa.array([1], pa.int64())}))
    # Carrying the column (any values: they are explicit) is fine; a NULL default may be left out.
    assert _commit(path, pa.table({"id": pa.array([1], pa.int64()), "s": ["y"]})).version == 1


@settings(max_examples=25, deadline=None)
@given(st.text(alphabet="ab`'\" \\x", max_size=12))
def test_backticks_become_double_quotes_outside_strings_only(text):
    out = spark_to_duckdb(text)
    # String literals are untouched: the text inside quotes is unchanged, so quote counts match.
    assert out.count("'") == text.count("'")
    if "`" not in text:
        assert out == text
