"""Vectorised log replay: add/remove lines parsed by pyarrow.json, file keys, newest action per key.

A JSON-only log of 100,000 file actions costs about 1.5 s with one ``json.loads``
per line plus per-action Python bookkeeping; parsing the same lines in one
``pyarrow.json`` call and reconciling with a hash aggregation takes a fraction of
that. The Arrow parser is less forgiving and less precise than ``json.loads`` in a
few corners (it cannot tell a missing map key from a null one, infers timestamps
from strings, accepts two objects on one line), so :func:`parse_file_lines` returns
None whenever its result could differ from the per-line reading, and the caller
falls back to that exact path, which also produces the precise error for a
corrupt log. One deliberate difference: map entries (partitionValues, tags) come in
the first-seen key order of the whole batch rather than each line's own order;
JSON objects are unordered, and Delta gives that order no meaning.
"""

from __future__ import annotations

import array
import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from deltalog._arrow_utils import conform, int_scalar
from deltalog._arrow_utils import string_scalar as _string
from deltalog.log.action_checks import first_file_problem
from deltalog.log.actions import ADD_TYPE, REMOVE_TYPE
from deltalog.log.commit_lines import is_utf8
from deltalog.protocol.log_paths import ABSOLUTE_PATH, canonical_path

__all__ = [
    "FILE_LINE_PREFIXES",
    "array_from_python",
    "canonical_paths",
    "empty_table",
    "file_keys",
    "has_absolute_keys",
    "int64_array",
    "newest_per_key",
    "parse_file_lines",
    "string_array",
    "take_newest_first",
]

#: Lines starting with these are file actions handled here; any other spelling
#: (spaces, a different key order) goes to the per-line path.
FILE_LINE_PREFIXES = (b'{"add":', b'{"remove":')
#: Map-typed action fields: JSON objects with free-form keys, which pyarrow.json can
#: only read as structs (their keys are inferred, then turned into map entries).
_MAP_FIELDS = ("partitionValues", "tags")
_BLOCK_SIZE = 8 << 20


def _without_maps(typ: pa.StructType) -> pa.StructType:
    return pa.struct([f for f in typ if f.name not in _MAP_FIELDS])


_BASE_SCHEMA = pa.schema([("add", _without_maps(ADD_TYPE)), ("remove", _without_maps(REMOVE_TYPE))])


class _NotExact(Exception):
    """The Arrow reading could differ from json.loads: use the per-line path."""


def _read(data: bytes | bytearray, schema: pa.Schema, longest_line: int) -> pa.Table:
    # A line must fit in one block (pyarrow.json cannot split an object across blocks).
    block_size = max(_BLOCK_SIZE, longest_line + 2)
    try:
        return pj.read_json(
            pa.BufferReader(pa.py_buffer(data)),  # zero-copy, unlike io.BytesIO
            read_options=pj.ReadOptions(use_threads=True, block_size=block_size),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer"),
        )
    except (pa.ArrowException, ValueError) as exc:
        raise _NotExact(str(exc)) from None


def _map_key_fixups(table: pa.Table) -> dict[tuple[str, str], list[str]]:
    """Map fields whose inferred struct children are not all strings, with their key names.

    pyarrow.json turns a string that looks like a timestamp into a timestamp, so such
    fields are read again with every key declared as a string. Anything else that is
    not a string (a number, a nested object) is not a valid Delta map: per-line path.
    """
    fixups: dict[tuple[str, str], list[str]] = {}
    for kind in ("add", "remove"):
        typ = table.schema.field(kind).type
        for name in _MAP_FIELDS:
            idx = typ.get_field_index(name)
            if idx < 0:
                continue
            ftype = typ.field(idx).type
            if pa.types.is_null(ftype):
                continue
            if not pa.types.is_struct(ftype):
                raise _NotExact(f"{kind}.{name} is not an object")
            children = [ftype.field(i) for i in range(ftype.num_fields)]
            if any(pa.types.is_timestamp(c.type) for c in children):
                fixups[(kind, name)] = [c.name for c in children]
            elif not all(pa.types.is_string(c.type) or pa.types.is_null(c.type) for c in children):
                raise _NotExact(f"{kind}.{name} holds a value that is not a string")
    return fixups


