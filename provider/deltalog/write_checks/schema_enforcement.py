"""Delta schema enforcement on write: a data file's Parquet footer against the table schema.

A commit makes a data file part of the table, so every reader will read it with
the table's schema. PROTOCOL.md ("Consistency Between Table Metadata and Data
Files", "Delta Data Type to Parquet Type Mappings") says what that requires;
a file that breaks it makes the table unreadable (a string where the table
says long) or silently wrong (nulls in a non-nullable column). Only the footer
is read (plus, rarely, the one column whose nulls the footer cannot decide):

- every column of the file is a column of the table (by physical name under
  column mapping, and by field id in ``id`` mode); a partition column in the
  file is refused unless the footer proves it holds exactly the partition value;
- each column's Parquet type is the one the Delta type maps to: the same
  integer width, float vs double, decimal precision *and* scale, string vs
  binary (unsigned 8/16/32-bit integers as short/integer/long, as Spark
  reads them), date, timestamp (``isAdjustedToUTC=true``) vs timestamp_ntz
  (``false``), micro- or millisecond units or INT96 (nanoseconds are refused:
  Delta Spark cannot read them), structs, arrays and maps recursively;
- a narrower file type is accepted only where the table supports the
  ``typeWidening`` feature and the change is one of its widenings;
- a ``void`` column (Spark's NullType) is absent: writers omit it from data files
  and readers read it as null;
- a geometry/geography column is WKB annotated with the Parquet GEOMETRY/GEOGRAPHY
  logical type of the column's kind, CRS and edges (Delta Spark needs it to read it);
- a non-nullable column is present and holds no null: the footer proves it
  (Parquet ``REQUIRED``, or null counts: 0 passes, more is refused with the
  count). Where the footer cannot decide (a non-nullable field nested under a
  nullable parent, whose null count includes the parent's nulls and empty
  lists; or no null counts at all), only the values of that one top-level
  column are read and checked exactly.

Violations raise :class:`~deltalog.errors.DataFileMismatchError` naming the file,
the column and both types. What a table promises about the rows themselves (CHECK
constraints, invariants, generated columns, defaults) is checked on the data by
:mod:`deltalog.write_checks.row_rules`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog.errors import DataFileMismatchError
from deltalog.log.actions import Metadata
from deltalog.protocol.geoarrow import geospatial_parts, parquet_geospatial_parts
from deltalog.protocol.parquet_layout import MATERIALIZE_PARTITION_COLUMNS
from deltalog.protocol.partition_values import PartitionValueError, canonical_partition_value
from deltalog.protocol.schema import VOID, delta_type_to_arrow, is_geospatial_type
from deltalog.protocol.table_protocol import Protocol

__all__ = ["check_file_schema"]

PHYSICAL_NAME = "delta.columnMapping.physicalName"
COLUMN_ID = "delta.columnMapping.id"
_FIELD_ID = b"PARQUET:field_id"
_INTEGERS = {8: "byte", 16: "short", 32: "integer", 64: "long"}
_INT_RANK = {"byte": 0, "short": 1, "integer": 2, "long": 3}
_TIME_UNITS = {"milliseconds": "MILLIS", "microseconds": "MICROS", "nanoseconds": "NANOS"}
#: What a file type named here may widen to under ``typeWidening`` (PROTOCOL.md "Type Widening").
_WIDENS_TO = {
    "byte": {"short", "integer", "long", "double"},
    "short": {"integer", "long", "double"},
    "integer": {"long", "double"},
    "float": {"double"},
    "date": {"timestamp_ntz"},
}


# --- the file side: the footer's schema as a tree -------------------------------------


@dataclass
class FileNode:
    """One field of the data file: a leaf (a Parquet column) or a struct/array/map of nodes."""

    name: str
    kind: str  # "leaf" | "struct" | "array" | "map"
    nullable: bool
    field_id: int | None = None
    children: list[FileNode] = field(default_factory=list)
    column: pq.ColumnSchema | None = None
    nulls: int | None = None  # leaves: nulls counted by the footer over all row groups (None: unknown)

    def leaves(self) -> Iterator[FileNode]:
        if self.kind == "leaf":
            yield self
        for child in self.children:
            yield from child.leaves()

    def type_name(self) -> str:
        """The Delta spelling of this node's type (or a description of a type Delta has not got)."""
        if self.kind == "struct":
            return "struct<" + ", ".join(f"{c.name}: {c.type_name()}" for c in self.children) + ">"
        if self.kind == "array":
            return f"array<{self.children[0].type_name()}>"
        if self.kind == "map":
            return f"map<{self.children[0].type_name()}, {self.children[1].type_name()}>"
        assert self.column is not None
        return leaf_type(self.column)


