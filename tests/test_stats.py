"""Delta stats from Parquet footers: values safe for data skipping, per type, and the same as deltalake's."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq

from deltalog.protocol.file_stats import stats_from_parquet_metadata, stats_json

UTC = dt.UTC


def footer(tmp_path, table: pa.Table, **kw) -> pq.FileMetaData:
    path = os.path.join(tmp_path, "f.parquet")
    pq.write_table(table, path, **kw)
    return pq.read_metadata(path)


def test_numeric_date_and_null_counts_across_row_groups(tmp_path) -> None:
    t = pa.table(
        {
            "i": pa.array([5, None, -3, 9], pa.int32()),
            "l": pa.array([1, 2, 3, 4], pa.int64()),
            "f": pa.array([1.5, float("nan"), -2.0, None], pa.float64()),
            "d": pa.array([dt.date(2024, 1, 2), None, dt.date(2020, 5, 6), dt.date(2030, 1, 1)]),
            "b": pa.array([True, False, None, True]),
        }
    )
    stats = stats_from_parquet_metadata(footer(tmp_path, t, row_group_size=2), t.schema)
    assert stats["numRecords"] == 4
    assert stats["minValues"] == {"i": -3, "l": 1, "f": -2.0, "d": "2020-05-06"}
    assert stats["maxValues"] == {"i": 9, "l": 4, "f": 1.5, "d": "2030-01-01"}
    assert stats["nullCount"] == {"i": 1, "l": 0, "f": 1, "d": 1, "b": 1}


def test_strings_are_cut_and_a_cut_maximum_stays_an_upper_bound(tmp_path) -> None:
    long_a, long_z = "a" * 40, "z" * 40 + "tail"
    t = pa.table({"s": [long_a, "m", long_z]})
    stats = stats_from_parquet_metadata(footer(tmp_path, t), t.schema)
    assert stats["minValues"]["s"] == "a" * 32
    assert stats["maxValues"]["s"] == "z" * 32 + "\U0010ffff"
    assert stats["maxValues"]["s"] > long_z
    short = stats_from_parquet_metadata(
        footer(tmp_path, t), t.schema, configuration={"delta.dataSkippingStringPrefixLength": "3"}
    )
    assert short["minValues"]["s"] == "aaa" and short["maxValues"]["s"] == "zzz\U0010ffff"


def test_timestamps_are_truncated_to_milliseconds(tmp_path) -> None:
    ts = [
        dt.datetime(2024, 1, 1, 10, 0, 0, 123999, tzinfo=UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999500, tzinfo=UTC),
    ]
    t = pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "ntz": pa.array([x.replace(tzinfo=None) for x in ts], pa.timestamp("ns")),
        }
    )
    stats = stats_from_parquet_metadata(footer(tmp_path, t), t.schema)
    assert stats["minValues"]["ts"] == "1969-12-31T23:59:59.999Z"
    assert stats["maxValues"]["ts"] == "2024-01-01T10:00:00.123Z"
    assert stats["minValues"]["ntz"] == "1969-12-31T23:59:59.999"
    assert stats["maxValues"]["ntz"] == "2024-01-01T10:00:00.123"


def test_decimals_keep_exact_digits(tmp_path) -> None:
    t = pa.table(
        {"x": pa.array([decimal.Decimal("12345678901234567.89"), decimal.Decimal("-0.50")], pa.decimal128(20, 2))}
    )
    text = stats_json(stats_from_parquet_metadata(footer(tmp_path, t), t.schema))
    assert '"minValues":{"x":-0.50}' in text and '"maxValues":{"x":12345678901234567.89}' in text
    assert json.loads(text, parse_float=decimal.Decimal)["maxValues"]["x"] == decimal.Decimal("12345678901234567.89")


def test_decimals_stored_as_integers(tmp_path) -> None:
    """Compaction writes decimals of precision <= 18 as INT32/INT64: their stats are read raw and scaled
    (pyarrow before 23 cannot convert them; the Airflow 3.0 matrix venv runs pyarrow 18)."""
    t = pa.table(
        {
            "small": pa.array([decimal.Decimal("-3.5"), decimal.Decimal("12.0")], pa.decimal128(5, 1)),
            "wide": pa.array([decimal.Decimal("0.001"), decimal.Decimal("-99999999999.999")], pa.decimal128(14, 3)),
        }
    )
    meta = footer(tmp_path, t, store_decimal_as_integer=True)
    assert [meta.row_group(0).column(i).physical_type for i in range(2)] == ["INT32", "INT64"]
    stats = stats_from_parquet_metadata(meta, t.schema)
    assert stats["minValues"] == {"small": decimal.Decimal("-3.5"), "wide": decimal.Decimal("-99999999999.999")}
    assert stats["maxValues"] == {"small": decimal.Decimal("12.0"), "wide": decimal.Decimal("0.001")}
    text = stats_json(stats)
    assert '"minValues":{"small":-3.5,"wide":-99999999999.999}' in text


def test_all_null_row_group_and_missing_column(tmp_path) -> None:
    t = pa.table({"a": pa.array([None, None, 1, 2], pa.int64())})
    schema = t.schema.append(pa.field("later", pa.string()))
    stats = stats_from_parquet_metadata(footer(tmp_path, t, row_group_size=2), schema)
    assert stats["minValues"] == {"a": 1} and stats["maxValues"] == {"a": 2}
    assert stats["nullCount"] == {"a": 2, "later": 4}


def test_structs_nest_lists_are_skipped_partitions_excluded(tmp_path) -> None:
    t = pa.table(
        {
            "s": pa.array([{"x": 1, "y": "b"}, {"x": 7, "y": "a"}]),
            "l": pa.array([[1, 2], [3]]),
            "p": ["k", "k"],
        }
    )
    stats = stats_from_parquet_metadata(footer(tmp_path, t), t.schema, ["p"])
    assert stats["minValues"] == {"s": {"x": 1, "y": "a"}}
    assert stats["maxValues"] == {"s": {"x": 7, "y": "b"}}
    assert stats["nullCount"] == {"s": {"x": 0, "y": 0}}


def test_indexed_column_limits(tmp_path) -> None:
    t = pa.table({"a": [1], "b": [2], "c": [3]})
    md = footer(tmp_path, t)
    two = stats_from_parquet_metadata(md, t.schema, configuration={"delta.dataSkippingNumIndexedCols": "2"})
    assert set(two["minValues"]) == {"a", "b"}
    named = stats_from_parquet_metadata(md, t.schema, configuration={"delta.dataSkippingStatsColumns": "c, a"})
    assert set(named["minValues"]) == {"a", "c"}
    none = stats_from_parquet_metadata(md, t.schema, configuration={"delta.dataSkippingNumIndexedCols": "0"})
    assert none == {"numRecords": 1}


def test_column_mapping_uses_physical_names(tmp_path) -> None:
    t = pa.table({"col-1234": [3, 1]})
    logical = pa.schema([pa.field("id", pa.int64(), metadata={"delta.columnMapping.physicalName": "col-1234"})])
    stats = stats_from_parquet_metadata(footer(tmp_path, t), logical)
    assert stats["minValues"] == {"col-1234": 1} and stats["nullCount"] == {"col-1234": 0}


def test_same_stats_as_deltalake_for_its_own_file(tmp_path) -> None:
    data = pa.table(
        {
            "id": pa.array([3, 1, None, 7], pa.int64()),
            "name": ["c", None, "a", "b"],
            "score": pa.array([0.5, 2.25, None, -1.0]),
            "day": pa.array([dt.date(2024, 3, 1), dt.date(2024, 1, 1), None, dt.date(2024, 2, 1)]),
            "at": pa.array(
                [dt.datetime(2024, 1, 1, 0, 0, 1, 500000, tzinfo=UTC), None, None, dt.datetime(2023, 1, 1, tzinfo=UTC)],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )
    path = str(tmp_path / "dl")
    deltalake.write_deltalake(path, data)
    with open(os.path.join(path, "_delta_log", f"{0:020d}.json")) as fh:
        add = next(json.loads(line)["add"] for line in fh if '"add"' in line)
    theirs = json.loads(add["stats"])
    ours = json.loads(
        stats_json(stats_from_parquet_metadata(pq.read_metadata(os.path.join(path, add["path"])), data.schema))
    )
    assert ours["numRecords"] == theirs["numRecords"]
    assert ours["nullCount"] == theirs["nullCount"]
    for key in ("minValues", "maxValues"):
        for col in ("id", "name", "score", "day"):
            assert ours[key][col] == theirs[key][col], (key, col)
        ts_ours = dt.datetime.fromisoformat(ours[key]["at"].replace("Z", "+00:00"))
        ts_theirs = dt.datetime.fromisoformat(theirs[key]["at"].replace("Z", "+00:00"))
        assert ts_ours == ts_theirs.replace(microsecond=ts_theirs.microsecond // 1000 * 1000)