def _schema_with_string_maps(fixups: dict[tuple[str, str], list[str]]) -> pa.Schema:
    fields = []
    for kind, typ in (("add", ADD_TYPE), ("remove", REMOVE_TYPE)):
        children = list(_without_maps(typ))
        for name in _MAP_FIELDS:
            keys = fixups.get((kind, name))
            if keys is not None:
                children.append(pa.field(name, pa.struct([(k, pa.string()) for k in keys])))
        fields.append((kind, pa.struct(children)))
    return pa.schema(fields)


# --- Arrow values built from buffers ---------------------------------------------------
# pyarrow converts any Python value (pa.array([...]), pa.scalar(1), pc.add(x, 1)) through
# a check that imports pandas on first use: about 0.3 s and 40 MB of resident memory,
# more than reading a 500,000-file checkpoint's add actions costs. The hot paths build
# their few constants from buffers instead, which never asks for pandas.


def int64_array(values: Iterable[int]) -> pa.Array:
    """An int64 array from Python ints, without pyarrow's Python-object conversion."""
    buf = array.array("q", values)
    return pa.Array.from_buffers(pa.int64(), len(buf), [None, pa.py_buffer(buf)])


def _int32_array(values: Iterable[int]) -> pa.Array:
    buf = array.array("i", values)
    assert buf.itemsize == 4
    return pa.Array.from_buffers(pa.int32(), len(buf), [None, pa.py_buffer(buf)])


def _offsets(lengths: Iterable[int]) -> pa.Buffer:
    """The int32 offsets buffer of a string or list array whose entries have ``lengths``."""
    offsets = array.array("i", [0])
    for n in lengths:
        offsets.append(offsets[-1] + n)
    return pa.py_buffer(offsets)


def _bitmap(flags: Iterable[bool]) -> pa.Buffer:
    """A bitmap (least significant bit first), for validity or boolean values."""
    flags = list(flags)
    bits = bytearray((len(flags) + 7) // 8)
    for i, flag in enumerate(flags):
        if flag:
            bits[i >> 3] |= 1 << (i & 7)
    return pa.py_buffer(bytes(bits))


def _string_buffers(encoded: list[bytes]) -> list[pa.Buffer]:
    """The offsets and data buffers of a string array holding ``encoded``."""
    return [_offsets(len(e) for e in encoded), pa.py_buffer(b"".join(encoded))]


def string_array(values: list[str]) -> pa.Array:
    """A string array from Python strings, without pyarrow's Python-object conversion."""
    return pa.Array.from_buffers(pa.string(), len(values), [None, *_string_buffers([v.encode() for v in values])])


def _validity(values: list[Any]) -> tuple[pa.Buffer | None, int]:
    """A validity bitmap for ``values`` and its null count; None when nothing is null."""
    nulls = sum(1 for v in values if v is None)
    if not nulls:
        return None, 0
    return _bitmap(v is not None for v in values), nulls


def array_from_python(values: list[Any], typ: pa.DataType) -> pa.Array:
    """``pa.array(values, type=typ)`` for the types of log actions, built from buffers (no pandas).

    Covers what checkpoints write for their few non-file actions: strings, 32/64-bit
    integers, booleans, lists of strings, string maps (a dict or a list of pairs) and
    structs of those (a dict per row), any of them null. Other types go to ``pa.array``.
    """
    n = len(values)
    validity, nulls = _validity(values)
    if pa.types.is_string(typ):
        encoded = [b"" if v is None else str(v).encode() for v in values]
        return pa.Array.from_buffers(typ, n, [validity, *_string_buffers(encoded)], null_count=nulls)
    if typ in (pa.int64(), pa.int32()):
        data = array.array("q" if typ == pa.int64() else "i", [0 if v is None else int(v) for v in values])
        return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(data)], null_count=nulls)
    if pa.types.is_boolean(typ):
        return pa.Array.from_buffers(typ, n, [validity, _bitmap(bool(v) for v in values)], null_count=nulls)
    if pa.types.is_list(typ) or pa.types.is_map(typ):
        rows = [[] if v is None else list(v.items()) if isinstance(v, dict) else list(v) for v in values]
        offsets = _offsets(len(r) for r in rows)
        flat = [x for r in rows for x in r]
        if pa.types.is_map(typ):
            key, item = typ.key_field, typ.item_field
            child = array_from_python([{key.name: k, item.name: v} for k, v in flat], pa.struct([key, item]))
        else:
            child = array_from_python(flat, typ.value_type)
        return pa.Array.from_buffers(typ, n, [validity, offsets], null_count=nulls, children=[child])
    if pa.types.is_struct(typ):
        fields = [typ.field(i) for i in range(typ.num_fields)]
        children = [array_from_python([None if v is None else v.get(f.name) for v in values], f.type) for f in fields]
        return pa.Array.from_buffers(typ, n, [validity], null_count=nulls, children=children)
    return pa.array(values, type=typ)


