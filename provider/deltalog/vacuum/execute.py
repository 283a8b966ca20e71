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
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.actions import Metadata
from deltalog.errors import CommitFailedError, DeltaLogError, OperationRefusedError, StorageError
from deltalog.history import format_ms
from deltalog.log import list_log
from deltalog.protocol import Protocol, check_writable
from deltalog.snapshot import Snapshot
from deltalog.storage import Storage
from deltalog.table import DeltaTable
from deltalog.transaction import CommitResult, Transaction
from deltalog.vacuum.paths import HiddenRule, PathResolver
from deltalog.vacuum.plan import (
    CURSOR_KEY,
    DEFAULT_MAX_WORKERS,
    VacuumPlan,
    as_table,
    cursor_path,
    partition_dir_names,
    plan_vacuum,
)
from deltalog.vacuum.retained import scan_commits
from deltalog.vacuum.retention import DELETED_FILE_RETENTION_KEY, resolve_retention

log = logging.getLogger(__name__)

START = "VACUUM START"
END = "VACUUM END"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
DRY_RUN = "DRY_RUN"

#: Files per unit of work handed to a delete worker (object stores: one bulk request).
LOCAL_CHUNK = 256
REMOTE_CHUNK = 1000
PROGRESS_EVERY_S = 5.0


@dataclass
class VacuumResult:
    """What a vacuum did (or, for a dry run, would do); ``to_dict()`` is what operators push to XCom.

    Every version from ``fully_readable_from_version`` to ``version`` (and every later
    one) still has all of its files after this vacuum.
    """

    table: str
    mode: str
    dry_run: bool
    status: str
    version: int
    cutoff_ms: int
    retention_hours: float
    configured_retention_hours: float
    fully_readable_from_version: int
    num_files_to_delete: int
    size_of_data_to_delete: int
    num_deleted_files: int = 0
    num_already_gone: int = 0
    num_vacuumed_directories: int = 0
    num_kept_by_revalidation: int = 0
    start_commit_version: int | None = None
    end_commit_version: int | None = None
    cursor: int | None = None
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    plan: VacuumPlan | None = field(default=None, repr=False)

    @property
    def fully_readable_versions(self) -> str:
        return f"{self.fully_readable_from_version}..{self.version}"

    def to_dict(self, include_files: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "table": self.table,
            "mode": self.mode,
            "dry_run": self.dry_run,
            "status": self.status,
            "version": self.version,
            "cutoff": format_ms(self.cutoff_ms),
            "cutoff_ms": self.cutoff_ms,
            "retention_hours": self.retention_hours,
            "configured_retention_hours": self.configured_retention_hours,
            "fully_readable_from_version": self.fully_readable_from_version,
            "fully_readable_versions": self.fully_readable_versions,
            "num_files_to_delete": self.num_files_to_delete,
            "size_of_data_to_delete": self.size_of_data_to_delete,
            "num_deleted_files": self.num_deleted_files,
            "num_already_gone": self.num_already_gone,
            "num_vacuumed_directories": self.num_vacuumed_directories,
            "num_kept_by_revalidation": self.num_kept_by_revalidation,
            "start_commit_version": self.start_commit_version,
            "end_commit_version": self.end_commit_version,
            "cursor": self.cursor,
            "seconds": round(self.seconds, 3),
            "warnings": list(self.warnings),
        }
        if self.plan is not None:
            out["plan"] = self.plan.to_dict(include_files=include_files)
        return out


def result_of_plan(plan: VacuumPlan, seconds: float) -> VacuumResult:
    """The dry-run result: the plan, nothing done."""
    return VacuumResult(
        table=plan.table_uri,
        mode=plan.mode,
        dry_run=True,
        status=DRY_RUN,
        version=plan.version,
        cutoff_ms=plan.cutoff_ms,
        retention_hours=plan.retention.retention_hours,
        configured_retention_hours=plan.retention.configured_hours,
        fully_readable_from_version=plan.fully_readable_from,
        num_files_to_delete=plan.num_files,
        size_of_data_to_delete=plan.size_in_bytes,
        cursor=plan.cursor,
        seconds=seconds,
        warnings=list(plan.warnings),
        plan=plan,
    )


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
    versions = range(view.version + 1, latest + 1)
    missing = [v for v in versions if v not in listing.commits]
    if missing:
        raise OperationRefusedError(f"commit {missing[0]} disappeared while vacuum was running (log cleanup?)")
    refs = scan_commits(storage, [listing.commits[v] for v in versions])
    protocol, metadata = view.protocol, view.metadata
    if refs.protocol is not None:
        protocol = Protocol.from_action(refs.protocol)
        check_writable(protocol, "vacuum")
    if refs.metadata is not None:
        metadata = Metadata.from_action(refs.metadata)
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
    return advanced, PathResolver(storage).resolve(refs.all_paths())


