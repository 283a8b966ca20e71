"""Convert a directory of Parquet files (plain or hive-partitioned) into a Delta table in place.

Like Delta's ``CONVERT TO DELTA parquet.`path` [PARTITIONED BY (col type, ...)]``:
every data file stays where it is and is listed in one commit 0 with its
size, partition values and stats from its footer. Nothing is written until
every file has been examined, so a directory that cannot be converted (a
file that is not Parquet, two files that disagree on a column's type, a
partition directory that does not match ``partition_by``) is refused with an
error naming the file, and stays exactly as it was. An existing Delta table is
refused too.

Hidden paths (a component starting with ``_`` or ``.``, e.g. ``_SUCCESS``,
``_temporary/``, ``.crc`` files) are skipped, as Delta readers skip them, by the
rule of :mod:`deltalog.write_checks.hidden_paths`: a partition directory ``_p=x`` of a declared
partition column ``_p`` is data, not hidden. Partition values are written in
their canonical form (:mod:`deltalog.protocol.partition_values`: ``d=1.5`` of a
``decimal(5,2)`` becomes ``"1.50"``); a value the type cannot hold is refused.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog.commit.transaction import Transaction
from deltalog.create import choose_protocol, required_features
from deltalog.errors import (
    CommitFailedError,
    DataFileMismatchError,
    InvalidArgumentError,
    NotADeltaTableError,
    OperationRefusedError,
    StorageError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from deltalog.log.actions import Metadata
from deltalog.log.listing import list_log
from deltalog.protocol.features import Operation
from deltalog.protocol.file_stats import stats_from_parquet_metadata, stats_json
from deltalog.protocol.parquet_layout import to_log_path
from deltalog.protocol.partition_values import PartitionValueError, canonical_partition_value
from deltalog.protocol.schema import arrow_field_to_delta, arrow_schema_to_schema_string, delta_type_to_arrow
from deltalog.protocol.table_protocol import check_writable
from deltalog.storage.filesystem import FileInfo, Storage
from deltalog.write_checks.hidden_paths import HiddenRule
from deltalog.write_checks.schema_enforcement import check_file_schema

__all__ = ["ConvertResult", "convert_to_delta"]

log = logging.getLogger(__name__)

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
#: Spark SQL type names accepted in ``partition_by`` and their Delta names.
_TYPE_NAMES = {
    "string": "string",
    "varchar": "string",
    "int": "integer",
    "integer": "integer",
    "bigint": "long",
    "long": "long",
    "smallint": "short",
    "short": "short",
    "tinyint": "byte",
    "byte": "byte",
    "boolean": "boolean",
    "bool": "boolean",
    "double": "double",
    "float": "float",
    "real": "float",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "binary": "binary",
}
_DECIMAL = re.compile(r"decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)", re.IGNORECASE)


@dataclass(frozen=True)
class ConvertResult:
    """What ``convert_to_delta`` wrote: commit 0 listing every data file."""

    table: str
    version: int
    num_files: int
    num_bytes: int
    num_records: int
    partition_columns: list[str]
    schema: list[dict[str, Any]]
    protocol: dict[str, Any]
    seconds: float = 0.0
    skipped_hidden: int = 0
    hooks: list[dict[str, Any]] = field(default_factory=list)

    def summary_line(self) -> str:
        """One line for logs and the CLI."""
        return (
            f"converted {self.table} to Delta (version {self.version}): {self.num_files} files, {self.num_bytes} "
            f"bytes, {self.num_records} records, partitioned by {self.partition_columns or 'nothing'}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "num_files": self.num_files,
            "num_bytes": self.num_bytes,
            "num_records": self.num_records,
            "partition_columns": list(self.partition_columns),
            "schema": self.schema,
            "protocol": self.protocol,
            "skipped_hidden_files": self.skipped_hidden,
            "seconds": round(self.seconds, 3),
        }


def parse_partition_by(spec: str | list[Any] | dict[str, str] | None) -> list[tuple[str, str]]:
    """``"year int, month string"`` (or a list of (name, type) pairs, or a dict) as (name, Delta type) pairs."""
    if spec is None or spec == "" or spec == []:
        return []
    if isinstance(spec, dict):
        items = list(spec.items())
    elif isinstance(spec, str):
        items = []
        for part in _split_top_level(spec):
            bits = part.strip().split(None, 1)
            if len(bits) != 2:
                raise InvalidArgumentError(
                    f"--partition-by: {part.strip()!r} must be 'column type' (e.g. \"year int, region string\")"
                )
            items.append((bits[0].strip("`"), bits[1].strip()))
    else:
        items = []
        for item in spec:
            if not isinstance(item, list | tuple) or len(item) != 2:
                raise InvalidArgumentError(f"partition_by entries must be (name, type) pairs, got {item!r}")
            items.append((str(item[0]), str(item[1])))
    out: list[tuple[str, str]] = []
    for name, type_name in items:
        m = _DECIMAL.fullmatch(type_name.strip())
        if m:
            delta_type = f"decimal({int(m.group(1))},{int(m.group(2))})"
        else:
            delta_type = _TYPE_NAMES.get(type_name.strip().lower(), "")
        if not delta_type:
            raise InvalidArgumentError(
                f"--partition-by: unknown type {type_name!r} for column {name!r} "
                f"(use one of {', '.join(sorted(set(_TYPE_NAMES)))} or decimal(p,s))"
            )
        if not name:
            raise InvalidArgumentError("--partition-by: a column name is empty")
        out.append((name, delta_type))
    lowered = [n.lower() for n, _ in out]
    if len(set(lowered)) != len(lowered):
        raise InvalidArgumentError("--partition-by lists a column twice")
    return out


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses (``decimal(10,2)``)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _normalise_value(raw: str, delta_type: str, column: str, rel: str) -> str | None:
    """A partition value in its canonical form (PROTOCOL.md serialization); refuses values the type cannot hold."""
    try:
        return canonical_partition_value(raw, delta_type_to_arrow(delta_type))
    except PartitionValueError as exc:
        raise InvalidArgumentError(
            f"{rel}: partition value {raw!r} of column {column!r} is not a valid {delta_type}: {exc}; nothing converted"
        ) from None


def _partition_values(rel: str, partition_by: list[tuple[str, str]]) -> dict[str, str | None]:
    dirs = rel.split("/")[:-1]
    if not partition_by:
        hive = [d.split("=", 1)[0] for d in dirs if "=" in d]
        if hive:
            raise InvalidArgumentError(
                f"{rel} is in hive-style partition directories ({', '.join(sorted(set(hive)))}); "
                'declare them with --partition-by "col type, ..."'
            )
        return {}
    expected = [name for name, _ in partition_by]
    if len(dirs) != len(partition_by):
        raise InvalidArgumentError(
            f"{rel} is not in a partition directory {'/'.join(f'{c}=...' for c in expected)} "
            "(every data file must sit exactly at the partition depth)"
        )
    values: dict[str, str | None] = {}
    for d, (name, delta_type) in zip(dirs, partition_by, strict=True):
        key, sep, raw = d.partition("=")
        if not sep or unquote(key) != name:
            raise InvalidArgumentError(f"{rel}: directory {d!r} is not a partition directory of column {name!r}")
        value = unquote(raw)
        values[name] = None if value in (HIVE_NULL, "") else _normalise_value(value, delta_type, name, rel)
    return values


@dataclass
class _Examined:
    info: FileInfo
    rel: str
    partition_values: dict[str, str | None]
    metadata: pq.FileMetaData
    schema: pa.Schema


def _examine(storage: Storage, info: FileInfo, rel: str, pv: dict[str, str | None]) -> _Examined:
    try:
        if storage.is_local:
            md = pq.read_metadata(info.path)
        else:
            with storage.open_input(info.path) as fh:
                md = pq.read_metadata(fh)
        schema = md.schema.to_arrow_schema()
    except OSError as exc:
        if exc.errno is not None:
            # A storage failure (network, permissions, a file vanishing) carries an errno; Arrow's own
            # parse errors (a corrupt footer) do not. Retryable, and the file may be fine: not "not Parquet".
            raise StorageError(f"cannot read the footer of {rel} ({exc}); nothing converted") from None
        raise InvalidArgumentError(f"{rel} is not a readable Parquet file ({exc}); nothing converted") from None
    except (pa.ArrowInvalid, ValueError) as exc:
        raise InvalidArgumentError(f"{rel} is not a readable Parquet file ({exc}); nothing converted") from None
    return _Examined(info, rel, pv, md, schema)


def _merge_schemas(examined: list[_Examined], partition_names: set[str]) -> pa.Schema:
    """Union of the files' columns; the same column must have the same Delta type in every file."""
    fields: dict[str, tuple[pa.Field, str, str]] = {}  # name -> (field, delta type json, first file)
    present: dict[str, int] = {}
    for e in examined:
        int96 = {
            e.metadata.schema.column(i).path
            for i in range(e.metadata.num_columns)
            if e.metadata.schema.column(i).physical_type == "INT96"
        }
        for f in e.schema:
            if f.name in partition_names:
                raise InvalidArgumentError(
                    f"{e.rel} holds partition column {f.name!r} as a data column; nothing converted"
                )
            try:
                delta = arrow_field_to_delta(pa.field(f.name, f.type, f.nullable))
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"{e.rel}: column {f.name!r}: {exc}") from None
            if f.name in int96:
                delta["type"] = "timestamp"  # Spark's INT96 is an instant (Delta Spark's CONVERT reads it so)
            type_json = json.dumps(delta["type"], sort_keys=True)
            seen = fields.get(f.name)
            if seen is None:
                fields[f.name] = (pa.field(f.name, delta_type_to_arrow(delta["type"]), f.nullable), type_json, e.rel)
            else:
                if seen[1] != type_json:
                    raise InvalidArgumentError(
                        f"incompatible files: {e.rel} has column {f.name!r} as {_show(delta['type'])} but "
                        f"{seen[2]} has it as {_show(json.loads(seen[1]))}; nothing converted"
                    )
                if f.nullable and not seen[0].nullable:
                    fields[f.name] = (seen[0].with_nullable(True), seen[1], seen[2])
            present[f.name] = present.get(f.name, 0) + 1
    out = []
    for name, (f, _, _) in fields.items():
        out.append(f if present[name] == len(examined) else f.with_nullable(True))
    return pa.schema(out)