def arange(n: int, start: int = 0, step: int = 1) -> pa.Array:
    """``start, start + step, ...`` (``n`` values) as int64."""
    return int64_array(range(start, start + n * step, step))


def empty_table(schema: pa.Schema) -> pa.Table:
    """``schema.empty_table()`` without its Python-object conversion."""
    return pa.Table.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)


def _int32(value: int) -> pa.Scalar:
    return int_scalar(value, pa.int32())


def _struct_to_map(struct: pa.StructArray) -> tuple[pa.MapArray, set[int]]:
    """A map<string,string> from an inferred struct, plus the rows it cannot represent exactly.

    A struct child that is null may have been a JSON null or a missing key; those rows
    (the second result) must be read by json.loads.
    """
    n = len(struct)
    k = struct.type.num_fields
    valid = struct.is_valid()
    children = [struct.field(i) for i in range(k)]
    ambiguous: set[int] = set()
    for child in children:
        if child.null_count:
            ambiguous.update(pc.indices_nonzero(pc.and_(valid, child.is_null())).to_pylist())
    counts = pc.if_else(valid, _int32(k), _int32(0))
    offsets = pa.concat_arrays([_int32_array([0]), pc.cumulative_sum(counts)])
    rows = pc.indices_nonzero(valid) if struct.null_count else arange(n)
    if k == 0 or len(rows) == 0:
        keys = values = pa.nulls(0, pa.string())
    elif k == 1:
        keys = pa.repeat(_string(struct.type.field(0).name), len(rows))
        value = children[0] if pa.types.is_string(children[0].type) else children[0].cast(pa.string())
        values = value if len(rows) == n else value.take(rows)
    else:
        # entry p (row rows[p // k], key p % k) takes child p % k at that row
        pos = arange(len(rows) * k)
        row_of = pc.divide(pos, int_scalar(k))
        key_of = pc.subtract(pos, pc.multiply(row_of, int_scalar(k)))
        keys = string_array([struct.type.field(i).name for i in range(k)]).take(key_of)
        flat = pa.concat_arrays([c if pa.types.is_string(c.type) else c.cast(pa.string()) for c in children])
        values = flat.take(pc.add(pc.multiply(key_of, int_scalar(n)), rows.take(row_of).cast(pa.int64())))
    mask = pc.invert(valid) if struct.null_count else None
    result = pa.MapArray.from_arrays(offsets, keys, values, mask=mask)
    if result.type != pa.map_(pa.string(), pa.string()):
        result = result.cast(pa.map_(pa.string(), pa.string()))
    return result, ambiguous


def _to_action_type(column: pa.StructArray, target: pa.StructType) -> tuple[pa.StructArray, list[int]]:
    """The parsed column as ``target`` (ADD_TYPE / REMOVE_TYPE) and the rows needing json.loads."""
    n = len(column)
    children = []
    redo: set[int] = set()
    for f in target:
        idx = column.type.get_field_index(f.name)
        if idx < 0:
            children.append(pa.nulls(n, f.type))
            continue
        child = column.field(idx)
        if f.name in _MAP_FIELDS:
            if pa.types.is_null(child.type):
                children.append(pa.nulls(n, f.type))
                continue
            child, ambiguous = _struct_to_map(child)
            redo |= ambiguous
        elif child.type != f.type:
            child = conform(child, f.type)
        children.append(child)
    mask = column.is_null() if column.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(target), mask=mask), sorted(redo)


