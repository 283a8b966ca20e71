"""Schema enforcement on commit requests, canonical partition values and the shared hidden rule.

Each test is one example an outside review used to make a table unreadable (or
silently wrong) through ``commit``/``convert``; each must be refused with one
clear error that names the column and both types, writing nothing, or (for
partition values) be written in a form deltalake reads.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import subprocess
import sys

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.convert import convert_to_delta
from deltalog.errors import (
    DataFileMismatchError,
    InvalidCommitRequestError,
    OperationRefusedError,
)
from deltalog.ingest import commit_request
from deltalog.protocol.table_protocol import Protocol
from helpers import make_table

DELTALOG = os.path.join(os.path.dirname(sys.executable), "deltalog")
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def put(root: str, rel: str, data: pa.Table) -> str:
    full = os.path.join(root, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    pq.write_table(data, full)
    return rel


def versions(root: str) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(os.path.join(root, "_delta_log")) if n.endswith(".json"))


def refused(table: str, request: dict, error: type = DataFileMismatchError) -> str:
    with pytest.raises(error) as info:
        commit_request(table, request, run_hooks=False)
    assert versions(table) == [0]
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.fixture
def table(tmp_path) -> str:
    path = str(tmp_path / "t")
    make_table(path, schema=SCHEMA)
    return path


# --- types --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "shown"),
    [
        (pa.array(["1"]), "string"),
        (pa.array([{"x": 1}]), "struct<x: long>"),
        (pa.array([decimal.Decimal("1.00")], pa.decimal128(10, 2)), "decimal(10,2)"),
        (pa.array([1], pa.int32()), "integer"),
        (pa.array([1.0]), "double"),
        (pa.array([1], pa.uint64()), "uint64"),
    ],
)
def test_wrong_type_for_a_long_column_is_refused(table: str, column: pa.Array, shown: str) -> None:
    rel = put(table, "f.parquet", pa.table({"id": column, "v": ["a"]}))
    message = refused(table, {"add": [rel]})
    assert f"column id is {shown} in the file but long in the table" in message
    assert message.startswith("invalid commit request: data file 'f.parquet'")


@pytest.mark.parametrize(
    ("table_type", "file_column", "shown"),
    [
        (pa.timestamp("us", tz="UTC"), pa.array([dt.date(2024, 1, 1)]), "date in the file but timestamp"),
        (pa.timestamp("us", tz="UTC"), pa.array([1], pa.timestamp("us")), "timestamp_ntz in the file but timestamp"),
        (pa.timestamp("us"), pa.array([1], pa.timestamp("us", tz="UTC")), "timestamp in the file but timestamp_ntz"),
        (pa.date32(), pa.array([1], pa.timestamp("us", tz="UTC")), "timestamp in the file but date"),
        (pa.timestamp("us", tz="UTC"), pa.array([1], pa.timestamp("ns", tz="UTC")), "timestamp(NANOS)"),
        (pa.decimal128(5, 2), pa.array([decimal.Decimal("1.5")], pa.decimal128(5, 1)), "decimal(5,1) in the file"),
    ],
)
def test_timestamp_date_and_decimal_mismatches_are_refused(tmp_path, table_type, file_column, shown) -> None:
    path = str(tmp_path / "t")
    protocol = Protocol(3, 7, ("timestampNtz",), ("timestampNtz",))
    make_table(path, schema=pa.schema([("id", pa.int64()), ("t", table_type)]), protocol=protocol)
    rel = put(path, "f.parquet", pa.table({"id": [1], "t": file_column}))
    assert shown in refused(path, {"add": [rel]})


def test_matching_types_including_int96_and_millis_are_accepted(tmp_path) -> None:
    path = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("d", pa.decimal128(5, 2))])
    make_table(path, schema=schema)
    stamp = dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC)
    data = pa.table(
        {"id": [1], "ts": pa.array([stamp], pa.timestamp("ms", tz="UTC")), "d": [decimal.Decimal("1.50")]},
        schema=pa.schema([("id", pa.int64()), ("ts", pa.timestamp("ms", tz="UTC")), ("d", pa.decimal128(5, 2))]),
    )
    put(path, "a.parquet", data)
    os.makedirs(path, exist_ok=True)
    pq.write_table(data, os.path.join(path, "b.parquet"), use_deprecated_int96_timestamps=True)
    assert commit_request(path, {"add": ["a.parquet", "b.parquet"]}, run_hooks=False).version == 1
    got = deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()
    assert [r["ts"].astimezone(dt.UTC) for r in got] == [stamp, stamp]


def test_type_widening_only_where_the_table_supports_it(tmp_path) -> None:
    narrow = pa.table({"id": pa.array([1], pa.int32())})
    plain = str(tmp_path / "plain")
    make_table(plain, schema=pa.schema([("id", pa.int64())]))
    put(plain, "f.parquet", narrow)
    assert "typeWidening would allow it" in refused(plain, {"add": ["f.parquet"]})
    widening = str(tmp_path / "widening")
    protocol = Protocol(3, 7, ("typeWidening",), ("typeWidening",))
    make_table(widening, schema=pa.schema([("id", pa.int64())]), protocol=protocol)
    put(widening, "f.parquet", narrow)
    assert commit_request(widening, {"add": ["f.parquet"]}, run_hooks=False).version == 1
    put(widening, "g.parquet", pa.table({"id": pa.array([1.0])}))  # double -> long is no widening
    with pytest.raises(DataFileMismatchError, match="column id is double in the file but long"):
        commit_request(widening, {"add": ["g.parquet"]}, run_hooks=False)


def test_nested_types_are_checked_recursively(tmp_path) -> None:
    path = str(tmp_path / "t")
    inner = pa.struct([("a", pa.int64()), ("tags", pa.list_(pa.string()))])
    schema = pa.schema([("id", pa.int64()), ("s", inner), ("m", pa.map_(pa.string(), pa.int32()))])
    make_table(path, schema=schema)
    good = pa.table({"id": [1], "s": [{"a": 1, "tags": ["x"]}], "m": pa.array([[("k", 1)]], schema.field("m").type)})
    put(path, "good.parquet", good)
    assert commit_request(path, {"add": ["good.parquet"]}, run_hooks=False).version == 1
    bad = pa.table({"id": [1], "s": [{"a": 1, "tags": [1]}], "m": pa.array([[("k", 1)]], schema.field("m").type)})
    put(path, "bad.parquet", bad)
    with pytest.raises(DataFileMismatchError, match="column s.tags.element is long in the file but string"):
        commit_request(path, {"add": ["bad.parquet"]}, run_hooks=False)
    extra = pa.table({"id": [1], "s": [{"a": 1, "tags": ["x"], "zz": 2}]})
    put(path, "extra.parquet", extra)
    with pytest.raises(DataFileMismatchError, match="column s.zz is in the file but not in the table schema"):
        commit_request(path, {"add": ["extra.parquet"]}, run_hooks=False)
    assert deltalake.DeltaTable(path).to_pyarrow_table().num_rows == 1


# --- nullability ------------------------------------------------------------------------


def test_missing_non_nullable_column_is_refused(table: str) -> None:
    rel = put(table, "f.parquet", pa.table({"v": ["a"]}))
    assert "column id is not nullable but the file does not have it" in refused(table, {"add": [rel]})


def test_nulls_in_a_non_nullable_column_are_refused(table: str) -> None:
    rel = put(table, "f.parquet", pa.table({"id": pa.array([1, None], pa.int64()), "v": ["a", "b"]}))
    assert "column id is not nullable but holds 1 null(s)" in refused(table, {"add": [rel]})
    # The same column without nulls (written as optional, as Spark writes it) is fine.
    rel = put(table, "g.parquet", pa.table({"id": pa.array([1, 2], pa.int64()), "v": [None, "b"]}))
    assert commit_request(table, {"add": [rel]}, run_hooks=False).version == 1


def test_nested_non_nullable_fields_are_decided_exactly(tmp_path) -> None:
    """A null parent is fine for a non-nullable child; a null child under a present parent is not."""
    path = str(tmp_path / "t")
    inner = pa.struct([pa.field("a", pa.int64(), nullable=False)])
    schema = pa.schema([("id", pa.int64()), ("s", inner), pa.field("l", pa.list_(pa.field("e", pa.int32(), False)))])
    make_table(path, schema=schema)
    loose = pa.struct([("a", pa.int64())])  # what Spark writes: everything optional
    ints = pa.list_(pa.int32())
    ok = pa.table({"id": [1, 2], "s": pa.array([{"a": 1}, None], loose), "l": pa.array([[1], None], ints)})
    put(path, "ok.parquet", ok)
    assert commit_request(path, {"add": ["ok.parquet"]}, run_hooks=False).version == 1
    bad_child = pa.table({"id": [1], "s": pa.array([{"a": None}], loose)})
    put(path, "bad_child.parquet", bad_child)
    with pytest.raises(DataFileMismatchError, match="column s.a is not nullable but holds null"):
        commit_request(path, {"add": ["bad_child.parquet"]}, run_hooks=False)
    bad_element = pa.table({"id": [1], "l": pa.array([[1, None]], ints)})
    put(path, "bad_element.parquet", bad_element)
    with pytest.raises(DataFileMismatchError, match="column l.element is not nullable but holds null"):
        commit_request(path, {"add": ["bad_element.parquet"]}, run_hooks=False)
    assert DeltaTable(path).snapshot().num_files == 1
    # (deltalake cannot read a null struct whose child is non-nullable: pyarrow refuses the
    # cast; Delta Spark reads it. The list case alone is read back below.)
    lists = str(tmp_path / "lists")
    make_table(lists, schema=pa.schema([("id", pa.int64()), schema.field("l")]))
    put(lists, "ok.parquet", ok.select(["id", "l"]))
    assert commit_request(lists, {"add": ["ok.parquet"]}, run_hooks=False).version == 1
    assert deltalake.DeltaTable(lists).to_pyarrow_table().to_pylist() == [{"id": 1, "l": [1]}, {"id": 2, "l": None}]


# --- files that are not what the stats say -----------------------------------------------


def test_non_parquet_file_with_stats_is_refused(table: str) -> None:
    with open(os.path.join(table, "f.parquet"), "w") as fh:
        fh.write("not parquet at all")
    request = {"add": [{"path": "f.parquet", "stats": {"numRecords": 1}}]}
    message = refused(table, request, InvalidCommitRequestError)
    assert "is not a readable Parquet file" in message


def test_extra_column_with_stats_is_refused(table: str) -> None:
    rel = put(table, "f.parquet", pa.table({"id": [1], "v": ["a"], "secret": ["x"]}))
    request = {"add": [{"path": rel, "stats": {"numRecords": 1}}]}
    assert "column secret is in the file but not in the table schema" in refused(table, request)


def test_lying_stats_are_refused(table: str) -> None:
    rel = put(table, "f.parquet", pa.table({"id": pa.array([1, 2, 500], pa.int64()), "v": ["a", "b", "c"]}))
    claims = {"numRecords": 3, "minValues": {"id": 1}, "maxValues": {"id": 100}, "nullCount": {"id": 0}}
    message = refused(table, {"add": [{"path": rel, "stats": claims}]})
    assert "maxValues.id is 100 but the file holds values up to 500" in message
    for wrong, expected in [
        ({**claims, "maxValues": {"id": 500}, "numRecords": 2}, "numRecords is 2 but the file has 3"),
        ({**claims, "maxValues": {"id": 500}, "minValues": {"id": 2}}, "minValues.id is 2 but the file holds"),
        ({**claims, "maxValues": {"id": 500}, "nullCount": {"id": 1}}, "nullCount.id is 1 but the file holds 0"),
        ({**claims, "maxValues": {"id": "500"}}, "not a value of the column's type"),
        ({**claims, "maxValues": {"nope": 1}}, "maxValues.nope names a column the table does not have"),
    ]:
        assert expected in refused(table, {"add": [{"path": rel, "stats": wrong}]})
    # Wider bounds than the data are true (only less useful): accepted, kept as given.
    honest = {**claims, "minValues": {"id": 0, "v": "a"}, "maxValues": {"id": 1000, "v": "c\U0010ffff"}}
    assert commit_request(table, {"add": [{"path": rel, "stats": honest}]}, run_hooks=False).version == 1
    assert json.loads(DeltaTable(table).snapshot().files.to_pylist()[0]["stats"]) == honest
    found = deltalake.DeltaTable(table).to_pyarrow_table(filters=[("id", "=", 500)]).to_pylist()
    assert found == [{"id": 500, "v": "c"}]


# --- what the table promises -------------------------------------------------------------


@pytest.mark.parametrize(
    ("configuration", "field_metadata", "named"),
    [
        ({"delta.constraints.v_positive": "v >= 0"}, {}, "CHECK constraint v_positive (v >= 0)"),
        (
            {},
            {"delta.invariants": json.dumps({"expression": {"expression": "v > 3"}})},
            "invariant on column v (v > 3)",
        ),
        ({}, {"delta.generationExpression": "id * 2"}, "generated column v (id * 2)"),
    ],
)
def test_tables_with_constraints_invariants_or_generated_columns_check_every_row(
    tmp_path, configuration, field_metadata, named
) -> None:
    path = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), pa.field("v", pa.int64(), metadata=field_metadata or None)])
    make_table(path, schema=schema, configuration=configuration, protocol=Protocol(1, 4))
    rel = put(path, "f.parquet", pa.table({"id": [1, 5], "v": [-5, 10]}))
    message = refused(path, {"add": [rel]}, OperationRefusedError)
    assert named in message and "1 row(s) of f.parquet violate it" in message
    assert versions(path) == [0]
    good = put(path, "g.parquet", pa.table({"id": [2, 5], "v": [4, 10]}))
    assert commit_request(path, {"add": [good]}, run_hooks=False).version == 1


def test_cli_exit_code_for_a_schema_mismatch(table: str, tmp_path) -> None:
    rel = put(table, "f.parquet", pa.table({"id": ["1"], "v": ["a"]}))
    req = tmp_path / "req.json"
    req.write_text(json.dumps({"add": [rel]}))
    out = subprocess.run(
        [DELTALOG, "commit", table, "--request", str(req)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2 and out.stdout == ""
    assert "column id is string in the file but long in the table" in out.stderr and out.stderr.count("\n") == 1
    assert versions(table) == [0]


# --- partition values --------------------------------------------------------------------


def test_decimal_partition_from_a_commit_request_is_canonical_and_readable(tmp_path) -> None:
    path = str(tmp_path / "t")
    make_table(path, schema=pa.schema([("id", pa.int64()), ("d", pa.decimal128(5, 2))]), partition_by=["d"])
    rel = put(path, "d=1.5/f.parquet", pa.table({"id": [1]}))
    commit_request(path, {"add": [rel]}, run_hooks=False)
    assert DeltaTable(path).snapshot().files.to_pylist()[0]["partitionValues"] == [("d", "1.50")]
    assert deltalake.DeltaTable(path).to_pyarrow_table().to_pylist() == [{"id": 1, "d": decimal.Decimal("1.50")}]
    put(path, "d=1.555/g.parquet", pa.table({"id": [2]}))
    with pytest.raises(InvalidCommitRequestError, match="more than 2 fraction digit"):
        commit_request(path, {"add": ["d=1.555/g.parquet"]}, run_hooks=False)
    put(path, "d=1234/g.parquet", pa.table({"id": [2]}))
    with pytest.raises(InvalidCommitRequestError, match="more than 3 integer digit"):
        commit_request(path, {"add": ["d=1234/g.parquet"]}, run_hooks=False)
    # The request may spell the value differently from the directory, as long as it is the same value.
    put(path, "d=2.5/h.parquet", pa.table({"id": [3]}))
    commit_request(path, {"add": [{"path": "d=2.5/h.parquet", "partitionValues": {"d": "2.500"}}]}, run_hooks=False)
    assert sorted(r["d"] for r in deltalake.DeltaTable(path).to_pyarrow_table().to_pylist()) == [
        decimal.Decimal("1.50"),
        decimal.Decimal("2.50"),
    ]


def test_decimal_partition_from_convert_is_canonical_and_readable(tmp_path) -> None:
    path = str(tmp_path / "t")
    put(path, "d=1.5/f.parquet", pa.table({"id": [1]}))
    put(path, "d=-0/g.parquet", pa.table({"id": [2]}))
    convert_to_delta(path, partition_by="d decimal(5,2)")
    values = sorted(dict(f["partitionValues"])["d"] for f in DeltaTable(path).snapshot().files.to_pylist())
    assert values == ["0.00", "1.50"]
    got = sorted(r["d"] for r in deltalake.DeltaTable(path).to_pyarrow_table().to_pylist())
    assert got == [decimal.Decimal("0.00"), decimal.Decimal("1.50")]


def test_convert_refuses_a_partition_value_that_does_not_fit(tmp_path) -> None:
    from deltalog.errors import InvalidArgumentError

    path = str(tmp_path / "t")
    put(path, "b=yes/f.parquet", pa.table({"id": [1]}))
    with pytest.raises(InvalidArgumentError, match="'yes' of column 'b' is not a valid boolean"):
        convert_to_delta(path, partition_by="b boolean")
    assert not os.path.exists(os.path.join(path, "_delta_log"))


# --- hidden paths ------------------------------------------------------------------------


def test_partition_folder_starting_with_underscore_is_not_hidden(tmp_path) -> None:
    path = str(tmp_path / "t")
    make_table(path, schema=pa.schema([("id", pa.int64()), ("_p", pa.string())]), partition_by=["_p"])
    rel = put(path, "_p=x/new.parquet", pa.table({"id": [1]}))
    assert commit_request(path, {"add": [rel]}, run_hooks=False).version == 1
    assert deltalake.DeltaTable(path).to_pyarrow_table().to_pylist() == [{"id": 1, "_p": "x"}]
    for hidden in ("_q=x/f.parquet", "_change_data/f.parquet", "_p=x/_tmp/f.parquet", "_p=x/.f.parquet"):
        put(path, hidden, pa.table({"id": [1]}))
        with pytest.raises(InvalidCommitRequestError, match="hidden path"):
            commit_request(path, {"add": [hidden]}, run_hooks=False)


def test_convert_keeps_underscore_partition_folders(tmp_path) -> None:
    path = str(tmp_path / "t")
    put(path, "_p=x/f.parquet", pa.table({"id": [1]}))
    put(path, "_p=x/_SUCCESS/marker.parquet", pa.table({"id": [9]}))
    result = convert_to_delta(path, partition_by="_p string")
    assert (result.num_files, result.skipped_hidden) == (1, 1)
    assert deltalake.DeltaTable(path).to_pyarrow_table().to_pylist() == [{"id": 1, "_p": "x"}]


def test_one_hidden_rule_for_vacuum_and_commit_requests() -> None:
    from deltalog.vacuuming import plan as paths  # the vacuum planner's rule
    from deltalog.write_checks.hidden_paths import HiddenRule

    assert paths.HiddenRule is HiddenRule
    rule = HiddenRule(["_p"])
    for rel in ("_p=x/f.parquet", "a/b.parquet", "_change_data/c.parquet", "_delta_log/0.json", "_q=1/f", ".x/f"):
        # A data file may only be where vacuum also looks (never the reverse direction for data).
        if rule.hidden_component(rel) is None:
            assert not rule.hidden_path(rel)
    assert rule.hidden_component("_change_data/c.parquet") == "_change_data"
    assert not rule.hidden_path("_change_data/c.parquet")  # vacuum still cleans change data


# --- column mapping and partition columns inside files ---------------------------------------


@pytest.mark.parametrize("mode", ["name", "id"])
def test_column_mapping_physical_names_and_ids_are_respected(tmp_path, mode) -> None:
    from deltalog.create import create_table

    path = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    create_table(path, schema, configuration={"delta.columnMapping.mode": mode}, run_hooks=False)
    fields = {f.name: f for f in DeltaTable(path).snapshot().metadata.schema}
    physical = {n: f.metadata[b"delta.columnMapping.physicalName"].decode() for n, f in fields.items()}
    ids = {n: int(f.metadata[b"delta.columnMapping.id"]) for n, f in fields.items()}
    put(path, "logical.parquet", pa.table({"id": [1], "v": ["a"]}))
    with pytest.raises(DataFileMismatchError, match="column id is in the file but not in the table schema"):
        commit_request(path, {"add": ["logical.parquet"]}, run_hooks=False)
    file_schema = pa.schema(
        [
            pa.field(physical["id"], pa.int64(), metadata={b"PARQUET:field_id": str(ids["id"]).encode()}),
            pa.field(physical["v"], pa.string(), metadata={b"PARQUET:field_id": str(ids["v"]).encode()}),
        ]
    )
    put(path, "physical.parquet", pa.table([[1], ["a"]], schema=file_schema))
    assert commit_request(path, {"add": ["physical.parquet"]}, run_hooks=False).version == 1
    assert DeltaTable(path).snapshot().num_files == 1  # (deltalake does not read column mapping)
    if mode == "id":
        wrong = file_schema.set(0, file_schema.field(0).with_metadata({b"PARQUET:field_id": b"99"}))
        put(path, "wrong_id.parquet", pa.table([[1], ["a"]], schema=wrong))
        with pytest.raises(DataFileMismatchError, match=f"has field id 99 in the file but {ids['id']} in the table"):
            commit_request(path, {"add": ["wrong_id.parquet"]}, run_hooks=False)


def test_partition_column_inside_the_file_must_hold_the_partition_value(tmp_path) -> None:
    path = str(tmp_path / "t")
    make_table(path, schema=pa.schema([("id", pa.int64()), ("p", pa.string())]), partition_by=["p"])
    put(path, "p=a/same.parquet", pa.table({"id": [1], "p": ["a"]}))
    assert commit_request(path, {"add": ["p=a/same.parquet"]}, run_hooks=False).version == 1
    put(path, "p=b/other.parquet", pa.table({"id": [2], "p": ["zzz"]}))
    with pytest.raises(DataFileMismatchError, match="partition column p is also stored in the file"):
        commit_request(path, {"add": ["p=b/other.parquet"]}, run_hooks=False)
    put(path, "p=c/typed.parquet", pa.table({"id": [3], "p": [3]}))
    with pytest.raises(DataFileMismatchError, match="column p is long in the file but string in the table"):
        commit_request(path, {"add": ["p=c/typed.parquet"]}, run_hooks=False)
    assert deltalake.DeltaTable(path).to_pyarrow_table().to_pylist() == [{"id": 1, "p": "a"}]


def test_convert_checks_what_readers_cannot_read_and_maps_int96_to_timestamp(tmp_path) -> None:
    from deltalog.errors import InvalidArgumentError

    nanos = str(tmp_path / "nanos")
    put(nanos, "f.parquet", pa.table({"t": pa.array([1], pa.timestamp("ns", tz="UTC"))}))
    with pytest.raises(InvalidArgumentError, match=r"f.parquet: column t is timestamp\(NANOS\) in the file"):
        convert_to_delta(nanos)
    assert not os.path.exists(os.path.join(nanos, "_delta_log"))
    int96 = str(tmp_path / "int96")
    os.makedirs(int96)
    stamp = dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC)
    # Spark writes INT96 without an Arrow schema hint: an instant, i.e. a Delta timestamp.
    pq.write_table(
        pa.table({"t": pa.array([stamp], pa.timestamp("ns"))}),
        os.path.join(int96, "f.parquet"),
        use_deprecated_int96_timestamps=True,
        store_schema=False,
    )
    result = convert_to_delta(int96)
    assert result.schema[0]["type"] == "timestamp"
    got = deltalake.DeltaTable(int96).to_pyarrow_table().column("t").to_pylist()
    assert [t.astimezone(dt.UTC) for t in got] == [stamp]
    unsigned = str(tmp_path / "unsigned")
    put(unsigned, "f.parquet", pa.table({"u": pa.array([200], pa.uint8())}))
    assert convert_to_delta(unsigned).schema[0]["type"] == "short"
    assert deltalake.DeltaTable(unsigned).to_pyarrow_table().to_pylist() == [{"u": 200}]


def test_stats_of_strings_timestamps_decimals_and_dates_are_checked_by_their_order(tmp_path) -> None:
    path = str(tmp_path / "t")
    schema = pa.schema(
        [("s", pa.string()), ("t", pa.timestamp("us", tz="UTC")), ("d", pa.decimal128(6, 2)), ("day", pa.date32())]
    )
    make_table(path, schema=schema)
    long_text = "x" * 40
    stamp = dt.datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=dt.UTC)
    data = pa.table(
        {
            "s": ["a", long_text],
            "t": pa.array([stamp, stamp], pa.timestamp("us", tz="UTC")),
            "d": pa.array([decimal.Decimal("-1.25"), decimal.Decimal("3.50")], pa.decimal128(6, 2)),
            "day": [dt.date(2024, 1, 1), dt.date(2024, 1, 31)],
        },
        schema=schema,
    )
    put(path, "f.parquet", data)
    honest = {
        "numRecords": 2,
        "minValues": {"s": "a", "t": "2024-05-01T10:00:00.123Z", "d": -1.25, "day": "2024-01-01"},
        # a 32-character prefix with U+10FFFF is an upper bound of the 40-character maximum
        "maxValues": {"s": "x" * 32 + "\U0010ffff", "t": "2024-05-01T10:00:00.123Z", "d": "3.50", "day": "2024-01-31"},
    }
    lies = [
        ({"maxValues": {**honest["maxValues"], "s": "x" * 32}}, "maxValues.s"),
        ({"maxValues": {**honest["maxValues"], "t": "2024-05-01T09:59:59.999Z"}}, "maxValues.t"),
        ({"minValues": {**honest["minValues"], "d": -1.2}}, "minValues.d"),
        ({"maxValues": {**honest["maxValues"], "day": "2024-01-30"}}, "maxValues.day"),
        ({"minValues": {**honest["minValues"], "t": "yesterday"}}, "not a value of the column's type"),
    ]
    for change, expected in lies:
        message = refused(path, {"add": [{"path": "f.parquet", "stats": {**honest, **change}}]})
        assert expected in message
    assert commit_request(path, {"add": [{"path": "f.parquet", "stats": honest}]}, run_hooks=False).version == 1


def test_decimal_stats_past_float_precision_are_compared_exactly(tmp_path) -> None:
    path = str(tmp_path / "t")
    make_table(path, schema=pa.schema([("d", pa.decimal128(22, 2))]))
    exact = decimal.Decimal("12345678901234567890.12")
    put(path, "f.parquet", pa.table({"d": pa.array([exact], pa.decimal128(22, 2))}))
    # As a JSON number this rounds to 1.2345678901234567e19 as a float: above the true minimum.
    stats = '{"numRecords":1,"minValues":{"d":12345678901234567890.12},"maxValues":{"d":12345678901234567890.12}}'
    assert commit_request(path, {"add": [{"path": "f.parquet", "stats": stats}]}, run_hooks=False).version == 1
    lying = stats.replace('"maxValues":{"d":12345678901234567890.12}', '"maxValues":{"d":12345678901234567890.11}')
    put(path, "g.parquet", pa.table({"d": pa.array([exact], pa.decimal128(22, 2))}))
    with pytest.raises(DataFileMismatchError, match="maxValues.d"):
        commit_request(path, {"add": [{"path": "g.parquet", "stats": lying}]}, run_hooks=False)


def _variant_table(path: str, features: tuple[str, ...] = ("variantType",), config: dict | None = None) -> None:
    import uuid

    from deltalog.commit.transaction import Transaction
    from deltalog.log.actions import Metadata
    from deltalog.storage.filesystem import Storage

    schema_string = json.dumps(
        {
            "type": "struct",
            "fields": [
                {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                {"name": "v", "type": "variant", "nullable": True, "metadata": {}},
            ],
        }
    )
    txn = Transaction(Storage(path), None, operation="CREATE TABLE", run_hooks=False)
    txn.update_protocol(Protocol(3, 7, features, features))
    txn.update_metadata(Metadata(str(uuid.uuid4()), schema_string, [], config or {}, created_time=0))
    txn.commit()


def test_variant_columns_take_unshredded_variant_structs_only(tmp_path) -> None:
    path = str(tmp_path / "t")
    _variant_table(path)
    variant = pa.struct([pa.field("metadata", pa.binary(), False), pa.field("value", pa.binary(), False)])
    put(
        path,
        "ok.parquet",
        pa.table({"id": [1], "v": pa.array([{"metadata": b"\x01\x00\x00", "value": b"\x00"}], variant)}),
    )
    assert commit_request(path, {"add": ["ok.parquet"]}, run_hooks=False).version == 1
    shredded = pa.struct([("metadata", pa.binary()), ("value", pa.binary()), ("typed_value", pa.int64())])
    put(path, "shredded.parquet", pa.table({"id": [1], "v": pa.array([{"metadata": b"", "value": b""}], shredded)}))
    with pytest.raises(DataFileMismatchError, match="but variant in the table"):
        commit_request(path, {"add": ["shredded.parquet"]}, run_hooks=False)
    put(path, "text.parquet", pa.table({"id": [1], "v": ["{}"]}))
    with pytest.raises(DataFileMismatchError, match="column v is string in the file but variant in the table"):
        commit_request(path, {"add": ["text.parquet"]}, run_hooks=False)


#: A shredded variant column (Parquet VariantShredding): an object whose field "a" is typed as long.
_SHREDDED_OBJECT = pa.struct(
    [
        pa.field("metadata", pa.binary(), False),
        ("value", pa.binary()),
        ("typed_value", pa.struct([pa.field("a", pa.struct([("value", pa.binary()), ("typed_value", pa.int64())]))])),
    ]
)


def test_shredded_variants_are_taken_only_where_the_table_enables_shredding(tmp_path) -> None:
    """PROTOCOL.md 'Variant Shredding': shredded files only while delta.enableVariantShredding is true, in the
    Parquet shredding layout (metadata, value, typed_value; object fields and array elements value/typed_value)."""
    features = ("variantType", "variantShredding-preview")
    row = {"metadata": b"\x01\x00\x00", "value": None, "typed_value": {"a": {"value": None, "typed_value": 7}}}
    supported = str(tmp_path / "supported")
    _variant_table(supported, features)  # supported, not enabled: new files must be unshredded
    put(supported, "s.parquet", pa.table({"id": [1], "v": pa.array([row], _SHREDDED_OBJECT)}))
    with pytest.raises(DataFileMismatchError, match="does not enable variant shredding"):
        commit_request(supported, {"add": ["s.parquet"]}, run_hooks=False)

    path = str(tmp_path / "enabled")
    _variant_table(path, features, {"delta.enableVariantShredding": "true"})
    put(path, "s.parquet", pa.table({"id": [1], "v": pa.array([row], _SHREDDED_OBJECT)}))
    primitive = pa.struct([pa.field("metadata", pa.binary(), False), ("typed_value", pa.int64())])
    put(
        path,
        "p.parquet",
        pa.table({"id": [2], "v": pa.array([{"metadata": b"\x01\x00\x00", "typed_value": 3}], primitive)}),
    )
    result = commit_request(path, {"add": ["s.parquet", "p.parquet"]}, run_hooks=False)
    stats = {
        json.loads(s)["maxValues"]["id"]: json.loads(s)
        for s in DeltaTable(path).snapshot().files.column("stats").to_pylist()
    }
    assert result.version == 1 and stats[1]["nullCount"] == {"id": 0, "v": 0}  # a variant's nullCount: a number

    bad_field = pa.struct([pa.field("metadata", pa.binary(), False), ("typed_value", pa.struct([("a", pa.int64())]))])
    put(
        path,
        "b1.parquet",
        pa.table({"id": [3], "v": pa.array([{"metadata": b"", "typed_value": {"a": 1}}], bad_field)}),
    )
    with pytest.raises(DataFileMismatchError, match=r"not a shredded variant .*v\.typed_value\.a is not a group"):
        commit_request(path, {"add": ["b1.parquet"]}, run_hooks=False)
    no_metadata = pa.struct([("value", pa.binary()), ("typed_value", pa.int64())])
    put(path, "b2.parquet", pa.table({"id": [4], "v": pa.array([{"value": b"", "typed_value": 1}], no_metadata)}))
    with pytest.raises(DataFileMismatchError, match="no binary metadata field"):
        commit_request(path, {"add": ["b2.parquet"]}, run_hooks=False)
    assert DeltaTable(path).snapshot().version == 1
