"""Listing the files of a table directory, in parallel, without looking into hidden paths.

Full-mode vacuum has to see every file under the table root; on a large table
that listing dominates the run. Each top-level directory (one per partition
value for partitioned tables) is listed by its own worker, hidden directories
(``_delta_log`` above all, whose thousands of commits vacuum never touches) are
pruned instead of listed, and the result is kept as Arrow columns for the
vectorised diff against the log.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from deltalog.errors import StorageError
from deltalog.storage import Storage, _mtime_ms
from deltalog.vacuum.paths import HiddenRule

log = logging.getLogger(__name__)


@dataclass
class FileListing:
    """Files under the table root that vacuum may consider: relative path, size, modification time (ms).

    ``directories`` maps relative directory paths to their modification time; it is
    filled for filesystems that have real directories (local) so that directories
    left empty can be removed. ``modificationTime`` is 0 when storage did not report one.
    """

    files: pa.Table
    directories: dict[str, int] = field(default_factory=dict)
    hidden_skipped: int = 0
    outside_table: int = 0
    source: str = "listing"

    @property
    def num_files(self) -> int:
        return self.files.num_rows


LISTING_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("modificationTime", pa.int64())])


def _table(paths: list[str], sizes: list[int], mtimes: list[int]) -> pa.Table:
    return pa.Table.from_arrays(
        [pa.array(paths, pa.string()), pa.array(sizes, pa.int64()), pa.array(mtimes, pa.int64())],
        schema=LISTING_SCHEMA,
    )


@dataclass
class _Part:
    paths: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    mtimes: list[int] = field(default_factory=list)
    dirs: dict[str, int] = field(default_factory=dict)
    hidden: int = 0


def _scan_local(top: str, rel_top: str, rule: HiddenRule) -> _Part:
    """Walk one local subtree (iteratively: partition nesting can be deep)."""
    part = _Part()
    stack = [(top, rel_top)]
    while stack:
        directory, rel_dir = stack.pop()
        try:
            it = os.scandir(directory)
        except FileNotFoundError:
            continue  # removed while we were listing
        except OSError as exc:
            raise StorageError(f"cannot list {directory}: {exc}") from None
        with it:
            for entry in it:
                name = entry.name
                if rule.hidden_name(name):
                    part.hidden += 1
                    continue
                rel = f"{rel_dir}/{name}" if rel_dir else name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        part.dirs[rel] = int(entry.stat(follow_symlinks=False).st_mtime * 1000)
                        stack.append((entry.path, rel))
                        continue
                    st = entry.stat()
                except FileNotFoundError:
                    continue
                part.paths.append(rel)
                part.sizes.append(st.st_size)
                part.mtimes.append(int(st.st_mtime * 1000))
    return part


def _scan_fsspec(storage: Storage, top: str, rule: HiddenRule) -> _Part:
    """List one remote subtree with ``find`` (one recursive listing per top-level directory)."""
    part = _Part()
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
            part.dirs[rel] = _mtime_ms(info)
            continue
        part.paths.append(rel)
        part.sizes.append(int(info.get("size") or 0))
        part.mtimes.append(_mtime_ms(info))
    return part


def list_table_files(storage: Storage, rule: HiddenRule, max_workers: int = 8) -> FileListing:
    """Every non-hidden file under the table root, listed with one worker per top-level directory."""
    parts: list[_Part] = []
    top = _Part()
    subdirs: list[tuple[str, str]] = []
    if storage.is_local:
        try:
            with os.scandir(storage.root) as it:
                entries = list(it)
        except OSError as exc:
            raise StorageError(f"cannot list {storage.root}: {exc}") from None
        for entry in entries:
            if rule.hidden_name(entry.name):
                top.hidden += 1
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    top.dirs[entry.name] = int(entry.stat(follow_symlinks=False).st_mtime * 1000)
                    subdirs.append((entry.path, entry.name))
                    continue
                st = entry.stat()
            except FileNotFoundError:
                continue
            top.paths.append(entry.name)
            top.sizes.append(st.st_size)
            top.mtimes.append(int(st.st_mtime * 1000))
        scan = lambda d: _scan_local(d[0], d[1], rule)  # noqa: E731
    else:
        try:
            storage.fs.invalidate_cache(storage.root)
            entries = storage.fs.ls(storage.root, detail=True)
        except FileNotFoundError:
            entries = []
        except OSError as exc:
            raise StorageError(f"cannot list {storage.uri}: {exc}") from None
        for info in entries:
            full = storage.fs._strip_protocol(info["name"]).rstrip("/")
            name = full.rsplit("/", 1)[-1]
            if full == storage.root:
                continue
            if rule.hidden_name(name):
                top.hidden += 1
                continue
            if info.get("type") == "directory":
                top.dirs[name] = _mtime_ms(info)
                subdirs.append((full, name))
                continue
            top.paths.append(name)
            top.sizes.append(int(info.get("size") or 0))
            top.mtimes.append(_mtime_ms(info))
        scan = lambda d: _scan_fsspec(storage, d[0], rule)  # noqa: E731
    parts.append(top)
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
    hidden = 0
    for p in parts:
        paths += p.paths
        sizes += p.sizes
        mtimes += p.mtimes
        dirs.update(p.dirs)
        hidden += p.hidden
    log.info("listed %d files in %d directories (%d hidden entries skipped)", len(paths), len(dirs), hidden)
    return FileListing(_table(paths, sizes, mtimes), dirs, hidden)