def _replace_rows(column: pa.StructArray, rows: list[int], values: list[dict[str, Any]]) -> pa.StructArray:
    exact = pa.array(values, type=column.type)
    n = len(column)
    mask = pc.is_in(arange(n), value_set=int64_array(rows))
    index = pc.replace_with_mask(arange(n), mask, arange(len(rows), start=n))
    return pa.concat_arrays([column, exact]).take(index)


def _check(add: pa.StructArray, remove: pa.StructArray) -> None:
    """The per-line path's validation, vectorised: one action per line, a path, an add's size, the fields' rules."""
    if not pc.all(pc.xor(add.is_valid(), remove.is_valid())).as_py():
        raise _NotExact("a line holds no file action or more than one")
    for kind, column in (("add", add), ("remove", remove)):
        if pc.struct_field(column, "path").null_count != column.null_count:
            raise _NotExact(f"{kind} without a path")
        dv = pc.struct_field(column, "deletionVector")
        if pc.struct_field(dv, "storageType").null_count != dv.null_count:
            raise _NotExact(f"{kind} with an incomplete deletion vector")
    if pc.struct_field(add, "size").null_count != add.null_count:
        raise _NotExact("add without a size")
    if first_file_problem("add", add) or first_file_problem("remove", remove):
        raise _NotExact("an invalid file action")  # the per-line path names it


def parse_file_lines(
    data: bytes | bytearray, count: int, longest: int
) -> tuple[pa.ChunkedArray, pa.ChunkedArray] | None:
    """The add and remove actions of ``data``: ``count`` newline-terminated file-action lines.

    Returns two chunked arrays of ADD_TYPE and REMOVE_TYPE with the same chunk layout,
    one row per line in line order, null where the line is the other kind; None when
    only the per-line path is exact. ``longest`` is the longest line's length.
    """
    if count == 0:
        return pa.chunked_array([], ADD_TYPE), pa.chunked_array([], REMOVE_TYPE)
    if not is_utf8(data):  # json.loads refuses invalid UTF-8 anywhere, keys included
        return None
    try:
        table = _read(data, _BASE_SCHEMA, longest)
        fixups = _map_key_fixups(table)
        if fixups:
            table = _read(data, _schema_with_string_maps(fixups), longest)
            if _map_key_fixups(table):
                raise _NotExact("map values are still not strings")
        table.validate(full=True)  # pyarrow.json passes invalid UTF-8 through; json.loads rejects it
        if table.num_rows != count or table.column_names != ["add", "remove"]:
            raise _NotExact("line count or top-level keys differ")
        # Chunk by chunk (no combine_chunks): the parsed text is never held twice.
        out: dict[str, list[pa.StructArray]] = {"add": [], "remove": []}
        reread: list[Any] | None = None
        offset = 0
        for batch in table.to_batches():
            for kind, target in (("add", ADD_TYPE), ("remove", REMOVE_TYPE)):
                column, redo = _to_action_type(batch.column(kind), target)
                if redo:
                    if reread is None:
                        reread = data.split(b"\n")
                    exact = []
                    for i in redo:
                        action = json.loads(reread[offset + i])
                        if not isinstance(action, dict) or list(action) != [kind]:
                            raise _NotExact("re-read line is not a single action")
                        exact.append(action[kind])
                    column = _replace_rows(column, redo, exact)
                out[kind].append(column)
            offset += batch.num_rows
        del table, reread
        add, remove = pa.chunked_array(out["add"], ADD_TYPE), pa.chunked_array(out["remove"], REMOVE_TYPE)
        _check(add, remove)
        return add, remove
    except (_NotExact, ValueError, TypeError, pa.ArrowException):
        return None


