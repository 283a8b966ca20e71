"""Checkpoint writing: one version's reconciled state as Parquet, then ``_last_checkpoint``.

A checkpoint lets readers skip replaying the JSON commits before it, and it is what
log cleanup keeps when it deletes them, so it must be complete and correct before
anyone can find it:

- the Parquet file is streamed to a hidden temp file (row group by row group, straight
  from the snapshot's Arrow tables: no per-row Python), re-read and checked against
  what was written, and only then moved into place (rename locally, one PUT remotely);
- ``_last_checkpoint`` (with the protocol's MD5 ``checksum``) is replaced only after
  that, and never moved back to an older version;
- a crash at any point leaves either no checkpoint under its final name or a complete
  one, plus at most hidden temp files or unreferenced sidecars that readers ignore.

Classic single-file checkpoints follow the V1 spec. Tables with the ``v2Checkpoint``
feature get a V2 checkpoint: a UUID-named JSON top-level file (checkpointMetadata,
protocol, metaData, txn, domainMetadata, sidecar) whose add/remove actions live in
Parquet sidecars under ``_delta_log/_sidecars`` (at most ``SIDECAR_MAX_ACTIONS`` each).

The checkpoint a commit asks for (``delta.checkpointInterval``, default 10: a checkpoint
at every version divisible by it) is this function called by the post-commit hook of
``deltalog.commit.standard_post_commit`` on the committer's storage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from deltalog.errors import (
    CorruptCheckpointError,
    InvalidArgumentError,
    OperationRefusedError,
    StorageError,
)
from deltalog.log.actions import ADD_FIELDS, REMOVE_FIELDS, STRING_MAP, Metadata
from deltalog.log.checkpoint_reader import read_protocol_and_metadata
from deltalog.log.history import format_ms
from deltalog.log.listing import SIDECARS_DIR, LogListing, list_log
from deltalog.log.load import snapshot_at
from deltalog.log.replay import array_from_python, int64_array
from deltalog.log.snapshot import Snapshot
from deltalog.log_maintenance.app_transactions import table_clock_at, txn_retention_at
from deltalog.log_maintenance.last_checkpoint import (
    describe_checkpoint,
    last_checkpoint_document,
    update_last_checkpoint,
)
from deltalog.protocol.features import Operation
from deltalog.protocol.parquet_layout import CODEC_PROPERTY, DEFAULT_CODEC, PARQUET_CODECS
from deltalog.protocol.properties import (
    DEFAULT_DELETED_FILE_RETENTION,
    checkpoint_protection_version,
    config_bool,
    config_interval_ms,
)
from deltalog.protocol.table_protocol import check_writable
from deltalog.protocol.write_gate import check_can_write
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage

log = logging.getLogger(__name__)

#: Rows per Parquet row group (and per Arrow batch converted at a time).
ROW_GROUP_ROWS = 65_536
#: File actions per V2 sidecar file.
SIDECAR_MAX_ACTIONS = 50_000
_PHYSICAL_NAME = b"delta.columnMapping.physicalName"


# --- the checkpoint schema -----------------------------------------------------------------

PROTOCOL_TYPE = pa.struct(
    [
        ("minReaderVersion", pa.int32()),
        ("minWriterVersion", pa.int32()),
        ("readerFeatures", pa.list_(pa.string())),
        ("writerFeatures", pa.list_(pa.string())),
    ]
)
METADATA_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STRING_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("createdTime", pa.int64()),
        ("configuration", STRING_MAP),
    ]
)
TXN_TYPE = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
DOMAIN_METADATA_TYPE = pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())])
CHECKPOINT_METADATA_TYPE = pa.struct([("version", pa.int64()), ("tags", STRING_MAP)])
SIDECAR_TYPE = pa.struct(
    [("path", pa.string()), ("sizeInBytes", pa.int64()), ("modificationTime", pa.int64()), ("tags", STRING_MAP)]
)
#: Tombstones in checkpoints carry no stats or tags (PROTOCOL.md, Checkpoints).
CHECKPOINT_REMOVE_FIELDS = [(n, t) for n, t in REMOVE_FIELDS if n not in ("stats", "tags")]
CHECKPOINT_REMOVE_TYPE = pa.struct(CHECKPOINT_REMOVE_FIELDS)


def _physical_name(f: pa.Field) -> str:
    if f.metadata and _PHYSICAL_NAME in f.metadata:
        return f.metadata[_PHYSICAL_NAME].decode()
    return f.name


def _renamed(f: pa.Field, physical: bool) -> pa.Field:
    """``f`` under its physical name, with nested struct fields renamed recursively."""
    typ = f.type
    if pa.types.is_struct(typ):
        typ = pa.struct([_renamed(typ.field(i), physical) for i in range(typ.num_fields)])
    return pa.field(_physical_name(f) if physical else f.name, typ)


def _has_min_max(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_string(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
    )


def _json_read_type(t: pa.DataType) -> pa.DataType:
    """How pyarrow's JSON reader must read a stats value of type ``t`` (dates and timestamps arrive as text)."""
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        return pa.string()
    return t