def _show(delta_type: Any) -> str:
    return delta_type if isinstance(delta_type, str) else json.dumps(delta_type)


def convert_to_delta(
    path: str,
    *,
    partition_by: str | list[Any] | dict[str, str] | None = None,
    storage_options: dict[str, Any] | None = None,
    max_workers: int | None = None,
) -> ConvertResult:
    """Make the Parquet directory at ``path`` a Delta table (version 0); see the module docstring."""
    started = time.perf_counter()
    parts = parse_partition_by(partition_by)
    storage = Storage(path, storage_options)
    if not storage.root_exists():
        raise TableNotFoundError(f"nothing to convert at {storage.uri}: the location does not exist")
    try:
        listing = list_log(storage)
    except NotADeltaTableError:
        listing = None
    if listing is not None:
        raise TableAlreadyExistsError(
            f"{storage.uri} is already a Delta table (version {listing.latest_version}); nothing converted"
        )
    candidates: list[tuple[FileInfo, str, dict[str, str | None]]] = []
    hidden = 0
    try:
        found = list(storage.walk_files())
    except OSError as exc:
        raise StorageError(f"cannot list {storage.uri} ({exc}); nothing converted") from None
    rule = HiddenRule(n for n, _ in parts)
    for info in found:
        rel = storage.relative(info.path).replace("\\", "/")
        if rule.hidden_component(rel) is not None:
            hidden += 1
            continue
        candidates.append((info, rel, _partition_values(rel, parts)))
    if not candidates:
        raise InvalidArgumentError(f"no Parquet data files at {storage.uri}; nothing to convert")
    candidates.sort(key=lambda c: c[1])
    workers = max_workers or (4 if storage.is_local else 32)
    log.info("examining %d files under %s", len(candidates), storage.uri)
    with ThreadPoolExecutor(max_workers=min(workers, len(candidates))) as pool:
        examined = list(pool.map(lambda c: _examine(storage, *c), candidates))
    data_schema = _merge_schemas(examined, {n for n, _ in parts})
    if len(data_schema) == 0:
        raise InvalidArgumentError(f"the files at {storage.uri} have no data columns; nothing converted")
    part_fields = [pa.field(n, delta_type_to_arrow(t), True) for n, t in parts]
    clash = [n for n, _ in parts if n.lower() in {f.name.lower() for f in data_schema}]
    if clash:
        raise InvalidArgumentError(f"partition column {clash[0]!r} is also a data column; nothing converted")
    schema = pa.schema(list(data_schema) + part_fields)
    protocol = choose_protocol(required_features(schema, {}))
    check_writable(protocol, "convert to Delta", Operation.CONVERT)
    partition_columns = [n for n, _ in parts]
    metadata = Metadata(
        id=str(uuid.uuid4()),
        schema_string=arrow_schema_to_schema_string(schema),
        partition_columns=partition_columns,
        configuration={},
        created_time=int(time.time() * 1000),
    )
    for e in examined:
        # The schema came from these files, yet a file may still hold what readers cannot
        # read as that type (nanosecond timestamps, unsigned integers): the commit-request rule.
        try:
            check_file_schema(e.metadata, metadata, protocol, e.rel)
        except DataFileMismatchError as exc:
            raise InvalidArgumentError(f"{e.rel}: {exc.detail}; nothing converted") from None
    adds: list[dict[str, Any]] = []
    records = 0
    for e in examined:
        stats = stats_from_parquet_metadata(e.metadata, metadata.schema, partition_columns)
        records += e.metadata.num_rows
        adds.append(
            {
                "path": to_log_path(e.rel),
                "partitionValues": dict(e.partition_values),
                "size": e.info.size,
                "modificationTime": e.info.modification_time,
                "dataChange": True,
                "stats": stats_json(stats),
            }
        )
    txn = Transaction(
        storage,
        None,
        operation="CONVERT",
        feature_operation=Operation.CONVERT,
        operation_parameters={
            "numFiles": str(len(adds)),
            "partitionedBy": json.dumps(partition_columns),
            "collectStats": "true",
            "sourceFormat": "parquet",
        },
        max_attempts=1,
    )
    txn.update_protocol(protocol)
    txn.update_metadata(metadata)
    txn.add(adds)
    try:
        commit = txn.commit()
    except CommitFailedError:
        raise TableAlreadyExistsError(
            f"a Delta table was created at {storage.uri} while it was being converted; nothing converted"
        ) from None
    if commit.noop:
        raise OperationRefusedError(f"{storage.uri} was not converted: {commit.reason}")
    log.info("converted %s: %d files, %d records", storage.uri, len(adds), records)
    return ConvertResult(
        table=storage.uri,
        version=commit.version,
        num_files=len(adds),
        num_bytes=sum(a["size"] for a in adds),
        num_records=records,
        partition_columns=partition_columns,
        schema=[arrow_field_to_delta(f) for f in schema],
        protocol=protocol.to_dict(),
        seconds=time.perf_counter() - started,
        skipped_hidden=hidden,
        hooks=[h.to_dict() for h in commit.hooks],
    )
