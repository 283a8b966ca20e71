"""Validation of the actions at load: the non-file actions, and the fields of add/remove that need more than a type.

A ``metaData`` whose ``schemaString`` does not parse, or a ``txn`` whose version is a
string, used to be refused by some commands and accepted by others: ``snapshot --json``
printed it, ``checkpoint`` copied it into a new checkpoint (or crashed on it), an
idempotent ``commit`` crashed. Checking every such action where the snapshot is built
makes every command fail the same way (a corrupt log, exit 2) or none do, and a
checkpoint can never be written from such a state.

The checks follow PROTOCOL.md's action schemas: required fields present, every known
field of its type (an int is never a bool, a map holds strings). Unknown fields are
ignored, as the protocol asks. The table schema and the partition columns are checked
on the metaData that describes the table (the newest one), the other metaData actions
of the log for their types only, like Delta's own readers.

File actions (add, remove) are typed by their Arrow schema when read; what a type cannot
say is checked here, per line (:func:`check_file_action`) or vectorised over a table of
them (:func:`check_file_table`): a non-empty ``path`` without NUL (the empty URI is the table
root; no storage accepts a NUL), a non-negative ``size``, and a deletion-vector descriptor
of PROTOCOL.md's shape (:func:`deltalog.protocol.deletion_vectors.descriptor_problem`).
A malformed descriptor used to load as a valid snapshot and fail compaction at the bin
holding its file, after the other bins had committed.

``where`` names the action's place ("00000000000000000003.json: line 2", "checkpoint
00000000000000000010.checkpoint.parquet"); ``error`` is the class to raise
(CorruptCheckpointError for checkpoint actions, so an older checkpoint can be tried).
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeGuard

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog._arrow_utils import int_scalar
from deltalog.errors import CorruptLogError, UnsupportedProtocolError
from deltalog.protocol.deletion_vectors import descriptor_problem, suspect_descriptors
from deltalog.protocol.schema import is_geospatial_type

__all__ = [
    "check_action",
    "check_file_action",
    "check_file_table",
    "check_protocol",
    "check_sidecar",
    "check_table_metadata",
    "check_txn",
    "file_action_problem",
]

_Error = type[CorruptLogError]

_PRIMITIVE_TYPES = frozenset(
    {
        "string",
        "long",
        "integer",
        "short",
        "byte",
        "float",
        "double",
        "boolean",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "variant",
        "void",  # Spark's NullType: all null, never in data files (PROTOCOL.md "Void Type")
    }
)
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _fail(error: _Error, where: str, kind: str, problem: str) -> CorruptLogError:
    return error(f"{where}: the {kind} action is invalid: {problem}")


def _string_map(value: Any) -> bool:
    """A JSON object of strings, or (from a Parquet checkpoint) a list of string key/value pairs."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        if not all(isinstance(p, list | tuple) and len(p) == 2 for p in value):
            return False
        items = [tuple(p) for p in value]
    else:
        return False
    return all(isinstance(k, str) and isinstance(v, str) for k, v in items)


def check_protocol(action: dict[str, Any], where: str, error: _Error = CorruptLogError) -> None:
    for name in ("minReaderVersion", "minWriterVersion"):
        value = action.get(name)
        if not _is_int(value) or value < 1:
            raise _fail(error, where, "protocol", f"{name} must be a positive integer, not {value!r}")
    for name in ("readerFeatures", "writerFeatures"):
        value = action.get(name)
        if value is not None and (not isinstance(value, list) or not all(isinstance(f, str) for f in value)):
            raise _fail(error, where, "protocol", f"{name} must be a list of feature names, not {value!r}")


