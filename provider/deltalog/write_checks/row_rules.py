"""What a table promises about every row, enforced on a commit request's new files with DuckDB.

A commit request adds rows, so it must hold them to the rules Delta Spark's writer
enforces (PROTOCOL.md "Column Invariants", "CHECK Constraints", "Generated Columns",
"Default Columns"):

- every CHECK constraint (``delta.constraints.<name>``) and column invariant
  (``delta.invariants``) is TRUE for every row; NULL counts as a violation, as in Delta
  Spark's ``CheckDeltaInvariant``;
- every generated column equals its ``delta.generationExpression`` (null-safe, Delta
  Spark's ``<=>``);
- a column with a ``CURRENT_DEFAULT`` that a file does not carry would read as NULL
  instead of its default: refused unless the default is NULL.

The expressions are Spark SQL. They are evaluated by DuckDB, a real SQL engine, over each
file's rows (streamed in record batches, renamed to logical column names, with the
file's partition values as columns), not by a home-made evaluator. Spark's backtick
identifiers become DuckDB's double quotes; anything else DuckDB cannot parse, bind or
evaluate is a refusal naming the rule, never a silent pass. DuckDB was chosen over
DataFusion because its function library covers more of the Spark SQL built-ins such
expressions use (``year``, ``date_trunc``, ``regexp_matches``, ``length``...), it queries
Arrow record batch readers directly (bounded memory, no copy) and it is one
dependency-free wheel.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog.errors import OperationRefusedError
from deltalog.log.actions import Metadata
from deltalog.protocol.schema import delta_type_to_arrow

__all__ = ["RowRuleChecker"]

log = logging.getLogger(__name__)

PHYSICAL_NAME = "delta.columnMapping.physicalName"
CURRENT_DEFAULT = "CURRENT_DEFAULT"


@dataclass(frozen=True)
class RowRule:
    """One rule every new row must satisfy; ``violation`` is a DuckDB predicate true for a breaking row."""

    kind: str  # "CHECK constraint" | "invariant" | "generated column"
    name: str
    expression: str
    violation: str

    def describe(self) -> str:
        return f"{self.kind} {self.name} ({self.expression})"


def spark_to_duckdb(expression: str) -> str:
    """Spark SQL identifiers quoted with backticks -> DuckDB's double quotes (string literals untouched)."""
    out = []
    quote: str | None = None
    i = 0
    while i < len(expression):
        c = expression[i]
        if quote is None:
            if c in "'\"":
                quote = c
                out.append(c)
            elif c == "`":
                end = expression.find("`", i + 1)
                if end < 0:
                    out.append(c)
                else:
                    out.append('"' + expression[i + 1 : end].replace('"', '""') + '"')
                    i = end
            else:
                out.append(c)
        else:
            out.append(c)
            if c == "\\" and i + 1 < len(expression):
                out.append(expression[i + 1])
                i += 1
            elif c == quote:
                quote = None
        i += 1
    return "".join(out)


def _invariant_expression(raw: Any) -> str:
    doc = json.loads(raw) if isinstance(raw, str) else raw
    return str(doc["expression"]["expression"])


def row_rules(metadata: Metadata) -> list[RowRule]:
    """The table's CHECK constraints, invariants and generated columns."""
    rules: list[RowRule] = []
    for key, expression in sorted(metadata.configuration.items()):
        if key.lower().startswith("delta.constraints."):
            name = key[len("delta.constraints.") :]
            rules.append(RowRule("CHECK constraint", name, expression, f"({spark_to_duckdb(expression)}) IS NOT TRUE"))
    try:
        fields = json.loads(metadata.schema_string).get("fields", [])
    except (ValueError, AttributeError):
        fields = []

    def walk(fs: list[dict[str, Any]], prefix: str) -> None:
        for f in fs:
            name = prefix + str(f.get("name"))
            meta = f.get("metadata") or {}
            if "delta.invariants" in meta:
                try:
                    expr = _invariant_expression(meta["delta.invariants"])
                except (ValueError, KeyError, TypeError):
                    raise OperationRefusedError(
                        f"the invariant on column {name} is unreadable ({meta['delta.invariants']!r}); nothing committed"
                    ) from None
                rules.append(RowRule("invariant on column", name, expr, f"({spark_to_duckdb(expr)}) IS NOT TRUE"))
            if "delta.generationExpression" in meta:
                expr = str(meta["delta.generationExpression"])
                column = ".".join(f'"{p}"' for p in name.split("."))
                rules.append(
                    RowRule(
                        "generated column",
                        name,
                        expr,
                        f"{column} IS DISTINCT FROM ({spark_to_duckdb(expr)})",
                    )
                )
            t = f.get("type")
            if isinstance(t, dict) and t.get("type") == "struct":
                walk(t.get("fields", []), name + ".")

    walk(fields, "")
    return rules


