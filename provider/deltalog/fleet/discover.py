"""Finding every Delta table under a root, or reading them from a list file.

A table is a folder holding ``_delta_log/`` with at least one commit or
checkpoint. The walk lists folders level by level on a thread pool (object-store
listings are latency-bound, so a few in flight hide the round trips) and never
descends into a table once found: its partition folders and data files can be
millions of objects. A folder that cannot be read is reported in ``errors`` and
the walk goes on; one unreadable prefix must not hide the rest of a bucket.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from deltalog._flags import require_workers
from deltalog.errors import DeltaLogError, InvalidArgumentError, NotADeltaTableError, StorageError
from deltalog.log.listing import LogListing, list_log
from deltalog.storage.filesystem import LOG_DIR, Storage, is_remote

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DiscoveryResult",
    "FoundTable",
    "discover_tables",
    "read_table_list",
    "tables_from_list",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_DEPTH = 6
DEFAULT_WORKERS = 8


@dataclass(frozen=True)
class FoundTable:
    uri: str
    version: int
    #: The ``_delta_log`` listing discovery made, so fleet health need not list it again.
    listing: LogListing | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "version": self.version}


@dataclass(frozen=True)
class DiscoveryResult:
    """Tables found (sorted by URI) and the folders or tables that could not be read."""

    root: str
    tables: tuple[FoundTable, ...]
    errors: tuple[dict[str, str], ...] = ()
    folders_listed: int = 0
    duration_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def summary_line(self) -> str:
        """One line for logs and the CLI."""
        return f"{len(self.tables)} tables, {len(self.errors)} errors ({self.duration_seconds:.2f} s)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "tables": [t.to_dict() for t in self.tables],
            "errors": list(self.errors),
            "folders_listed": self.folders_listed,
            "duration_seconds": round(self.duration_seconds, 3),
        }


def _child_uri(storage: Storage, path: str) -> str:
    """The URI of a folder found inside ``storage`` (local: a plain path)."""
    if storage.is_local:
        return path
    return f"{storage.protocol}://{path.lstrip('/')}"


def _list_subdirs(storage: Storage, path: str) -> tuple[list[str], bool]:
    """(sub-folders of ``path``, whether it holds ``_delta_log``); OSError/StorageError propagate."""
    if storage.is_local:
        with os.scandir(path) as it:
            dirs = [e.path for e in it if e.is_dir(follow_symlinks=False)]
    else:
        dirs = storage.list_entries(path)[1]
    names = {d.rstrip("/").rsplit("/", 1)[-1]: d for d in dirs}
    has_log = LOG_DIR in names
    # Hidden and underscore folders (_spark_metadata, .tmp, _temporary) never hold tables of their own.
    subdirs = [d for n, d in names.items() if not n.startswith(("_", "."))]
    return sorted(subdirs), has_log


def _table_listing(uri: str, storage_options: dict[str, Any]) -> LogListing | None:
    """The log listing of the table at ``uri``; None when its ``_delta_log`` holds no commit or checkpoint."""
    try:
        return list_log(Storage(uri, storage_options))
    except NotADeltaTableError:
        return None


def discover_tables(
    root: str,
    *,
    storage_options: dict[str, Any] | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_workers: int = DEFAULT_WORKERS,
) -> DiscoveryResult:
    """Every Delta table at or below ``root`` (depth 0 is the root itself), found in parallel."""
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
        raise InvalidArgumentError(f"max depth must be a non-negative integer, got {max_depth!r}")
    require_workers(max_workers)
    opts = dict(storage_options or {})
    t0 = time.perf_counter()
    storage = Storage(root, opts)
    if not storage.root_exists():
        raise NotADeltaTableError(f"cannot discover tables under {storage.uri}: the location does not exist")
    tables: list[FoundTable] = []
    errors: list[dict[str, str]] = []
    listed = 0

    def visit(path: str) -> tuple[str, list[str], FoundTable | None, str | None]:
        uri = _child_uri(storage, path)
        try:
            subdirs, has_log = _list_subdirs(storage, path)
            if has_log:
                listing = _table_listing(uri, opts)
                if listing is not None and listing.latest_version is not None:
                    return uri, [], FoundTable(uri, listing.latest_version, listing), None
            return uri, subdirs, None, None
        except (OSError, DeltaLogError) as exc:
            return uri, [], None, f"{type(exc).__name__}: {exc}"

    level = [storage.root]
    depth = 0
    with ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="deltalog-discover") as pool:
        while level:
            next_level: list[str] = []
            for uri, subdirs, found, error in pool.map(visit, level):
                listed += 1
                if error is not None:
                    errors.append({"uri": uri, "error": error})
                    log.warning("discover: cannot read %s: %s", uri, error)
                elif found is not None:
                    tables.append(found)
                elif depth < max_depth:
                    next_level.extend(subdirs)
            level = next_level
            depth += 1
    tables.sort(key=lambda t: t.uri)
    log.info("discovered %d tables under %s (%d folders listed, %d errors)", len(tables), root, listed, len(errors))
    return DiscoveryResult(
        root=storage.uri,
        tables=tuple(tables),
        errors=tuple(errors),
        folders_listed=listed,
        duration_seconds=time.perf_counter() - t0,
    )


def read_table_list(path: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """Table URIs from a list file (a local path or a URI such as ``s3://bucket/tables.txt``, read
    with ``storage_options``): one a line; blank lines and ``#`` comments skipped."""
    try:
        if is_remote(path):
            storage = Storage(path, storage_options)
            text = storage.read_bytes(storage.root).decode("utf-8")
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except (OSError, StorageError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(
            f"cannot read the table list {path}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    lines = text.splitlines()
    uris = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    if not uris:
        raise InvalidArgumentError(f"the table list {path} names no table")
    return uris


def tables_from_list(
    path: str, storage_options: dict[str, Any] | None = None, *, max_workers: int = DEFAULT_WORKERS
) -> DiscoveryResult:
    """The tables a list file names, each checked (version read) like a discovered one."""
    t0 = time.perf_counter()
    opts = dict(storage_options or {})
    uris = read_table_list(path, opts)

    def one(uri: str) -> tuple[str, LogListing | None, str | None]:
        try:
            listing = _table_listing(uri, opts)
        except (OSError, DeltaLogError) as exc:
            return uri, None, f"{type(exc).__name__}: {exc}"
        return uri, listing, None if listing is not None else "not a Delta table: _delta_log holds no commits"

    tables: list[FoundTable] = []
    errors: list[dict[str, str]] = []
    with ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="deltalog-discover") as pool:
        for uri, listing, error in pool.map(one, uris):
            if error is not None or listing is None or listing.latest_version is None:
                errors.append({"uri": uri, "error": error or "unreadable"})
            else:
                tables.append(FoundTable(uri, listing.latest_version, listing))
    return DiscoveryResult(
        root=path, tables=tuple(tables), errors=tuple(errors), duration_seconds=time.perf_counter() - t0
    )
