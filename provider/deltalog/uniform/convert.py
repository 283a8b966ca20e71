"""Bring a UniForm table's Iceberg metadata up to its Delta version: one Iceberg snapshot per Delta version.

Run after every deltalog commit to a UniForm table (the ``iceberg_metadata`` post-commit
hook of :mod:`deltalog.commit.standard_post_commit`) and on demand
(``deltalog uniform-sync``). It follows Delta's converter (``IcebergConverter``):

- **No Iceberg metadata yet** (``created``): a new Iceberg table (format version 2) at the
  table root, its schema, partition spec and properties from the Delta metadata
  (:mod:`deltalog.uniform.iceberg_schema`), and one ``append`` snapshot holding every live
  file of the Delta version (none for an empty table).
- **Behind by up to 100 commits that are all in the log** (``incremental``): each Delta
  version in between becomes one snapshot (:mod:`deltalog.uniform.snapshots`), appends,
  deletes, overwrites and replaces by the kind of its actions; versions that change no data
  file (properties, vacuum's START/END) add no snapshot. Delta Spark 4.4 writes no Iceberg
  metadata for a table addressed by its path (its converter works through Unity Catalog), so
  this is also how its commits reach Iceberg readers: at deltalog's next commit or sync.
- **Further behind, commits cleaned up, or metadata deltalog did not write**
  (``catch_up``): one snapshot for the Delta version, the difference between the files of the
  current Iceberg snapshot and the Delta version's live files (Delta's converter replaces the
  table then; continuing the chain keeps the older snapshots readable until they expire).

Every incremental conversion is checked against the Delta version's file count and bytes
before it lands; a mismatch (a commit whose actions do not say everything, such as an add
of a new file without data change) is redone as a catch-up. Table properties carry
``delta-version``, ``delta-timestamp`` and ``base-delta-version`` as Delta's converter
writes them, plus ``delta-table-id`` (the Delta table's id: deltalog continues its own chain
incrementally only for the table it wrote it for). Each snapshot's summary names its Delta
version, and its timestamp is the Delta commit's (never earlier than the previous one), so
Iceberg time travel by version or by time finds the same rows as Delta's.

The new metadata file lands with the storage's create-if-absent
(:mod:`deltalog.uniform.metadata_files`): a writer that loses the race removes the
manifests it wrote and starts again from the winner's version. Nothing is deleted that
another writer could reference. A table state Iceberg metadata cannot express is refused
with the reason (:func:`deltalog.protocol.uniform.uniform_iceberg_problem`), as the write
gate refuses the commits that would create it.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from pyiceberg.partitioning import PARTITION_FIELD_ID_START
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, TableMetadataV2
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import (
    AddSchemaUpdate,
    RemovePropertiesUpdate,
    SetCurrentSchemaUpdate,
    SetPropertiesUpdate,
    TableUpdate,
    update_table_metadata,
)

from deltalog.errors import OperationRefusedError
from deltalog.log.commit_lines import parse_commit
from deltalog.log.history import CommitTimestamps, ict_enablement_version
from deltalog.log.listing import LogListing, list_log
from deltalog.log.load import snapshot_at
from deltalog.log.snapshot import Snapshot, read_commit_files
from deltalog.protocol.uniform import uniform_iceberg_enabled, uniform_iceberg_problem
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage
from deltalog.uniform.data_files import DataFileFactory
from deltalog.uniform.iceberg_schema import (
    MAX_SNAPSHOT_AGE_PROPERTY,
    iceberg_properties,
    iceberg_schema,
    partition_spec,
)
from deltalog.uniform.metadata_files import (
    IcebergHead,
    StorageFileIO,
    UniformMetadataError,
    aliased,
    read_head,
    table_relative,
    write_hint,
    write_metadata,
)
from deltalog.uniform.snapshots import (
    DELTA_TIMESTAMP,
    DELTA_VERSION,
    LiveFiles,
    SnapshotChange,
    commit_snapshot,
    file_key,
)

__all__ = [
    "BASE_DELTA_VERSION",
    "DELTA_TABLE_ID",
    "MAX_COMMITS_TO_CONVERT",
    "ConvertedSnapshot",
    "IcebergSyncResult",
    "UniformConversionError",
    "sync_iceberg_metadata",
]

log = logging.getLogger(__name__)

#: Delta's ``spark.databricks.delta.iceberg.maxPendingCommits`` default: further behind, one catch-up snapshot.
MAX_COMMITS_TO_CONVERT = 100
#: Metadata versions tried when other writers keep winning the race for the next one.
MAX_ATTEMPTS = 10
BASE_DELTA_VERSION = "base-delta-version"
DELTA_TABLE_ID = "delta-table-id"


class UniformConversionError(OperationRefusedError):
    """The Iceberg metadata of this Delta version cannot be written (the reason says why)."""


@dataclass(frozen=True)
class ConvertedSnapshot:
    """One Iceberg snapshot written for one Delta version."""

    delta_version: int
    snapshot_id: int
    operation: str
    added_files: int
    removed_files: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class IcebergSyncResult:
    """What bringing the Iceberg metadata to a Delta version did.

    ``mode``: ``not_uniform`` (nothing to do), ``up_to_date``, ``created``, ``incremental``
    (a snapshot per Delta version) or ``catch_up`` (one snapshot for the difference).
    """

    table_uri: str
    delta_version: int
    mode: str
    previous_delta_version: int | None = None
    iceberg_version: int | None = None
    metadata_location: str | None = None
    snapshots: list[ConvertedSnapshot] = field(default_factory=list)
    attempts: int = 1
    reason: str | None = None

    def summary_line(self) -> str:
        if self.mode == "not_uniform":
            return f"{self.table_uri}: not a UniForm Iceberg table; no Iceberg metadata written"
        if self.mode == "up_to_date":
            return f"{self.table_uri}: Iceberg metadata already at Delta version {self.delta_version}"
        return (
            f"{self.table_uri}: Iceberg metadata v{self.iceberg_version} at Delta version {self.delta_version} "
            f"({self.mode}, {len(self.snapshots)} snapshot(s))"
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["snapshots"] = [s.to_dict() for s in self.snapshots]
        return out


def _same_root(storage: Storage, location: str) -> bool:
    return table_relative(storage, location.rstrip("/") + "/x") == "x"


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, list):
        return dict(value)  # an Arrow map as Python: [(key, value), ...]
    return {}


def _live_adds(snapshot: Snapshot) -> list[dict[str, Any]]:
    rows = snapshot.files.to_pylist()
    for row in rows:
        row["partitionValues"] = _as_dict(row.get("partitionValues"))
    return rows


class _Pending:
    """The metadata being built, and the previous metadata file to log on its first change."""

    def __init__(self, metadata: TableMetadata, previous_location: str | None) -> None:
        self.metadata = metadata
        self.previous_location = previous_location

    def take_location(self) -> str | None:
        location, self.previous_location = self.previous_location, None
        return location

    def apply(self, *updates: TableUpdate) -> None:
        """Apply schema or property updates. They keep ``last-updated-ms`` (pyiceberg would set the clock's time):
        the metadata's times are the Delta commits', so that a snapshot is never dated after its successor."""
        kept = self.metadata.last_updated_ms
        updated = update_table_metadata(self.metadata, updates, metadata_location=self.take_location())
        self.metadata = updated.model_copy(update={"last_updated_ms": kept})


def _new_metadata(storage: Storage, target: Snapshot, schema: Schema, max_id: int, now_ms: int) -> TableMetadata:
    """An Iceberg table with no snapshot yet (Delta's CREATE_TABLE with the column mapping ids kept)."""
    spec = partition_spec(schema, target.metadata.partition_columns)
    try:
        table_uuid = uuid.UUID(target.metadata.id)
    except (TypeError, ValueError):
        table_uuid = uuid.uuid4()
    max_column = _int(target.metadata.configuration.get("delta.columnMapping.maxColumnId")) or 0
    return TableMetadataV2(
        **aliased(
            {
                "location": storage.uri,
                "table-uuid": table_uuid,
                "last-updated-ms": now_ms,
                "last-column-id": max(max_id, max_column),
                "schemas": [schema],
                "current-schema-id": schema.schema_id,
                "partition-specs": [spec],
                "default-spec-id": spec.spec_id,
                "last-partition-id": PARTITION_FIELD_ID_START + len(spec.fields) - 1,
                "properties": {},
                "sort-orders": [UNSORTED_SORT_ORDER],
                "default-sort-order-id": UNSORTED_SORT_ORDER.order_id,
                "last-sequence-number": 0,
            }
        )
    )


def _spec_shape(metadata: TableMetadata) -> list[tuple[int, str, str]]:
    return [(f.source_id, str(f.transform), f.name) for f in metadata.spec().fields]


def _set_schema(pending: _Pending, schema: Schema) -> None:
    """Make ``schema`` (ids from column mapping) current: an identical known one, or a new one."""
    current = pending.metadata.schema()
    if current.fields == schema.fields:
        return
    for known in pending.metadata.schemas:
        if known.fields == schema.fields:
            pending.apply(SetCurrentSchemaUpdate(**aliased({"schema-id": known.schema_id})))
            return
    new_id = max(s.schema_id for s in pending.metadata.schemas) + 1
    pending.apply(
        AddSchemaUpdate(schema=Schema(*schema.fields, schema_id=new_id)),
        SetCurrentSchemaUpdate(**aliased({"schema-id": -1})),
    )


class _Conversion:
    """One attempt at writing the next Iceberg metadata version."""

    def __init__(self, storage: Storage, listing: LogListing, target: Snapshot, head: IcebergHead | None) -> None:
        self.storage = storage
        self.listing = listing
        self.target = target
        self.head = head
        self.io = StorageFileIO(storage)
        md = target.metadata
        self.schema, self.max_id = iceberg_schema(md.schema_string)
        self.factory: DataFileFactory | None = None
        ict_from = ict_enablement_version(md.configuration)
        self.timestamps = CommitTimestamps(storage, listing, ict_from)
        self.snapshots: list[ConvertedSnapshot] = []

    def timestamp(self, version: int) -> int:
        return self.timestamps(version) if version in self.listing.commits else int(time.time() * 1000)

    def files(self, pending: _Pending) -> DataFileFactory:
        if self.factory is None:
            md = self.target.metadata
            self.factory = DataFileFactory(
                self.storage, pending.metadata.schema(), pending.metadata.spec(), md.schema_string, md.partition_columns
            )
        return self.factory

    def commit(self, pending: _Pending, live: LiveFiles, change: SnapshotChange) -> None:
        if not change.added and not change.removed:
            return
        pending.metadata, snapshot = commit_snapshot(
            self.storage, self.io, pending.metadata, live, change, pending.take_location()
        )
        self.snapshots.append(
            ConvertedSnapshot(
                change.delta_version,
                snapshot.snapshot_id,
                str(snapshot.summary.operation.value if snapshot.summary else ""),
                len(change.added),
                len(change.removed),
            )
        )

    def catch_up(self, pending: _Pending, live: LiveFiles) -> None:
        """One snapshot: the difference between the current Iceberg files and the Delta version's."""
        factory = self.files(pending)
        wanted = {file_key(self.storage, factory.location(a["path"])): a for a in _live_adds(self.target)}
        have = live.entries()
        added = [factory.from_add(wanted[k]) for k in sorted(wanted) if k not in have]
        removed = {k for k in have if k not in wanted}
        version = self.target.version
        self.commit(pending, live, SnapshotChange(version, self.timestamp(version), added, removed))

    def incremental(self, pending: _Pending, live: LiveFiles, first: int) -> None:
        versions = list(range(first, self.target.version + 1))
        contents = read_commit_files(self.storage, [self.listing.commits[v] for v in versions])
        factory = self.files(pending)
        for version, data in zip(versions, contents):
            actions = parse_commit(data, self.listing.commits[version].name)
            adds = {file_key(self.storage, factory.location(a["add"]["path"])): a["add"] for a in actions if "add" in a}
            removes = {
                file_key(self.storage, factory.location(a["remove"]["path"])): a["remove"]
                for a in actions
                if "remove" in a
            }
            for key in set(adds) & set(removes):  # the same file removed and added again: unchanged
                adds.pop(key)
                removes.pop(key)
            changing = list(adds.values()) + list(removes.values())
            data_change = any(a.get("dataChange", True) for a in changing)
            if adds and not removes and not data_change:
                # Delta's converter ignores add-only commits without data change (re-adds of live files); a file
                # that is not live yet is added all the same.
                adds = {k: a for k, a in adds.items() if k not in live}
            removed = {k for k in removes if k in live} if removes else set()
            added = [factory.from_add(adds[k]) for k in sorted(adds)]
            self.commit(pending, live, SnapshotChange(version, self.timestamp(version), added, removed, data_change))

    def consistent(self, metadata: TableMetadata) -> bool:
        """Whether the current Iceberg snapshot holds as many files and bytes as the Delta version."""
        snapshot = metadata.current_snapshot()
        summary = snapshot.summary if snapshot is not None and snapshot.summary is not None else None
        files = int(summary.get("total-data-files", "0")) if summary is not None else 0
        size = int(summary.get("total-files-size", "0")) if summary is not None else 0
        return files == self.target.num_files and size == self.target.size_in_bytes

    def properties(self, pending: _Pending, previous: int | None) -> None:
        md = self.target.metadata
        props = iceberg_properties(md.configuration, pending.metadata.schema())
        props[DELTA_VERSION] = str(self.target.version)
        props[DELTA_TIMESTAMP] = str(self.timestamp(self.target.version))
        props[DELTA_TABLE_ID] = md.id
        if previous is not None:
            props[BASE_DELTA_VERSION] = str(previous)
        stale = [
            k
            for k in (MAX_SNAPSHOT_AGE_PROPERTY, BASE_DELTA_VERSION)
            if k in pending.metadata.properties and k not in props
        ]
        if stale:
            pending.apply(RemovePropertiesUpdate(removals=stale))
        changed = {k: v for k, v in props.items() if pending.metadata.properties.get(k) != v}
        if changed:
            pending.apply(SetPropertiesUpdate(updates=changed))

    def run(self) -> tuple[str, TableMetadata, int | None]:
        """Build the next metadata; returns (mode, metadata, previous Delta version)."""
        head, target = self.head, self.target
        if head is None:
            created = _new_metadata(self.storage, target, self.schema, self.max_id, self.timestamp(target.version))
            pending = _Pending(created, None)
            live = LiveFiles(self.storage, self.io, [])
            mode, previous = "created", None
            if target.num_files:
                self.catch_up(pending, live)
        else:
            pending = _Pending(head.metadata, head.location)
            if _spec_shape(head.metadata) != _spec_shape(_new_metadata(self.storage, target, self.schema, 0, 0)):
                raise UniformConversionError(
                    "the Iceberg metadata's partition spec is not the Delta table's identity partitioning on "
                    f"{target.metadata.partition_columns} (partition evolution is not expressed); sync refused"
                )
            _set_schema(pending, self.schema)
            previous = _int(head.metadata.properties.get(DELTA_VERSION))
            snapshot = head.metadata.current_snapshot()
            live = LiveFiles(self.storage, self.io, snapshot.manifests(self.io) if snapshot is not None else [])
            first = (previous + 1) if previous is not None else None
            can_increment = (
                not head.foreign
                and first is not None
                and head.metadata.properties.get(DELTA_TABLE_ID) == target.metadata.id
                and target.version - (first - 1) <= MAX_COMMITS_TO_CONVERT
                and all(v in self.listing.commits for v in range(first, target.version + 1))
            )
            mode = "incremental" if can_increment else "catch_up"
            if can_increment and first is not None:
                base = pending.metadata
                self.incremental(pending, live, first)
                if not self.consistent(pending.metadata):
                    log.warning(
                        "Iceberg conversion of %s: the commits after Delta version %s do not add up to version %d's "
                        "files; writing one catch-up snapshot instead",
                        self.storage.uri,
                        previous,
                        target.version,
                    )
                    self.discard()
                    self.snapshots = []
                    pending = _Pending(base, head.location)
                    live = LiveFiles(self.storage, self.io, snapshot.manifests(self.io) if snapshot is not None else [])
                    mode = "catch_up"
                    self.catch_up(pending, live)
            else:
                self.catch_up(pending, live)
        self.properties(pending, previous)
        floor = max([pending.metadata.last_updated_ms, self.timestamp(target.version)])
        metadata = pending.metadata.model_copy(update={"last_updated_ms": floor})
        return mode, metadata, previous

    def discard(self) -> None:
        """Remove the manifests and manifest lists this attempt wrote (no published metadata names them)."""
        for location in self.io.written:
            try:
                self.io.delete(location)
            except Exception as exc:  # noqa: BLE001 - best effort: an orphan manifest harms no reader
                log.warning("could not remove %s after a lost Iceberg commit race: %s", location, exc)
        self.io.written.clear()


def sync_iceberg_metadata(
    table: TableRef,
    *,
    version: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> IcebergSyncResult:
    """Write the Iceberg metadata of the table's latest Delta version (or ``version``), as the module doc says.

    Raises :class:`UniformConversionError` (exit code 1) for a table state Iceberg metadata
    cannot express, :class:`UniformMetadataError` for Iceberg metadata that is not this
    table's or cannot be read; nothing is written then.
    """
    storage = table_storage(table, storage_options)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        listing = list_log(storage)
        target = snapshot_at(storage, version, listing=listing)
        md = target.metadata
        if not uniform_iceberg_enabled(md.configuration):
            return IcebergSyncResult(storage.uri, target.version, "not_uniform")
        problem = uniform_iceberg_problem(
            target.protocol.effective_writer_features(), md.configuration, md.schema_string, md.partition_columns
        )
        if problem:
            raise UniformConversionError(
                f"cannot write the Iceberg metadata of {storage.uri} at version {target.version}: {problem}"
            )
        head = read_head(storage)
        if head is not None:
            if not _same_root(storage, head.metadata.location):
                raise UniformMetadataError(
                    f"the Iceberg metadata in {storage.uri}/metadata ({head.location}) belongs to the table at "
                    f"{head.metadata.location}, not this one; deltalog does not continue another table's Iceberg history"
                )
            converted = _int(head.metadata.properties.get(DELTA_VERSION))
            latest = listing.latest_version
            if converted is not None and latest is not None and converted > latest:
                raise UniformMetadataError(
                    f"the Iceberg metadata of {storage.uri} says Delta version {converted}, past the table's latest "
                    f"version {latest}: it is not this table's history"
                )
            if converted is not None and converted >= target.version and not head.foreign:
                if head.stale_hint:
                    write_hint(storage, head.version)
                return IcebergSyncResult(
                    storage.uri, target.version, "up_to_date", converted, head.version, head.location, attempts=attempt
                )
        conversion = _Conversion(storage, listing, target, head)
        try:
            mode, metadata, previous = conversion.run()
            number = (head.version if head is not None else 0) + 1
            location = write_metadata(storage, number, metadata)
        except FileExistsError:
            conversion.discard()
            log.info("Iceberg metadata of %s: another writer landed the next version first; retrying", storage.uri)
            time.sleep(0.01 * attempt)
            continue
        except BaseException:
            conversion.discard()
            raise
        log.info(
            "Iceberg metadata v%d of %s: Delta version %d (%s, %d snapshot(s))",
            number,
            storage.uri,
            target.version,
            mode,
            len(conversion.snapshots),
        )
        return IcebergSyncResult(
            storage.uri, target.version, mode, previous, number, location, conversion.snapshots, attempt
        )
    raise UniformMetadataError(
        f"the Iceberg metadata of {storage.uri} could not be written: other writers won the race for the next "
        f"version {MAX_ATTEMPTS} times"
    )