def _defaults(metadata: Metadata) -> dict[str, tuple[str, str]]:
    """Top-level columns with a ``CURRENT_DEFAULT``: logical name -> (physical name, expression)."""
    try:
        fields = json.loads(metadata.schema_string).get("fields", [])
    except (ValueError, AttributeError):
        return {}
    out = {}
    for f in fields:
        meta = f.get("metadata") or {}
        if CURRENT_DEFAULT in meta:
            out[str(f["name"])] = (str(meta.get(PHYSICAL_NAME) or f["name"]), str(meta[CURRENT_DEFAULT]))
    return out


def _refuse(rule: RowRule, why: str) -> OperationRefusedError:
    return OperationRefusedError(f"{rule.describe()}: {why}; nothing committed")


class RowRuleChecker:
    """Checks the new files of one commit request against the table's row rules."""

    def __init__(self, metadata: Metadata, defaults: bool = True) -> None:
        """``defaults``: the table supports ``allowColumnDefaults`` (else CURRENT_DEFAULT means nothing)."""
        self.metadata = metadata
        self.rules = row_rules(metadata)
        self.defaults = _defaults(metadata) if defaults else {}
        schema = json.loads(metadata.schema_string).get("fields", []) if metadata.schema_string else []
        #: Top-level logical name -> (physical name, Delta type).
        self.columns = {
            str(f["name"]): (str((f.get("metadata") or {}).get(PHYSICAL_NAME) or f["name"]), f["type"]) for f in schema
        }

    @property
    def active(self) -> bool:
        return bool(self.rules or self.defaults)

    def _batches(
        self, pf: pq.ParquetFile, partition_values: dict[str, str | None]
    ) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """The file's rows under logical names, partition values as columns."""
        file_names = set(pf.schema_arrow.names)
        picks: list[tuple[str, str]] = []  # (physical in file, logical)
        consts: list[tuple[str, pa.DataType, str | None]] = []
        for logical, (physical, dtype) in self.columns.items():
            if logical in partition_values:
                consts.append((logical, delta_type_to_arrow(dtype), partition_values[logical]))
            elif physical in file_names:
                picks.append((physical, logical))
        file_schema = pf.schema_arrow
        fields = [file_schema.field(p).with_name(lg) for p, lg in picks]
        fields += [pa.field(n, t) for n, t, _ in consts]
        schema = pa.schema(fields)

        def gen() -> Iterator[pa.RecordBatch]:
            for batch in pf.iter_batches(columns=[p for p, _ in picks], use_threads=False):
                n = batch.num_rows
                arrays = [batch.column(i) for i in range(len(picks))]
                for _, t, v in consts:
                    arrays.append(pa.array([v] * n, pa.string()).cast(t) if v is not None else pa.nulls(n, t))
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)

        return schema, gen()

    def check_file(self, path: str, partition_values: dict[str, str | None], open_file: Callable[[str], Any]) -> None:
        """Refuse (naming the rule) unless every row of the file keeps every rule."""
        import duckdb  # imported here: only tables with row rules need it

        with open_file(path) as fh:
            pf = pq.ParquetFile(fh)
            present = set(pf.schema_arrow.names) | set(partition_values)
            for logical, (physical, default) in self.defaults.items():
                if physical not in present and logical not in present:
                    if not self._default_is_null(default):
                        raise OperationRefusedError(
                            f"{path}: column {logical!r} has the default {default} but the file does not carry it, "
                            "so its rows would read NULL instead; write the default into the file; nothing committed"
                        )
            if not self.rules:
                return
            schema, batches = self._batches(pf, partition_values)
            con = duckdb.connect()
            try:
                empty = pa.Table.from_batches([], schema=schema)
                con.register("new_rows", empty)
                for rule in self.rules:  # binding errors name the rule before any row is read
                    try:
                        con.execute(f"SELECT count(*) FROM new_rows WHERE {rule.violation}").fetchall()
                    except duckdb.Error as exc:
                        raise _refuse(rule, f"DuckDB cannot evaluate the expression ({_first_line(exc)})") from None
                con.unregister("new_rows")
                reader = pa.RecordBatchReader.from_batches(schema, batches)
                con.register("new_rows", reader)
                counts = ", ".join(f"count(*) FILTER (WHERE {r.violation})" for r in self.rules)
                try:
                    row = con.execute(f"SELECT {counts} FROM new_rows").fetchone()
                except duckdb.Error as exc:
                    names = "; ".join(r.describe() for r in self.rules)
                    raise OperationRefusedError(
                        f"{path}: evaluating the table's rules failed ({_first_line(exc)}) for one of: {names}; "
                        "nothing committed"
                    ) from None
            finally:
                con.close()
        assert row is not None
        for rule, bad in zip(self.rules, row):
            if bad:
                raise _refuse(rule, f"{bad} row(s) of {path} violate it")
        log.info("%s: %d row rule(s) hold", path, len(self.rules))

    def _default_is_null(self, expression: str) -> bool:
        import duckdb

        try:
            (value,) = duckdb.execute(f"SELECT ({spark_to_duckdb(expression)}) IS NULL").fetchone() or (False,)
            return bool(value)
        except duckdb.Error:
            return False


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
