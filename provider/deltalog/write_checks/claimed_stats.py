"""Checking the ``stats`` a commit request claims for a file against the file's Parquet footer.

Readers skip files by their stats: a claimed ``maxValues.id`` of 100 for a file
that holds ``id = 500`` makes ``WHERE id = 500`` miss that row, silently. So
stats handed to a commit are checked against the footer (never the data):

- ``numRecords`` must equal the footer's row count;
- a claimed ``minValues``/``maxValues`` must *cover* the footer's: the claimed
  minimum at or below the smallest value the footer records, the maximum at or
  above the largest (strings compare by code point, so a truncated prefix
  minimum and a ``…\\U0010ffff`` maximum pass; timestamps compare at the
  millisecond the protocol truncates to);
- a claimed ``nullCount`` must equal the footer's (with ``tightBounds: false``
  only its two meaningful values, 0 and ``numRecords``, are checked);
- the stats may only name columns of the table, with values of their type.

Where the footer records nothing for a column (no statistics, INT96
timestamps, booleans, binary), the claim cannot be checked and is kept as given.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog.errors import DataFileMismatchError
from deltalog.log.actions import Metadata
from deltalog.protocol.file_stats import physical_name, stats_from_parquet_metadata

__all__ = ["check_claimed_stats", "parse_stats"]

#: Footer stats for the comparison: every leaf column, strings untruncated.
_FULL_STATS = {"delta.dataSkippingNumIndexedCols": "-1", "delta.dataSkippingStringPrefixLength": str(2**31)}
_EPOCH = dt.datetime(1970, 1, 1)


def _leaf_types(schema: pa.Schema, partition_columns: list[str]) -> tuple[dict[tuple[str, ...], pa.DataType], set]:
    """(physical path of each data leaf -> type, physical paths of the structs above them)."""
    leaves: dict[tuple[str, ...], pa.DataType] = {}
    structs: set[tuple[str, ...]] = set()

    def walk(f: pa.Field, prefix: tuple[str, ...]) -> None:
        path = prefix + (physical_name(f),)
        if pa.types.is_struct(f.type):
            structs.add(path)
            for i in range(f.type.num_fields):
                walk(f.type.field(i), path)
        else:
            leaves[path] = f.type

    parts = set(partition_columns)
    for f in schema:
        if f.name not in parts:
            walk(f, ())
    return leaves, structs


def _flatten(tree: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _flatten(value, prefix + (str(key),))
        else:
            yield prefix + (str(key),), value


def _get(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def _timestamp_ms(value: Any) -> int:
    if not isinstance(value, str):
        raise ValueError(value)
    stamp = dt.datetime.fromisoformat(value.strip())
    if stamp.tzinfo is not None:
        stamp = stamp.astimezone(dt.UTC).replace(tzinfo=None)
    return (stamp - _EPOCH) // dt.timedelta(milliseconds=1)


def comparable(value: Any, dtype: pa.DataType) -> Any:
    """A stats value as a Python value that orders like the column's type (ValueError if it is not one)."""
    if isinstance(value, bool) or value is None:
        raise ValueError(value)
    if pa.types.is_integer(dtype):
        if not isinstance(value, int):
            raise ValueError(value)
        return value
    if pa.types.is_floating(dtype):
        if not isinstance(value, int | float | decimal.Decimal) or math.isnan(value):
            raise ValueError(value)
        return float(value)
    if pa.types.is_decimal(dtype):
        if not isinstance(value, int | float | str | decimal.Decimal):
            raise ValueError(value)
        number = decimal.Decimal(str(value))
        if not number.is_finite():
            raise ValueError(value)
        return number
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        if not isinstance(value, str):
            raise ValueError(value)
        return value
    if pa.types.is_date(dtype):
        if not isinstance(value, str):
            raise ValueError(value)
        return dt.date.fromisoformat(value.strip())
    if pa.types.is_timestamp(dtype):
        return _timestamp_ms(value)
    return None  # no ordering we check (boolean, binary, arrays, maps)


def check_claimed_stats(claimed: dict[str, Any], footer: pq.FileMetaData, metadata: Metadata, rel: str) -> None:
    """Refuse (DataFileMismatchError) ``claimed`` stats the footer contradicts; see the module docstring.

    Parse the stats JSON with ``parse_float=decimal.Decimal`` (:func:`parse_stats`): a
    decimal bound past float precision would otherwise be compared rounded.
    """

    def fail(message: str) -> DataFileMismatchError:
        return DataFileMismatchError(
            f"invalid commit request: data file {rel!r}: its stats do not match its Parquet footer: {message}"
        )

    rows = footer.num_rows
    if "numRecords" in claimed:
        n = claimed["numRecords"]
        if not isinstance(n, int) or isinstance(n, bool) or n != rows:
            raise fail(f"numRecords is {n!r} but the file has {rows} row(s)")
    truth = stats_from_parquet_metadata(footer, metadata.schema, metadata.partition_columns, configuration=_FULL_STATS)
    leaves, structs = _leaf_types(metadata.schema, metadata.partition_columns)
    parts = set(metadata.partition_columns)
    tight = claimed.get("tightBounds", True) is not False
    for section in ("minValues", "maxValues", "nullCount"):
        tree = claimed.get(section)
        if tree is None:
            continue
        if not isinstance(tree, dict):
            raise fail(f"{section} must be an object")
        for path, value in _flatten(tree):
            name = f"{section}.{'.'.join(path)}"
            if path[0] in parts and len(path) == 1:
                continue  # partition columns have no column stats; readers use partitionValues
            dtype = leaves.get(path)
            if dtype is None:
                if section == "nullCount" and path in structs:
                    continue
                raise fail(f"{name} names a column the table does not have")
            if value is None:
                continue
            if section == "nullCount":
                _check_null_count(fail, name, value, _get(truth.get("nullCount"), path), rows, tight)
                continue
            try:
                mine = comparable(value, dtype)
            except (ValueError, TypeError, decimal.InvalidOperation):
                raise fail(f"{name} is {value!r}, not a value of the column's type {dtype}") from None
            actual = _get(truth.get(section), path)
            if mine is None or actual is None:
                continue  # the footer records no bound for this column: nothing to check against
            footer_value = comparable(actual, dtype)
            if section == "minValues" and mine > footer_value:
                raise fail(f"{name} is {value!r} but the file holds values down to {actual!r}")
            if section == "maxValues" and mine < footer_value:
                raise fail(f"{name} is {value!r} but the file holds values up to {actual!r}")


def parse_stats(text: str) -> dict[str, Any]:
    """A ``stats`` JSON string with numbers kept exact (decimals as ``decimal.Decimal``)."""
    return json.loads(text, parse_float=decimal.Decimal)


def _check_null_count(fail: Any, name: str, value: Any, actual: Any, rows: int, tight: bool) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise fail(f"{name} is {value!r}, not a count")
    if actual is None:
        return
    if tight and value != actual:
        raise fail(f"{name} is {value} but the file holds {actual} null(s)")
    if not tight and ((value == 0 and actual != 0) or (value == rows and actual != rows)):
        raise fail(f"{name} is {value} but the file holds {actual} null(s)")
