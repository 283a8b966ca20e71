"""``DeltaTable``: the entry point of the Python API."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from deltalog.errors import CorruptCheckpointError, DeltaLogError, InvalidArgumentError
from deltalog.health import TableHealth, compute_health
from deltalog.history import CommitTimestamps, HistoryEntry, history, ict_enablement_version, parse_timestamp
from deltalog.log import LogListing, build_segment, list_log
from deltalog.snapshot import Snapshot, load_snapshot
from deltalog.storage import Storage

if TYPE_CHECKING:
    from deltalog.checkpoint import CheckpointResult
    from deltalog.compaction import CompactionResult
    from deltalog.log_cleanup import LogCleanupResult
    from deltalog.manifest import ManifestResult
    from deltalog.transaction import Transaction
    from deltalog.vacuum import VacuumResult


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

    def history(self, *, limit: int | None = None) -> list[HistoryEntry]:
        """commitInfo of the newest ``limit`` commits still in the log, newest first."""
        listing = self.list_log()
        latest = self._load(listing, None)
        return history(self.storage, listing, ict_enablement_version(latest.metadata.configuration), limit)

    def health(self, *, target_file_size: int | None = None) -> TableHealth:
        """The health numbers of the latest version (small files, commits since checkpoint, ...)."""
        if target_file_size is not None and target_file_size <= 0:
            raise InvalidArgumentError(f"target file size must be positive, got {target_file_size}")
        return compute_health(self.snapshot(), target=target_file_size)

    # --- operations: each delegates to its module (imported here, on use: they build on this class) ---

    def vacuum(self, **options: Any) -> VacuumResult:
        """Delete files no retained version needs; see :func:`deltalog.vacuum.vacuum` for the options
        (``retention_hours``, ``mode``, ``dry_run``, ``allow_short_retention``, ``inventory``, ``cancel``...)."""
        from deltalog.vacuum import vacuum

        return vacuum(self, **options)

    def compact(self, **options: Any) -> CompactionResult:
        """Bin-pack small files (OPTIMIZE); see :func:`deltalog.compaction.compact` for the options
        (``target_size``, ``where``, ``engine``, ``plan_only``, ``bins_per_commit``, ``cancel``...)."""
        from deltalog.compaction import compact

        return compact(self, **options)

    def create_checkpoint(self, **options: Any) -> CheckpointResult:
        """Write a checkpoint (of ``version``, default the latest); see :func:`deltalog.checkpoint.create_checkpoint`."""
        from deltalog.checkpoint import create_checkpoint

        return create_checkpoint(self, **options)

    def cleanup_log(self, **options: Any) -> LogCleanupResult:
        """Delete expired log files (``dry_run`` to only list them); see :func:`deltalog.log_cleanup.cleanup_log`."""
        from deltalog.log_cleanup import cleanup_log

        return cleanup_log(self, **options)

    def generate_manifest(self, **options: Any) -> ManifestResult:
        """Write symlink-format manifests (``full``, ``dry_run``); see :func:`deltalog.manifest.generate_manifest`."""
        from deltalog.manifest import generate_manifest

        return generate_manifest(self, **options)

    def transaction(self, *, operation: str, **options: Any) -> Transaction:
        """A new optimistic transaction on the latest snapshot; see :class:`deltalog.transaction.Transaction`
        (``operation_parameters``, ``isolation_level``, ``post_commit_hooks``...)."""
        from deltalog.transaction import Transaction

        return Transaction(self.storage, self.snapshot(), operation=operation, **options)


def table_for_storage(storage: Storage) -> DeltaTable:
    """A DeltaTable sharing an existing Storage (post-commit hooks get a Storage, not a table)."""
    table = DeltaTable.__new__(DeltaTable)
    table.storage = storage
    return table


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
