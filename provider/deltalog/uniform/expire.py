"""Expire Iceberg snapshots past the table's retention, and delete the metadata files only they referenced.

Run within log cleanup (:func:`deltalog.log_maintenance.log_cleanup.cleanup_log`), with
its dry run. The retention is Delta's converter's Iceberg snapshot age
(:func:`deltalog.uniform.iceberg_schema.snapshot_retention_ms`: the smaller of
``delta.logRetentionDuration`` and ``delta.deletedFileRetentionDuration``, or a smaller
``history.expire.max-snapshot-age-ms`` given through the table's
``delta.universalformat.config.iceberg.*``), the window inside which vacuum keeps the
files the Iceberg snapshots reference.

- Expired: snapshots older than ``now - retention`` that are neither the current one nor
  the head of a branch or tag. The current snapshot is never expired, whatever its age.
- The new metadata version without them lands first (create-if-absent, as every Iceberg
  version deltalog writes); only then are files deleted, so a crash leaves at most
  unreferenced files, never a metadata file naming a missing one.
- Deleted: the manifest lists of expired snapshots, their manifests that no retained
  snapshot lists, and earlier ``v<N>.metadata.json`` files of the metadata log older than
  the cutoff; each one proven to lie in the table's ``metadata/`` folder. Data files are
  never deleted here: that is vacuum's job, which keeps those any retained snapshot needs.

Iceberg metadata written by Delta's converter (``<NNNNN>-<uuid>.metadata.json``, behind a
catalog deltalog does not see) is left alone.
"""

from __future__ import annotations

import logging
import posixpath
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from pyiceberg.manifest import read_manifest_list
from pyiceberg.table.metadata import MetadataLogEntry
from pyiceberg.table.update import RemoveSnapshotsUpdate, update_table_metadata

from deltalog._flags import require_bools
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage
from deltalog.uniform.iceberg_schema import snapshot_retention_ms
from deltalog.uniform.metadata_files import (
    METADATA_DIR,
    StorageFileIO,
    aliased,
    read_head,
    table_relative,
    write_metadata,
)
from deltalog.uniform.snapshots import DELTA_VERSION

__all__ = ["ExpiredSnapshot", "IcebergExpiryResult", "expire_iceberg_snapshots"]

log = logging.getLogger(__name__)

