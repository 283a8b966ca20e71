"""Table creation: version 0 with the smallest protocol that covers what the table uses.

The protocol is derived from the schema and the properties, never guessed:
timestamp_ntz columns need ``timestampNtz``, ``delta.enableInCommitTimestamps``
needs ``inCommitTimestamp``, ``delta.enableDeletionVectors`` needs
``deletionVectors``, ``delta.columnMapping.mode`` needs ``columnMapping`` (and
every column gets an id and a physical name), ``delta.enableIcebergCompatV1/V2``
needs its feature and column mapping (name mode unless given; V2 also ids for list
elements and map keys/values), and ``delta.universalFormat.enabledFormats=iceberg``
makes a UniForm table whose Iceberg metadata the post-commit hook writes; and
``delta.feature.<name>=supported`` asks for a feature explicitly. A table that needs nothing beyond append-only and
invariants gets the legacy protocol (1, 2) that every reader understands. The
writer-feature gate runs before anything is written, so a table that would need
a feature deltalog does not implement is refused, naming the feature.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

import pyarrow as pa

from deltalog._flags import require_bools
from deltalog.commit.result import CommitResult
from deltalog.commit.transaction import Transaction
from deltalog.errors import InvalidArgumentError, NotADeltaTableError, TableAlreadyExistsError
from deltalog.log.actions import Metadata
from deltalog.log.listing import list_log
from deltalog.protocol.features import Operation
from deltalog.protocol.properties import validate_table_properties
from deltalog.protocol.schema import arrow_schema_to_schema_string, has_timestamp_ntz
from deltalog.protocol.table_protocol import FeatureRequirements, Protocol
from deltalog.protocol.uniform import uniform_iceberg_enabled
from deltalog.protocol.write_gate import check_can_write
from deltalog.storage.filesystem import Storage
from deltalog.write_checks.iceberg_compat import check_iceberg_schema, iceberg_compat_version

__all__ = ["choose_protocol", "create_table", "required_features"]

log = logging.getLogger(__name__)

#: Features that are reader+writer features (listed in both lists of the protocol).
_READER_WRITER = {"columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint", "typeWidening", "variantType"}
#: Properties that switch a feature on when true.
_FEATURE_PROPERTIES = {
    "delta.enableInCommitTimestamps": "inCommitTimestamp",
    "delta.enableDeletionVectors": "deletionVectors",
    "delta.appendOnly": "appendOnly",
    "delta.enableChangeDataFeed": "changeDataFeed",
    "delta.enableRowTracking": "rowTracking",
    "delta.enableTypeWidening": "typeWidening",
    "delta.enableIcebergCompatV1": "icebergCompatV1",
    "delta.enableIcebergCompatV2": "icebergCompatV2",
    "delta.enableIcebergCompatV3": "icebergCompatV3",
}
_LEGACY_12 = {"appendOnly", "invariants"}
_PHYSICAL = "delta.columnMapping.physicalName"
_ID = "delta.columnMapping.id"
_NESTED_IDS = "delta.columnMapping.nested.ids"


def _normalise_configuration(configuration: dict[str, Any] | None) -> tuple[dict[str, str], set[str]]:
    """String-valued table properties, and the features asked for with ``delta.feature.X``."""
    config: dict[str, str] = {}
    requested: set[str] = set()
    for key, value in (configuration or {}).items():
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError(f"table property names must be non-empty strings, got {key!r}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        if value is None or not isinstance(value, str | int | float):
            raise InvalidArgumentError(f"table property {key!r} must have a string value, got {value!r}")
        value = str(value)
        if key.startswith("delta.feature."):
            if value.lower() not in ("supported", "enabled"):
                raise InvalidArgumentError(f"{key} accepts only 'supported', got {value!r}")
            requested.add(key[len("delta.feature.") :])
            continue
        if key in ("delta.minReaderVersion", "delta.minWriterVersion"):
            raise InvalidArgumentError(
                f"{key} is not supported: deltalog chooses the protocol from the features the table needs "
                "(ask for a feature with delta.feature.<name>=supported)"
            )
        config[key] = value
    mode = config.get("delta.columnMapping.mode", "none")
    if mode not in ("none", "name", "id"):
        raise InvalidArgumentError(f"delta.columnMapping.mode must be none, name or id, got {mode!r}")
    validate_table_properties(config)
    return config, requested


def _field_features(schema: pa.Schema) -> set[str]:
    """Writer features implied by column metadata (invariants, generated and identity columns)."""
    found: set[str] = set()

    def walk(f: pa.Field) -> None:
        keys = {k.decode() for k in (f.metadata or {})}
        if "delta.invariants" in keys:
            found.add("invariants")
        if "delta.generationExpression" in keys:
            found.add("generatedColumns")
        if any(k.startswith("delta.identity.") for k in keys):
            found.add("identityColumns")
        if pa.types.is_struct(f.type):
            for i in range(f.type.num_fields):
                walk(f.type.field(i))

    for f in schema:
        walk(f)
    return found


def required_features(schema: pa.Schema, config: dict[str, str], requested: set[str] | None = None) -> set[str]:
    """Every table feature a new table with this schema and these properties uses."""
    features = set(requested or ())
    if has_timestamp_ntz(schema):
        features.add("timestampNtz")
    for prop, feature in _FEATURE_PROPERTIES.items():
        if config.get(prop, "false").lower() == "true":
            features.add(feature)
    if config.get("delta.columnMapping.mode", "none") != "none":
        features.add("columnMapping")
    if any(k.startswith("delta.constraints.") for k in config):
        features.add("checkConstraints")
    features |= _field_features(schema)
    return features


def choose_protocol(features: set[str]) -> Protocol:
    """(1, 2) when append-only/invariants are all the table needs, else table features (x, 7)."""
    if features <= _LEGACY_12:
        return Protocol(1, 2)
    req = FeatureRequirements()
    for f in features:
        (req.reader if f in _READER_WRITER else req.writer).add(f)
    return req.to_protocol()


def _with_column_mapping(schema: pa.Schema, nested_ids: bool = False) -> tuple[pa.Schema, int]:
    """Give every (nested) field a column id and a unique physical name, as PROTOCOL.md requires; struct fields
    inside lists and maps too. ``nested_ids`` (icebergCompatV2): list elements and map keys/values get ids in
    ``delta.columnMapping.nested.ids`` of the field holding them, keyed ``<physical name>.element`` / ``.key`` /
    ``.value`` (deeper: ``<physical name>.element.element``), as Delta's IcebergCompatV2 assigns them."""
    next_id = 0

    def retype(t: pa.DataType) -> pa.DataType:
        if pa.types.is_struct(t):
            return pa.struct([assign(t.field(i)) for i in range(t.num_fields)])
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return pa.list_(t.value_field.with_type(retype(t.value_type)))
        if pa.types.is_map(t):
            return pa.map_(t.key_field.with_type(retype(t.key_type)), t.item_field.with_type(retype(t.item_type)))
        return t

    def assign(f: pa.Field) -> pa.Field:
        nonlocal next_id
        t = retype(f.type)
        next_id += 1
        md = dict(f.metadata or {})
        md[_ID.encode()] = str(next_id).encode()
        md[_PHYSICAL.encode()] = f"col-{uuid.uuid4()}".encode()
        return pa.field(f.name, t, f.nullable, metadata=md)

    def nested(t: pa.DataType, path: str, ids: dict[str, int]) -> None:
        nonlocal next_id
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            next_id += 1
            ids[f"{path}.element"] = next_id
            nested(t.value_type, f"{path}.element", ids)
        elif pa.types.is_map(t):
            for part, inner in (("key", t.key_type), ("value", t.item_type)):
                next_id += 1
                ids[f"{path}.{part}"] = next_id
                nested(inner, f"{path}.{part}", ids)

    def with_nested(f: pa.Field) -> pa.Field:
        t = f.type
        if pa.types.is_struct(t):
            t = pa.struct([with_nested(t.field(i)) for i in range(t.num_fields)])
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            t = pa.list_(with_nested(t.value_field))
        elif pa.types.is_map(t):
            t = pa.map_(with_nested(t.key_field), with_nested(t.item_field))
        md = dict(f.metadata or {})
        physical = md.get(_PHYSICAL.encode())
        if physical is not None:
            ids: dict[str, int] = {}
            nested(f.type, physical.decode(), ids)
            if ids:
                md[_NESTED_IDS.encode()] = json.dumps(ids).encode()
        return f.with_type(t).with_metadata(md)

    fields = [assign(f) for f in schema]
    if nested_ids:
        fields = [with_nested(f) for f in fields]
    return pa.schema(fields), next_id


