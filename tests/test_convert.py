"""convert_to_delta: a Parquet directory becomes a Delta table in place, or is refused untouched."""

from __future__ import annotations

import json
import os
from collections import Counter

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.convert import convert_to_delta, parse_partition_by
from deltalog.errors import InvalidArgumentError, TableAlreadyExistsError, TableNotFoundError
from test_compaction_support import multiset_of, read_multiset, rich_rows


def _listing(path: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), path) for d, _, names in os.walk(path) for n in names)


def _expected(tables: list[pa.Table]) -> Counter:
    return multiset_of(pa.concat_tables(tables))


def test_plain_directory(tmp_path):
    path = str(tmp_path / "plain")
    os.makedirs(os.path.join(path, "sub"))
    parts = [rich_rows(20, i * 20, "x") for i in range(3)]
    pq.write_table(parts[0], os.path.join(path, "a.parquet"))
    pq.write_table(parts[1], os.path.join(path, "b.snappy.parquet"), compression="snappy")
    pq.write_table(parts[2], os.path.join(path, "sub", "c.parquet"))
    open(os.path.join(path, "_SUCCESS"), "w").close()
    os.makedirs(os.path.join(path, ".hidden"))
    open(os.path.join(path, ".hidden", "junk"), "w").write("not parquet")

    result = convert_to_delta(path)

    assert result.version == 0 and result.num_files == 3 and result.num_records == 60
    assert result.skipped_hidden == 2 and result.partition_columns == []
    assert read_multiset(path) == _expected(parts)
    snap = DeltaTable(path).snapshot()
    stats = {p: json.loads(s) for p, s in zip(snap.file_paths(), snap.files.column("stats").to_pylist())}
    assert stats["a.parquet"]["numRecords"] == 20 and stats["a.parquet"]["maxValues"]["id"] == 19
    assert stats["sub/c.parquet"]["nullCount"]["name"] == parts[2].column("name").null_count
    history = deltalake.DeltaTable(path).history()
    assert history[0]["operation"] == "CONVERT"


def test_hive_partitioned_directory_with_typed_columns(tmp_path):
    path = str(tmp_path / "hive")
    expected = []
    for year in (2023, 2024):
        for region in ("eu", "us west", None):
            d = os.path.join(path, f"year={year}", f"region={region or '__HIVE_DEFAULT_PARTITION__'}")
            os.makedirs(d)
            data = rich_rows(10, year * 100, "x").drop_columns(["part"])
            pq.write_table(data, os.path.join(d, "part-0.parquet"))
            expected.append(
                data.append_column("year", pa.array([year] * 10, pa.int32())).append_column(
                    "region", pa.array([region] * 10, pa.string())
                )
            )
    result = convert_to_delta(path, partition_by="year int, region string")
    assert result.partition_columns == ["year", "region"] and result.num_files == 6
    assert [f["name"] for f in result.schema][-2:] == ["year", "region"]
    assert read_multiset(path) == _expected(expected)
    pvs = DeltaTable(path).snapshot().files.column("partitionValues").to_pylist()
    assert {(dict(p)["year"], dict(p)["region"]) for p in pvs} == {
        (y, r) for y in ("2023", "2024") for r in ("eu", "us west", None)
    }
    assert deltalake.DeltaTable(path).to_pyarrow_table(filters=[("year", "=", 2024)]).num_rows == 30


def test_refusals_leave_the_directory_untouched(tmp_path):
    path = str(tmp_path / "d")
    os.makedirs(os.path.join(path, "k=1"))
    pq.write_table(pa.table({"a": [1, 2]}), os.path.join(path, "k=1", "f1.parquet"))
    pq.write_table(pa.table({"a": ["x"]}), os.path.join(path, "k=1", "f2.parquet"))
    before = _listing(path)
    with pytest.raises(InvalidArgumentError, match="hive-style partition directories"):
        convert_to_delta(path)
    with pytest.raises(InvalidArgumentError, match=r"k=1/f2.parquet has column 'a' as string but k=1/f1.parquet"):
        convert_to_delta(path, partition_by="k int")
    with pytest.raises(InvalidArgumentError, match="not a partition directory of column 'j'"):
        convert_to_delta(path, partition_by="j int")
    with pytest.raises(InvalidArgumentError, match="'1' of column 'k' is not a valid date"):
        convert_to_delta(path, partition_by="k date")
    os.remove(os.path.join(path, "k=1", "f2.parquet"))
    open(os.path.join(path, "k=1", "notes.txt"), "w").write("hello")
    with pytest.raises(InvalidArgumentError, match="notes.txt is not a readable Parquet file"):
        convert_to_delta(path, partition_by="k int")
    assert _listing(path) == sorted(
        set(before) - {os.path.join("k=1", "f2.parquet")} | {os.path.join("k=1", "notes.txt")}
    )
    assert not os.path.exists(os.path.join(path, "_delta_log"))


def test_refuses_an_existing_table_and_a_missing_or_empty_directory(tmp_path):
    path = str(tmp_path / "t")
    deltalake.write_deltalake(path, pa.table({"a": [1]}))
    version = deltalake.DeltaTable(path).version()
    with pytest.raises(TableAlreadyExistsError, match="already a Delta table"):
        convert_to_delta(path)
    assert deltalake.DeltaTable(path).version() == version
    with pytest.raises(TableNotFoundError):
        convert_to_delta(str(tmp_path / "missing"))
    os.makedirs(tmp_path / "empty")
    with pytest.raises(InvalidArgumentError, match="no Parquet data files"):
        convert_to_delta(str(tmp_path / "empty"))


def test_columns_missing_in_some_files_become_nullable(tmp_path):
    path = str(tmp_path / "d")
    os.makedirs(path)
    schema = pa.schema([pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.string())])
    pq.write_table(pa.table({"a": [1], "b": ["x"]}, schema=schema), os.path.join(path, "1.parquet"))
    pq.write_table(pa.table({"a": pa.array([2], pa.int64())}), os.path.join(path, "2.parquet"))
    result = convert_to_delta(path)
    fields = {f["name"]: f for f in result.schema}
    assert fields["a"]["nullable"] is True and fields["b"]["nullable"] is True
    assert sorted(deltalake.DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: r["a"]) == [
        {"a": 1, "b": "x"},
        {"a": 2, "b": None},
    ]


def test_partition_by_parsing():
    assert parse_partition_by("year int, amount decimal(10, 2), d DATE") == [
        ("year", "integer"),
        ("amount", "decimal(10,2)"),
        ("d", "date"),
    ]
    assert parse_partition_by({"x": "bigint"}) == [("x", "long")]
    with pytest.raises(InvalidArgumentError, match="unknown type 'colour'"):
        parse_partition_by("x colour")
    with pytest.raises(InvalidArgumentError, match="must be 'column type'"):
        parse_partition_by("x")
    with pytest.raises(InvalidArgumentError, match="twice"):
        parse_partition_by("x int, X string")