def check_metadata(action: dict[str, Any], where: str, error: _Error = CorruptLogError) -> None:
    """The types of a metaData action's fields (every metaData of the log)."""

    def bad(problem: str) -> CorruptLogError:
        return _fail(error, where, "metaData", problem)

    if not isinstance(action.get("id"), str) or not action["id"]:
        raise bad(f"'id' must be a non-empty string, not {action.get('id')!r}")
    if not isinstance(action.get("schemaString"), str):
        raise bad(f"'schemaString' must be a string, not {action.get('schemaString')!r}")
    for name in ("name", "description"):
        if action.get(name) is not None and not isinstance(action[name], str):
            raise bad(f"'{name}' must be a string, not {action[name]!r}")
    columns = action.get("partitionColumns")
    if columns is not None and (not isinstance(columns, list) or not all(isinstance(c, str) for c in columns)):
        raise bad(f"'partitionColumns' must be a list of column names, not {columns!r}")
    if action.get("configuration") is not None and not _string_map(action["configuration"]):
        raise bad("'configuration' must map strings to strings")
    created = action.get("createdTime")
    if created is not None and not _is_int(created):
        raise bad(f"'createdTime' must be an integer, not {created!r}")
    fmt = action.get("format")
    if fmt is not None:
        if not isinstance(fmt, dict) or not isinstance(fmt.get("provider"), str):
            raise bad(f"'format' must be an object with a string 'provider', not {fmt!r}")
        if fmt.get("options") is not None and not _string_map(fmt["options"]):
            raise bad("'format.options' must map strings to strings")


def check_table_metadata(action: dict[str, Any], where: str, error: _Error = CorruptLogError) -> None:
    """The metaData that describes the table: its types, its schema and its partition columns."""
    check_metadata(action, where, error)

    def bad(problem: str) -> CorruptLogError:
        return _fail(error, where, "metaData", problem)

    provider = (action.get("format") or {}).get("provider") or "parquet"
    if provider.lower() != "parquet":
        raise UnsupportedProtocolError(
            f"{where}: the table's files are in format {provider!r}; deltalog reads only parquet tables"
        )
    try:
        doc = json.loads(action["schemaString"])
    except (ValueError, RecursionError) as exc:
        raise bad(f"'schemaString' is not valid JSON ({exc})") from None
    problem = _schema_problem(doc, "the schema")
    if problem:
        raise bad(f"'schemaString' is not a valid Delta schema: {problem}")
    top = {f["name"].lower(): f for f in doc["fields"]}
    for column in action.get("partitionColumns") or []:
        field = top.get(column.lower())
        if field is None:
            raise bad(f"partition column {column!r} is not a column of the schema")
        if isinstance(field["type"], dict):
            raise bad(f"partition column {column!r} has the non-primitive type {field['type'].get('type')!r}")


def _schema_problem(doc: Any, at: str) -> str | None:
    """What makes ``doc`` not a Delta struct type (a sentence), or None."""
    if not isinstance(doc, dict) or doc.get("type") != "struct":
        return f"{at} is not a struct type"
    fields = doc.get("fields")
    if not isinstance(fields, list):
        return f"{at} has no list of fields"
    seen: set[str] = set()
    for i, f in enumerate(fields):
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            return f"field {i} of {at} has no string name"
        name = f["name"]
        if name.lower() in seen:
            return f"{at} has two fields named {name!r}"
        seen.add(name.lower())
        if "nullable" in f and not isinstance(f["nullable"], bool):
            return f"field {name!r} has a 'nullable' that is not a boolean"
        if f.get("metadata") is not None and not isinstance(f["metadata"], dict):
            return f"field {name!r} has a 'metadata' that is not an object"
        if "type" not in f:
            return f"field {name!r} has no type"
        problem = _type_problem(f["type"], f"field {name!r}")
        if problem:
            return problem
    return None