def _stats_fields(fields: list[pa.Field], leaf: Any) -> list[pa.Field]:
    out = []
    for f in fields:
        if pa.types.is_struct(f.type):
            children = _stats_fields([f.type.field(i) for i in range(f.type.num_fields)], leaf)
            if children:
                out.append(pa.field(f.name, pa.struct(children)))
            continue
        t = leaf(f.type)
        if t is not None:
            out.append(pa.field(f.name, t))
    return out


@dataclass
class _ParsedColumns:
    """The typed ``partitionValues_parsed`` / ``stats_parsed`` struct types, when the table asks for them."""

    partition_fields: list[tuple[str, pa.DataType]] = field(default_factory=list)  # (physical name, type)
    stats_type: pa.StructType | None = None  # typed, as written
    stats_read_type: pa.StructType | None = None  # as pyarrow's JSON reader must read it

    @classmethod
    def for_table(cls, metadata: Metadata) -> _ParsedColumns:
        schema = metadata.schema
        physical = metadata.column_mapping_mode != "none"
        by_name = {f.name: _renamed(f, physical) for f in schema}
        partition_fields = [(by_name[c].name, by_name[c].type) for c in metadata.partition_columns if c in by_name]
        data_fields = [by_name[f.name] for f in schema if f.name not in set(metadata.partition_columns)]

        def stats(leaf_minmax: Any) -> pa.StructType:
            return pa.struct(
                [
                    ("numRecords", pa.int64()),
                    ("minValues", pa.struct(_stats_fields(data_fields, leaf_minmax))),
                    ("maxValues", pa.struct(_stats_fields(data_fields, leaf_minmax))),
                    ("nullCount", pa.struct(_stats_fields(data_fields, lambda t: pa.int64()))),
                    ("tightBounds", pa.bool_()),
                ]
            )

        return cls(
            partition_fields=partition_fields,
            stats_type=stats(lambda t: t if _has_min_max(t) else None),
            stats_read_type=stats(lambda t: _json_read_type(t) if _has_min_max(t) else None),
        )


@dataclass
class _Layout:
    """What this checkpoint writes: the add struct's fields and how to fill the optional ones."""

    add_type: pa.StructType
    write_stats_json: bool
    parsed: _ParsedColumns | None

    @classmethod
    def for_table(cls, metadata: Metadata) -> _Layout:
        conf = metadata.configuration
        write_json = config_bool(conf, "delta.checkpoint.writeStatsAsJson", True)
        write_struct = config_bool(conf, "delta.checkpoint.writeStatsAsStruct", False)
        fields = [(n, t) for n, t in ADD_FIELDS if write_json or n != "stats"]
        parsed = None
        if write_struct:
            parsed = _ParsedColumns.for_table(metadata)
            if parsed.partition_fields:
                fields.append(("partitionValues_parsed", pa.struct(parsed.partition_fields)))
            fields.append(("stats_parsed", parsed.stats_type))
        return cls(pa.struct(fields), write_json, parsed)

    def schema(self, v2_top_level: bool, file_actions: bool = True, small_actions: bool = True) -> pa.Schema:
        cols: list[tuple[str, pa.DataType]] = []
        if small_actions:
            cols += [("protocol", PROTOCOL_TYPE), ("metaData", METADATA_TYPE), ("txn", TXN_TYPE)]
            cols += [("domainMetadata", DOMAIN_METADATA_TYPE)]
            if v2_top_level:
                cols += [("checkpointMetadata", CHECKPOINT_METADATA_TYPE), ("sidecar", SIDECAR_TYPE)]
        if file_actions:
            cols += [("add", self.add_type), ("remove", CHECKPOINT_REMOVE_TYPE)]
        return pa.schema(cols)