def leaf_type(column: pq.ColumnSchema) -> str:
    """The Delta type a Parquet column holds (``long``, ``decimal(5,2)``, ``int96 timestamp`` ...)."""
    physical = column.physical_type
    try:
        logical = json.loads(column.logical_type.to_json())
    except (AttributeError, ValueError):
        logical = {"Type": "None"}
    kind = logical.get("Type", "None")
    if kind == "Decimal":
        return f"decimal({logical.get('precision', column.precision)},{logical.get('scale', column.scale)})"
    if kind == "Int":
        width, signed = logical.get("bitWidth"), logical.get("isSigned", True)
        return _INTEGERS.get(width, f"int{width}") if signed else f"uint{width}"
    if kind == "Timestamp":
        base = "timestamp" if logical.get("isAdjustedToUTC") else "timestamp_ntz"
        unit = _TIME_UNITS.get(logical.get("timeUnit", ""), "?")
        return base if unit in ("MICROS", "MILLIS") else f"{base}({unit})"
    if kind == "Date":
        return "date"
    if kind in ("String", "Enum", "Json"):
        return "string" if kind == "String" else f"string ({kind.lower()})"
    if kind != "None":
        return f"{physical.lower()} ({kind.lower()})"
    return {
        "BOOLEAN": "boolean",
        "INT32": "integer",
        "INT64": "long",
        "INT96": "int96 timestamp",
        "FLOAT": "float",
        "DOUBLE": "double",
        "BYTE_ARRAY": "binary",
        "FIXED_LEN_BYTE_ARRAY": "binary",
    }.get(physical, physical.lower())


def _null_counts(footer: pq.FileMetaData) -> list[int | None]:
    counts: list[int | None] = [0] * footer.num_columns
    for rg in range(footer.num_row_groups):
        group = footer.row_group(rg)
        if group.num_rows == 0:
            continue
        for c in range(group.num_columns):
            if counts[c] is None:
                continue
            s = group.column(c).statistics
            counts[c] = counts[c] + s.null_count if s is not None and s.has_null_count else None  # type: ignore[operator]
    return counts


def file_tree(footer: pq.FileMetaData) -> list[FileNode]:
    """The footer's top-level fields as nodes (Arrow gives the nesting; Parquet columns the leaf types)."""
    arrow = footer.schema.to_arrow_schema()
    columns = iter(range(footer.num_columns))
    nulls = _null_counts(footer)

    def node(f: pa.Field) -> FileNode:
        fid = f.metadata.get(_FIELD_ID) if f.metadata else None
        out = FileNode(f.name, "leaf", f.nullable, int(fid) if fid is not None else None)
        t = f.type
        if pa.types.is_struct(t):
            out.kind, out.children = "struct", [node(t.field(i)) for i in range(t.num_fields)]
        elif pa.types.is_map(t):
            out.kind, out.children = "map", [node(t.key_field), node(t.item_field)]
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            out.kind, out.children = "array", [node(t.value_field)]
        else:
            i = next(columns)
            out.column, out.nulls = footer.schema.column(i), nulls[i]
        return out

    return [node(f) for f in arrow]


# --- the table side -----------------------------------------------------------------------


