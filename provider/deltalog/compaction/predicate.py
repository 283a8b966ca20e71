"""Partition filters for compaction: ``col = 'v'``, ``col IN ('a', 'b')``, ``col IS NULL``, joined by AND.

Compaction only ever selects whole partitions (like Delta's ``OPTIMIZE ...
WHERE``), so the grammar is deliberately small and every column must be a
partition column; anything else is refused with an error that says what is
accepted. Values are compared by the column's type (``year = 2024`` matches
the partition value ``"2024"``; ``d = '2024-01-05'`` matches a date), and the
filter runs vectorised over the snapshot's ``partitionValues`` column: each
distinct value is judged once, then ``is_in`` builds the mask.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.errors import InvalidArgumentError
from deltalog.protocol.parquet_layout import PHYSICAL_NAME

__all__ = ["PartitionFilter", "parse_where"]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>'(?:[^']|'')*')
      | (?P<dstr>"(?:[^"]|"")*")
      | (?P<num>[-+]?\d+(?:\.\d+)?)
      | (?P<qid>`(?:[^`]|``)+`)
      | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
      | (?P<op>==|=|<>|!=|>=|<=|<|>|\(|\)|,)
    )""",
    re.VERBOSE,
)
_ACCEPTED = "accepted: col = 'value', col IN ('a', 'b'), col IS NULL, joined by AND, on partition columns only"


@dataclass
class Clause:
    """One condition: the partition value of ``column`` is one of ``values`` (None = null)."""

    column: str  # logical name, as the user wrote it
    key: str  # key in partitionValues (the physical name under column mapping)
    values: list[Any]  # typed literals; None stands for null

    def describe(self) -> str:
        def lit(v: Any) -> str:
            return "NULL" if v is None else repr(str(v))

        if self.values == [None]:
            return f"{self.column} IS NULL"
        if len(self.values) == 1:
            return f"{self.column} = {lit(self.values[0])}"
        return f"{self.column} IN ({', '.join(lit(v) for v in self.values)})"


@dataclass
class PartitionFilter:
    """A conjunction of clauses over partition columns."""

    expression: str
    clauses: list[Clause] = field(default_factory=list)
    types: dict[str, pa.DataType] = field(default_factory=dict)

    def describe(self) -> list[str]:
        """Delta-style ``predicate`` strings for commitInfo.operationParameters."""
        return [c.describe() for c in self.clauses]

    def matches(self, partition_values: dict[str, str | None]) -> bool:
        return all(_value_in(partition_values.get(c.key), c, self.types[c.key]) for c in self.clauses)

    def mask(self, partition_values: pa.ChunkedArray | pa.Array) -> pa.Array:
        """Boolean mask over a ``partitionValues`` (map<string,string>) column."""
        result = None
        for c in self.clauses:
            values = pc.map_lookup(partition_values, pa.scalar(c.key), "first")
            distinct = pc.unique(values).to_pylist()
            keep = [v for v in distinct if _value_in(v, c, self.types[c.key])]
            m = pc.is_in(values, value_set=pa.array([v for v in keep if v is not None], pa.string()))
            if None in keep:
                m = pc.or_(m, pc.is_null(values))
            m = pc.fill_null(m, False)
            result = m if result is None else pc.and_(result, m)
        if result is None:
            return pa.array([True] * len(partition_values))
        return result.combine_chunks() if isinstance(result, pa.ChunkedArray) else result


def _typed(raw: str, t: pa.DataType) -> Any:
    """A partition value (or literal text) as a comparable Python value of the column type."""
    if pa.types.is_integer(t):
        return int(raw)
    if pa.types.is_floating(t):
        return float(raw)
    if pa.types.is_decimal(t):
        return decimal.Decimal(raw)
    if pa.types.is_boolean(t):
        low = raw.lower()
        if low not in ("true", "false"):
            raise ValueError(raw)
        return low == "true"
    if pa.types.is_date(t):
        return dt.date.fromisoformat(raw)
    if pa.types.is_timestamp(t):
        value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00").replace("T", " "))
        if t.tz is not None and value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value
    return raw