#: Metadata versions tried when a conversion lands one first.
MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class ExpiredSnapshot:
    """A snapshot past the retention."""

    snapshot_id: int
    timestamp_ms: int
    delta_version: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class IcebergExpiryResult:
    """Which Iceberg snapshots expired (or would, in a dry run) and which metadata files went with them."""

    dry_run: bool
    retention_ms: int
    cutoff_ms: int
    iceberg_version: int | None = None
    expired: list[ExpiredSnapshot] = field(default_factory=list)
    snapshots_kept: int = 0
    files: list[str] = field(default_factory=list)  # table-relative paths under metadata/
    num_deleted: int = 0
    skipped_reason: str | None = None

    def summary_line(self) -> str:
        if self.skipped_reason:
            return f"Iceberg snapshot expiry: nothing expired: {self.skipped_reason}"
        verb = "would expire" if self.dry_run else "expired"
        gone = len(self.files) if self.dry_run else self.num_deleted
        return (
            f"Iceberg snapshot expiry: {verb} {len(self.expired)} snapshot(s) older than the retention, "
            f"kept {self.snapshots_kept}; {'would delete' if self.dry_run else 'deleted'} {gone} metadata file(s)"
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["expired"] = [s.to_dict() for s in self.expired]
        return out


def _referenced(io: StorageFileIO, manifest_list: str) -> set[str]:
    """The manifest list and every manifest it lists."""
    out = {manifest_list}
    for manifest in read_manifest_list(io.new_input(manifest_list)):
        out.add(manifest.manifest_path)
    return out


def _inside_metadata(storage: Storage, location: str) -> str | None:
    rel = table_relative(storage, location)
    if rel is None or posixpath.dirname(rel) != METADATA_DIR:
        return None
    return rel


def expire_iceberg_snapshots(
    table: TableRef,
    configuration: dict[str, str],
    *,
    dry_run: bool = False,
    now_ms: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> IcebergExpiryResult:
    """Expire the table's Iceberg snapshots past the retention of ``configuration`` (the Delta table properties)."""
    require_bools(dry_run=dry_run)
    storage = table_storage(table, storage_options)
    retention = snapshot_retention_ms(configuration)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now - retention
    for _attempt in range(MAX_ATTEMPTS):
        head = read_head(storage)
        if head is None:
            return IcebergExpiryResult(dry_run, retention, cutoff, skipped_reason="the table has no Iceberg metadata")
        if head.foreign:
            return IcebergExpiryResult(
                dry_run,
                retention,
                cutoff,
                skipped_reason="its Iceberg metadata was written by Delta's converter behind a catalog; left alone",
            )
        metadata = head.metadata
        if table_relative(storage, metadata.location.rstrip("/") + "/x") != "x":
            return IcebergExpiryResult(
                dry_run, retention, cutoff, head.version, skipped_reason="its Iceberg metadata names another location"
            )
        current = metadata.current_snapshot_id
        heads = {ref.snapshot_id for ref in metadata.refs.values()}
        expired = [
            s
            for s in metadata.snapshots
            if s.timestamp_ms < cutoff and s.snapshot_id != current and s.snapshot_id not in heads
        ]
        kept = [s for s in metadata.snapshots if s not in expired]
        # A metadata file is past the retention once the cutoff is after the moment the next one replaced it.
        replaced_at = [e.timestamp_ms for e in metadata.metadata_log[1:]] + [metadata.last_updated_ms]
        old_files = [e for e, at in zip(metadata.metadata_log, replaced_at) if at < cutoff]
        if not expired and not old_files:
            return IcebergExpiryResult(
                dry_run,
                retention,
                cutoff,
                head.version,
                snapshots_kept=len(kept),
                skipped_reason="no Iceberg snapshot or metadata file is older than the retention",
            )
        io = StorageFileIO(storage)
        keep: set[str] = set()
        for snapshot in kept:
            keep |= _referenced(io, snapshot.manifest_list)
        doomed: set[str] = set()
        for snapshot in expired:
            doomed |= _referenced(io, snapshot.manifest_list) - keep
        doomed |= {e.metadata_file for e in old_files} - {head.location}
        files = sorted(rel for rel in (_inside_metadata(storage, d) for d in doomed) if rel is not None)
        outside = sorted(d for d in doomed if _inside_metadata(storage, d) is None)
        if outside:
            log.warning(
                "Iceberg expiry of %s keeps %d file(s) outside its metadata/ folder: %s",
                storage.uri,
                len(outside),
                outside[:3],
            )
        described = [
            ExpiredSnapshot(
                s.snapshot_id, s.timestamp_ms, _version(s.summary.get(DELTA_VERSION) if s.summary else None)
            )
            for s in expired
        ]
        if dry_run:
            return IcebergExpiryResult(True, retention, cutoff, head.version, described, len(kept), files)
        gone_logs = {e.metadata_file for e in old_files}
        log_entries = [e for e in metadata.metadata_log if e.metadata_file not in gone_logs]
        log_entries.append(
            MetadataLogEntry(**aliased({"metadata-file": head.location, "timestamp-ms": metadata.last_updated_ms}))
        )
        new = metadata
        if expired:
            new = update_table_metadata(
                new, (RemoveSnapshotsUpdate(**aliased({"snapshot-ids": [s.snapshot_id for s in expired]})),)
            )
        new = new.model_copy(update={"metadata_log": log_entries, "last_updated_ms": metadata.last_updated_ms})
        try:
            write_metadata(storage, head.version + 1, new)
        except FileExistsError:
            log.info("Iceberg expiry of %s: a conversion landed the next version first; planning again", storage.uri)
            continue
        deleted = 0
        for rel in files:
            if storage.delete(storage.join(rel)):
                deleted += 1
        log.info(
            "Iceberg expiry of %s: %d snapshot(s) expired, %d metadata file(s) deleted (v%d)",
            storage.uri,
            len(expired),
            deleted,
            head.version + 1,
        )
        return IcebergExpiryResult(False, retention, cutoff, head.version + 1, described, len(kept), files, deleted)
    return IcebergExpiryResult(
        dry_run, retention, cutoff, skipped_reason=f"conversions kept landing new versions ({MAX_ATTEMPTS} tries)"
    )


def _version(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