def _delta_type_name(dtype: Any) -> str:
    if isinstance(dtype, str):
        return dtype.replace(" ", "")
    kind = dtype.get("type")
    if kind == "struct":
        return "struct<" + ", ".join(f"{f['name']}: {_delta_type_name(f['type'])}" for f in dtype["fields"]) + ">"
    if kind == "array":
        return f"array<{_delta_type_name(dtype['elementType'])}>"
    if kind == "map":
        return f"map<{_delta_type_name(dtype['keyType'])}, {_delta_type_name(dtype['valueType'])}>"
    return json.dumps(dtype)


def _decimal(name: str) -> tuple[int, int] | None:
    if not name.startswith("decimal("):
        return None
    p, s = name[len("decimal(") : -1].split(",")
    return int(p), int(s)


def widening_allowed(file_type: str, table_type: str) -> bool:
    """Whether ``typeWidening`` lets a file of ``file_type`` stand in a column of ``table_type``."""
    if table_type in _WIDENS_TO.get(file_type, set()):
        return True
    to_dec = _decimal(table_type)
    if to_dec is None:
        return False
    from_dec = _decimal(file_type)
    if from_dec is not None:
        k1, k2 = to_dec[0] - from_dec[0], to_dec[1] - from_dec[1]
        return k1 >= k2 >= 0
    base = {"byte": 10, "short": 10, "integer": 10, "long": 20}.get(file_type)
    return base is not None and to_dec[0] - base >= to_dec[1] >= 0


#: Unsigned Parquet integers and the Delta type Spark reads them as (exactly, without overflow).
_UNSIGNED_AS = {"uint8": "short", "uint16": "integer", "uint32": "long"}


def _leaf_matches(file_type: str, table_type: str) -> bool:
    if file_type == table_type or _UNSIGNED_AS.get(file_type) == table_type:
        return True
    return file_type == "int96 timestamp" and table_type in ("timestamp", "timestamp_ntz")


# --- the comparison -------------------------------------------------------------------


@dataclass(frozen=True)
class _Check:
    rel: str
    column_mapping: str
    widening: bool
    #: The table enables variant shredding: variant columns may be shredded (PROTOCOL.md "Variant Shredding").
    shredding: bool = False
    #: Top-level columns (physical names) whose non-nullable parts the footer cannot decide.
    undecided: set[str] = field(default_factory=set)

    def fail(self, message: str) -> DataFileMismatchError:
        error = DataFileMismatchError(
            f"invalid commit request: data file {self.rel!r} does not match the table schema: {message}"
        )
        error.detail = message
        return error


def variant_shredding_enabled(protocol: Protocol, configuration: dict[str, str]) -> bool:
    """New files may hold shredded variants: the feature is supported and ``delta.enableVariantShredding`` true."""
    supported = protocol.has_feature("variantShredding") or protocol.has_feature("variantShredding-preview")
    return supported and str(configuration.get("delta.enableVariantShredding", "")).lower() == "true"


def _proven_non_null(node: FileNode) -> bool:
    """The footer proves the node never null: Parquet REQUIRED, or a leaf below it with no null at all."""
    return not node.nullable or any(leaf.nulls == 0 for leaf in node.leaves())


def _check_nullability(check: _Check, node: FileNode, path: str, top: str, top_level: bool = False) -> None:
    """Refuse nulls in a non-nullable column the footer counts exactly; leave undecided ones for the data check."""
    if _proven_non_null(node):
        return
    if top_level and node.kind == "leaf" and node.nulls is not None:
        raise check.fail(f"column {path} is not nullable but holds {node.nulls} null(s)")
    # Nested (the footer cannot tell a child's nulls from its parent's or from empty
    # lists) or no null counts: only this column's values can answer.
    check.undecided.add(top)


