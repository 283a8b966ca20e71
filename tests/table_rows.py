"""Rows as readers return them, in one comparable form, and deltalake's read of a version in that form.

Readers return the same rows in different Arrow shapes: ``string`` or ``string_view``,
``int16`` or ``int32`` (Iceberg has no 16-bit integer), a map as key/value pairs in file order,
a variant as its two encoded binaries (deltalake) or as DuckDB's own VARIANT. :class:`Rows`
keeps what a user sees and drops only that representation:

- the column names (sorted: readers order columns alike, but nothing promises it), compared;
- each value as a plain Python value (``to_pylist``): integers of any width as ``int``, strings
  of any Arrow layout as ``str``, decimals as ``Decimal``, timestamps as aware or naive datetimes
  as the column is (a reader that drops the zone differs), structs as (name, value) pairs, lists
  as tuples, maps as their (key, value) pairs sorted (a map has no order);
- variant values decoded to the JSON-like value they hold (deltalake's binaries by the Variant
  encoding below, DuckDB's VARIANT through its JSON cast): the value is compared, not the bytes;
- the rows as a sorted multiset (readers return rows in any order; duplicates count).

Kept free of pytest (the oracle checks import it).
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

__all__ = ["Rows", "decode_variant", "deltalake_rows", "plain", "rows_of"]


@dataclass(frozen=True)
class Rows:
    """What a reader read: its column names (sorted) and its rows (sorted, each in column-name order)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def __len__(self) -> int:
        return len(self.rows)

    @classmethod
    def of(cls, columns: list[str] | tuple[str, ...], rows: Any) -> Rows:
        return cls(tuple(columns), tuple(sorted((tuple(r) for r in rows), key=repr)))

    def counts(self) -> Counter[tuple[Any, ...]]:
        return Counter(self.rows)

    def plus(self, other: Rows) -> Rows:
        """The union of two multisets of rows with the same columns."""
        assert self.columns == other.columns, (self.columns, other.columns)
        return Rows.of(self.columns, self.rows + other.rows)

    def minus(self, other: Rows) -> Rows:
        """The rows of ``self`` that ``other`` does not have (multiset difference)."""
        return Rows.of(self.columns, (self.counts() - other.counts()).elements())

    def with_nulls(self, columns: set[str]) -> Rows:
        """The same rows with ``columns`` all NULL (what a reader that loses those columns' values reads)."""
        idx = {i for i, c in enumerate(self.columns) if c in columns}
        return Rows.of(self.columns, (tuple(None if i in idx else v for i, v in enumerate(r)) for r in self.rows))

    def difference(self, other: Rows, limit: int = 2) -> str:
        """A short account of how ``self`` differs from ``other`` (empty when they are equal)."""
        if self == other:
            return ""
        if self.columns != other.columns:
            return f"columns {list(self.columns)} != {list(other.columns)}"
        mine, theirs = self.counts(), other.counts()
        only_mine = list((mine - theirs).elements())[:limit]
        only_theirs = list((theirs - mine).elements())[:limit]
        return f"{len(self)} rows != {len(other)}; only here: {only_mine}; only there: {only_theirs}"


def plain(value: Any) -> Any:
    """A value as a hashable plain Python value that two readers' representations share."""
    if isinstance(value, dict):
        return tuple(sorted((k, plain(v)) for k, v in value.items()))
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # a map's (key, value) pairs
            return ("map", tuple(sorted(((plain(k), plain(v)) for k, v in value), key=repr)))
        return tuple(plain(v) for v in value)
    return value


def rows_of(table: pa.Table, variants: dict[str, Any] | None = None) -> Rows:
    """``table`` as :class:`Rows`; ``variants`` maps each variant column to how its values are decoded."""
    names = sorted(table.column_names)
    columns = []
    for name in names:
        values = table.column(name).to_pylist()
        decode = (variants or {}).get(name)
        if decode is not None:
            values = [None if v is None else decode(v) for v in values]
        columns.append([plain(v) for v in values])
    return Rows.of(names, zip(*columns, strict=True) if columns else [])


