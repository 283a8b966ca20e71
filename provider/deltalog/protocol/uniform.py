"""What UniForm's Iceberg metadata can express: the rules a table must keep for its Iceberg readers.

A Delta table with ``delta.universalFormat.enabledFormats`` naming ``iceberg`` promises
Iceberg readers (Snowflake, Trino, BigQuery, pyiceberg, Spark with the Iceberg runtime)
the same rows as Delta readers at every version: after each deltalog commit the Iceberg
metadata of the new version is written (:mod:`deltalog.uniform`). A table state that
metadata cannot express would leave those readers behind, so every operation that
changes data files refuses such a table before it reads or writes anything
(:func:`uniform_iceberg_problem`, called by :mod:`deltalog.protocol.write_gate`):

- UniForm Iceberg needs ``delta.enableIcebergCompatV1`` or ``V2`` (exactly one); V3
  (Iceberg format v3: row lineage, deletion vectors as Puffin files) is not written;
- column mapping (``name`` or ``id``): the Iceberg field ids are the mapping ids;
- no deletion vectors (``delta.enableDeletionVectors`` on a protocol with the feature):
  icebergCompatV1/V2 forbid them, and Delta's converter writes none for these versions;
- only types the compatibility version allows (V1: no map, array or void; V2: its
  allow-list; partition columns: the allow-list's primitives), checked by
  :func:`iceberg_schema_problem`, the same rule commit requests are held to;
- only type changes Iceberg can read as promotions (``delta.typeChanges``: an integer
  to a wider integer, float to double, a decimal to a wider precision of the same
  scale), as Delta's ``CheckTypeWideningSupported`` rules.

These mirror Delta Spark's ``IcebergCompatV1/V2`` checks (``IcebergCompat.scala``) and
``UniversalFormat.enforceIcebergInvariantsAndDependencies``; nothing here reads storage.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "ENABLED_FORMATS",
    "iceberg_compat_versions",
    "iceberg_schema_problem",
    "type_change_problem",
    "uniform_iceberg_enabled",
    "uniform_iceberg_problem",
]

#: The table property naming the formats UniForm keeps beside the Delta log.
ENABLED_FORMATS = "delta.universalFormat.enabledFormats"

#: PROTOCOL.md "Writer Requirements for IcebergCompatV2": the primitive types of the allow-list.
V2_PRIMITIVES = frozenset(
    {"byte", "short", "integer", "long", "float", "double", "string", "binary", "boolean", "timestamp"}
    | {"timestamp_ntz", "date"}
)
#: Nested types of the V2 allow-list (V1 blocks array and map).
V2_NESTED = frozenset({"array", "map", "struct"})
#: Integral types by width: a change to a wider one is an Iceberg promotion (byte/short/int are all Iceberg int).
_INTEGRAL_WIDTH = {"byte": 1, "short": 2, "integer": 4, "long": 8}


def _true(configuration: dict[str, str], key: str) -> bool:
    return str(configuration.get(key, "")).strip().lower() == "true"


def uniform_iceberg_enabled(configuration: dict[str, str] | None) -> bool:
    """Whether the table keeps Iceberg metadata (``delta.universalFormat.enabledFormats`` names iceberg)."""
    value = str((configuration or {}).get(ENABLED_FORMATS, ""))
    return "iceberg" in {v.strip().lower() for v in value.split(",")}


def iceberg_compat_versions(configuration: dict[str, str]) -> list[int]:
    """The icebergCompat versions the properties enable (V1..V3)."""
    return [n for n in (1, 2, 3) if _true(configuration, f"delta.enableIcebergCompatV{n}")]


def _disallowed(dtype: Any, version: int, path: str) -> tuple[str, str] | None:
    """(column path, type name) of the first type ``version`` does not allow inside ``dtype``, if any."""
    if isinstance(dtype, str):
        name = "decimal" if dtype.startswith("decimal") else dtype
        if name in V2_PRIMITIVES or name == "decimal":
            return None
        if version == 1 and name not in ("void", "null"):
            return None  # V1 has no allow-list; it blocks void (and array/map below)
        return path, dtype
    kind = dtype.get("type") if isinstance(dtype, dict) else None
    if kind not in V2_NESTED:
        return path, str(kind)
    if version == 1 and kind != "struct":
        return path, kind
    if kind == "struct":
        for f in dtype.get("fields", []):
            hit = _disallowed(f["type"], version, f"{path}.{f['name']}" if path else f["name"])
            if hit:
                return hit
        return None
    if kind == "array":
        return _disallowed(dtype["elementType"], version, f"{path}.element")
    return _disallowed(dtype["keyType"], version, f"{path}.key") or _disallowed(
        dtype["valueType"], version, f"{path}.value"
    )


def iceberg_schema_problem(schema_string: str, partition_columns: list[str], version: int | None) -> str | None:
    """Why icebergCompat ``version`` does not allow this schema, naming the column (None: it does)."""
    if not version:
        return None
    doc = json.loads(schema_string)
    hit = _disallowed(doc, version, "")
    if hit is not None:
        column, type_name = hit
        allowed = "map, array and void are blocked" if version == 1 else "only its type allow-list is allowed"
        return (
            f"column {column} has type {type_name}, which icebergCompatV{version} does not allow ({allowed}; "
            "PROTOCOL.md 'Iceberg Compatibility')"
        )
    if version >= 2:
        for f in doc.get("fields", []):
            dtype = f["type"]
            name = "decimal" if isinstance(dtype, str) and dtype.startswith("decimal") else dtype
            if f["name"] in partition_columns and not (
                isinstance(name, str) and (name in V2_PRIMITIVES or name == "decimal")
            ):
                return (
                    f"partition column {f['name']} has type {json.dumps(dtype)}, which icebergCompatV{version} "
                    "does not allow as a partition column (primitive types of its allow-list only)"
                )
    return None


def _decimal(t: str) -> tuple[int, int] | None:
    if not t.startswith("decimal(") or not t.endswith(")"):
        return None
    p, _, s = t[len("decimal(") : -1].partition(",")
    return int(p), int(s)


def type_change_problem(from_type: str, to_type: str) -> str | None:
    """Why Iceberg cannot read a column widened from ``from_type`` to ``to_type`` (None: a promotion it reads)."""
    if from_type == to_type:
        return None
    if from_type in _INTEGRAL_WIDTH and to_type in _INTEGRAL_WIDTH:
        if _INTEGRAL_WIDTH[from_type] <= _INTEGRAL_WIDTH[to_type]:
            return None
    elif (from_type, to_type) == ("float", "double"):
        return None
    else:
        a, b = _decimal(from_type), _decimal(to_type)
        if a is not None and b is not None and a[1] == b[1] and a[0] <= b[0]:
            return None
    return f"{from_type} -> {to_type} is not an Iceberg type promotion"


def _type_changes(dtype: Any, path: str, metadata: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """Every (column, fromType, toType) recorded in ``delta.typeChanges`` inside a field."""
    out: list[tuple[str, str, str]] = []
    for change in (metadata or {}).get("delta.typeChanges") or []:
        if (
            isinstance(change, dict)
            and isinstance(change.get("fromType"), str)
            and isinstance(change.get("toType"), str)
        ):
            where = f"{path}.{change['fieldPath']}" if change.get("fieldPath") else path
            out.append((where, change["fromType"], change["toType"]))
    if isinstance(dtype, dict):
        kind = dtype.get("type")
        if kind == "struct":
            for f in dtype.get("fields", []):
                out += _type_changes(f["type"], f"{path}.{f['name']}" if path else f["name"], f.get("metadata"))
        elif kind == "array":
            out += _type_changes(dtype["elementType"], f"{path}.element", None)
        elif kind == "map":
            out += _type_changes(dtype["keyType"], f"{path}.key", None)
            out += _type_changes(dtype["valueType"], f"{path}.value", None)
    return out


def uniform_iceberg_problem(
    writer_features: set[str] | frozenset[str],
    configuration: dict[str, str],
    schema_string: str | None = None,
    partition_columns: list[str] | None = None,
) -> str | None:
    """Why the Iceberg metadata of this UniForm table state cannot be written (None: it can, or no UniForm).

    ``writer_features``: the protocol's (effective) writer features; the schema checks run when
    ``schema_string`` is given.
    """
    if not uniform_iceberg_enabled(configuration):
        return None
    versions = iceberg_compat_versions(configuration)
    if 3 in versions:
        return (
            "it enables icebergCompatV3 (Iceberg format v3), whose metadata deltalog does not write (docs/uniform.md)"
        )
    if len(versions) != 1:
        return (
            "UniForm Iceberg needs exactly one of delta.enableIcebergCompatV1 / V2 set to true "
            f"({'neither is' if not versions else 'both are'}), as Delta requires"
        )
    version = versions[0]
    if str(configuration.get("delta.columnMapping.mode", "none")).lower() not in ("name", "id"):
        return (
            f"icebergCompatV{version} needs column mapping (delta.columnMapping.mode name or id): the Iceberg field "
            "ids are the column mapping ids"
        )
    if "deletionVectors" in writer_features and _true(configuration, "delta.enableDeletionVectors"):
        return (
            f"deletion vectors are enabled (delta.enableDeletionVectors=true), which icebergCompatV{version} forbids "
            "and its Iceberg metadata cannot express"
        )
    if schema_string is None:
        return None
    problem = iceberg_schema_problem(schema_string, list(partition_columns or []), version)
    if problem:
        return problem
    for column, old, new in _type_changes(json.loads(schema_string), "", None):
        why = type_change_problem(old, new)
        if why:
            return (
                f"column {column} was widened from {old} to {new}: {why}, so Iceberg readers could not read its files"
            )
    return None