def _compare(check: _Check, table_type: Any, node: FileNode, path: str, top: str) -> None:
    """Refuse unless ``node`` (the file) holds values of ``table_type`` (the table), recursively."""
    table_name = _delta_type_name(table_type)
    mismatch = f"column {path} is {node.type_name()} in the file but {table_name} in the table"
    if isinstance(table_type, str):
        if table_type == "variant":
            _compare_variant(check, node, path)
            return
        if is_geospatial_type(table_type):
            _compare_geospatial(check, table_type, node, path)
            return
        if node.kind != "leaf":
            raise check.fail(mismatch)
        file_type = node.type_name()
        if _leaf_matches(file_type, table_name):
            return
        if check.widening and widening_allowed(file_type, table_name):
            return
        hint = " (typeWidening would allow it, but the table does not support it)"
        raise check.fail(mismatch + (hint if widening_allowed(file_type, table_name) else ""))
    kind = table_type.get("type")
    if kind == "struct":
        if node.kind != "struct":
            raise check.fail(mismatch)
        _compare_fields(check, table_type.get("fields", []), node.children, path + ".", top)
    elif kind == "array":
        if node.kind != "array":
            raise check.fail(mismatch)
        element = node.children[0]
        _compare(check, table_type["elementType"], element, path + ".element", top)
        if not table_type.get("containsNull", True):
            _check_nullability(check, element, path + ".element", top)
    elif kind == "map":
        if node.kind != "map":
            raise check.fail(mismatch)
        _compare(check, table_type["keyType"], node.children[0], path + ".key", top)
        _compare(check, table_type["valueType"], node.children[1], path + ".value", top)
        if not table_type.get("valueContainsNull", True):
            _check_nullability(check, node.children[1], path + ".value", top)
    else:
        raise check.fail(mismatch)


def _compare_geospatial(check: _Check, table_type: str, node: FileNode, path: str) -> None:
    """A geometry/geography column must carry the Parquet logical type of its Delta type: kind, CRS, edges."""
    want = geospatial_parts(table_type)
    got = parquet_geospatial_parts(node.column.logical_type) if node.kind == "leaf" and node.column else None
    if got is None or got[0] != want[0] or got[1].lower() != want[1].lower() or got[2] != want[2]:
        found = node.type_name() if got is None else f"{got[0]}({', '.join(p for p in got[1:] if p)})"
        raise check.fail(
            f"column {path} is {found} in the file but {table_type} in the table (a geospatial column must be "
            "WKB with the Parquet GEOMETRY/GEOGRAPHY logical type of its CRS and edges, as Delta Spark writes it)"
        )


def _compare_variant(check: _Check, node: FileNode, path: str) -> None:
    names = sorted(c.name for c in node.children) if node.kind == "struct" else []
    if names == ["metadata", "value"] and all(c.type_name() == "binary" for c in node.children):
        return
    if check.shredding and "typed_value" in names:
        problem = _shredding_problem(node, path)
        if problem is None:
            return
        raise check.fail(
            f"column {path} is not a shredded variant as the Parquet variant shredding spec says: {problem}"
        )
    shredded = " (the table does not enable variant shredding)" if "typed_value" in names else ""
    raise check.fail(
        f"column {path} is {node.type_name()} in the file but variant in the table "
        f"(an unshredded struct<metadata: binary, value: binary>){shredded}"
    )


def _shredding_problem(node: FileNode, path: str) -> str | None:
    """What breaks the Parquet VariantShredding layout of a top-level shredded variant group (None: nothing).

    The group holds ``metadata`` (binary), an optional ``value`` (binary) and ``typed_value``: a
    primitive, an object (a group whose every field is a group of optional ``value`` /
    ``typed_value``) or an array (whose element is such a group); a map is never shredded.
    """
    children = {c.name: c for c in node.children}
    if set(children) - {"metadata", "value", "typed_value"}:
        return f"unexpected field(s) {sorted(set(children) - {'metadata', 'value', 'typed_value'})}"
    if "metadata" not in children or children["metadata"].type_name() != "binary":
        return "no binary metadata field"
    return _shredded_value_problem(node, path, top=True)