# --- building record batches straight from the snapshot's Arrow tables ---------------------


def _nulls_batch(schema: pa.Schema, n: int, **columns: pa.Array) -> pa.RecordBatch:
    arrays = [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _parse_partition_values(pv: pa.Array, fields: list[tuple[str, pa.DataType]]) -> pa.StructArray:
    """``partitionValues`` (string map) as a typed struct; empty strings are nulls (PROTOCOL.md)."""
    children = []
    for name, typ in fields:
        raw = pc.map_lookup(pv, pa.scalar(name), "first")
        raw = pc.if_else(pc.equal(raw, ""), pa.scalar(None, pa.string()), raw)
        children.append(_cast_partition_value(raw, typ, name))
    return pa.StructArray.from_arrays(children, fields=[pa.field(n, t) for n, t in fields])


def _cast_partition_value(raw: pa.Array, typ: pa.DataType, name: str) -> pa.Array:
    if pa.types.is_string(typ):
        return raw
    if pa.types.is_binary(typ):
        return raw.cast(pa.binary())
    try:
        return raw.cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if pa.types.is_timestamp(typ) and typ.tz is not None:
            # Partition timestamps may be written without a zone; they are then UTC wall-clock values.
            return raw.cast(pa.timestamp(typ.unit)).cast(typ)
        raise


def _parse_stats(stats: pa.Array, read_type: pa.StructType, final_type: pa.StructType) -> pa.StructArray:
    """``stats`` JSON strings as the typed ``stats_parsed`` struct, with pyarrow's JSON reader."""
    filled = pc.fill_null(stats, "{}")
    filled = pc.if_else(pc.equal(filled, ""), "{}", filled)
    # One object per line: a raw newline can only be JSON whitespace, so it becomes a space. The
    # string array's data buffer then *is* the newline-delimited document (no Python strings).
    lines = pc.binary_join_element_wise(pc.replace_substring(filled, "\n", " "), "", "\n")
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    buffers = lines.buffers()
    offset_type = pa.int64() if pa.types.is_large_string(lines.type) else pa.int32()
    offsets = pa.Array.from_buffers(offset_type, len(lines) + 1, [None, buffers[1]], offset=lines.offset)
    start, end = offsets[0].as_py(), offsets[len(lines)].as_py()
    text = buffers[2][start:end] if len(lines) else pa.py_buffer(b"")
    table = pa_json.read_json(
        pa.BufferReader(text),
        read_options=pa_json.ReadOptions(block_size=max(1 << 20, len(text) + 1)),
        parse_options=pa_json.ParseOptions(
            explicit_schema=pa.schema(list(read_type)), unexpected_field_behavior="ignore"
        ),
    )
    if table.num_rows != len(stats):
        raise ValueError(f"read {table.num_rows} stats objects for {len(stats)} files")
    arr = table.to_struct_array().combine_chunks()
    typed = _cast_struct(arr, final_type)
    mask = pc.is_null(stats)
    return pa.StructArray.from_arrays(
        [typed.field(i) for i in range(typed.type.num_fields)], fields=list(final_type), mask=mask
    )


def _cast_struct(arr: pa.Array, target: pa.DataType) -> pa.Array:
    if pa.types.is_struct(target):
        children = [_cast_struct(arr.field(i), target.field(i).type) for i in range(target.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=arr.is_null() if arr.null_count else None)
    if arr.type == target:
        return arr
    if pa.types.is_timestamp(target) and target.tz is not None:
        try:
            return arr.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return arr.cast(pa.timestamp(target.unit)).cast(target)
    return arr.cast(target)


def _add_struct(batch: pa.RecordBatch, layout: _Layout) -> pa.StructArray:
    """One batch of ``snapshot.files`` as the checkpoint's ``add`` struct."""
    arrays = {name: batch.column(name) for name in batch.schema.names}
    children = []
    parsed = layout.parsed  # set exactly when the layout has the *_parsed fields
    for f in layout.add_type:
        if f.name == "partitionValues_parsed" and parsed is not None:
            children.append(_parse_partition_values(arrays["partitionValues"], parsed.partition_fields))
        elif f.name == "stats_parsed" and parsed is not None:
            children.append(_parse_stats(arrays["stats"], parsed.stats_read_type, parsed.stats_type))
        else:
            children.append(arrays[f.name])
    return pa.StructArray.from_arrays(children, fields=list(layout.add_type))


def _remove_struct(batch: pa.RecordBatch) -> pa.StructArray:
    return pa.StructArray.from_arrays(
        [batch.column(n) for n, _ in CHECKPOINT_REMOVE_FIELDS],
        fields=[pa.field(n, t) for n, t in CHECKPOINT_REMOVE_FIELDS],
    )


def _small_action_rows(
    snapshot: Snapshot, txns: list[dict[str, Any]], checkpoint_metadata: dict[str, Any] | None
) -> list[tuple[str, dict[str, Any]]]:
    """Every non-file action of the checkpoint, in the order it is written."""
    rows: list[tuple[str, dict[str, Any]]] = []
    if checkpoint_metadata is not None:
        rows.append(("checkpointMetadata", checkpoint_metadata))
    rows.append(("protocol", snapshot.protocol.to_dict()))
    rows.append(("metaData", snapshot.metadata.to_action()))
    rows += [("txn", {k: t.get(k) for k in ("appId", "version", "lastUpdated")}) for t in txns]
    for d in snapshot.domain_metadata.values():
        rows.append(
            ("domainMetadata", {"domain": d["domain"], "configuration": d.get("configuration", ""), "removed": False})
        )
    return rows


def _small_batch(schema: pa.Schema, rows: list[tuple[str, dict[str, Any]]]) -> pa.RecordBatch:
    n = len(rows)
    columns = {}
    for name in schema.names:
        values = [_for_arrow(body) if kind == name else None for kind, body in rows]
        if any(v is not None for v in values):
            columns[name] = array_from_python(values, schema.field(name).type)  # pa.array would import pandas
    return _nulls_batch(schema, n, **columns)


def _for_arrow(value: Any) -> Any:
    """Dicts that pyarrow must read as maps become lists of pairs; nested structs stay dicts."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("configuration", "options", "tags") and isinstance(v, dict):
                out[k] = list(v.items())
            else:
                out[k] = _for_arrow(v)
        return out
    return value


# --- writing files atomically and checking them ---------------------------------------------


@dataclass
class _Written:
    """One file this checkpoint wrote: where, its size, and what it holds."""

    path: str
    size: int
    modification_time: int
    num_rows: int
    num_adds: int


@contextlib.contextmanager
def _local_temp(storage: Storage, final_path: str) -> Iterator[str]:
    """A temp file to stream into: next to the target locally (for the rename), else in the local temp dir."""
    if storage.is_local:
        directory = os.path.dirname(final_path)
        storage.makedirs(directory)
        tmp = os.path.join(directory, f".{os.path.basename(final_path)}.{uuid.uuid4().hex}.tmp")
    else:
        fd, tmp = tempfile.mkstemp(prefix="deltalog-checkpoint-", suffix=".parquet")
        os.close(fd)
    try:
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _publish(storage: Storage, tmp: str, final_path: str) -> tuple[int, int]:
    """Move a complete, verified temp file to its final name; return (size, modification time)."""
    if storage.is_local:
        if storage.fsync:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, final_path)
        info = storage.info(final_path)
        return info.size, info.modification_time
    expected = os.path.getsize(tmp)
    try:
        storage.fs.put_file(tmp, final_path)  # one PUT / completed multipart upload: atomic
        info = storage.info(final_path)
    except OSError as exc:
        raise StorageError(f"cannot upload {final_path}: {exc}") from None
    if info.size != expected:
        storage.delete(final_path)
        raise StorageError(f"uploaded {final_path} has {info.size} bytes instead of {expected}; removed it")
    return info.size, info.modification_time


def _verify_parquet(path: str, expected_rows: int, expected_adds: int, name: str, small: bool) -> pa.Schema:
    """Re-read a written checkpoint/sidecar file and check it holds exactly what was written."""
    try:
        pf = pq.ParquetFile(path)
        if pf.metadata.num_rows != expected_rows:
            raise CorruptCheckpointError(
                f"checkpoint file {name} holds {pf.metadata.num_rows} actions instead of {expected_rows}"
            )
        found = 0
        if expected_rows:
            for batch in pf.iter_batches(batch_size=ROW_GROUP_ROWS, columns=["add.path"]):
                adds = batch.column(0)
                found += len(adds) - adds.null_count
        if found != expected_adds:
            raise CorruptCheckpointError(f"checkpoint file {name} holds {found} add actions instead of {expected_adds}")
        if small:
            head = pf.read(columns=["protocol", "metaData"])
            for col in ("protocol", "metaData"):
                c = head.column(col)
                if len(c) - c.null_count != 1:
                    raise CorruptCheckpointError(f"checkpoint file {name} does not hold exactly one {col} action")
        return pf.schema_arrow
    except (OSError, pa.ArrowException) as exc:
        raise CorruptCheckpointError(f"checkpoint file {name} could not be re-read after writing: {exc}") from None


def _compression(metadata: Metadata, warnings: list[str]) -> str:
    """``delta.parquet.compression.codec`` (PROTOCOL.md Table Properties; default zstd)."""
    codec = metadata.configuration.get(CODEC_PROPERTY, DEFAULT_CODEC).strip().lower()
    if codec not in PARQUET_CODECS:
        warnings.append(f"unknown {CODEC_PROPERTY} {codec!r}: wrote {DEFAULT_CODEC}")
        return DEFAULT_CODEC
    return PARQUET_CODECS[codec]


class _ParquetSink:
    """Streams record batches into one Parquet file through a temp file."""

    def __init__(self, tmp: str, schema: pa.Schema, compression: str) -> None:
        self.schema = schema
        # Without dictionaries zstd compresses the log's long unique strings (paths, stats) better and
        # faster; checkpoint readers do not use Parquet column statistics.
        self.writer = pq.ParquetWriter(
            tmp, schema, compression=compression, use_dictionary=False, write_statistics=False
        )
        self.rows = 0
        self.adds = 0

    def write(self, batch: pa.RecordBatch, adds: int = 0) -> None:
        if batch.num_rows:
            self.writer.write_batch(batch, row_group_size=ROW_GROUP_ROWS)
            self.rows += batch.num_rows
            self.adds += adds

    def close(self) -> None:
        self.writer.close()


# --- the result ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointResult:
    """What ``create_checkpoint`` wrote (or found already written)."""

    version: int
    kind: str  # "classic" (V1 spec, one Parquet file) or "v2" (UUID-named, with sidecars)
    files: list[str]  # top-level checkpoint file(s), names inside _delta_log
    sidecars: list[str] = field(default_factory=list)  # names inside _delta_log (``_sidecars/...``)
    num_actions: int = 0
    num_add_files: int = 0
    num_remove_tombstones: int = 0
    num_expired_tombstones: int = 0
    num_txns: int = 0
    #: App transactions left out: expired by delta.setTransactionRetentionDuration on the table's clock.
    num_expired_txns: int = 0
    num_domain_metadata: int = 0
    size_in_bytes: int = 0
    duration_seconds: float = 0.0
    last_checkpoint_updated: bool = False
    already_existed: bool = False
    warnings: list[str] = field(default_factory=list)

    def summary_line(self) -> str:
        """One line for logs and the CLI."""
        state = "already existed (verified)" if self.already_existed else f"written in {self.duration_seconds:.2f} s"
        return (
            f"{self.kind} checkpoint of version {self.version} {state}: {self.num_actions} actions "
            f"({self.num_add_files} add files, {self.num_remove_tombstones} tombstones), {self.size_in_bytes} bytes"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- creating a checkpoint ----------------------------------------------------------------


def create_checkpoint(
    table: TableRef,
    *,
    version: int | None = None,
    now_ms: int | None = None,
    sidecar_max_actions: int = SIDECAR_MAX_ACTIONS,
    storage_options: dict[str, Any] | None = None,
) -> CheckpointResult:
    """Write a checkpoint of ``version`` (default: the latest) and point ``_last_checkpoint`` at it.

    Refuses (before writing anything) tables whose protocol deltalog cannot write, and,
    under ``checkpointProtection``, versions before ``delta.requireCheckpointProtectionBeforeVersion``.
    When a complete checkpoint of the same kind already exists at the version, it is
    checked and reused (``already_existed``), so a rerun after a crash only repairs
    ``_last_checkpoint``. ``now_ms`` fixes the local clock (tests): tombstones and app transactions expire
    by the earlier of it and the version's commit time (``log_maintenance.app_transactions.table_clock_at``).
    ``table`` may also be a ``Storage``: the post-commit checkpoint passes the committer's.
    """
    started = time.perf_counter()
    storage = table_storage(table, storage_options)
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 0):
        raise InvalidArgumentError(f"version must be a non-negative integer, got {version!r}")
    if sidecar_max_actions < 1:
        raise InvalidArgumentError(f"sidecar_max_actions must be at least 1, got {sidecar_max_actions}")
    listing = list_log(storage)
    latest_version = listing.latest_version
    assert latest_version is not None
    if version is None or version == latest_version:
        snapshot = snapshot_at(storage, listing=listing)
        latest_protocol, latest_config = snapshot.protocol, snapshot.metadata.configuration
    else:
        latest_protocol, latest_metadata = read_protocol_and_metadata(storage, listing)
        latest_config = latest_metadata.configuration
        snapshot = snapshot_at(storage, version, listing=listing)
    check_can_write(storage, latest_protocol, "write a checkpoint", Operation.CHECKPOINT, latest_config, commits=False)
    check_writable(
        snapshot.protocol,
        f"write a checkpoint of version {snapshot.version}",
        Operation.CHECKPOINT,
        snapshot.metadata.configuration,
    )
    protected = checkpoint_protection_version(latest_protocol, latest_config)
    if snapshot.version < protected:
        raise OperationRefusedError(
            f"refusing to write a checkpoint of version {snapshot.version}: the table's checkpointProtection "
            f"forbids new checkpoints before version {protected} (delta.requireCheckpointProtectionBeforeVersion)"
        )

    warnings: list[str] = list(snapshot.warnings)
    kind = "classic"
    if snapshot.protocol.has_feature("v2Checkpoint"):
        kind = "v2"
    elif snapshot.metadata.configuration.get("delta.checkpointPolicy", "classic").lower() == "v2":
        warnings.append(
            "delta.checkpointPolicy=v2 needs the v2Checkpoint table feature, which the protocol lacks: "
            "wrote a classic checkpoint"
        )

    existing = _existing_checkpoint(storage, listing, snapshot.version, kind)
    if existing is not None:
        result = existing
    else:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        writer = _CheckpointWriter(storage, snapshot, now, warnings)
        result = writer.write_v2(sidecar_max_actions) if kind == "v2" else writer.write_classic()
    result = dataclasses.replace(
        result, warnings=warnings + result.warnings, duration_seconds=round(time.perf_counter() - started, 3)
    )
    log.info(
        "checkpoint of version %d (%s): %d actions, %d add files, %d bytes in %.2f s%s",
        result.version,
        result.kind,
        result.num_actions,
        result.num_add_files,
        result.size_in_bytes,
        result.duration_seconds,
        " (already existed)" if result.already_existed else "",
    )
    return result


class _CheckpointWriter:
    """Writes one snapshot as a classic or V2 checkpoint."""

    def __init__(self, storage: Storage, snapshot: Snapshot, now_ms: int, warnings: list[str]) -> None:
        self.storage = storage
        self.snapshot = snapshot
        self.warnings = warnings
        conf = snapshot.metadata.configuration
        self.layout = _Layout.for_table(snapshot.metadata)
        self.compression = _compression(snapshot.metadata, warnings)
        # Tombstones and app transactions expire on the table's clock (the earlier of this machine's and
        # the version's commit time), never by this machine's alone: a host whose clock runs days ahead
        # would drop tombstones Delta Spark's VACUUM still protects files by, and a stream's txn.
        listing = snapshot.segment.listing
        clock = table_clock_at(storage, listing, conf, snapshot.version, now_ms)
        # Unexpired tombstones only; a remove without deletionTimestamp counts as deleted at 0 (expired).
        tombstones = snapshot.tombstones
        if clock is None:  # the version's commit time is unknown: none expires
            self.tombstones = tombstones.filter(pc.is_valid(tombstones.column("deletionTimestamp")))
        else:
            retention = config_interval_ms(conf, "delta.deletedFileRetentionDuration", DEFAULT_DELETED_FILE_RETENTION)
            # An Arrow scalar, not a Python int: converting one would import pandas (40 MB, 0.2-0.3 s).
            cutoff = int64_array([clock - retention])[0]
            # A null comparison (no deletionTimestamp) is dropped by the filter: expired.
            self.tombstones = tombstones.filter(pc.greater(tombstones.column("deletionTimestamp"), cutoff))
        self.expired = tombstones.num_rows - self.tombstones.num_rows
        self.published: list[str] = []
        # Every live txn (what a restarted stream reads to skip a batch it committed): expired only by
        # delta.setTransactionRetentionDuration on the table's clock.
        txn_rules = txn_retention_at(storage, listing, conf, snapshot.version, now_ms, clock)
        if txn_rules.warning:
            warnings.append(txn_rules.warning)
        txns = list(snapshot.app_transactions.values())
        self.txns = [t for t in txns if not txn_rules.expired(t)]
        self.expired_txns = len(txns) - len(self.txns)
        if self.expired_txns:
            log.info(
                "checkpoint of version %d: %d app transaction(s) expired (last updated at or before %s)",
                snapshot.version,
                self.expired_txns,
                format_ms(txn_rules.cutoff_ms or 0),
            )

    # -- file actions ----------------------------------------------------------------------

    def _add_batches(self, files: pa.Table) -> Iterator[pa.StructArray]:
        for batch in files.to_batches(max_chunksize=ROW_GROUP_ROWS):
            if batch.num_rows == 0:
                continue
            try:
                yield _add_struct(batch, self.layout)
            except (pa.ArrowException, ValueError) as exc:
                if self.layout.parsed is None:
                    raise
                # A stats or partition value that does not parse: the typed columns are optional
                # for readers, a wrong one is not, so they are dropped for the whole checkpoint.
                raise _ParsedColumnsFailed(str(exc)) from None

    def _write_file_actions(self, sink: _ParquetSink, files: pa.Table, tombstones: pa.Table) -> None:
        schema = sink.schema
        for add in self._add_batches(files):
            sink.write(_nulls_batch(schema, len(add), add=add), adds=len(add))
        for batch in tombstones.to_batches(max_chunksize=ROW_GROUP_ROWS):
            if batch.num_rows:
                sink.write(_nulls_batch(schema, batch.num_rows, remove=_remove_struct(batch)))

    def _with_parsed_fallback(self, fn: Any) -> Any:
        try:
            return fn()
        except _ParsedColumnsFailed as exc:
            for path in self.published:  # sidecars of the failed attempt: nothing references them
                self.storage.delete(path)
            self.published = []
            self.warnings.append(
                f"stats_parsed/partitionValues_parsed left out: a value did not parse as its column type ({exc})"
            )
            self.layout = _Layout(
                pa.struct([f for f in self.layout.add_type if not f.name.endswith("_parsed")]),
                self.layout.write_stats_json,
                None,
            )
            return fn()

    # -- classic ---------------------------------------------------------------------------

    def write_classic(self) -> CheckpointResult:
        return self._with_parsed_fallback(self._write_classic)

    def _write_classic(self) -> CheckpointResult:
        snap, storage = self.snapshot, self.storage
        name = f"{snap.version:020d}.checkpoint.parquet"
        final = storage.join("_delta_log", name)
        rows = _small_action_rows(snap, self.txns, None)
        schema = self.layout.schema(v2_top_level=False)
        with _local_temp(storage, final) as tmp:
            sink = _ParquetSink(tmp, schema, self.compression)
            try:
                sink.write(_small_batch(schema, rows))
                self._write_file_actions(sink, snap.files, self.tombstones)
            finally:
                sink.close()
            written_schema = _verify_parquet(tmp, sink.rows, sink.adds, name, small=True)
            size, _mtime = _publish(storage, tmp, final)
        return self._finish("classic", name, [], sink.rows, sink.adds, size, written_schema)

    # -- V2 ----------------------------------------------------------------------------------

    def write_v2(self, sidecar_max_actions: int) -> CheckpointResult:
        return self._with_parsed_fallback(lambda: self._write_v2(sidecar_max_actions))

    def _write_sidecars(self, max_actions: int) -> list[_Written]:
        """Write the file actions into sidecars of at most ``max_actions`` rows each."""
        storage, snap = self.storage, self.snapshot
        schema = self.layout.schema(v2_top_level=False, small_actions=False)
        files, tombstones = snap.files, self.tombstones
        total = files.num_rows + tombstones.num_rows
        out: list[_Written] = []
        start = 0
        while start < total:
            end = min(total, start + max_actions)
            add_part = (
                files.slice(start, max(0, min(end, files.num_rows) - start))
                if start < files.num_rows
                else files.slice(0, 0)
            )
            t0, t1 = max(0, start - files.num_rows), max(0, end - files.num_rows)
            remove_part = tombstones.slice(t0, t1 - t0)
            name = f"{uuid.uuid4()}.parquet"
            final = storage.join("_delta_log", SIDECARS_DIR, name)
            with _local_temp(storage, final) as tmp:
                sink = _ParquetSink(tmp, schema, self.compression)
                try:
                    self._write_file_actions(sink, add_part, remove_part)
                finally:
                    sink.close()
                _verify_parquet(tmp, sink.rows, sink.adds, f"{SIDECARS_DIR}/{name}", small=False)
                size, mtime = _publish(storage, tmp, final)
            self.published.append(final)
            out.append(_Written(final, size, mtime, sink.rows, sink.adds))
            start = end
        return out

    def _write_v2(self, sidecar_max_actions: int) -> CheckpointResult:
        snap, storage = self.snapshot, self.storage
        sidecars = self._write_sidecars(sidecar_max_actions)
        rows = _small_action_rows(snap, self.txns, {"version": snap.version})
        lines = [json.dumps({kind: body}, separators=(",", ":")) for kind, body in rows]
        for s in sidecars:
            sidecar = {
                "path": s.path.rsplit("/", 1)[-1],
                "sizeInBytes": s.size,
                "modificationTime": s.modification_time,
            }
            lines.append(json.dumps({"sidecar": sidecar}, separators=(",", ":")))
        data = ("\n".join(lines) + "\n").encode()
        name = f"{snap.version:020d}.checkpoint.{uuid.uuid4()}.json"
        final = storage.join("_delta_log", name)
        storage.write_atomic(final, data)
        if storage.read_bytes(final) != data:
            storage.delete(final)
            raise CorruptCheckpointError(
                f"checkpoint file {name} read back different from what was written; removed it"
            )
        num_actions = len(lines) + sum(s.num_rows for s in sidecars)
        num_adds = sum(s.num_adds for s in sidecars)
        size = len(data) + sum(s.size for s in sidecars)
        sidecar_names = [f"{SIDECARS_DIR}/{s.path.rsplit('/', 1)[-1]}" for s in sidecars]
        return self._finish("v2", name, sidecar_names, num_actions, num_adds, size, None)

    # -- both ------------------------------------------------------------------------------

    def _finish(
        self,
        kind: str,
        name: str,
        sidecars: list[str],
        num_actions: int,
        num_adds: int,
        size: int,
        checkpoint_schema: pa.Schema | None,
    ) -> CheckpointResult:
        """Point ``_last_checkpoint`` at the checkpoint just published and describe it (classic and V2 alike)."""
        version = self.snapshot.version
        doc = last_checkpoint_document(version, num_actions, None, size, num_adds, checkpoint_schema)
        updated = update_last_checkpoint(self.storage, doc)
        return CheckpointResult(
            version=version,
            kind=kind,
            files=[name],
            sidecars=sidecars,
            num_actions=num_actions,
            num_add_files=num_adds,
            num_remove_tombstones=self.tombstones.num_rows,
            num_expired_tombstones=self.expired,
            num_txns=len(self.txns),
            num_expired_txns=self.expired_txns,
            num_domain_metadata=len(self.snapshot.domain_metadata),
            size_in_bytes=size,
            last_checkpoint_updated=updated,
        )


class _ParsedColumnsFailed(Exception):
    """Internal: a ``*_parsed`` column could not be built; the checkpoint is rewritten without them."""


def _existing_checkpoint(storage: Storage, listing: LogListing, version: int, kind: str) -> CheckpointResult | None:
    """A complete, readable checkpoint of ``kind`` already at ``version`` (``_last_checkpoint`` refreshed), or None."""
    for cp in listing.checkpoints.get(version, []):
        if cp.kind != kind:
            continue
        try:
            info = describe_checkpoint(storage, cp)
        except CorruptCheckpointError as exc:
            log.warning("rewriting the checkpoint of version %d: the existing one is unreadable (%s)", version, exc)
            continue
        updated = update_last_checkpoint(storage, info.last_checkpoint)
        return CheckpointResult(
            version=version,
            kind=kind,
            files=[f.name for f in cp.files],
            sidecars=info.sidecars,
            num_actions=info.num_actions,
            num_add_files=info.num_add_files,
            size_in_bytes=info.size_in_bytes,
            last_checkpoint_updated=updated,
            already_existed=True,
        )
    return None


__all__ = ["CheckpointResult", "create_checkpoint"]