def _check_schema(schema: Any, partition_by: list[str]) -> None:
    if not isinstance(schema, pa.Schema):
        raise InvalidArgumentError(f"the schema must be a pyarrow.Schema, got {type(schema).__name__}")
    if len(schema) == 0:
        raise InvalidArgumentError("the schema has no columns")
    lower = [n.lower() for n in schema.names]
    dup = sorted({n for n in lower if lower.count(n) > 1})
    if dup:
        raise InvalidArgumentError(f"column names must be unique regardless of case; {dup[0]!r} appears twice")
    for c in partition_by:
        if c not in schema.names:
            raise InvalidArgumentError(f"partition column {c!r} is not in the schema ({', '.join(schema.names)})")
        t = schema.field(c).type
        if pa.types.is_nested(t):
            raise InvalidArgumentError(f"partition column {c!r} has nested type {t}; partition by a primitive column")
    if len(set(partition_by)) != len(partition_by):
        raise InvalidArgumentError("a partition column is listed twice")
    if partition_by and len(set(partition_by)) == len(schema):
        raise InvalidArgumentError("every column is a partition column; a table needs at least one data column")


def existing_table_version(storage: Storage) -> int | None:
    """The latest version of the Delta table at ``storage``, or None when there is none (yet)."""
    if not storage.root_exists():
        return None
    try:
        return list_log(storage).latest_version
    except NotADeltaTableError:
        return None


