"""Executing a vacuum plan: re-validate, mark the start, delete, mark the end.

Between planning and deleting, writers may have committed. Just before the
first deletion the plan is checked against every commit that landed since it
was made: a file re-added meanwhile (a RESTORE, a repair) is dropped from the
plan, and a protocol or retention change stops the run. Then a ``VACUUM START``
commit records what is about to go, the files are deleted by a bounded pool of
workers, directories left empty are removed, and ``VACUUM END`` records the
outcome (COMPLETED or FAILED), as Delta Spark writes them.

Deleting is idempotent, so a run that crashed part-way is finished by running
vacuum again: the files already gone are simply not listed any more.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog._arrow_utils import column_sum, count_true
from deltalog._flags import require_bools, require_workers
from deltalog.commit.result import CommitResult
from deltalog.commit.transaction import Transaction
from deltalog.errors import (
    CommitFailedError,
    DeltaLogError,
    ForeignHandoffError,
    OperationCancelledError,
    OperationRefusedError,
    StorageError,
)
from deltalog.log.actions import Metadata
from deltalog.log.listing import list_log
from deltalog.log.snapshot import Snapshot
from deltalog.protocol.features import Operation
from deltalog.protocol.table_protocol import Protocol, check_writable
from deltalog.protocol.write_gate import check_can_write
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage
from deltalog.vacuuming.delete import Progress, ancestors, delete_files, remove_empty_dirs
from deltalog.vacuuming.iceberg_guard import IcebergGuard, iceberg_rule
from deltalog.vacuuming.paths import PathResolver
from deltalog.vacuuming.plan import (
    CURSOR_KEY,
    DEFAULT_MAX_WORKERS,
    VacuumPlan,
    cursor_path,
    plan_vacuum,
)
from deltalog.vacuuming.result import COMPLETED, FAILED, VacuumResult, result_of_plan
from deltalog.vacuuming.retained import scan_commits
from deltalog.vacuuming.retention import DELETED_FILE_RETENTION_KEY, resolve_retention
from deltalog.write_checks.hidden_paths import HiddenRule

__all__ = ["execute_vacuum", "vacuum"]

log = logging.getLogger(__name__)

START = "VACUUM START"
END = "VACUUM END"


# --- re-validation ---------------------------------------------------------------------------


def _advance(storage: Storage, view: Snapshot, plan: VacuumPlan, *, before_delete: bool) -> tuple[Snapshot, pa.Array]:
    """Read the commits made since ``view``; return a view at the newest version and the paths they reference.

    The returned snapshot keeps the planned file lists: it only carries what a
    commit-info-only transaction needs (version, protocol, metadata and a fresh
    listing, from which in-commit timestamps continue). ``before_delete`` also
    checks that a retention change has not made the plan unsafe.
    """
    listing = list_log(storage)
    latest = listing.latest_commit
    none = pa.array([], pa.string())
    if latest is None or latest < view.version:
        raise OperationRefusedError(f"the log of {storage.uri} went back to version {latest} during vacuum")
    planned, now = view.segment.listing.commits.get(view.version), listing.commits.get(view.version)
    if planned is not None and (
        now is None or (now.size, now.modification_time) != (planned.size, planned.modification_time)
    ):
        raise ForeignHandoffError(
            f"the plan was made from version {view.version} of {storage.uri}, and that commit is not the same file "
            "any more (the table was deleted and re-created?); nothing was deleted, plan again"
        )
    versions = range(view.version + 1, latest + 1)
    missing = [v for v in versions if v not in listing.commits]
    if missing:
        raise OperationRefusedError(f"commit {missing[0]} disappeared while vacuum was running (log cleanup?)")
    refs = scan_commits(storage, [listing.commits[v] for v in versions])
    protocol, metadata = view.protocol, view.metadata
    if refs.protocol is not None:
        protocol = Protocol.from_action(refs.protocol)
        check_writable(protocol, "vacuum", Operation.VACUUM)
    if refs.metadata is not None:
        metadata = Metadata.from_action(refs.metadata)
        if metadata.id != view.metadata.id:
            raise ForeignHandoffError(
                f"the plan was made for table {view.metadata.id}, but {storage.uri} is table {metadata.id} since a "
                "commit after planning (replaced?); nothing was deleted, plan again"
            )
        before = view.metadata.configuration.get(DELETED_FILE_RETENTION_KEY)
        after = metadata.configuration.get(DELETED_FILE_RETENTION_KEY)
        if before_delete and before != after:
            # The plan's cutoff came from the old value: check it against the new one.
            specified = plan.retention.retention_hours if plan.retention.specified else None
            new = resolve_retention(metadata.configuration, specified, plan.retention.short_retention_allowed)
            if new.retention_ms > plan.retention.retention_ms:
                raise OperationRefusedError(
                    f"{DELETED_FILE_RETENTION_KEY} changed from {before!r} to {after!r} after vacuum planned; "
                    "nothing was deleted, plan again"
                )
    segment = dataclasses.replace(view.segment, version=latest, listing=listing)
    advanced = dataclasses.replace(view, version=latest, protocol=protocol, metadata=metadata, segment=segment)
    if not before_delete:
        return advanced, none
    return advanced, PathResolver(storage).resolve(refs.all_paths(), strict=True)


#: Plan paths that could leave the table root or name it: absolute, dot segments, doubled slashes, empty.
_OUTSIDE = r"^$|^/|(^|/)\.{1,2}(/|$)|//"


class _Checked:
    """A planned batch as it may be deleted: refused if it names a hidden path or one outside the table
    root, without the files that commits since planning reference and those Iceberg readers may still
    need (both counted)."""

    def __init__(self, rule: HiddenRule, newly_referenced: pa.Array, iceberg: IcebergGuard | None) -> None:
        self.rule = rule
        self.newly_referenced = newly_referenced
        self.iceberg = iceberg
        self.kept = self.kept_for_iceberg = self.count = self.size = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        paths = batch.column("path")
        # Defence in depth: a plan never holds these, and a corrupted (or hand-made) one must not delete them.
        if pc.any(self.rule.hidden_mask(paths.combine_chunks())).as_py():
            raise OperationRefusedError("the vacuum plan names hidden paths (such as _delta_log); refusing to run it")
        if pc.any(pc.match_substring_regex(paths, _OUTSIDE)).as_py():
            raise OperationRefusedError(
                "the vacuum plan names a path that is not a plain path inside the table root (absolute, '..' "
                "or empty); refusing to run it"
            )
        if len(self.newly_referenced):
            keep = pc.is_in(paths, value_set=self.newly_referenced)
            kept = count_true(keep)
            if kept:
                self.kept += kept
                batch = batch.filter(pc.invert(keep))
        if self.iceberg is not None:
            batch, for_iceberg = self.iceberg.split(batch)
            self.kept_for_iceberg += for_iceberg.num_rows
        self.count += batch.num_rows
        self.size += column_sum(batch, "size")
        return batch


def _commit_marker(
    storage: Storage, view: Snapshot, operation: str, parameters: dict[str, Any], metrics: dict[str, Any]
) -> CommitResult:
    """Write a commitInfo-only commit (VACUUM START/END) at the version after ``view``."""
    txn = Transaction(
        storage, view, operation=operation, operation_parameters=parameters, feature_operation=Operation.VACUUM
    )
    return txn.commit(metrics)


def write_cursor(storage: Storage, version: int) -> None:
    """Record in ``_delta_log/_last_vacuum_info`` that every commit up to ``version`` has been vacuumed."""
    storage.write_atomic(cursor_path(storage), json.dumps({CURSOR_KEY: version}).encode())


# --- entry points -----------------------------------------------------------------------------


def execute_vacuum(
    table: TableRef,
    plan: VacuumPlan,
    *,
    max_workers: int = DEFAULT_MAX_WORKERS,
    storage_options: dict[str, Any] | None = None,
    cancel: threading.Event | None = None,
) -> VacuumResult:
    """Carry out ``plan`` (from :func:`plan_vacuum`) after re-validating it against the latest log.

    A table given as a URI without ``storage_options`` reuses the planned snapshot's storage options.
    ``cancel`` (set from another thread, e.g. an Airflow ``on_kill``) stops the deleting at the
    next file or chunk; ``VACUUM END`` records how far it got (status FAILED) and
    ``OperationCancelledError`` says so (a rerun finishes the job).
    """
    t0 = time.perf_counter()
    require_workers(max_workers)
    if isinstance(table, str) and storage_options is None and plan.snapshot is not None:
        storage_options = plan.snapshot.storage.storage_options
    storage = table_storage(table, storage_options)
    if plan.snapshot is None:
        raise OperationRefusedError("this vacuum plan carries no snapshot (was it rebuilt from JSON?); plan again")
    if storage.uri != plan.table_uri:
        raise OperationRefusedError(f"the plan was made for {plan.table_uri}, not {storage.uri}")
    snapshot = plan.snapshot
    check_can_write(
        storage, snapshot.protocol, "vacuum", Operation.VACUUM, snapshot.metadata.configuration, commits=True
    )
    view, newly_referenced = _advance(storage, plan.snapshot, plan, before_delete=True)
    # The Iceberg metadata again: what was written since planning (a converter's next commit) is kept too;
    # unreadable or foreign metadata now is refused, as at planning.
    iceberg = IcebergGuard.revalidate(storage, plan.iceberg, plan.cutoff_ms)
    rule = iceberg_rule(plan.snapshot.metadata, iceberg)
    checked = _Checked(rule, newly_referenced, iceberg)
    # First pass: every planned path is checked (and counted) before the first deletion. A plan
    # in memory is kept as checked; a spilled one (millions of files) is read again to delete.
    batches = [checked(b) for b in plan.file_batches()]
    kept, total, size = checked.kept, checked.count, checked.size
    if kept:
        log.warning("vacuum: %d planned files were referenced by commits made since planning; keeping them", kept)
    if checked.kept_for_iceberg:
        log.warning(
            "vacuum: %d planned files are referenced by Iceberg metadata written since planning; keeping them",
            checked.kept_for_iceberg,
        )
    if plan.files_location:
        batches = []

    retention = plan.retention
    parameters: dict[str, Any] = {
        "retentionCheckEnabled": not retention.short_retention_allowed,
        "defaultRetentionMillis": retention.configured_ms,
        "vacuumType": plan.mode.upper(),
    }
    if retention.specified:
        parameters["specifiedRetentionMillis"] = retention.retention_ms
    start = _commit_marker(storage, view, START, parameters, {"numFilesToDelete": total, "sizeOfDataToDelete": size})
    log.info(
        "vacuum of %s: %s at version %d, deleting %d files (%d bytes)",
        storage.uri,
        START,
        start.version,
        total,
        size,
    )

    status = COMPLETED
    failure: BaseException | None = None
    progress = Progress(total, cancel)
    parents: set[str] = set()
    try:
        # In parallel batches: each batch's files by the bounded pool, batch after batch.
        for batch in batches or (_Checked(rule, newly_referenced, iceberg)(b) for b in plan.file_batches()):
            if progress.halted():
                break
            paths = batch.column("path").to_pylist()
            delete_files(storage, paths, max_workers, progress)
            if storage.is_local and not plan.knows_directories:
                parents.update(ancestors(paths))
    except Exception as exc:  # noqa: BLE001 - recorded in VACUUM END, then re-raised as a StorageError
        status, failure = FAILED, exc
    if failure is None and progress.cancelled:
        status, failure = FAILED, OperationCancelledError("cancelled")
    deleted, gone = progress.deleted, progress.gone
    dirs = plan.directories if plan.knows_directories else sorted(parents)
    num_dirs = remove_empty_dirs(storage, dirs, rule) if failure is None else 0

    warnings = list(plan.warnings)
    if progress.refused:
        warnings.append(
            f"{progress.refused} planned file(s) had become symbolic links or lay behind one at delete time; "
            "they were not deleted"
        )
    end_version: int | None = None
    try:
        view, _ = _advance(storage, view, plan, before_delete=False)
        end = _commit_marker(
            storage, view, END, {"status": status}, {"numDeletedFiles": deleted, "numVacuumedDirectories": num_dirs}
        )
        end_version = end.version
    except (CommitFailedError, DeltaLogError) as exc:
        warnings.append(f"the {END} commit could not be written ({exc}); the deletions themselves stand")
        log.warning("vacuum of %s: %s", storage.uri, warnings[-1])
    if isinstance(failure, OperationCancelledError):
        raise OperationCancelledError(
            f"vacuum of {storage.uri} was cancelled after deleting {deleted} of {total} files; run it again to finish"
        )
    if failure is not None:
        raise StorageError(
            f"vacuum of {storage.uri} stopped after deleting {deleted} of {total} files "
            f"({type(failure).__name__}: {failure}); run it again to finish"
        ) from failure
    if plan.cursor is not None and (plan.previous_cursor is None or plan.cursor > plan.previous_cursor):
        write_cursor(storage, plan.cursor)
    log.info(
        "vacuum of %s completed: %d files deleted, %d already gone, %d directories removed",
        storage.uri,
        deleted,
        gone,
        num_dirs,
    )
    return dataclasses.replace(
        result_of_plan(plan, plan.planning_seconds + time.perf_counter() - t0),
        dry_run=False,
        status=status,
        num_files_to_delete=total,
        size_of_data_to_delete=size,
        num_deleted_files=deleted,
        num_already_gone=gone,
        num_vacuumed_directories=num_dirs,
        num_kept_by_revalidation=kept,
        num_kept_for_iceberg=(plan.num_kept_for_iceberg + checked.kept_for_iceberg) if iceberg is not None else None,
        start_commit_version=start.version,
        end_commit_version=end_version,
        warnings=warnings,
    )


def vacuum(
    table: TableRef,
    *,
    retention_hours: float | None = None,
    mode: str = "full",
    dry_run: bool = False,
    allow_short_retention: bool = False,
    inventory: str | pa.Table | None = None,
    max_workers: int = DEFAULT_MAX_WORKERS,
    full_fallback: bool = False,
    engine: str = "local",
    spark_options: dict[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
    cancel: threading.Event | None = None,
) -> VacuumResult:
    """Delete the files no version inside the retention window needs (see :func:`plan_vacuum` for the checks).

    ``dry_run`` returns the plan without deleting or writing anything; ``cancel``: see
    :func:`execute_vacuum` (it also stops a Spark job). ``engine`` / ``spark_options``: where
    the plan is made (:func:`plan_vacuum`); the deletion is this process's either way.
    """
    t0 = time.perf_counter()
    require_bools(dry_run=dry_run, allow_short_retention=allow_short_retention, full_fallback=full_fallback)
    storage = table_storage(table, storage_options)
    if not dry_run:
        # Before the listing: a store that cannot commit VACUUM START is refused now (plan_vacuum
        # checks the protocol right after reading the log, before it lists anything).
        check_can_write(storage, None, "vacuum", Operation.VACUUM, commits=True)
    plan = plan_vacuum(
        storage,
        retention_hours=retention_hours,
        mode=mode,
        allow_short_retention=allow_short_retention,
        inventory=inventory,
        max_workers=max_workers,
        full_fallback=full_fallback,
        engine=engine,
        spark_options=spark_options,
        cancel=cancel,
    )
    if dry_run:
        return result_of_plan(plan, time.perf_counter() - t0)
    return execute_vacuum(storage, plan, max_workers=max_workers, cancel=cancel)