def _shredded_value_problem(node: FileNode, path: str, top: bool = False) -> str | None:
    children = {c.name: c for c in node.children}
    allowed = {"metadata", "value", "typed_value"} if top else {"value", "typed_value"}
    if node.kind != "struct" or set(children) - allowed or not ({"value", "typed_value"} & set(children)):
        return f"{path} is not a group of value / typed_value"
    if "value" in children and children["value"].type_name() != "binary":
        return f"{path}.value is {children['value'].type_name()}, not binary"
    typed = children.get("typed_value")
    if typed is None or typed.kind == "leaf":
        return None
    if typed.kind == "map":
        return f"{path}.typed_value is a map, which variant shredding never writes"
    if typed.kind == "array":
        return _shredded_value_problem(typed.children[0], f"{path}.typed_value.element")
    for field_node in typed.children:
        problem = _shredded_value_problem(field_node, f"{path}.typed_value.{field_node.name}")
        if problem:
            return problem
    return None


def _physical(f: dict[str, Any], mode: str) -> str:
    if mode != "none":
        physical = (f.get("metadata") or {}).get(PHYSICAL_NAME)
        if physical:
            return str(physical)
    return str(f["name"])


def _compare_fields(
    check: _Check,
    fields: list[dict[str, Any]],
    nodes: list[FileNode],
    prefix: str,
    top: str | None = None,
    skip: frozenset[str] = frozenset(),
) -> None:
    """Compare struct fields (``top`` None: the table's top-level columns)."""
    by_name = {_physical(f, check.column_mapping): f for f in fields}
    for node in nodes:
        if node.name in skip:
            continue
        f = by_name.get(node.name)
        if f is None:
            raise check.fail(f"column {prefix}{node.name} is in the file but not in the table schema")
        if check.column_mapping == "id":
            want = (f.get("metadata") or {}).get(COLUMN_ID)
            if want is not None and node.field_id != int(want):
                raise check.fail(
                    f"column {prefix}{f['name']} has field id {node.field_id} in the file but "
                    f"{want} in the table (column mapping mode 'id')"
                )
    present = {n.name: n for n in nodes}
    for physical, f in by_name.items():
        if physical in skip:
            continue
        path = prefix + str(f["name"])
        got = present.get(physical)
        if f["type"] == VOID:
            if got is not None:
                raise check.fail(
                    f"column {path} is of type void in the table, and writers must omit void columns from data "
                    f"files (PROTOCOL.md 'Void Type'); the file has it as {got.type_name()}"
                )
            continue  # read as all null, like any column a file lacks
        if got is None:
            if not f.get("nullable", True):
                raise check.fail(f"column {path} is not nullable but the file does not have it")
            continue
        _compare(check, f["type"], got, path, top or physical)
        if not f.get("nullable", True):
            _check_nullability(check, got, path, top or physical, top_level=top is None)


def check_file_schema(
    footer: pq.FileMetaData,
    metadata: Metadata,
    protocol: Protocol,
    rel: str,
    partition_values: dict[str, str | None] | None = None,
    read_columns: Callable[[list[str]], pa.Table] | None = None,
) -> None:
    """Refuse (DataFileMismatchError) a data file whose footer does not fit the table (see the module doc).

    ``read_columns(names)`` reads those top-level columns of the file; it is called
    only for non-nullable nested fields the footer cannot decide (None: refuse them).
    """
    check = _Check(
        rel,
        metadata.column_mapping_mode,
        protocol.has_feature("typeWidening") or protocol.has_feature("typeWidening-preview"),
        shredding=variant_shredding_enabled(protocol, metadata.configuration),
    )
    try:
        nodes = file_tree(footer)
    except (ValueError, pa.ArrowException, StopIteration) as exc:
        raise check.fail(f"its Parquet schema cannot be read ({exc})") from None
    fields = json.loads(metadata.schema_string).get("fields", [])
    partition_fields = [f for f in fields if f.get("name") in set(metadata.partition_columns)]
    partition_names = {_physical(f, check.column_mapping): f for f in partition_fields}
    data_fields = [f for f in fields if f not in partition_fields]
    _compare_fields(check, data_fields, nodes, "", skip=frozenset(partition_names))
    if check.undecided:
        _check_nulls_in_data(check, data_fields, read_columns)
    for node in nodes:
        f = partition_names.get(node.name)
        if f is not None:
            _check_partition_column(check, f, node, footer, (partition_values or {}).get(node.name))
    if MATERIALIZE_PARTITION_COLUMNS in protocol.effective_writer_features():
        present = {n.name for n in nodes}
        missing = [str(f["name"]) for p, f in partition_names.items() if p not in present]
        if missing:
            raise check.fail(
                f"partition column {missing[0]} is not in the file, and the table's materializePartitionColumns "
                "feature requires every new data file to carry its partition columns"
            )


