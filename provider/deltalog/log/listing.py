"""The ``_delta_log`` directory: naming rules, listing, and choosing a log segment.

A *log segment* is what a snapshot at version V is built from: the newest
complete checkpoint at or before V plus every JSON commit after it up to V.
``_last_checkpoint`` is only a hint (a corrupt or stale one is ignored): the
listing decides, so a crash between writing a checkpoint and updating the hint,
or a hint pointing to a deleted file, never makes the table unreadable.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from deltalog.errors import MissingCommitError, NotADeltaTableError, StorageError, VersionNotFoundError
from deltalog.storage.filesystem import FileInfo, Storage, ensure_table_root

__all__ = [
    "CLASSIC_CHECKPOINT_RE",
    "COMMIT_RE",
    "Checkpoint",
    "LAST_CHECKPOINT",
    "LogListing",
    "LogSegment",
    "MULTIPART_CHECKPOINT_RE",
    "SIDECARS_DIR",
    "V2_CHECKPOINT_RE",
    "build_segment",
    "commit_name",
    "list_log",
]

COMMIT_RE = re.compile(r"^(\d{20})\.json$")
CLASSIC_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
MULTIPART_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
V2_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.([0-9a-fA-F-]{36})\.(json|parquet)$")
CRC_RE = re.compile(r"^(\d{20})\.crc$")
COMPACTED_RE = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")
LAST_CHECKPOINT = "_last_checkpoint"
SIDECARS_DIR = "_sidecars"


def commit_name(version: int) -> str:
    return f"{version:020d}.json"


@dataclass
class Checkpoint:
    """One complete checkpoint: its version, kind and file(s)."""

    version: int
    kind: str  # "classic" | "multipart" | "v2"
    files: list[FileInfo]

    @property
    def size_in_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass
class LogListing:
    """Everything found in ``_delta_log`` by one listing, grouped by kind."""

    commits: dict[int, FileInfo] = field(default_factory=dict)
    checkpoints: dict[int, list[Checkpoint]] = field(default_factory=dict)
    incomplete_checkpoints: dict[int, list[FileInfo]] = field(default_factory=dict)
    crc: dict[int, FileInfo] = field(default_factory=dict)
    compacted: list[tuple[int, int, FileInfo]] = field(default_factory=list)
    other: list[FileInfo] = field(default_factory=list)
    last_checkpoint: dict[str, Any] | None = None

    @property
    def latest_commit(self) -> int | None:
        return max(self.commits) if self.commits else None

    @property
    def latest_version(self) -> int | None:
        candidates = list(self.commits) + list(self.checkpoints)
        return max(candidates) if candidates else None

    def checkpoint_at_or_before(self, version: int) -> Checkpoint | None:
        best = [v for v in self.checkpoints if v <= version]
        if not best:
            return None
        return self.preferred_checkpoint(max(best))

    def preferred_checkpoint(self, version: int) -> Checkpoint:
        # Any complete checkpoint at a version is equivalent; prefer V2 (it may carry
        # sidecars a classic compat checkpoint only points to), then classic, then multi-part.
        order = {"v2": 0, "classic": 1, "multipart": 2}
        return sorted(self.checkpoints[version], key=lambda c: order[c.kind])[0]

    def oldest_reconstructable_version(self) -> int | None:
        """The lowest version the current log can still build a snapshot of.

        Version 0 while commit 0 exists; otherwise the oldest complete checkpoint
        (anything older lost its commits to log cleanup).
        """
        if 0 in self.commits:
            return 0
        return min(self.checkpoints) if self.checkpoints else None


class _LocalLogFile(FileInfo):
    """A local ``_delta_log`` entry whose size and mtime are read by the first use.

    Building a snapshot needs only the names of the log files; the ``stat`` per entry
    that a full listing does was the largest cost of opening a local table with a
    long log (55,000 entries: about a third of a second). History, health and log
    cleanup still get the same values, stat'ed when they ask.
    """

    def __init__(self, path: str) -> None:  # the dataclass fields size and mtime become lazy properties
        object.__setattr__(self, "path", path)

    def _stat(self) -> os.stat_result:
        st = self.__dict__.get("_st")
        if st is None:
            st = os.stat(self.path)
            object.__setattr__(self, "_st", st)
        return st

    @property  # type: ignore[override]
    def size(self) -> int:
        return self._stat().st_size

    @property  # type: ignore[override]
    def modification_time(self) -> int:
        return int(self._stat().st_mtime * 1000)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FileInfo):
            return NotImplemented
        return (self.path, self.size, self.modification_time) == (other.path, other.size, other.modification_time)

    __hash__ = FileInfo.__hash__


def _list_log_files(storage: Storage) -> list[FileInfo]:
    """The files in ``_delta_log``: names only for a local table (see _LocalLogFile), else the storage listing."""
    if not storage.is_local:
        return storage.list_log()
    try:
        with os.scandir(storage.log_dir) as entries:
            return [_LocalLogFile(e.path) for e in entries if e.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise StorageError(f"cannot list {storage.log_dir}: {exc}") from None


def _commit_version(name: str) -> int | None:
    """The version of a ``<20 digits>.json`` commit name (the common case, without a regex)."""
    if len(name) == 25 and name.endswith(".json") and name[:20].isascii() and name[:20].isdigit():
        return int(name[:20])
    return None


def list_log(storage: Storage, *, read_hint: bool = True) -> LogListing:
    """List ``_delta_log`` once and classify every file in it."""
    files = _list_log_files(storage)
    if not files:
        # Only now ask whether the root exists (one more request on an object store),
        # to tell a missing location from a folder that is no table.
        ensure_table_root(storage)
        raise NotADeltaTableError(f"not a Delta table: no _delta_log with commits at {storage.uri}")
    listing = LogListing()
    parts: dict[tuple[int, int], dict[int, FileInfo]] = {}
    for f in files:
        name = f.name
        version = _commit_version(name)
        if version is not None:
            listing.commits[version] = f
            continue
        m = CLASSIC_CHECKPOINT_RE.match(name)
        if m:
            v = int(m.group(1))
            listing.checkpoints.setdefault(v, []).append(Checkpoint(v, "classic", [f]))
            continue
        m = MULTIPART_CHECKPOINT_RE.match(name)
        if m:
            v, part, total = int(m.group(1)), int(m.group(2)), int(m.group(3))
            parts.setdefault((v, total), {})[part] = f
            continue
        m = V2_CHECKPOINT_RE.match(name)
        if m:
            v = int(m.group(1))
            listing.checkpoints.setdefault(v, []).append(Checkpoint(v, "v2", [f]))
            continue
        m = CRC_RE.match(name)
        if m:
            listing.crc[int(m.group(1))] = f
            continue
        m = COMPACTED_RE.match(name)
        if m:
            listing.compacted.append((int(m.group(1)), int(m.group(2)), f))
            continue
        if name == LAST_CHECKPOINT and read_hint:
            listing.last_checkpoint = _read_hint(storage, f.path)
            continue
        listing.other.append(f)
    for (v, total), found in parts.items():
        if total > 0 and set(found) == set(range(1, total + 1)):
            listing.checkpoints.setdefault(v, []).append(
                Checkpoint(v, "multipart", [found[i] for i in range(1, total + 1)])
            )
        else:
            listing.incomplete_checkpoints.setdefault(v, []).extend(found.values())
    if not listing.commits and not listing.checkpoints:
        raise NotADeltaTableError(f"not a Delta table: _delta_log at {storage.uri} holds no commits or checkpoints")
    return listing


def _read_hint(storage: Storage, path: str) -> dict[str, Any] | None:
    """``_last_checkpoint`` parsed, or None when it is unreadable (it is only a hint)."""
    try:
        doc = json.loads(storage.read_bytes(path))
        return doc if isinstance(doc, dict) and isinstance(doc.get("version"), int) else None
    except (OSError, ValueError):
        return None


@dataclass
class LogSegment:
    """The files a snapshot at ``version`` is built from."""

    version: int
    checkpoint: Checkpoint | None
    commits: list[FileInfo]  # ascending, checkpoint.version+1 .. version
    listing: LogListing

    @property
    def commit_versions(self) -> list[int]:
        start = self.checkpoint.version + 1 if self.checkpoint else 0
        return list(range(start, self.version + 1))


def build_segment(
    listing: LogListing, version: int | None = None, *, exclude_checkpoints: set[int] | None = None
) -> LogSegment:
    """Choose the checkpoint and commits for ``version`` (default: the latest)."""
    latest = listing.latest_version
    assert latest is not None
    if version is None:
        version = latest
    elif version < 0:
        raise VersionNotFoundError(f"version {version} is invalid: versions start at 0")
    elif version > latest:
        raise VersionNotFoundError(f"version {version} does not exist: the latest version is {latest}")
    excluded = exclude_checkpoints or set()
    candidates = sorted((v for v in listing.checkpoints if v <= version and v not in excluded), reverse=True)
    checkpoint = listing.preferred_checkpoint(candidates[0]) if candidates else None
    start = checkpoint.version + 1 if checkpoint else 0
    if checkpoint is None and version not in listing.commits:
        raise VersionNotFoundError(f"version {version} cannot be reconstructed: its commit file is missing")
    commits = []
    for v in range(start, version + 1):
        f = listing.commits.get(v)
        if f is None:
            if checkpoint is None and v == 0:
                oldest = listing.oldest_reconstructable_version()
                raise VersionNotFoundError(
                    f"version {version} cannot be reconstructed: commit 0 is gone and no checkpoint precedes it"
                    + (f" (oldest reconstructable version: {oldest})" if oldest is not None else "")
                )
            present = sorted(c for c in listing.commits if c > v)
            nxt = present[0] if present else None
            raise MissingCommitError(
                f"commit {v} ({commit_name(v)}) is missing from the log"
                + (f" (found commit {nxt} after it)" if nxt is not None else "")
                + ": versions must be contiguous"
            )
        commits.append(f)
    return LogSegment(version, checkpoint, commits, listing)