def _commit_marker(
    storage: Storage, view: Snapshot, operation: str, parameters: dict[str, Any], metrics: dict[str, Any]
) -> CommitResult:
    """Write a commitInfo-only commit (VACUUM START/END) at the version after ``view``."""
    txn = Transaction(storage, view, operation=operation, operation_parameters=parameters)
    return txn.commit(metrics)


# --- deleting -------------------------------------------------------------------------------


class _Progress:
    """Thread-safe counters with a log line every few seconds."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.deleted = 0
        self.gone = 0
        self.lock = threading.Lock()
        self.last = time.monotonic()
        #: Set by the first failing worker so the others stop instead of deleting on.
        self.stop = threading.Event()

    def add(self, deleted: int, gone: int) -> None:
        with self.lock:
            self.deleted += deleted
            self.gone += gone
            now = time.monotonic()
            if now - self.last >= PROGRESS_EVERY_S:
                self.last = now
                log.info("vacuum: %d of %d files deleted (%d already gone)", self.deleted, self.total, self.gone)


def _unlink(path: str) -> None:
    os.unlink(path)


def _delete_chunk_local(root: str, chunk: list[str], progress: _Progress) -> None:
    deleted = gone = 0
    try:
        for rel in chunk:
            if progress.stop.is_set():
                return
            try:
                _unlink(os.path.join(root, rel))
                deleted += 1
            except FileNotFoundError:
                gone += 1
    except BaseException:
        progress.stop.set()
        raise
    finally:
        progress.add(deleted, gone)


def _delete_chunk_remote(storage: Storage, chunk: list[str], progress: _Progress) -> None:
    if progress.stop.is_set():
        return
    try:
        storage.fs.rm([storage.join(rel) for rel in chunk])
    except FileNotFoundError:
        pass
    except BaseException:
        progress.stop.set()
        raise
    progress.add(len(chunk), 0)


def delete_files(storage: Storage, paths: list[str], max_workers: int, progress: _Progress) -> None:
    """Delete table-relative ``paths`` with at most ``max_workers`` concurrent workers.

    Stops at the first failure (the exception propagates once the running chunks
    have finished); ``progress`` says how far it got either way.
    """
    if not paths:
        return
    size = LOCAL_CHUNK if storage.is_local else REMOTE_CHUNK
    chunks = [paths[i : i + size] for i in range(0, len(paths), size)]
    work: Callable[[list[str]], None]
    if storage.is_local:
        work = lambda c: _delete_chunk_local(storage.root, c, progress)  # noqa: E731
    else:
        work = lambda c: _delete_chunk_remote(storage, c, progress)  # noqa: E731
    workers = max(1, min(max_workers, len(chunks)))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vacuum-delete")
    try:
        futures = [pool.submit(work, c) for c in chunks]
        wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            if f.done() and f.exception() is not None:
                for other in futures:
                    other.cancel()
                raise f.exception()  # type: ignore[misc]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def remove_empty_dirs(storage: Storage, dirs: list[str], rule: HiddenRule) -> int:
    """Remove the directories that are empty now, deepest first; a non-empty one is left alone."""
    if not storage.is_local:
        return 0  # object stores have no directories to leave behind
    removed = 0
    for d in sorted(set(dirs), key=lambda p: (-p.count("/"), p)):
        if not d or rule.hidden_path(d):
            continue
        try:
            os.rmdir(os.path.join(storage.root, d))
            removed += 1
        except OSError:
            continue  # not empty (a hidden .crc, a new file) or already gone
    return removed


def _ancestors(paths: list[str]) -> list[str]:
    out: set[str] = set()
    for p in paths:
        d = p.rpartition("/")[0]
        while d and d not in out:
            out.add(d)
            d = d.rpartition("/")[0]
    return list(out)


def write_cursor(storage: Storage, version: int) -> None:
    """Record in ``_delta_log/_last_vacuum_info`` that every commit up to ``version`` has been vacuumed."""
    storage.write_atomic(cursor_path(storage), json.dumps({CURSOR_KEY: version}).encode())


# --- entry points -----------------------------------------------------------------------------


def execute_vacuum(
    table: DeltaTable | str,
    plan: VacuumPlan,
    max_workers: int = DEFAULT_MAX_WORKERS,
    *,
    storage_options: dict[str, Any] | None = None,
) -> VacuumResult:
    """Carry out ``plan`` (from :func:`plan_vacuum`) after re-validating it against the latest log.

    A table given as a URI without ``storage_options`` reuses the planned snapshot's storage options.
    """
    t0 = time.perf_counter()
    if isinstance(table, str) and storage_options is None and plan.snapshot is not None:
        storage_options = plan.snapshot.storage.storage_options
    dt = as_table(table, storage_options)
    storage = dt.storage
    if plan.snapshot is None:
        raise OperationRefusedError("this vacuum plan carries no snapshot (was it rebuilt from JSON?); plan again")
    if storage.uri != plan.table_uri:
        raise OperationRefusedError(f"the plan was made for {plan.table_uri}, not {storage.uri}")
    rule = HiddenRule(partition_dir_names(plan.snapshot))
    files = plan.files
    paths = files.column("path").combine_chunks() if files.num_rows else pa.array([], pa.string())
    # Defence in depth: the plan never holds these, and a corrupted plan must not delete them.
    if len(paths) and pc.any(rule.hidden_mask(paths)).as_py():
        raise OperationRefusedError("the vacuum plan names hidden paths (such as _delta_log); refusing to run it")

    view, newly_referenced = _advance(storage, plan.snapshot, plan, before_delete=True)
    kept = 0
    if len(newly_referenced) and len(paths):
        keep = pc.is_in(paths, value_set=newly_referenced)
        kept = int(pc.sum(pc.cast(keep, pa.int64())).as_py() or 0)
        if kept:
            log.warning("vacuum: %d planned files were referenced by commits made since planning; keeping them", kept)
            files = files.filter(pc.invert(keep))
            paths = files.column("path").combine_chunks()
    to_delete = paths.to_pylist()
    size = int(pc.sum(files.column("size")).as_py() or 0) if files.num_rows else 0

    retention = plan.retention
    parameters: dict[str, Any] = {
        "retentionCheckEnabled": not retention.short_retention_allowed,
        "defaultRetentionMillis": retention.configured_ms,
        "vacuumType": plan.mode.upper(),
    }
    if retention.specified:
        parameters["specifiedRetentionMillis"] = retention.retention_ms
    start = _commit_marker(
        storage, view, START, parameters, {"numFilesToDelete": len(to_delete), "sizeOfDataToDelete": size}
    )
    log.info(
        "vacuum of %s: %s at version %d, deleting %d files (%d bytes)",
        storage.uri,
        START,
        start.version,
        len(to_delete),
        size,
    )

    status = COMPLETED
    failure: BaseException | None = None
    progress = _Progress(len(to_delete))
    try:
        delete_files(storage, to_delete, max_workers, progress)
    except Exception as exc:  # noqa: BLE001 - recorded in VACUUM END, then re-raised as a StorageError
        status, failure = FAILED, exc
    deleted, gone = progress.deleted, progress.gone
    dirs = plan.directories if plan.mode == "full" and plan.source == "listing" else _ancestors(to_delete)
    num_dirs = remove_empty_dirs(storage, dirs, rule) if failure is None else 0

    warnings = list(plan.warnings)
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
    if failure is not None:
        raise StorageError(
            f"vacuum of {storage.uri} stopped after deleting {deleted} of {len(to_delete)} files "
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
        num_files_to_delete=len(to_delete),
        size_of_data_to_delete=size,
        num_deleted_files=deleted,
        num_already_gone=gone,
        num_vacuumed_directories=num_dirs,
        num_kept_by_revalidation=kept,
        start_commit_version=start.version,
        end_commit_version=end_version,
        warnings=warnings,
    )


def vacuum(
    table: DeltaTable | str,
    retention_hours: float | None = None,
    mode: str = "full",
    dry_run: bool = False,
    allow_short_retention: bool = False,
    inventory: str | pa.Table | None = None,
    max_workers: int = DEFAULT_MAX_WORKERS,
    full_fallback: bool = False,
    *,
    storage_options: dict[str, Any] | None = None,
) -> VacuumResult:
    """Delete the files no version inside the retention window needs (see :func:`plan_vacuum` for the checks).

    ``dry_run`` returns the plan without deleting or writing anything.
    """
    t0 = time.perf_counter()
    dt = as_table(table, storage_options)
    plan = plan_vacuum(
        dt,
        retention_hours=retention_hours,
        mode=mode,
        allow_short_retention=allow_short_retention,
        inventory=inventory,
        max_workers=max_workers,
        full_fallback=full_fallback,
    )
    if dry_run:
        return result_of_plan(plan, time.perf_counter() - t0)
    return execute_vacuum(dt, plan, max_workers=max_workers)