def _type_problem(t: Any, at: str) -> str | None:
    if isinstance(t, str):
        if t in _PRIMITIVE_TYPES:
            return None
        m = _DECIMAL.fullmatch(t)
        if m and 1 <= int(m.group(1)) <= 38 and int(m.group(2)) <= int(m.group(1)):
            return None
        if is_geospatial_type(t):  # the geospatial feature's geometry(<crs>), geography(<crs>, <edges>)
            return None
        return f"{at} has the unknown type {t!r}"
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "struct":
            return _schema_problem(t, at)
        if kind == "array":
            if "containsNull" in t and not isinstance(t["containsNull"], bool):
                return f"{at} has a 'containsNull' that is not a boolean"
            return _type_problem(t.get("elementType"), f"the elements of {at}")
        if kind == "map":
            if "valueContainsNull" in t and not isinstance(t["valueContainsNull"], bool):
                return f"{at} has a 'valueContainsNull' that is not a boolean"
            return _type_problem(t.get("keyType"), f"the keys of {at}") or _type_problem(
                t.get("valueType"), f"the values of {at}"
            )
    return f"{at} has the unknown type {json.dumps(t)[:80]}"


def check_txn(action: dict[str, Any], where: str, error: _Error = CorruptLogError) -> None:
    if not isinstance(action.get("appId"), str):
        raise _fail(error, where, "txn", f"'appId' must be a string, not {action.get('appId')!r}")
    if not _is_int(action.get("version")):
        raise _fail(error, where, "txn", f"'version' must be an integer, not {action.get('version')!r}")
    if action.get("lastUpdated") is not None and not _is_int(action["lastUpdated"]):
        raise _fail(error, where, "txn", f"'lastUpdated' must be an integer, not {action['lastUpdated']!r}")


def check_domain_metadata(action: dict[str, Any], where: str, error: _Error = CorruptLogError) -> None:
    if not isinstance(action.get("domain"), str):
        raise _fail(error, where, "domainMetadata", f"'domain' must be a string, not {action.get('domain')!r}")
    if not isinstance(action.get("configuration"), str):
        raise _fail(
            error, where, "domainMetadata", f"'configuration' must be a string, not {action.get('configuration')!r}"
        )
    if action.get("removed") is not None and not isinstance(action["removed"], bool):
        raise _fail(error, where, "domainMetadata", f"'removed' must be a boolean, not {action['removed']!r}")


def check_sidecar(action: dict[str, Any], where: str, error: _Error = CorruptLogError) -> None:
    if not isinstance(action.get("path"), str) or not action["path"]:
        raise _fail(error, where, "sidecar", f"'path' must be a non-empty string, not {action.get('path')!r}")
    for name in ("sizeInBytes", "modificationTime"):
        if action.get(name) is not None and not _is_int(action[name]):
            raise _fail(error, where, "sidecar", f"'{name}' must be an integer, not {action[name]!r}")


def check_checkpoint_metadata(action: dict[str, Any], where: str, error: _Error = CorruptLogError) -> None:
    if not _is_int(action.get("version")):
        raise _fail(error, where, "checkpointMetadata", f"'version' must be an integer, not {action.get('version')!r}")


#: The checks per action kind (any other kind is not checked here).
CHECKS = {
    "protocol": check_protocol,
    "metaData": check_metadata,
    "txn": check_txn,
    "domainMetadata": check_domain_metadata,
    "sidecar": check_sidecar,
    "checkpointMetadata": check_checkpoint_metadata,
}


def check_action(kind: str, action: dict[str, Any], where: str, error: _Error = CorruptLogError) -> None:
    """Check one non-file action of ``kind`` (a no-op for kinds without a check)."""
    check = CHECKS.get(kind)
    if check is not None:
        check(action, where, error)


# --- file actions ------------------------------------------------------------------------


def file_action_problem(kind: str, action: dict[str, Any]) -> str | None:
    """What makes an add/remove invalid beyond its field types (a sentence naming the file), or None."""
    path = action.get("path")
    if path == "":
        # An empty URI names the table root: a reader would take the whole table for one file.
        return "an empty 'path' names no file"
    if isinstance(path, str) and "\x00" in path:
        # No URI holds a NUL; every storage refuses it, so the file could never be read.
        return f"a 'path' holding a NUL character names no file ({path!r})"
    size = action.get("size")
    if kind == "add" and "size" in action:  # an add lacking the key: refused by the replay itself
        if not _is_int(size):
            return f"no integer 'size' ({size!r}) (file {path!r})"
        if size < 0:
            return f"'size' must not be negative, not {size} (file {path!r})"
    dv = action.get("deletionVector")
    if dv is not None:
        problem = descriptor_problem(dv, action.get("stats"))
        if problem:
            return f"{problem} (file {path!r})"
    return None


