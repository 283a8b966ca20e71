"""Planning a vacuum: what would be deleted, and why, without deleting anything.

Full mode compares a listing (or an inventory) of the table directory with the
protected set of :mod:`deltalog.vacuuming.retained`; lite mode reads the remove
actions of the commits since the previous vacuum (the cursor in
``_delta_log/_last_vacuum_info``, as Delta Spark keeps it) and lists nothing.
Either way, every safety check runs here, before a single file is touched:
protocol, retention, modification times, and the retained versions.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog._arrow_utils import count_true
from deltalog._flags import require_bools, require_workers
from deltalog.errors import InvalidArgumentError, OperationRefusedError
from deltalog.log.checkpoint_reader import check_checkpoint_deletion_vectors
from deltalog.log.history import format_ms
from deltalog.log.listing import LogListing, list_log
from deltalog.log.load import snapshot_at
from deltalog.log.snapshot import Snapshot
from deltalog.protocol.features import Operation
from deltalog.protocol.write_gate import check_can_write
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage
from deltalog.vacuuming.iceberg_guard import IcebergGuard, empty_kept, iceberg_rule
from deltalog.vacuuming.inventory import newest_per_path, scan_inventory
from deltalog.vacuuming.links import LinkGuard, describe, scan_links, through_links
from deltalog.vacuuming.listing import LISTING_SCHEMA, FileListing, fill_stats, list_table_files
from deltalog.vacuuming.path_set import PathSet
from deltalog.vacuuming.paths import PathResolver
from deltalog.vacuuming.retained import VACUUM_COLUMNS, RetainedState, retained_state, scan_commits
from deltalog.vacuuming.retention import resolve_retention
from deltalog.vacuuming.times import FLOOR_MS, plausible_times
from deltalog.vacuuming.vacuum_plan import (
    CURSOR_KEY,
    DEFAULT_MAX_WORKERS,
    ENGINES,
    LAST_VACUUM_INFO,
    MODES,
    VacuumPlan,
    cursor_path,
    log_plan,
    next_cursor,
    previous_cursor_of,
    without_file_lists,
)
from deltalog.vacuuming.verdict import (
    PLAN_SCHEMA,
    REASON_CDC,
    REASON_DV,
    REASON_LITE_REMOVED,
    age_masks,
    reasons,
)
from deltalog.write_checks.hidden_paths import HiddenRule
from deltalog.write_checks.hidden_paths import partition_dir_names as hidden_partition_dir_names

__all__ = [
    "CURSOR_KEY",
    "DEFAULT_MAX_WORKERS",
    "LAST_VACUUM_INFO",
    "LiteVacuumUnavailableError",
    "MODES",
    "VacuumPlan",
    "cursor_path",
    "plan_vacuum",
]

log = logging.getLogger(__name__)


class LiteVacuumUnavailableError(OperationRefusedError):
    """Lite mode needs commits that log cleanup already removed; only a full vacuum can proceed."""


# --- helpers -----------------------------------------------------------------------------


def partition_dir_names(snapshot: Snapshot) -> list[str]:
    """Partition column names as directories may carry them (the shared rule of :mod:`deltalog.write_checks.hidden_paths`)."""
    return hidden_partition_dir_names(snapshot.metadata)


def _empty_directories(listing: FileListing, deleted: pa.Array, cutoff_ms: int) -> list[str]:
    """Directories that hold nothing once ``deleted`` is gone, deepest first.

    Counts come from the listing (hidden entries such as ``.crc`` files included), so
    no pass over the remaining files is needed. A directory qualifies when it ends up
    empty and either lost something to this vacuum or was last modified before the
    cutoff (a fresh empty directory may belong to a writer about to put a file in it).
    """
    if not listing.entries or not listing.directories:
        return []
    parts = pc.split_pattern(deleted, "/", max_splits=1, reverse=True)
    nested = pc.equal(pc.list_value_length(parts), 2)
    parents = pc.list_element(parts.filter(nested), 0)
    lost: dict[str, int] = {}
    if len(parents):
        counts = pc.value_counts(parents)
        lost = dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()))
    eligible: set[str] = set()
    for d in sorted(listing.directories, key=lambda p: p.count("/"), reverse=True):
        if d not in listing.entries:
            continue  # not scanned (vanished while listing): leave it alone
        children_gone = sum(1 for c in listing.children(d) if c in eligible)
        gone = lost.get(d, 0) + children_gone
        if listing.entries[d] - gone != 0:
            continue
        if gone or 0 < listing.directories[d] < cutoff_ms:
            eligible.add(d)
    return sorted(eligible, key=lambda p: (-p.count("/"), p))


def _protect_through_links(storage: Storage, retained: RetainedState, links: list[str], warnings: list[str]) -> None:
    """Add the real paths of referenced files reached through ``links`` to the protected set (local storage)."""
    if not storage.is_local or not links:
        return
    inside, outside = through_links(storage, retained.protected, links)
    if inside:
        retained.protected = pa.chunked_array([*retained.protected.chunks, pa.array(inside, pa.string())])
    note = (
        f"; {len(outside)} referenced file(s) lie behind links leading out of the table root, where vacuum "
        "neither lists nor deletes anything"
        if outside
        else ""
    )
    warnings.append(
        f"vacuum never deletes or follows symbolic links; the table holds {len(links)}: "
        f"{describe(storage, links)}{note}"
    )


def _drop_links(storage: Storage, paths: list[str], warnings: list[str]) -> set[str]:
    """The ``paths`` that are links, lead through one or are not regular files (local storage): never deleted."""
    if not storage.is_local or not paths:
        return set()
    guard = LinkGuard(storage)
    linked = {p for p in paths if guard.check(p)[0] == LinkGuard.LINK}
    if linked:
        shown = ", ".join(sorted(linked)[:5]) + (f" and {len(linked) - 5} more" if len(linked) > 5 else "")
        warnings.append(
            f"{len(linked)} candidate(s) are symbolic links, lie behind one or are not regular files, so they are "
            f"not deleted: {shown}"
        )
    return linked


# --- the two modes -------------------------------------------------------------------------


@dataclass
class Unreferenced:
    """The listed files no retained version references, and how many were listed and protected."""

    files: pa.Table
    listed: int = 0
    protected: int = 0


#: The local engine holds its plan in memory (about 100 bytes a file): past this many unreferenced
#: files it stops and points to the Spark engine, whose plan stays in Parquet and is deleted batch by batch.
LOCAL_CANDIDATES_LIMIT = 20_000_000


def unreferenced(parts: Iterable[pa.Table], protected: PathSet) -> Unreferenced:
    """The rows of ``parts`` (``LISTING_SCHEMA`` tables: a listing, or an inventory a batch at a time)
    whose path is not in ``protected``; only those rows are kept, so an inventory is never held whole.

    Refuses (OperationRefusedError) once more than :data:`LOCAL_CANDIDATES_LIMIT` rows are unreferenced.
    """
    keep: list[pa.Table] = []
    out = Unreferenced(LISTING_SCHEMA.empty_table())
    kept = 0
    for part in parts:
        out.listed += part.num_rows
        if not part.num_rows:
            continue
        hit = protected.contains(part.column("path"))
        found = count_true(hit)
        out.protected += found
        if found < part.num_rows:
            keep.append(part.filter(pc.invert(hit)) if found else part)
            kept += part.num_rows - found
            if kept > LOCAL_CANDIDATES_LIMIT:
                raise OperationRefusedError(
                    f"more than {LOCAL_CANDIDATES_LIMIT:,} of the {out.listed:,} files listed so far are referenced by "
                    "no retained version: the local engine holds its plan in memory, so a plan this large is made "
                    "by the Spark engine (engine='spark'; CLI --engine spark), which keeps it in Parquet and deletes "
                    "it batch by batch. Nothing was deleted"
                )
    if keep:
        out.files = pa.concat_tables(keep) if len(keep) > 1 else keep[0]
    return out


def _plan_full(
    storage: Storage,
    retained: RetainedState,
    listing: FileListing,
    diff: Unreferenced,
    max_workers: int,
    warnings: list[str],
    iceberg: IcebergGuard | None,
) -> tuple[pa.Table, pa.Table, list[str], str, dict[str, int]]:
    """Turn the unreferenced files into the plan: stat them (local listings), keep the recent and implausible
    ones, and those Iceberg readers may still need (returned apart, with the reason)."""
    cutoff = retained.cutoff_ms
    candidates = diff.files
    if not listing.has_stats:
        candidates = fill_stats(storage, candidates, max_workers)
    mtime = candidates.column("modificationTime")
    known, implausible, old = age_masks(mtime, cutoff)
    if count_true(implausible):
        shown = candidates.filter(implausible).column("path").to_pylist()[:5]
        warnings.append(
            f"{count_true(implausible)} unreferenced file(s) have a modification time before 2000 "
            f"(e.g. {', '.join(shown)}); such a time is not believable, so they are kept"
        )
    to_delete = candidates.filter(old).sort_by("path")
    links_skipped = len(listing.links)
    if storage.is_local and listing.source != "listing":  # an inventory cannot tell a link from a file
        linked = _drop_links(storage, to_delete.column("path").to_pylist(), warnings)
        if linked:
            to_delete = to_delete.filter(pc.invert(pc.is_in(to_delete.column("path"), pa.array(sorted(linked)))))
            links_skipped += len(linked)
    del_paths = to_delete.column("path").combine_chunks()
    expired = pc.is_in(del_paths, value_set=retained.expired_tombstones)
    plan = to_delete.append_column("reason", reasons(del_paths, expired))
    kept = empty_kept()
    if iceberg is not None:
        plan, kept = iceberg.split(plan)
        del_paths = plan.column("path").combine_chunks()

    stats = {
        "files_listed": diff.listed,
        "files_protected": diff.protected,
        "files_too_new": count_true(pc.and_(known, pc.greater_equal(mtime, cutoff))),
        "files_without_modification_time": count_true(pc.invert(known)),
        "files_with_implausible_time": count_true(implausible),
        "hidden_entries_skipped": listing.hidden_skipped,
        "rows_outside_table": listing.outside_table,
        "directories_listed": len(listing.directories),
        "links_skipped": links_skipped,
    }
    dirs = _empty_directories(listing, del_paths, cutoff) if storage.is_local and listing.source == "listing" else []
    return plan, kept, dirs, listing.source, stats


def _stat_candidates(storage: Storage, rel_paths: list[str], max_workers: int) -> list[tuple[str, int, int] | None]:
    """(path, size, mtime) per candidate, None for files already gone."""

    def one(rel: str) -> tuple[str, int, int] | None:
        full = storage.join(rel)
        try:
            if storage.is_local:
                st = os.stat(full)
                return rel, st.st_size, int(st.st_mtime * 1000)
            info = storage.info(full)
            return rel, info.size, info.modification_time
        except FileNotFoundError:
            return None

    if storage.is_local or len(rel_paths) < 2:
        return [one(p) for p in rel_paths]
    with ThreadPoolExecutor(
        max_workers=max(1, min(max_workers, len(rel_paths))), thread_name_prefix="vacuum-stat"
    ) as pool:
        return list(pool.map(one, rel_paths))


def _plan_lite(
    storage: Storage,
    listing: LogListing,
    retained: RetainedState,
    rule: HiddenRule,
    previous_cursor: int | None,
    max_workers: int,
    warnings: list[str],
) -> tuple[pa.Table, tuple[int, int] | None, dict[str, int]]:
    end = retained.window_start
    start = 0 if previous_cursor is None else previous_cursor + 1
    empty = pa.Table.from_pylist([], schema=PLAN_SCHEMA)
    if end is None or start > end:
        return empty, None, {"commits_scanned": 0, "candidates": 0, "links_skipped": 0}
    missing = [v for v in range(start, end + 1) if v not in listing.commits]
    if missing:
        since = (
            "since version 0 (no previous vacuum)"
            if previous_cursor is None
            else f"since the last vacuum (version {previous_cursor})"
        )
        raise LiteVacuumUnavailableError(
            f"lite vacuum must read the commits {since} up to version {end}, but commit {missing[0]} "
            f"{'and later ones are' if len(missing) > 1 else 'is'} gone (log cleanup); run a full vacuum "
            "(mode='full', or full_fallback=True; CLI: --mode full or --full-fallback)"
        )
    refs = scan_commits(storage, [listing.commits[v] for v in range(start, end + 1)], kinds=("remove", "cdc"))
    if storage.is_local:  # lite lists nothing, so look for links on the referenced paths
        _protect_through_links(storage, retained, scan_links(storage, retained.protected), warnings)
    resolver = PathResolver(storage)
    kinds = [
        (resolver.resolve(refs.removed, strict=True), REASON_LITE_REMOVED),
        (resolver.resolve(refs.removed_dvs, strict=True), REASON_DV),
        (resolver.resolve(refs.cdc, strict=True), REASON_CDC),
    ]
    reasons: dict[str, str] = {}
    protected = PathSet(retained.protected)
    for arr, why in kinds:
        if len(arr) == 0:
            continue
        keep = protected.contains(arr)
        hidden = rule.hidden_mask(arr)
        for p in arr.filter(pc.invert(pc.or_(keep, hidden))).to_pylist():
            reasons.setdefault(p, why)
    linked = _drop_links(storage, sorted(reasons), warnings)
    candidates = sorted(set(reasons) - linked)
    found = [r for r in _stat_candidates(storage, candidates, max_workers) if r is not None]
    eligible = [r for r in found if FLOOR_MS <= r[2] < retained.cutoff_ms]
    implausible = [r[0] for r in found if 0 < r[2] < FLOOR_MS]
    if implausible:
        warnings.append(
            f"{len(implausible)} removed file(s) have a modification time before 2000 "
            f"(e.g. {', '.join(implausible[:5])}); such a time is not believable, so they are kept"
        )
    table = pa.Table.from_pylist(
        [{"path": p, "size": s, "modificationTime": m, "reason": reasons[p]} for p, s, m in eligible],
        schema=PLAN_SCHEMA,
    )
    stats = {
        "commits_scanned": refs.commits,
        "candidates": len(candidates),
        "candidates_already_gone": len(candidates) - len(found),
        "files_too_new": sum(1 for r in found if r[2] >= retained.cutoff_ms),
        "files_with_implausible_time": len(implausible),
        "links_skipped": len(linked),
        "protected_paths": protected.distinct,
    }
    return table, (start, end), stats


# --- entry point ---------------------------------------------------------------------------


def plan_vacuum(
    table: TableRef,
    *,
    retention_hours: float | None = None,
    mode: str = "full",
    allow_short_retention: bool = False,
    inventory: str | pa.Table | None = None,
    max_workers: int = DEFAULT_MAX_WORKERS,
    full_fallback: bool = False,
    engine: str = "local",
    spark_options: dict[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
    now_ms: int | None = None,
    cancel: threading.Event | None = None,
) -> VacuumPlan:
    """Plan a vacuum: every check of a real run, nothing deleted, nothing written.

    ``now_ms`` fixes the clock the cutoff is computed from (``now - retention``); tests
    use it to compare plans with Delta Spark's at one exact cutoff.

    ``engine``: ``"local"`` (this process: a path-only replay of the log, the inventory
    streamed) or ``"spark"`` (full mode: the anti-join of storage against every protected
    path runs as a Spark job, :mod:`deltalog.vacuuming.spark`; ``spark_options``: its
    ``master``, ``spark_submit``, ``conf``, ``timeout``, ``work_dir``, or a ``session`` to run
    in). ``cancel`` stops a Spark job.

    Raises InvalidArgumentError (bad parameters, malformed inventory or retention
    property), OperationRefusedError (retention shorter than the table's without
    ``allow_short_retention``; lite mode without the commits it needs and no
    ``full_fallback``), UnsupportedProtocolError (a reader or writer feature deltalog
    does not implement, which ``vacuumProtocolCheck`` makes mandatory to check) and
    NotADeltaTableError.
    """
    t0 = time.perf_counter()
    require_bools(allow_short_retention=allow_short_retention, full_fallback=full_fallback)
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "lite" and inventory is not None:
        raise InvalidArgumentError("an inventory replaces the listing of full mode; lite mode lists nothing")
    require_workers(max_workers)
    if now_ms is not None and (isinstance(now_ms, bool) or not isinstance(now_ms, int)):
        raise InvalidArgumentError(f"now_ms must be milliseconds since the epoch (an int), got {now_ms!r}")
    if engine not in ENGINES:
        raise InvalidArgumentError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if spark_options is not None and engine != "spark":
        raise InvalidArgumentError("spark_options are for engine='spark'")
    storage = table_storage(table, storage_options)
    listing = list_log(storage)
    if engine == "spark":
        from deltalog.vacuuming.spark.driver import plan_on_spark

        return plan_on_spark(
            storage,
            listing,
            mode=mode,
            retention_hours=retention_hours,
            allow_short_retention=allow_short_retention,
            now_ms=now_ms,
            inventory=inventory,
            spark_options=spark_options,
            cancel=cancel,
            started=t0,
        )
    snapshot = snapshot_at(storage, listing=listing, columns=VACUUM_COLUMNS)
    check_can_write(
        storage, snapshot.protocol, "vacuum", Operation.VACUUM, snapshot.metadata.configuration, commits=False
    )
    check_checkpoint_deletion_vectors(storage, snapshot.segment)  # stats were projected away
    retention = resolve_retention(snapshot.metadata.configuration, retention_hours, allow_short_retention, now_ms)
    # Iceberg readers of the table (UniForm, or any metadata/*.metadata.json naming this location): what
    # their snapshots reference is kept; unreadable or foreign metadata is refused here, before any listing.
    iceberg = IcebergGuard.load(storage, retention.cutoff_ms)
    rule = iceberg_rule(snapshot.metadata, iceberg)
    log.info(
        "planning %s vacuum of %s at version %d: retention %.4g hours, cutoff %s",
        mode,
        storage.uri,
        snapshot.version,
        retention.retention_hours,
        format_ms(retention.cutoff_ms),
    )
    retained = retained_state(snapshot, listing, retention.cutoff_ms)
    warnings = list(retention.warnings) + retained.warnings
    previous_cursor = previous_cursor_of(storage, snapshot.version, warnings)
    lite_range: tuple[int, int] | None = None
    dirs: list[str] = []
    effective_mode = mode
    if mode == "lite":
        try:
            files, lite_range, stats = _plan_lite(
                storage, listing, retained, rule, previous_cursor, max_workers, warnings
            )
            source = "log"
            kept = empty_kept()
            if iceberg is not None:
                files, kept = iceberg.split(files)
        except LiteVacuumUnavailableError as exc:
            if not full_fallback:
                raise
            warnings.append(f"{exc}; falling back to a full vacuum as requested")
            effective_mode = "full"
    protected_count = 0
    if effective_mode == "full":
        window = plausible_times() if inventory is not None else None
        # From here on the file lists live on only as the protected paths (and their fingerprints).
        snapshot = retained.snapshot = without_file_lists(snapshot)
        if inventory is not None:
            scan = scan_inventory(storage, inventory, rule, window)
            # An inventory cannot tell a link from a file: look for links on the referenced paths, as lite does.
            if storage.is_local:
                _protect_through_links(storage, retained, scan_links(storage, retained.protected), warnings)
        else:
            file_listing = list_table_files(storage, rule, max_workers)
            _protect_through_links(storage, retained, file_listing.links, warnings)
        protected = PathSet(retained.protected)
        protected_count = protected.distinct
        retained.protected = pa.chunked_array([], pa.string())  # the paths' memory goes to the listing
        if inventory is not None:
            diff = unreferenced(scan.parts(), protected)
            scan.finish()
            diff.files = newest_per_path(diff.files)
            file_listing = FileListing(diff.files, {}, scan.hidden, scan.outside, source="inventory")
        else:
            diff = unreferenced([file_listing.files], protected)
        files, kept, dirs, source, stats = _plan_full(
            storage, retained, file_listing, diff, max_workers, warnings, iceberg
        )
    stats["commits_read_for_window"] = retained.commits_read
    if iceberg is not None:
        stats.update(iceberg.stats(), files_kept_for_iceberg=kept.num_rows)
        warnings.extend(iceberg.references.warnings)
    stats.setdefault("protected_paths", protected_count)
    cursor = next_cursor(retained.window_start, previous_cursor)
    plan = VacuumPlan(
        table_uri=storage.uri,
        mode=effective_mode,
        version=snapshot.version,
        retention=retention,
        fully_readable_from=retained.fully_readable_from,
        window_start=retained.window_start,
        files=files,
        directories=dirs,
        source=source,
        cursor=cursor,
        previous_cursor=previous_cursor,
        lite_range=lite_range,
        stats=stats,
        warnings=warnings,
        planning_seconds=time.perf_counter() - t0,
        snapshot=without_file_lists(snapshot),
        kept_for_iceberg=kept,
        iceberg=iceberg,
    )
    log_plan(plan)
    return plan
