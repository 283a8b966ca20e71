"""The other readers' machinery (tests/duckdb_readers.py, tests/table_rows.py, tests/reader_checks.py) on small
tables deltalog writes: the extensions load from their packages, a limitation is held both ways, and the checks
catch a version a reader cannot read or reads with other rows.

The checks themselves run on the corpus in tests/test_delta_spark_oracle.py (every operation, every version),
on the UniForm tables (tests/test_uniform*.py) and after our vacuum of deltalake's tables
(tests/test_vacuum_interop.py).
"""

from __future__ import annotations

import os
import shutil
from decimal import Decimal
from urllib.parse import unquote

import pytest

import reader_checks
from deltalog import DeltaTable
from duckdb_readers import connection, duckdb_delta_rows, extension_file
from helpers import append, make_table, rows
from reader_checks import (
    DUCKDB,
    NULL_PARTITIONS,
    UNREADABLE,
    Limit,
    ReaderCheck,
    TableShape,
    untouched_reads,
)
from table_rows import Rows, decode_variant, deltalake_rows
from uniform_tables import append as uniform_append
from uniform_tables import create_uniform
from uniform_tables import rows as uniform_rows


def test_the_extensions_load_from_their_packages_and_nothing_is_downloaded():
    con = connection()
    loaded = dict(con.execute("SELECT extension_name, install_path FROM duckdb_extensions() WHERE loaded").fetchall())
    for name in ("delta", "avro", "iceberg"):
        assert name in loaded, loaded
        assert os.path.exists(extension_file(name))
    settings = dict(
        con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN "
            "('autoinstall_known_extensions', 'autoload_known_extensions', 'TimeZone')"
        ).fetchall()
    )
    assert settings.pop("TimeZone") in ("UTC", "Etc/UTC")
    assert settings == {"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}


def _plain_table(path: str) -> DeltaTable:
    table = make_table(path, partition_by=["part"])
    for i, part in enumerate("aab"):
        append(table, rows(3, start=i * 3, part=part), partition={"part": part})
    return table


def _untouched(path: str) -> reader_checks.Untouched:
    counts = {v: len(deltalake_rows(path, v)) for v in range(DeltaTable(path).snapshot().version + 1)}
    return untouched_reads(os.path.basename(path), path, TableShape.of_table(path), counts)


def test_a_limitation_is_held_both_ways(tmp_path, monkeypatch):
    """DuckDB loses the partition values of column-mapped tables (duckdb/duckdb-delta#343): recorded, it is
    expected; unrecorded, the untouched table's reads say so; recorded where it does not occur, too."""
    mapped = str(tmp_path / "mapped")
    table = create_uniform(mapped)  # column mapping by name, partitioned by part
    uniform_append(table, uniform_rows(0, 4, "a"))
    plain = str(tmp_path / "plain")
    _plain_table(plain)
    assert _untouched(mapped).findings == [] and _untouched(plain).findings == []
    got = duckdb_delta_rows(mapped, 1)
    assert {r[got.columns.index("part")] for r in got.rows} == {None}  # the limitation is real

    recorded = reader_checks.LIMITS
    monkeypatch.setattr(reader_checks, "_UNTOUCHED", {})
    monkeypatch.setattr(reader_checks, "LIMITS", tuple(x for x in recorded if x.feature != "columnMapping"))
    (finding,) = _untouched(mapped).findings
    assert "read the untouched table differently" in finding and "'a'" in finding

    monkeypatch.setattr(reader_checks, "_UNTOUCHED", {})
    monkeypatch.setattr(reader_checks, "LIMITS", (Limit(DUCKDB, "appendOnly", NULL_PARTITIONS, "made up"),))
    found = _untouched(plain).findings
    assert found and all("despite its recorded limitation on appendOnly" in f for f in found)

    monkeypatch.setattr(reader_checks, "_UNTOUCHED", {})
    monkeypatch.setattr(reader_checks, "LIMITS", (Limit(DUCKDB, "appendOnly", UNREADABLE, "made up", "x"),))
    (finding,) = _untouched(plain).findings
    assert "now reads v0.. of a appendOnly table" in finding and "take the entry out of LIMITS" in finding


def test_the_checks_catch_a_lost_file_and_rows_a_commit_did_not_add(tmp_path):
    source = str(tmp_path / "source")
    _plain_table(source)
    untouched = _untouched(source)
    copy = str(tmp_path / "copy")
    shutil.copytree(source, copy)
    check = ReaderCheck(untouched)
    assert check.check(copy, [0, 1, 2, 3], "nothing") == []
    # A commit that adds copies of rows the table has: the expected rows of its version follow.
    table = DeltaTable(copy)
    append(table, rows(2, start=0, part="a"), partition={"part": "a"})
    assert check.committed(copy, 3, 4, 2, "an append of copies") == []
    assert len(check.expected[4]) == 11 and check.check(copy, [4], "an append of copies") == []
    # Rows the version before does not have are not a copy: named.
    append(table, rows(1, start=50, part="b"), partition={"part": "b"})
    (problem,) = check.committed(copy, 4, 5, 1, "an append of new rows")
    assert "v5 is not v4 plus 1 of its rows" in problem
    # A file a retained version needs, deleted: every reader fails on every version that needs it.
    first = DeltaTable(copy).snapshot(version=1).files.column("path").to_pylist()[0]
    os.remove(os.path.join(copy, unquote(first)))
    problems = ReaderCheck(untouched).check(copy, [1, 2, 3], "a bad vacuum")
    assert len(problems) == 6 and all("cannot read" in p for p in problems), problems


def test_rows_compare_values_not_their_arrow_representation():
    import pyarrow as pa

    a = pa.table({"b": pa.array(["x", "y"], pa.string_view()), "a": pa.array([1, 2], pa.int16())})
    b = pa.table({"a": pa.array([2, 1], pa.int64()), "b": pa.array(["y", "x"], pa.large_string())})
    from table_rows import rows_of

    assert rows_of(a) == rows_of(b)
    assert rows_of(a) != rows_of(b.rename_columns(["a", "c"]))  # names count
    m1 = pa.table({"m": pa.array([[("k", 1), ("j", 2)]], pa.map_(pa.string(), pa.int64()))})
    m2 = pa.table({"m": pa.array([[("j", 2), ("k", 1)]], pa.map_(pa.string(), pa.int32()))})
    assert rows_of(m1) == rows_of(m2)  # a map has no order
    assert Rows.of(["a"], [(1,), (1,)]) != Rows.of(["a"], [(1,)])  # duplicates count


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"\x0c\x05", 5),  # int8 (type id 3 << 2)
        (b"\x10\x00\x01", 256),  # int16, little-endian
        (b"\x04", True),
        (b"\x00", None),
        (b"\x20\x02\x39\x30\x00\x00", Decimal("123.45")),  # decimal4: scale 2, unscaled 12345
        (b"\x0dabc", "abc"),  # short string: its length in the header
        (b"\x40\x03\x00\x00\x00xyz", "xyz"),  # string: a 4-byte length
        (b"\x03\x02\x00\x02\x04\x0c\x01\x0c\x02", [1, 2]),  # array: 2 elements, offsets 0 2 4, two int8
    ],
)
def test_variant_values_decode_as_the_encoding_says(value, expected):
    metadata = b"\x01\x00\x00"  # version 1, an empty dictionary
    assert decode_variant({"metadata": metadata, "value": value}) == expected


def test_variant_objects_name_their_fields_from_the_dictionary():
    metadata = b"\x01\x02\x00\x01\x02ka"  # version 1, keys "k", "a"
    # An object of two fields: ids 1 ("a") and 0 ("k"), offsets 0 and 2, then int8 7 and int8 9.
    value = b"\x02\x02\x01\x00\x00\x02\x04\x0c\x07\x0c\x09"
    assert decode_variant({"metadata": metadata, "value": value}) == {"a": 7, "k": 9}
    with pytest.raises(ValueError, match="variant primitive type 20"):
        decode_variant({"metadata": metadata, "value": b"\x50"})
