"""Listing the files of a table directory, in parallel, without looking into hidden paths.

Full-mode vacuum has to see every file under the table root; on a large table
that listing dominates the run. Each top-level directory (one per partition
value for partitioned tables) is listed by its own worker, hidden directories
(``_delta_log`` above all, whose thousands of commits vacuum never touches) are
pruned instead of listed, and the result is kept as Arrow columns for the
vectorised diff against the log.

On a local filesystem the listing collects names only: size and modification
time cost one ``stat`` per file, and only the files that no retained version
references need them (:func:`fill_stats`), typically a small fraction. Object
store listings return both for free, so they are kept.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property

import pyarrow as pa

from deltalog.errors import StorageError
from deltalog.storage.filesystem import Storage, check_utf8_names, mtime_ms
from deltalog.vacuuming.links import LinkGuard
from deltalog.write_checks.hidden_paths import HiddenRule

__all__ = ["FileListing", "LISTING_SCHEMA", "ListedPart", "fill_stats", "list_table_files", "scan_subtree", "top_level"]

log = logging.getLogger(__name__)

LISTING_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("modificationTime", pa.int64())])
STAT_CHUNK = 512


@dataclass
class FileListing:
    """Files under the table root that vacuum may consider: relative path, size, modification time (ms).

    ``size``/``modificationTime`` are null until :func:`fill_stats` when the listing
    collected names only (``has_stats`` False); a modification time of 0 means storage
    did not report one. ``directories`` maps relative directory paths to their
    modification time (filesystems with real directories only), so that directories
    left empty can be removed.
    """

    files: pa.Table
    directories: dict[str, int] = field(default_factory=dict)
    hidden_skipped: int = 0
    outside_table: int = 0
    source: str = "listing"
    has_stats: bool = True
    #: Entries (hidden ones included) directly inside each listed directory (local listings).
    entries: dict[str, int] = field(default_factory=dict)
    #: Symbolic links found (table-relative), never listed as files nor walked: see :mod:`deltalog.vacuuming.links`.
    links: list[str] = field(default_factory=list)

    @property
    def num_files(self) -> int:
        return self.files.num_rows

    @cached_property
    def _children(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for d in self.directories:
            out.setdefault(d.rpartition("/")[0], []).append(d)
        return out

    def children(self, directory: str) -> list[str]:
        """The listed subdirectories directly inside ``directory`` ("" is the root)."""
        return self._children.get(directory, [])


def _table(paths: list[str], sizes: list[int] | None, mtimes: list[int] | None) -> pa.Table:
    n = len(paths)
    return pa.Table.from_arrays(
        [
            pa.array(paths, pa.string()),
            pa.array(sizes, pa.int64()) if sizes is not None else pa.nulls(n, pa.int64()),
            pa.array(mtimes, pa.int64()) if mtimes is not None else pa.nulls(n, pa.int64()),
        ],
        schema=LISTING_SCHEMA,
    )


@dataclass
class ListedPart:
    """What one worker listed: files (stats on object stores only), directories, entries per directory, links."""

    paths: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    mtimes: list[int] = field(default_factory=list)
    dirs: dict[str, int] = field(default_factory=dict)
    entries: dict[str, int] = field(default_factory=dict)
    links: list[str] = field(default_factory=list)
    hidden: int = 0


def _scan_local(top: str, rel_top: str, rule: HiddenRule) -> ListedPart:
    """Names of the files in one local subtree (iteratively: partition nesting can be deep)."""
    part = ListedPart()
    stack = [(top, rel_top)]
    while stack:
        directory, rel_dir = stack.pop()
        try:
            it = os.scandir(directory)
        except FileNotFoundError:
            continue  # removed while we were listing
        except OSError as exc:
            raise StorageError(f"cannot list {directory}: {exc}") from None
        prefix = f"{rel_dir}/" if rel_dir else ""
        count = 0
        with it:
            for entry in it:
                count += 1
                name = entry.name
                if entry.is_symlink():  # never a file to delete, never a folder to walk into
                    part.links.append(prefix + name)
                    if rule.hidden_name(name):
                        part.hidden += 1
                    continue
                if rule.hidden_name(name):
                    part.hidden += 1
                    continue
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    if is_dir:
                        part.dirs[prefix + name] = int(entry.stat(follow_symlinks=False).st_mtime * 1000)
                except FileNotFoundError:
                    continue
                if is_dir:
                    stack.append((entry.path, prefix + name))
                else:
                    part.paths.append(prefix + name)
        part.entries[rel_dir] = count
    return part


def _scan_fsspec(storage: Storage, top: str, rule: HiddenRule) -> ListedPart:
    """List one remote subtree with ``find`` (one recursive listing per top-level directory)."""
    part = ListedPart()
    try:
        found = storage.fs.find(top, detail=True, withdirs=True)
    except FileNotFoundError:
        return part
    except OSError as exc:
        raise StorageError(f"cannot list {top}: {exc}") from None
    for name, info in found.items():
        rel = storage.relative(name)
        if not rel or rel == name.rstrip("/"):
            continue
        if rule.hidden_path(rel):
            part.hidden += 1
            continue
        if info.get("type") == "directory":
            part.dirs[rel] = mtime_ms(info)
            continue
        part.paths.append(rel)
        part.sizes.append(int(info.get("size") or 0))
        part.mtimes.append(mtime_ms(info))
    return part


def top_level(storage: Storage, rule: HiddenRule) -> tuple[ListedPart, list[tuple[str, str]]]:
    """The root's own files (with stats) and its non-hidden subdirectories."""
    top = ListedPart()
    subdirs: list[tuple[str, str]] = []
    if storage.is_local:
        try:
            with os.scandir(storage.root) as it:
                entries = list(it)
        except OSError as exc:
            raise StorageError(f"cannot list {storage.root}: {exc}") from None
        for entry in entries:
            if entry.is_symlink():  # never a file to delete, never a folder to walk into
                top.links.append(entry.name)
                if rule.hidden_name(entry.name):
                    top.hidden += 1
                continue
            if rule.hidden_name(entry.name):
                top.hidden += 1
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    top.dirs[entry.name] = int(entry.stat(follow_symlinks=False).st_mtime * 1000)
                    subdirs.append((entry.path, entry.name))
                else:
                    top.paths.append(entry.name)
            except FileNotFoundError:
                continue
        return top, subdirs
    try:
        storage.fs.invalidate_cache(storage.root)
        listed = storage.fs.ls(storage.root, detail=True)
    except FileNotFoundError:
        listed = []
    except OSError as exc:
        raise StorageError(f"cannot list {storage.uri}: {exc}") from None
    for info in listed:
        full = storage.fs._strip_protocol(info["name"]).rstrip("/")
        name = full.rsplit("/", 1)[-1]
        if full == storage.root:
            continue
        if rule.hidden_name(name):
            top.hidden += 1
            continue
        if info.get("type") == "directory":
            top.dirs[name] = mtime_ms(info)
            subdirs.append((full, name))
            continue
        top.paths.append(name)
        top.sizes.append(int(info.get("size") or 0))
        top.mtimes.append(mtime_ms(info))
    return top, subdirs


