"""Delta per-file statistics from a Parquet footer (no data is read).

Delta readers skip files using ``numRecords``, ``minValues``, ``maxValues`` and
``nullCount`` (PROTOCOL.md, Per-file Statistics). Parquet already keeps min, max
and null count per row group, so aggregating the footer gives the same answer
as scanning the file, at the cost of one small read. Where the footer cannot
give a value that is safe for skipping, the value is left out (a missing stat
only costs skipping, a wrong one loses rows):

- strings are cut to ``delta.dataSkippingStringPrefixLength`` (default 32)
  characters; a cut maximum gets U+10FFFF appended so it stays an upper bound;
- timestamps are truncated down to milliseconds (the protocol's rule) and
  written as ISO-8601 (``...Z`` for timestamp, no zone for timestamp_ntz);
- decimals keep their exact digits (serialise with :func:`stats_json`);
- booleans, binary, INT96 timestamps, NaN/infinite floats, lists and maps get
  no min/max; struct fields are handled recursively;
- a variant column gets only its own ``nullCount``, a number (PROTOCOL.md "Statistics for
  Variant Columns"): the null count of its ``metadata`` leaf, which is required inside
  the optional variant group, so it counts exactly the null variants;
- only the first ``delta.dataSkippingNumIndexedCols`` (default 32) leaf columns,
  or those named in ``delta.dataSkippingStatsColumns``, get column stats.

With column mapping the Parquet columns and the stats keys are physical names.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["physical_name", "stats_from_parquet_metadata", "stats_json"]

PHYSICAL_NAME_KEY = b"delta.columnMapping.physicalName"
DEFAULT_NUM_INDEXED_COLS = 32
DEFAULT_STRING_PREFIX = 32
_MAX_CHAR = "\U0010ffff"
_EPOCH = dt.datetime(1970, 1, 1)
_UNIT_PER_MS = {"MILLIS": 1, "MICROS": 1000, "NANOS": 1_000_000}


def physical_name(f: pa.Field) -> str:
    """The column's name in data files and stats: its physical name under column mapping."""
    if f.metadata and PHYSICAL_NAME_KEY in f.metadata:
        return f.metadata[PHYSICAL_NAME_KEY].decode()
    return f.name


@dataclass
class _Acc:
    """Running min/max/null count of one leaf column across row groups."""

    min: Any = None
    max: Any = None
    nulls: int = 0
    min_max_ok: bool = True
    nulls_ok: bool = True
    kind: str = ""
    seen: bool = False