def _value_in(raw: str | None, clause: Clause, t: pa.DataType) -> bool:
    if raw is None or raw == "":  # an empty partition value is null (PROTOCOL.md)
        return None in clause.values
    try:
        value = _typed(raw, t)
    except (ValueError, decimal.InvalidOperation):
        return any(v is not None and str(v) == raw for v in clause.values)
    return value in clause.values


def _tokens(expr: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    expr = expr.rstrip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            raise InvalidArgumentError(f"cannot parse --where near {expr[pos : pos + 20]!r} ({_ACCEPTED})")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def parse_where(
    expression: str | None, partition_columns: list[str], schema: pa.Schema, column_mapping: bool = False
) -> PartitionFilter | None:
    """Parse ``expression``; None when it is empty. Raises InvalidArgumentError on anything unsupported."""
    if expression is None or not expression.strip():
        return None
    if not partition_columns:
        raise InvalidArgumentError("--where needs a partitioned table: this table has no partition columns")
    fields = {f.name.lower(): f for f in schema}
    parts = {c.lower(): c for c in partition_columns}
    toks = _tokens(expression)
    pf = PartitionFilter(expression=expression.strip())
    i = 0

    def take() -> tuple[str, str]:
        nonlocal i
        if i >= len(toks):
            raise InvalidArgumentError(f"--where {expression!r} ends too early ({_ACCEPTED})")
        i += 1
        return toks[i - 1]

    def literal(t: pa.DataType, column: str) -> Any:
        kind, text = take()
        if kind == "word" and text.upper() == "NULL":
            return None
        if kind == "str":
            raw = text[1:-1].replace("''", "'")
        elif kind == "dstr":
            raw = text[1:-1].replace('""', '"')
        elif kind == "num" or (kind == "word" and text.lower() in ("true", "false")):
            raw = text
        else:
            raise InvalidArgumentError(f"--where: expected a value after {column!r}, got {text!r} ({_ACCEPTED})")
        try:
            return _typed(raw, t)
        except (ValueError, decimal.InvalidOperation):
            raise InvalidArgumentError(f"--where: {raw!r} is not a valid {t} value for column {column!r}") from None

    while True:
        kind, text = take()
        if kind == "qid":
            name = text[1:-1].replace("``", "`")
        elif kind == "word" and text.upper() not in ("AND", "OR", "NOT", "IN", "IS", "NULL"):
            name = text
        else:
            raise InvalidArgumentError(f"--where: expected a partition column name, got {text!r} ({_ACCEPTED})")
        column = parts.get(name.lower())
        if column is None:
            what = "a data column" if name.lower() in fields else "not a column of the table"
            raise InvalidArgumentError(
                f"--where can only filter on partition columns ({', '.join(partition_columns)}); {name!r} is {what}"
            )
        f = fields[column.lower()]
        key = (f.metadata or {}).get(PHYSICAL_NAME.encode(), b"").decode() if column_mapping else ""
        key = key or column
        pf.types[key] = f.type
        kind, text = take()
        upper = text.upper() if kind == "word" else text
        if upper in ("=", "=="):
            values = [literal(f.type, column)]
        elif upper == "IN":
            if take()[1] != "(":
                raise InvalidArgumentError(f"--where: IN needs a parenthesised list ({_ACCEPTED})")
            values = [literal(f.type, column)]
            while True:
                kind, text = take()
                if text == ")":
                    break
                if text != ",":
                    raise InvalidArgumentError(f"--where: expected ',' or ')' in the IN list, got {text!r}")
                values.append(literal(f.type, column))
        elif upper == "IS":
            kind, text = take()
            if text.upper() != "NULL":
                raise InvalidArgumentError(f"--where: only 'IS NULL' is supported, got 'IS {text}' ({_ACCEPTED})")
            values = [None]
        else:
            raise InvalidArgumentError(f"--where: operator {text!r} is not supported ({_ACCEPTED})")
        pf.clauses.append(Clause(column=column, key=key, values=values))
        if i == len(toks):
            return pf
        kind, text = take()
        if kind != "word" or text.upper() != "AND":
            raise InvalidArgumentError(f"--where: expected AND, got {text!r} ({_ACCEPTED})")
