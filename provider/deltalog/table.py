"""``DeltaTable``: the entry point of the Python API."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from deltalog.errors import InvalidArgumentError
from deltalog.log.activity import VACUUM_LOOKBACK
from deltalog.log.history import HistoryEntry, history, ict_enablement_version
from deltalog.log.listing import LogListing, list_log
from deltalog.log.load import snapshot_at
from deltalog.log.snapshot import Snapshot
from deltalog.storage.filesystem import Storage

if TYPE_CHECKING:
    import threading
    from collections.abc import Sequence

    import pyarrow as pa

    from deltalog.commit.post_commit import PostCommitHook
    from deltalog.commit.transaction import Transaction
    from deltalog.compaction import CompactionOptions, CompactionPlan, CompactionResult
    from deltalog.log_maintenance import CheckpointResult
    from deltalog.log_maintenance.log_cleanup import LogCleanupResult
    from deltalog.log_maintenance.manifest import ManifestResult
    from deltalog.maintenance.health import TableHealth
    from deltalog.protocol.features import Operation
    from deltalog.uniform.convert import IcebergSyncResult
    from deltalog.vacuuming import VacuumResult

__all__ = ["DeltaTable"]


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
        """The table state at ``version`` or at ``timestamp`` (default: the latest).

        See :func:`deltalog.log.load.snapshot_at` (which also skips an unreadable checkpoint).
        """
        return snapshot_at(self.storage, version, timestamp, listing=listing)

    def version(self) -> int:
        """The latest version, from the listing alone (no replay)."""
        listing = self.list_log()
        latest = listing.latest_version
        assert latest is not None
        return latest

    def history(self, *, limit: int | None = None) -> list[HistoryEntry]:
        """commitInfo of the newest ``limit`` commits still in the log, newest first."""
        listing = self.list_log()
        latest = snapshot_at(self.storage, listing=listing)
        return history(self.storage, listing, ict_enablement_version(latest.metadata.configuration), limit)

    def health(
        self, *, target_file_size: int | str | None = None, vacuum_lookback: int = VACUUM_LOOKBACK
    ) -> TableHealth:
        """The health numbers of the latest version (small files, commits since checkpoint, ...).

        See :func:`deltalog.maintenance.health.compute_health` (``target_file_size`` is its ``target``).
        """
        from deltalog.maintenance.health import compute_health

        if isinstance(target_file_size, int) and target_file_size <= 0:
            raise InvalidArgumentError(f"target file size must be positive, got {target_file_size}")
        return compute_health(self.snapshot(), target=target_file_size, vacuum_lookback=vacuum_lookback)

    # --- operations: each delegates to its module, imported on use so ``import deltalog`` stays
    # cheap. The operations take the table's storage, never this class: the facade sits on top.
    # The parameters mirror the functions' (tests/test_public_api.py compares them), except
    # ``storage_options``: the table carries its own.

    def vacuum(
        self,
        *,
        retention_hours: float | None = None,
        mode: str = "full",
        dry_run: bool = False,
        allow_short_retention: bool = False,
        inventory: str | pa.Table | None = None,
        max_workers: int = 8,
        full_fallback: bool = False,
        engine: str = "local",
        spark_options: dict[str, Any] | None = None,
        cancel: threading.Event | None = None,
    ) -> VacuumResult:
        """Delete files no retained version needs; see :func:`deltalog.vacuuming.vacuum`."""
        from deltalog.vacuuming import vacuum

        return vacuum(
            self,
            retention_hours=retention_hours,
            mode=mode,
            dry_run=dry_run,
            allow_short_retention=allow_short_retention,
            inventory=inventory,
            max_workers=max_workers,
            full_fallback=full_fallback,
            engine=engine,
            spark_options=spark_options,
            cancel=cancel,
        )

    def compact(
        self,
        *,
        options: CompactionOptions | None = None,
        plan: CompactionPlan | None = None,
        cancel: threading.Event | None = None,
        **option_values: Any,
    ) -> CompactionResult:
        """Bin-pack small files (OPTIMIZE), purge deletion vectors or Z-order; see :func:`deltalog.compaction.compact`.

        ``options`` (a :class:`~deltalog.compaction.CompactionOptions`) or its fields as
        keyword arguments: ``table.compact(target_size="128m", zorder_by=["ts"])``.
        """
        from deltalog.compaction import compact

        return compact(self, options=options, plan=plan, cancel=cancel, **option_values)

    def create_checkpoint(
        self, *, version: int | None = None, now_ms: int | None = None, sidecar_max_actions: int = 50_000
    ) -> CheckpointResult:
        """Write a checkpoint (of ``version``, default the latest); see :func:`deltalog.log_maintenance.create_checkpoint`."""
        from deltalog.log_maintenance import create_checkpoint

        return create_checkpoint(self, version=version, now_ms=now_ms, sidecar_max_actions=sidecar_max_actions)

    def cleanup_log(self, *, dry_run: bool = False, now_ms: int | None = None) -> LogCleanupResult:
        """Delete expired log files (``dry_run`` to only list them); see :func:`deltalog.log_maintenance.log_cleanup.cleanup_log`."""
        from deltalog.log_maintenance.log_cleanup import cleanup_log

        return cleanup_log(self, dry_run=dry_run, now_ms=now_ms)

    def generate_manifest(self, *, full: bool = False, dry_run: bool = False) -> ManifestResult:
        """Write symlink-format manifests; see :func:`deltalog.log_maintenance.manifest.generate_manifest`."""
        from deltalog.log_maintenance.manifest import generate_manifest

        return generate_manifest(self, full=full, dry_run=dry_run)

    def sync_iceberg(self, *, version: int | None = None) -> IcebergSyncResult:
        """Write a UniForm table's Iceberg metadata up to ``version`` (the latest); see
        :func:`deltalog.uniform.convert.sync_iceberg_metadata`."""
        from deltalog.uniform.convert import sync_iceberg_metadata

        return sync_iceberg_metadata(self, version=version)

    def transaction(
        self,
        *,
        operation: str,
        operation_parameters: dict[str, Any] | None = None,
        isolation_level: str | None = None,
        user_metadata: str | None = None,
        max_attempts: int = 1000,
        run_hooks: bool = True,
        allow_system_domains: bool = False,
        feature_operation: Operation | None = None,
        post_commit_hooks: Sequence[PostCommitHook] | None = None,
    ) -> Transaction:
        """A new optimistic transaction on the latest snapshot; see :class:`deltalog.commit.transaction.Transaction`."""
        from deltalog.commit.transaction import Transaction

        return Transaction(
            self.storage,
            self.snapshot(),
            operation=operation,
            operation_parameters=operation_parameters,
            isolation_level=isolation_level,
            user_metadata=user_metadata,
            max_attempts=max_attempts,
            run_hooks=run_hooks,
            allow_system_domains=allow_system_domains,
            feature_operation=feature_operation,
            post_commit_hooks=post_commit_hooks,
        )