def create_table(
    uri: str,
    schema: pa.Schema,
    *,
    partition_by: list[str] | None = None,
    configuration: dict[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
    name: str | None = None,
    description: str | None = None,
    run_hooks: bool = True,
) -> CommitResult:
    """Create an empty Delta table at ``uri`` (version 0); refuses a location that already holds one."""
    require_bools(run_hooks=run_hooks)
    partition_by = list(partition_by or [])
    _check_schema(schema, partition_by)
    config, requested = _normalise_configuration(configuration)
    compat = iceberg_compat_version(config)
    if (compat or uniform_iceberg_enabled(config)) and config.get("delta.columnMapping.mode", "none") == "none":
        # icebergCompat requires column mapping; Delta sets name mode when it is not given (RequireColumnMapping).
        config["delta.columnMapping.mode"] = "name"
    features = required_features(schema, config, requested)
    protocol = choose_protocol(features)
    check_iceberg_schema(
        arrow_schema_to_schema_string(schema), partition_by, iceberg_compat_version(config), InvalidArgumentError
    )
    if "columnMapping" in features:
        schema, max_id = _with_column_mapping(schema, nested_ids=(compat or 0) >= 2)
        config["delta.columnMapping.maxColumnId"] = str(max_id)
    storage = Storage(uri, storage_options)
    check_can_write(
        storage,
        protocol,
        "create the table",
        Operation.CREATE,
        config,
        commits=True,
        schema_string=arrow_schema_to_schema_string(schema),
        partition_columns=partition_by,
    )
    existing = existing_table_version(storage)
    if existing is not None:
        raise TableAlreadyExistsError(
            f"a Delta table already exists at {storage.uri} (version {existing}); refusing to create another"
        )
    now = int(time.time() * 1000)
    metadata = Metadata(
        id=str(uuid.uuid4()),
        schema_string=arrow_schema_to_schema_string(schema),
        partition_columns=partition_by,
        configuration=config,
        name=name,
        description=description,
        created_time=now,
    )
    params: dict[str, Any] = {
        "isManaged": "false",
        "partitionBy": json.dumps(partition_by),
        "properties": json.dumps(config),
    }
    if description is not None:
        params["description"] = description
    txn = Transaction(
        storage,
        None,
        operation="CREATE TABLE",
        feature_operation=Operation.CREATE,
        operation_parameters=params,
        run_hooks=run_hooks,
        max_attempts=1,
    )
    txn.update_protocol(protocol)
    txn.update_metadata(metadata)
    log.info(
        "creating table at %s with protocol (%d, %d) %s",
        storage.uri,
        protocol.min_reader_version,
        protocol.min_writer_version,
        sorted(features),
    )
    return txn.commit()
