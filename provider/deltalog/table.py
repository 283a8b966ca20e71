"""``DeltaTable``: the entry point of the Python API."""

from __future__ import annotations

import datetime as dt
from typing import Any

from deltalog.errors import CorruptCheckpointError, DeltaLogError, InvalidArgumentError
from deltalog.health import TableHealth, compute_health
from deltalog.history import CommitTimestamps, HistoryEntry, history, ict_enablement_version, parse_timestamp
from deltalog.log import LogListing, build_segment, list_log
from deltalog.snapshot import Snapshot, load_snapshot
from deltalog.storage import Storage


class DeltaTable:
    """A Delta table at a path or URI (``storage_options`` go to fsspec)."""

    def __init__(self, uri: str, storage_options: dict[str, Any] | None = None) -> None:
        self.storage = Storage(uri, storage_options)

    @property
    def uri(self) -> str:
        return self.storage.uri

    def __repr__(self) -> str:
        return f"DeltaTable({self.storage.uri!r})"

    def list_log(self) -> LogListing:
        return list_log(self.storage)

    def snapshot(
        self,
        version: int | None = None,
        timestamp: str | int | dt.datetime | None = None,
        *,
        listing: LogListing | None = None,
    ) -> Snapshot:
        """The table state at ``version`` or at ``timestamp`` (default: the latest)."""
        if version is not None and timestamp is not None:
            raise InvalidArgumentError("give either a version or a timestamp, not both")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
            raise InvalidArgumentError(f"version must be an integer, got {version!r}")
        listing = listing or self.list_log()
        if timestamp is not None:
            ts = parse_timestamp(timestamp)
            latest = self._load(listing, None)
            ict_from = ict_enablement_version(latest.metadata.configuration)
            version = CommitTimestamps(self.storage, listing, ict_from).version_at(ts)
            if version == latest.version:
                return latest
        return self._load(listing, version)

    def _load(self, listing: LogListing, version: int | None) -> Snapshot:
        excluded: set[int] = set()
        while True:
            segment = build_segment(listing, version, exclude_checkpoints=excluded)
            try:
                return load_snapshot(self.storage, segment)
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

    def version(self) -> int:
        """The latest version, from the listing alone (no replay)."""
        listing = self.list_log()
        latest = listing.latest_version
        assert latest is not None
        return latest

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        listing = self.list_log()
        latest = self._load(listing, None)
        return history(self.storage, listing, ict_enablement_version(latest.metadata.configuration), limit)

    def health(self, target_file_size: int | None = None) -> TableHealth:
        if target_file_size is not None and target_file_size <= 0:
            raise InvalidArgumentError(f"target file size must be positive, got {target_file_size}")
        return compute_health(self.snapshot(), target_file_size)


def as_table(table: DeltaTable | str, storage_options: dict[str, Any] | None = None) -> DeltaTable:
    """``table`` as a DeltaTable: every operation accepts a DeltaTable or a path/URI string.

    One place for this so every operation rejects a wrong type with the same
    clear sentence. ``storage_options`` only apply to a string (a DeltaTable
    already carries its own).
    """
    if isinstance(table, DeltaTable):
        return table
    if isinstance(table, str):
        return DeltaTable(table, storage_options)
    raise InvalidArgumentError(f"table must be a DeltaTable or a path/URI string, got {type(table).__name__}")