def take_newest_first(
    add: pa.ChunkedArray, remove: pa.ChunkedArray, rows: pa.Array
) -> tuple[list[pa.StructArray], list[pa.StructArray]]:
    """The add and the remove actions at ``rows`` (descending positions), newest first.

    Chunk by chunk from the last, so only the surviving rows are ever copied and no
    chunk is concatenated with the others first.
    """
    adds: list[pa.StructArray] = []
    removes: list[pa.StructArray] = []
    hi = len(add)
    for add_chunk, remove_chunk in reversed(list(zip(add.chunks, remove.chunks))):
        lo = hi - len(add_chunk)
        inside = pc.and_(pc.greater_equal(rows, int_scalar(lo)), pc.less(rows, int_scalar(hi)))
        local = pc.subtract(rows.filter(inside), int_scalar(lo))
        is_add = add_chunk.is_valid().take(local)
        adds.append(add_chunk.take(local.filter(is_add)))
        removes.append(remove_chunk.take(local.filter(pc.invert(is_add))))
        hi = lo
    return adds, removes


# --- file keys and reconciliation -----------------------------------------------------


def canonical_paths(paths: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Vectorised :func:`deltalog.protocol.log_paths.canonical_path`.

    Relative paths (nearly every path of nearly every table) are canonical as written;
    two plain substring searches find the others, which are few, and only those are
    rewritten one by one.
    """
    if len(paths) == 0:
        return paths
    special = pc.or_(pc.starts_with(paths, "/"), pc.match_substring(paths, ":"))
    if not pc.any(special).as_py():
        return paths
    special = pc.and_(special, pc.match_substring_regex(paths, ABSOLUTE_PATH))
    if not pc.any(special).as_py():
        return paths
    special = pc.and_kleene(special, pc.is_valid(special))
    if isinstance(paths, pa.ChunkedArray):
        paths = paths.combine_chunks()
        special = special.combine_chunks()
    rows = paths.filter(special).to_pylist()
    return pc.replace_with_mask(paths, special, string_array([canonical_path(p) for p in rows]))


def file_keys(paths: pa.Array, deletion_vectors: pa.Array | None, *, canonical: bool = True) -> pa.Array:
    """Vectorised :func:`deltalog.log.actions.file_key`: canonical path, plus NUL and the DV id where there is a DV.

    ``canonical=False`` keeps the paths as written: right when the keys they are compared
    with hold no absolute path, as a relative path is its own canonical form and never
    equals an absolute one (:func:`has_absolute_keys`).
    """
    if canonical:
        paths = canonical_paths(paths)
    if deletion_vectors is None or deletion_vectors.null_count == len(deletion_vectors):
        return paths
    dv = deletion_vectors
    empty, at_sign, nul = _string(""), _string("@"), _string("\x00")
    storage_type = pc.fill_null(pc.struct_field(dv, "storageType"), empty)
    where = pc.fill_null(pc.struct_field(dv, "pathOrInlineDv"), empty)
    offset = pc.struct_field(dv, "offset")
    at = pc.fill_null(pc.binary_join_element_wise(at_sign, pc.cast(offset, pa.string()), empty), empty)
    uid = pc.binary_join_element_wise(storage_type, where, at, empty)
    with_dv = pc.binary_join_element_wise(paths, uid, nul)
    return pc.if_else(dv.is_valid(), with_dv, paths)


def has_absolute_keys(keys: pa.Array) -> bool:
    """Whether any of ``keys`` (canonical file keys) names an absolute path: only those need other rows canonical."""
    return len(keys) > 0 and pc.any(pc.match_substring_regex(keys, ABSOLUTE_PATH)).as_py() is True


def newest_per_key(keys: pa.Array) -> tuple[pa.Array, pa.Array]:
    """For actions in log order: the row of the newest action per key (newest first), and the distinct keys.

    Hash kernels on the reversed keys (``unique`` keeps first appearances, which are
    the newest; ``index_in`` finds where each first appears) rather than
    ``Table.group_by``, which loads Arrow's query engine: 40 MB of resident memory
    for one aggregation.
    """
    n = len(keys)
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    backwards = arange(n, start=n - 1, step=-1)
    newest_first = keys.take(backwards)
    distinct = pc.unique(newest_first)
    if len(distinct) == n:  # no key repeats: every action is the newest for its key
        return backwards, distinct
    position = pc.index_in(distinct, value_set=newest_first).cast(pa.int64())
    return pc.subtract(int_scalar(n - 1), position), distinct
