"""A table's snapshot at a version or a time, straight from its storage.

The one way every layer loads a table: the facade (``DeltaTable.snapshot``), the
operations, the post-commit work and the log readers that fall back to a full replay.
An unreadable checkpoint is skipped here when an older one (or commit 0) can rebuild
the same version, so every caller gets the same recovery, not only the facade's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import TypeVar

from deltalog.errors import CorruptCheckpointError, DeltaLogError, InvalidArgumentError, VersionNotFoundError
from deltalog.log.actions import ALL_FILE_COLUMNS, FileColumns
from deltalog.log.catalog_managed import catalog_view
from deltalog.log.history import CommitTimestamps, ict_enablement_version, parse_timestamp
from deltalog.log.listing import LogListing, LogSegment, build_segment, list_log
from deltalog.log.snapshot import Snapshot, SnapshotHead, load_snapshot, load_snapshot_head
from deltalog.storage.filesystem import Storage

__all__ = ["snapshot_at", "snapshot_head_at"]

_T = TypeVar("_T")


def snapshot_at(
    storage: Storage,
    version: int | None = None,
    timestamp: str | int | dt.datetime | None = None,
    *,
    listing: LogListing | None = None,
    columns: FileColumns = ALL_FILE_COLUMNS,
) -> Snapshot:
    """The table state at ``version`` or at ``timestamp`` (default: the latest), from ``listing`` if given.

    ``columns``: the add/remove fields to hold (:class:`~deltalog.log.actions.FileColumns`; all by default).
    """
    if version is not None and timestamp is not None:
        raise InvalidArgumentError("give either a version or a timestamp, not both")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise InvalidArgumentError(f"version must be an integer, got {version!r}")
    listing = listing or list_log(storage)
    if timestamp is not None:
        ts = parse_timestamp(timestamp)
        latest = _load(storage, listing, None, columns)
        ict_from = ict_enablement_version(latest.metadata.configuration)
        version = CommitTimestamps(storage, listing, ict_from).version_at(ts)
        if version == latest.version:
            return _with_catalog_notice(latest, listing)
    try:
        return _with_catalog_notice(_load(storage, listing, version, columns), listing)
    except VersionNotFoundError:
        newest = listing.latest_version
        if version is None or newest is None or version <= newest:
            raise
        latest = _load(storage, listing, None, columns)
        view = catalog_view(storage, latest.protocol, latest.metadata.configuration, latest.version)
        if view is None:
            raise
        raise VersionNotFoundError(view.unpublished(version)) from None


def _with_catalog_notice(snapshot: Snapshot, listing: LogListing) -> Snapshot:
    """``snapshot``, with the warning a catalog-managed table read from storage alone carries."""
    newest = listing.latest_version
    view = catalog_view(
        snapshot.storage,
        snapshot.protocol,
        snapshot.metadata.configuration,
        snapshot.version if newest is None else newest,
    )
    if view is None:
        return snapshot
    return dataclasses.replace(snapshot, warnings=(*snapshot.warnings, view.warning()))


def snapshot_head_at(storage: Storage, listing: LogListing, columns: FileColumns = ALL_FILE_COLUMNS) -> SnapshotHead:
    """The latest version's :class:`~deltalog.log.snapshot.SnapshotHead` (the Parquet checkpoint files' file actions
    left unread), with the same recovery from an unreadable checkpoint as :func:`snapshot_at`."""
    return _with_recovery(listing, None, lambda segment: load_snapshot_head(storage, segment, columns))


def _load(storage: Storage, listing: LogListing, version: int | None, columns: FileColumns) -> Snapshot:
    return _with_recovery(listing, version, lambda segment: load_snapshot(storage, segment, columns))


def _with_recovery(listing: LogListing, version: int | None, load: Callable[[LogSegment], _T]) -> _T:
    excluded: set[int] = set()
    while True:
        segment = build_segment(listing, version, exclude_checkpoints=excluded)
        try:
            return load(segment)
        except CorruptCheckpointError as exc:
            # An unreadable checkpoint is skipped when an older one (or commit 0) can
            # rebuild the same version; otherwise the error stands.
            if segment.checkpoint is None:
                raise
            excluded.add(segment.checkpoint.version)
            try:
                build_segment(listing, version, exclude_checkpoints=excluded)
            except DeltaLogError:
                raise exc from None