def check_file_action(kind: str, action: dict[str, Any], where: str, error: _Error = CorruptLogError) -> None:
    """One add/remove action, as a JSON commit line holds it."""
    problem = file_action_problem(kind, action)
    if problem:
        raise _fail(error, where, kind, problem)


def _column(table: pa.Table | pa.StructArray, name: str) -> Any:
    if isinstance(table, pa.Table):
        return table.column(name) if name in table.column_names else None
    return pc.struct_field(table, name) if table.type.get_field_index(name) >= 0 else None


def _may_hold_unusable_paths(paths: pa.Array | pa.ChunkedArray) -> bool:
    """Whether any of ``paths`` may be empty or hold a NUL: a screen cheap enough for every load.

    The byte lengths' minimum comes from the offsets, and a NUL is looked for in the
    string bytes as one numpy reduction (about 0.1 s for ten million paths, where
    ``match_substring`` takes seconds); only a hit pays for the exact row mask.
    """
    chunks = paths.chunks if isinstance(paths, pa.ChunkedArray) else [paths]
    for chunk in chunks:
        if len(chunk) == chunk.null_count:
            continue
        if pc.min(pc.binary_length(chunk)).as_py() == 0:
            return True
        if not (pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)):
            return True  # another layout (string_view): the exact mask decides
        _, offsets, data = chunk.buffers()[:3]
        if data is None:
            continue
        wide = pa.types.is_large_string(chunk.type)
        width = 8 if wide else 4
        bounds = np.frombuffer(
            offsets, np.int64 if wide else np.int32, count=len(chunk) + 1, offset=chunk.offset * width
        )
        values = np.frombuffer(data, np.uint8)[bounds[0] : bounds[-1]]
        if values.size and values.min() == 0:
            return True
    return False


def first_file_problem(kind: str, table: pa.Table | pa.StructArray | pa.ChunkedArray) -> str | None:
    """:func:`file_action_problem` of the first invalid row of a table (or struct array) of ``kind`` actions.

    Vectorised: only rows a cheap pre-check cannot clear are looked at one by one.
    """
    if isinstance(table, pa.ChunkedArray):
        table = table.combine_chunks() if table.num_chunks != 1 else table.chunk(0)
    if len(table) == 0:
        return None
    suspect = None
    path = _column(table, "path")
    if path is not None and _may_hold_unusable_paths(path):
        suspect = pc.or_(pc.equal(pc.binary_length(path), int_scalar(0)), pc.match_substring(path, "\x00"))
    size = _column(table, "size")
    # A reader that projects the columns away (size, stats) has those checks skipped, not failed.
    if kind == "add" and size is not None and (size.null_count or pc.min(size).as_py() < 0):
        small = pc.less(pc.fill_null(size, int_scalar(-1)), int_scalar(0))
        suspect = small if suspect is None else pc.or_(suspect, small)
    dv = _column(table, "deletionVector")
    if dv is not None and dv.null_count < len(dv):
        flagged = suspect_descriptors(dv, _column(table, "stats"))
        suspect = flagged if suspect is None else pc.or_(suspect, flagged)
    if isinstance(table, pa.StructArray) and suspect is not None:
        suspect = pc.and_(suspect, table.is_valid())
    if suspect is None or not pc.any(suspect).as_py():
        return None
    rows = table.filter(suspect)
    for row in rows.to_pylist():
        problem = file_action_problem(kind, row)
        if problem:
            return problem
    return None


def check_file_table(kind: str, table: pa.Table | pa.StructArray, where: str, error: _Error = CorruptLogError) -> None:
    """Every row of a table of ``kind`` actions (a checkpoint's), vectorised; raises for the first invalid one."""
    problem = first_file_problem(kind, table)
    if problem:
        raise _fail(error, where, kind, problem)