def _kind(t: pa.DataType) -> str:
    """How min/max of a table column type is collected ('' = not at all)."""
    if pa.types.is_boolean(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return ""
    if pa.types.is_fixed_size_binary(t):
        return ""
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    return ""


def _timestamp_unit(column: pq.ColumnChunkMetaData) -> str | None:
    """MILLIS/MICROS/NANOS of an INT64 timestamp column (None when it is not one)."""
    if column.physical_type != "INT64":
        return None
    try:
        info = json.loads(column.statistics.logical_type.to_json())
    except (AttributeError, ValueError, TypeError):
        info = {}
    if info.get("Type") == "Timestamp":
        return {"milliseconds": "MILLIS", "microseconds": "MICROS", "nanoseconds": "NANOS"}.get(info.get("timeUnit"))
    return None


def _integer_decimal_scale(column: pq.ColumnChunkMetaData) -> int | None:
    """The scale of a decimal stored as INT32/INT64 (None for any other column).

    pyarrow before 23 cannot turn such statistics into Decimals (``Statistics.min`` raises
    ArrowNotImplementedError), so they are read raw and scaled here.
    """
    if column.physical_type not in ("INT32", "INT64"):
        return None
    try:
        info = json.loads(column.statistics.logical_type.to_json())
    except (AttributeError, ValueError, TypeError):
        return None
    return int(info["scale"]) if info.get("Type") == "Decimal" and "scale" in info else None


def _fold(acc: _Acc, column: pq.ColumnChunkMetaData, num_rows: int) -> None:
    s = column.statistics
    acc.seen = True
    if s is None or not s.has_null_count:
        acc.nulls_ok = False
    else:
        acc.nulls += s.null_count
    if not acc.kind or not acc.min_max_ok:
        return
    if s is None:
        acc.min_max_ok = False
        return
    if not s.has_min_max:
        # A row group with only nulls legitimately has no min/max.
        if not (s.has_null_count and s.null_count == num_rows):
            acc.min_max_ok = False
        return
    if acc.kind in ("timestamp", "timestamp_ntz"):
        unit = _timestamp_unit(column)
        if unit is None:  # INT96 or an unexpected encoding: no trustworthy bound
            acc.min_max_ok = False
            return
        lo, hi = s.min_raw // _UNIT_PER_MS[unit], s.max_raw // _UNIT_PER_MS[unit]
    elif acc.kind == "decimal" and (scale := _integer_decimal_scale(column)) is not None:
        lo, hi = decimal.Decimal(s.min_raw).scaleb(-scale), decimal.Decimal(s.max_raw).scaleb(-scale)
    else:
        lo, hi = s.min, s.max
        if acc.kind == "string" and (not isinstance(lo, str) or not isinstance(hi, str)):
            acc.min_max_ok = False  # not valid UTF-8
            return
        if acc.kind == "float" and not (math.isfinite(lo) and math.isfinite(hi)):
            acc.min_max_ok = False
            return
    acc.min = lo if acc.min is None or lo < acc.min else acc.min
    acc.max = hi if acc.max is None or hi > acc.max else acc.max


def _format(acc: _Acc, value: Any, is_max: bool, prefix: int) -> Any:
    if acc.kind == "string":
        if len(value) <= prefix:
            return value
        return value[:prefix] + _MAX_CHAR if is_max else value[:prefix]
    if acc.kind == "date":
        return value.isoformat()
    if acc.kind == "timestamp":
        return (_EPOCH + dt.timedelta(milliseconds=value)).isoformat(timespec="milliseconds") + "Z"
    if acc.kind == "timestamp_ntz":
        return (_EPOCH + dt.timedelta(milliseconds=value)).isoformat(timespec="milliseconds")
    if acc.kind == "float":
        return float(value)
    return value


def is_variant(t: pa.DataType) -> bool:
    """A variant column as :func:`deltalog.protocol.schema.delta_type_to_arrow` types it: struct<value, metadata> binaries."""
    return (
        pa.types.is_struct(t)
        and t.num_fields == 2
        and sorted(t.field(i).name for i in range(2)) == ["metadata", "value"]
        and all(pa.types.is_binary(t.field(i).type) and not t.field(i).nullable for i in range(2))
    )


def _selected_leaves(
    schema: pa.Schema, partition_columns: list[str], configuration: dict[str, str]
) -> list[tuple[tuple[str, ...], tuple[str, ...], pa.DataType]]:
    """(logical path, physical path, type) of the leaf columns that get stats, in schema order."""
    leaves: list[tuple[tuple[str, ...], tuple[str, ...], pa.DataType]] = []

    def walk(f: pa.Field, logical: tuple[str, ...], physical: tuple[str, ...]) -> None:
        logical, physical = logical + (f.name,), physical + (physical_name(f),)
        if pa.types.is_struct(f.type) and not is_variant(f.type):
            for i in range(f.type.num_fields):
                walk(f.type.field(i), logical, physical)
        else:
            leaves.append((logical, physical, f.type))

    parts = set(partition_columns)
    for f in schema:
        if f.name not in parts:
            walk(f, (), ())
    named = configuration.get("delta.dataSkippingStatsColumns")
    if named:
        wanted = {c.strip().strip("`") for c in named.split(",") if c.strip()}
        return [leaf for leaf in leaves if any(".".join(leaf[0][:i]) in wanted for i in range(1, len(leaf[0]) + 1))]
    try:
        limit = int(configuration.get("delta.dataSkippingNumIndexedCols", DEFAULT_NUM_INDEXED_COLS))
    except ValueError:
        limit = DEFAULT_NUM_INDEXED_COLS
    return leaves if limit < 0 else leaves[:limit]


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def stats_from_parquet_metadata(
    metadata: pq.FileMetaData,
    schema: pa.Schema,
    partition_columns: list[str] | None = None,
    *,
    configuration: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Delta stats (numRecords, minValues, maxValues, nullCount) of one data file.

    ``schema`` is the table's logical schema (field metadata carries physical names
    under column mapping); partition columns get no column stats. Serialise the
    result with :func:`stats_json` (decimals are ``decimal.Decimal``).
    """
    config = configuration or {}
    try:
        prefix = int(config.get("delta.dataSkippingStringPrefixLength", DEFAULT_STRING_PREFIX))
    except ValueError:
        prefix = DEFAULT_STRING_PREFIX
    num_rows = metadata.num_rows
    stats: dict[str, Any] = {"numRecords": num_rows}
    leaves = _selected_leaves(schema, list(partition_columns or []), config)
    if not leaves:
        return stats
    accs = {physical: _Acc(kind=_kind(t)) for _, physical, t in leaves}
    for _, physical, t in leaves:
        if is_variant(t):  # its null count is its required metadata leaf's
            accs[physical + ("metadata",)] = accs.pop(physical)
    for rg in range(metadata.num_row_groups):
        group = metadata.row_group(rg)
        if group.num_rows == 0:
            continue
        for c in range(group.num_columns):
            column = group.column(c)
            acc = accs.get(tuple(column.path_in_schema.split(".")))
            if acc is not None:
                _fold(acc, column, group.num_rows)
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    for _, physical, t in leaves:
        acc = accs[physical + ("metadata",)] if is_variant(t) else accs[physical]
        if not acc.seen:
            if _file_has_column(metadata, physical):
                continue  # e.g. a list/map leaf: stats live below it
            _put(nulls, physical, num_rows)  # missing from the file: every value is null
            continue
        if acc.nulls_ok:
            _put(nulls, physical, acc.nulls)
        if acc.kind and acc.min_max_ok and acc.min is not None:
            _put(mins, physical, _format(acc, acc.min, False, prefix))
            _put(maxs, physical, _format(acc, acc.max, True, prefix))
    if mins:
        stats["minValues"] = mins
    if maxs:
        stats["maxValues"] = maxs
    if nulls:
        stats["nullCount"] = nulls
    return stats


def _file_has_column(metadata: pq.FileMetaData, physical: tuple[str, ...]) -> bool:
    dotted = ".".join(physical)
    paths = (metadata.schema.column(i).path for i in range(metadata.num_columns))
    return any(p == dotted or p.startswith(dotted + ".") for p in paths)


def _dumps(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return json.dumps(value, ensure_ascii=False)


def stats_json(stats: dict[str, Any]) -> str:
    """The ``stats`` string of an add action (compact; decimals keep their exact digits)."""
    return _dumps(stats)


def stats_from_parquet_file(
    source: Any, schema: pa.Schema, partition_columns: list[str] | None = None, **kw: Any
) -> dict[str, Any]:
    """Convenience: read the footer of ``source`` (path or file object) and compute its stats."""
    return stats_from_parquet_metadata(pq.read_metadata(source), schema, partition_columns, **kw)