# --- the Variant binary encoding (Parquet's VariantEncoding.md), as deltalake returns variants ----------


def _uint(data: bytes, pos: int, size: int) -> int:
    return int.from_bytes(data[pos : pos + size], "little")


def _dictionary(metadata: bytes) -> list[str]:
    header = metadata[0]
    if header & 0x0F != 1:
        raise ValueError(f"variant metadata version {header & 0x0F} (only 1 exists)")
    size = ((header >> 6) & 0x03) + 1
    n = _uint(metadata, 1, size)
    offsets = [_uint(metadata, 1 + size * (i + 1), size) for i in range(n + 1)]
    start = 1 + size * (n + 2)
    return [metadata[start + offsets[i] : start + offsets[i + 1]].decode() for i in range(n)]


#: Primitive type ids of the encoding that a JSON-like value has: (struct format, size) or a decoder.
_FIXED = {3: ("<b", 1), 4: ("<h", 2), 5: ("<i", 4), 6: ("<q", 8), 7: ("<d", 8), 14: ("<f", 4)}


def _value(value: bytes, pos: int, keys: list[str]) -> Any:
    header = value[pos]
    basic, head = header & 0x03, header >> 2
    if basic == 1:  # short string: the length is in the header
        return value[pos + 1 : pos + 1 + head].decode()
    if basic == 0:
        if head == 0:
            return None
        if head in (1, 2):
            return head == 1
        if head in _FIXED:
            fmt, size = _FIXED[head]
            return struct.unpack_from(fmt, value, pos + 1)[0]
        if head in (8, 9, 10):  # decimal4/8/16: a scale byte, then the unscaled little-endian integer
            size = {8: 4, 9: 8, 10: 16}[head]
            scale = value[pos + 1]
            unscaled = int.from_bytes(value[pos + 2 : pos + 2 + size], "little", signed=True)
            return Decimal(unscaled).scaleb(-scale)
        if head == 16:  # string: a 4-byte length, then the bytes
            length = _uint(value, pos + 1, 4)
            return value[pos + 5 : pos + 5 + length].decode()
        raise ValueError(f"variant primitive type {head} is not decoded here (not in the tests' tables)")
    offset_size = (head & 0x03) + 1
    if basic == 2:  # object
        id_size = ((head >> 2) & 0x03) + 1
        large = (head >> 4) & 0x01
    else:  # array
        id_size = 0
        large = (head >> 2) & 0x01
    count_size = 4 if large else 1
    n = _uint(value, pos + 1, count_size)
    ids_at = pos + 1 + count_size
    offsets_at = ids_at + n * id_size
    values_at = offsets_at + (n + 1) * offset_size
    offsets = [_uint(value, offsets_at + i * offset_size, offset_size) for i in range(n)]
    items = [_value(value, values_at + o, keys) for o in offsets]
    if basic == 3:
        return items
    return {keys[_uint(value, ids_at + i * id_size, id_size)]: item for i, item in enumerate(items)}


def decode_variant(encoded: dict[str, bytes]) -> Any:
    """A variant as deltalake returns it (``{"metadata": ..., "value": ...}``) as the value it holds."""
    return _value(bytes(encoded["value"]), 0, _dictionary(bytes(encoded["metadata"])))


def variant_columns(schema_json: str) -> list[str]:
    """The top-level variant columns of a Delta schema (JSON)."""
    return [f["name"] for f in json.loads(schema_json)["fields"] if f["type"] == "variant"]


def deltalake_rows(uri: str, version: int, storage_options: dict[str, str] | None = None) -> Rows:
    """What deltalake (delta-rs, through its SQL engine: column mapping and deletion vectors applied) reads at
    ``version``."""
    from deltalake import DeltaTable as RsTable
    from deltalake import QueryBuilder

    table = RsTable(uri, version=version, storage_options=storage_options)
    # Through the C stream: pa.table() of the result would first import pandas to ask whether it is a frame.
    data = pa.RecordBatchReader.from_stream(QueryBuilder().register("t", table).execute("select * from t")).read_all()
    variants = variant_columns(table.schema().to_json())
    return rows_of(data, {c: decode_variant for c in variants})