def _check_nulls_in_data(
    check: _Check, fields: list[dict[str, Any]], read_columns: Callable[[list[str]], pa.Table] | None
) -> None:
    """Decide the undecided non-nullable parts by reading just those columns' values."""
    names = sorted(check.undecided)
    if read_columns is None:
        raise check.fail(f"column(s) {', '.join(names)} have non-nullable parts whose nulls the footer cannot rule out")
    try:
        data = read_columns(names)
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise check.fail(f"column(s) {', '.join(names)} cannot be read to check their nulls ({exc})") from None
    by_physical = {_physical(f, check.column_mapping): f for f in fields}
    for name in names:
        f = by_physical[name]
        column = data.column(name)
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        where = _null_violation(array, f["type"], f.get("nullable", True), str(f["name"]), check.column_mapping)
        if where is not None:
            raise check.fail(f"column {where} is not nullable but holds null(s)")


def _null_violation(array: pa.Array, dtype: Any, nullable: bool, path: str, mode: str) -> str | None:
    """The first non-nullable path with a null where all its parents are present (None: no violation)."""
    if not nullable and array.null_count:
        return path
    if not isinstance(dtype, dict):
        return None
    valid = array.filter(array.is_valid()) if array.null_count else array
    kind = dtype.get("type")
    if kind == "struct":
        index = {valid.type.field(i).name: i for i in range(valid.type.num_fields)}
        for f in dtype.get("fields", []):
            i = index.get(_physical(f, mode))
            if i is None:
                continue  # a missing non-nullable child was refused from the footer already
            found = _null_violation(valid.field(i), f["type"], f.get("nullable", True), f"{path}.{f['name']}", mode)
            if found:
                return found
    elif kind == "array":
        return _null_violation(
            valid.flatten(), dtype["elementType"], dtype.get("containsNull", True), path + ".element", mode
        )
    elif kind == "map":
        return _null_violation(valid.keys, dtype["keyType"], False, path + ".key", mode) or _null_violation(
            valid.items, dtype["valueType"], dtype.get("valueContainsNull", True), path + ".value", mode
        )
    return None


def _check_partition_column(
    check: _Check, f: dict[str, Any], node: FileNode, footer: pq.FileMetaData, value: str | None
) -> None:
    """A partition column stored in the file too: allowed only when the footer proves every row holds ``value``."""
    name = str(f["name"])
    _compare(check, f["type"], node, name, node.name)
    refuse = check.fail(
        f"partition column {name} is also stored in the file, and its footer does not prove every row holds "
        f"the partition value {value!r}"
    )
    leaf = node.column
    if node.kind != "leaf" or leaf is None or node.nulls is None:
        raise refuse
    if value is None:
        if node.nulls != footer.num_rows:
            raise refuse
        return
    if node.nulls != 0:
        raise refuse
    dtype = delta_type_to_arrow(f["type"])
    index = next(i for i in range(footer.num_columns) if footer.schema.column(i).path == leaf.path)
    seen: set[str | None] = set()
    for rg in range(footer.num_row_groups):
        group = footer.row_group(rg)
        if group.num_rows == 0:
            continue
        s = group.column(index).statistics
        if s is None or not s.has_min_max or not _exact_stats_type(dtype):
            raise refuse
        for bound in (s.min, s.max):
            try:
                seen.add(canonical_partition_value(str(bound), dtype))
            except PartitionValueError:
                raise refuse from None
    if seen - {value}:
        raise refuse


def _exact_stats_type(dtype: pa.DataType) -> bool:
    """Types whose footer min/max print back as the partition value exactly."""
    return (
        pa.types.is_integer(dtype) or pa.types.is_string(dtype) or pa.types.is_decimal(dtype) or pa.types.is_date(dtype)
    )