def scan_subtree(storage: Storage, top: str, rel_top: str, rule: HiddenRule) -> ListedPart:
    """Everything under one non-hidden directory of the table (``top`` absolute, ``rel_top`` table-relative).

    What each worker of :func:`list_table_files` runs, one per top-level directory (the Spark engine
    runs it in its tasks): hidden directories pruned, links recorded but never walked into.
    """
    return _scan_local(top, rel_top, rule) if storage.is_local else _scan_fsspec(storage, top, rule)


def list_table_files(storage: Storage, rule: HiddenRule, max_workers: int = 8) -> FileListing:
    """Every non-hidden file under the table root, listed with one worker per top-level directory.

    Local listings carry names only (``has_stats`` False): see :func:`fill_stats`.
    """
    top, subdirs = top_level(storage, rule)
    parts = [top]
    scan = lambda d: scan_subtree(storage, d[0], d[1], rule)  # noqa: E731
    if subdirs:
        workers = max(1, min(max_workers, len(subdirs)))
        if workers == 1:
            parts.extend(scan(d) for d in subdirs)
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vacuum-list") as pool:
                parts.extend(pool.map(scan, subdirs))
    paths: list[str] = []
    sizes: list[int] = []
    mtimes: list[int] = []
    dirs: dict[str, int] = {}
    entries: dict[str, int] = {}
    links: list[str] = []
    hidden = 0
    for p in parts:
        paths += p.paths
        sizes += p.sizes
        mtimes += p.mtimes
        dirs.update(p.dirs)
        entries.update(p.entries)
        links += p.links
        hidden += p.hidden
    log.info("listed %d files in %d directories (%d hidden entries skipped)", len(paths), len(dirs), hidden)
    for names in (paths, dirs, links):
        check_utf8_names(names, storage.uri)
    if storage.is_local:
        return FileListing(_table(paths, None, None), dirs, hidden, has_stats=False, entries=entries, links=links)
    return FileListing(_table(paths, sizes, mtimes), dirs, hidden)


def fill_stats(storage: Storage, files: pa.Table, max_workers: int = 8) -> pa.Table:
    """``files`` with size and modification time from storage; files gone meanwhile are dropped."""
    paths = files.column("path").to_pylist()
    if not paths:
        return files

    guard = LinkGuard(storage) if storage.is_local else None

    def stat_chunk(chunk: list[str]) -> list[tuple[str, int, int] | None]:
        out: list[tuple[str, int, int] | None] = []
        for rel in chunk:
            try:
                if guard is not None:
                    # A link (or a path through one) appearing since the listing is dropped like a vanished file.
                    _, st = guard.check(rel)
                    out.append((rel, st.st_size, int(st.st_mtime * 1000)) if st is not None else None)
                else:
                    info = storage.info(storage.join(rel))
                    out.append((rel, info.size, info.modification_time))
            except FileNotFoundError:
                out.append(None)
        return out

    size = STAT_CHUNK if storage.is_local else 16
    chunks = [paths[i : i + size] for i in range(0, len(paths), size)]
    workers = max(1, min(max_workers, len(chunks)))
    if workers == 1:
        results = [stat_chunk(c) for c in chunks]
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vacuum-stat") as pool:
            results = list(pool.map(stat_chunk, chunks))
    found = [r for chunk in results for r in chunk if r is not None]
    return _table([r[0] for r in found], [r[1] for r in found], [r[2] for r in found])
