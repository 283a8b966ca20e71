"""The next Iceberg snapshot: its manifests and manifest list, from the current snapshot and one Delta version's changes.

As Iceberg's own snapshot producers do (and Delta's converter through them): files a
Delta version adds go into one new manifest (status ADDED); a manifest holding a file the
version removes is rewritten, that file DELETED and the others EXISTING with their
sequence numbers; untouched manifests are carried over as they are, manifests with no
live file left are dropped, and once a snapshot would list more than
``commit.manifest.min-count-to-merge`` (100) manifests the small ones are merged into one
(Iceberg's merge-append). The operation is Delta's converter's: ``append`` (adds only),
``delete`` (removes only), ``replace`` (adds and removes, none changing data: a
compaction, Z-order or clustering, same rows in new files) and ``overwrite`` (adds and
removes that change data). The summary carries Iceberg's counters and totals plus
``delta-version`` and ``delta-timestamp``, so every snapshot names the Delta version whose
rows it holds.

The live files of the current snapshot (path -> manifest entry) are read from its
manifests the first time a version removes files, and kept up to date from then on.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from pyiceberg.manifest import (
    DataFile,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    read_manifest_list,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.update import AddSnapshotUpdate, SetSnapshotRefUpdate, update_table_metadata

from deltalog._version import __version__
from deltalog.storage.filesystem import Storage
from deltalog.uniform.metadata_files import METADATA_DIR, StorageFileIO, aliased, table_relative

__all__ = ["DELTA_TIMESTAMP", "DELTA_VERSION", "LiveFiles", "SnapshotChange", "commit_snapshot", "file_key"]

#: Delta's converter's property names (``IcebergConverter.DELTA_VERSION_PROPERTY`` / ``DELTA_TIMESTAMP_PROPERTY``),
#: on the table properties and, by deltalog, on each snapshot's summary.
DELTA_VERSION = "delta-version"
DELTA_TIMESTAMP = "delta-timestamp"
#: Iceberg's ``commit.manifest.min-count-to-merge`` and ``commit.manifest.target-size-bytes`` defaults.
MIN_COUNT_TO_MERGE = 100
TARGET_MANIFEST_BYTES = 8 * 1024 * 1024
#: Iceberg's default ``write.avro.compression-codec`` (Avro's deflate).
AVRO_COMPRESSION: Any = "gzip"


def file_key(storage: Storage, location: str) -> str:
    """One key per file whatever the spelling of its location (``file:/t/x``, ``file:///t/x``, ``s3a://``)."""
    return table_relative(storage, location) or location


@dataclass
class SnapshotChange:
    """What one Delta version does to the Iceberg table's files."""

    delta_version: int
    timestamp_ms: int
    added: list[DataFile]
    removed: set[str]  # file keys
    data_change: bool = True


class LiveFiles:
    """The live files of the Iceberg table's current snapshot, by file key, with the manifest holding each."""

    def __init__(self, storage: Storage, io: StorageFileIO, manifests: list[ManifestFile]) -> None:
        self.storage = storage
        self.io = io
        self.manifests = list(manifests)
        self._entries: dict[str, tuple[ManifestEntry, str]] | None = None

    @property
    def loaded(self) -> bool:
        return self._entries is not None

    def entries(self) -> dict[str, tuple[ManifestEntry, str]]:
        if self._entries is None:
            entries: dict[str, tuple[ManifestEntry, str]] = {}
            for manifest in self.manifests:
                for entry in manifest.fetch_manifest_entry(self.io, discard_deleted=True):
                    entries[file_key(self.storage, entry.data_file.file_path)] = (entry, manifest.manifest_path)
            self._entries = entries
        return self._entries

    def __contains__(self, key: str) -> bool:
        return key in self.entries()


def _operation(change: SnapshotChange) -> Operation:
    if change.added and change.removed:
        return Operation.OVERWRITE if change.data_change else Operation.REPLACE
    return Operation.APPEND if change.added else Operation.DELETE


def _summary(
    change: SnapshotChange,
    removed: list[DataFile],
    schema: Schema,
    spec: PartitionSpec,
    previous: Summary | None,
) -> Summary:
    collector = SnapshotSummaryCollector()
    for data_file in change.added:
        collector.add_file(data_file, schema=schema, partition_spec=spec)
    for data_file in removed:
        collector.remove_file(data_file, schema=schema, partition_spec=spec)
    operation = _operation(change)
    extra = {
        DELTA_VERSION: str(change.delta_version),
        DELTA_TIMESTAMP: str(change.timestamp_ms),
        "engine-name": "deltalog",
        "engine-version": __version__,
    }
    # pyiceberg totals the counters for append/overwrite/delete; a replace totals like an overwrite.
    counted = Operation.OVERWRITE if operation is Operation.REPLACE else operation
    totals = update_snapshot_summaries(Summary(counted, **collector.build(), **extra), previous)
    return Summary(operation, **totals.additional_properties)


class _ManifestNames:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.commit = uuid.uuid4()
        self.count = 0

    def manifest(self) -> str:
        self.count += 1
        return self.storage.full_uri(f"{METADATA_DIR}/{self.commit}-m{self.count - 1}.avro")

    def manifest_list(self, snapshot_id: int) -> str:
        return self.storage.full_uri(f"{METADATA_DIR}/snap-{snapshot_id}-1-{self.commit}.avro")


def _write(
    io: StorageFileIO,
    names: _ManifestNames,
    metadata: TableMetadata,
    snapshot_id: int,
    entries: list[tuple[str, ManifestEntry]],
) -> ManifestFile:
    """One manifest of ``(status, entry)`` pairs: ``added``, ``existing`` or ``deleted``."""
    with write_manifest(
        format_version=2,
        spec=metadata.spec(),
        schema=metadata.schema(),
        output_file=io.new_output(names.manifest()),
        snapshot_id=snapshot_id,
        avro_compression=AVRO_COMPRESSION,
    ) as writer:
        for status, entry in entries:
            getattr(writer, {"added": "add", "existing": "existing", "deleted": "delete"}[status])(entry)
    return writer.to_manifest_file()


def _merge_small(
    io: StorageFileIO, names: _ManifestNames, metadata: TableMetadata, snapshot_id: int, kept: list[ManifestFile]
) -> list[ManifestFile]:
    """Iceberg's merge-append: past the minimum count, small carried-over manifests become one."""
    if len(kept) < MIN_COUNT_TO_MERGE:
        return kept
    small = [m for m in kept if m.manifest_length < TARGET_MANIFEST_BYTES]
    if len(small) < 2:
        return kept
    entries = [("existing", entry) for m in small for entry in m.fetch_manifest_entry(io, discard_deleted=True)]
    merged = _write(io, names, metadata, snapshot_id, entries)
    return [m for m in kept if m not in small] + [merged]


def commit_snapshot(
    storage: Storage,
    io: StorageFileIO,
    metadata: TableMetadata,
    live: LiveFiles,
    change: SnapshotChange,
    metadata_location: str | None,
) -> tuple[TableMetadata, Snapshot]:
    """Write the manifests and manifest list of ``change`` on top of the current snapshot and add the snapshot
    to ``metadata`` as the main branch's head (nothing is published until the metadata file lands)."""
    names = _ManifestNames(storage)
    mark = len(io.written)
    snapshot_id = metadata.new_snapshot_id()
    sequence = metadata.next_sequence_number()
    entries = live.entries() if change.removed else None
    removed_by_manifest: dict[str, set[str]] = {}
    removed_files: list[DataFile] = []
    if entries is not None:
        for key in change.removed:
            entry, manifest_path = entries[key]
            removed_by_manifest.setdefault(manifest_path, set()).add(key)
            removed_files.append(entry.data_file)
    new_manifests: list[ManifestFile] = []
    kept: list[ManifestFile] = []
    for manifest in live.manifests:
        hit = removed_by_manifest.get(manifest.manifest_path)
        if hit:
            rewritten = []
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                gone = file_key(storage, entry.data_file.file_path) in hit
                rewritten.append(("deleted" if gone else "existing", entry))
            new_manifests.append(_write(io, names, metadata, snapshot_id, rewritten))
        elif (manifest.added_files_count or 0) + (manifest.existing_files_count or 0) > 0:
            kept.append(manifest)
    kept = _merge_small(io, names, metadata, snapshot_id, kept)
    if change.added:
        added = [
            (
                "added",
                ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=data_file),
            )
            for data_file in change.added
        ]
        new_manifests.insert(0, _write(io, names, metadata, snapshot_id, added))
    manifests = new_manifests + kept
    parent = metadata.current_snapshot()
    list_location = names.manifest_list(snapshot_id)
    with write_manifest_list(
        format_version=2,
        output_file=io.new_output(list_location),
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id if parent else None,
        sequence_number=sequence,
        avro_compression=AVRO_COMPRESSION,
    ) as list_writer:
        list_writer.add_manifests(manifests)
    floor = max([metadata.last_updated_ms] + [e.timestamp_ms for e in metadata.snapshot_log])
    timestamp = max(change.timestamp_ms, floor)
    # pydantic models built by their aliases (the names the Iceberg spec gives the fields).
    snapshot = Snapshot(
        **aliased(
            {
                "snapshot-id": snapshot_id,
                "parent-snapshot-id": parent.snapshot_id if parent else None,
                "sequence-number": sequence,
                "timestamp-ms": timestamp,
                "manifest-list": list_location,
                "summary": _summary(
                    change, removed_files, metadata.schema(), metadata.spec(), parent.summary if parent else None
                ),
                "schema-id": metadata.current_schema_id,
            }
        )
    )
    ref = {
        "ref-name": MAIN_BRANCH,
        "type": SnapshotRefType.BRANCH,
        "snapshot-id": snapshot_id,
        "parent-snapshot-id": snapshot.parent_snapshot_id,
    }
    updates: Any = (AddSnapshotUpdate(snapshot=snapshot), SetSnapshotRefUpdate(**aliased(ref)))
    metadata = update_table_metadata(metadata, updates, metadata_location=metadata_location)
    # The live files move on: removed ones out, the entries of the manifests written here in (read back through
    # the manifest list, which gave them their sequence number).
    listed = list(read_manifest_list(io.new_input(list_location)))
    live.manifests = listed
    if live.loaded:
        current = live.entries()
        for key in change.removed:
            current.pop(key, None)
        fresh = set(io.written[mark:])
        for manifest in listed:
            if manifest.manifest_path in fresh:
                for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                    current[file_key(storage, entry.data_file.file_path)] = (entry, manifest.manifest_path)
    return metadata, snapshot
