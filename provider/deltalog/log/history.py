"""Commit history: commitInfo per version and commit timestamps for time travel.

A commit's timestamp is its in-commit timestamp when the table has
``delta.enableInCommitTimestamps`` (from the enablement version on), otherwise
the commit file's modification time, made monotonic the way Delta Spark does
(a commit never appears older than the one before it).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from deltalog.errors import InvalidArgumentError, VersionNotFoundError
from deltalog.log.commit_lines import check_commits, parse_action
from deltalog.log.listing import LogListing
from deltalog.log.snapshot import read_commit_files
from deltalog.storage.filesystem import Storage

__all__ = [
    "CommitTimestamps",
    "HistoryEntry",
    "format_ms",
    "history",
    "ict_enablement_version",
    "parse_timestamp",
    "read_commit_info",
]


@dataclass(frozen=True)
class HistoryEntry:
    """One entry of ``deltalog history``."""

    version: int
    timestamp: int
    operation: str | None = None
    operationParameters: dict[str, Any] = field(default_factory=dict)
    operationMetrics: dict[str, Any] = field(default_factory=dict)
    readVersion: int | None = None
    isolationLevel: str | None = None
    isBlindAppend: bool | None = None
    engineInfo: str | None = None
    userMetadata: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_commit_info(storage: Storage, path: str, name: str) -> dict[str, Any] | None:
    """The commitInfo action of one commit file, or None when it has none.

    The whole commit is checked against the line rule first: a commit with a torn or
    merged line is corrupt, whatever its commitInfo says.
    """
    data = storage.read_bytes(path)
    check_commits([(name, data)])
    return _commit_info(data, name)


def _commit_info(data: bytes, name: str) -> dict[str, Any] | None:
    """The commitInfo of a commit already checked against the line rule."""
    for lineno, line in enumerate(data.split(b"\n"), start=1):
        if b'"commitInfo"' in line:
            action = parse_action(line, name, lineno)
            if "commitInfo" in action:
                return action["commitInfo"]
    return None


def ict_enablement_version(configuration: dict[str, str]) -> int | None:
    """The first version whose commits carry in-commit timestamps, or None."""
    if configuration.get("delta.enableInCommitTimestamps", "false").lower() != "true":
        return None
    return int(configuration.get("delta.inCommitTimestampEnablementVersion", "0"))


class CommitTimestamps:
    """Lazily computed timestamps (ms) of the commits present in a listing."""

    def __init__(self, storage: Storage, listing: LogListing, ict_from: int | None) -> None:
        self.storage = storage
        self.listing = listing
        self.ict_from = ict_from
        self.versions = sorted(listing.commits)
        self._mtime: dict[int, int] = {}
        prev = -1
        for v in self.versions:
            ts = listing.commits[v].modification_time
            if ts <= prev:
                ts = prev + 1
            self._mtime[v] = ts
            prev = ts
        self._ict: dict[int, int] = {}

    def __call__(self, version: int) -> int:
        if self.ict_from is not None and version >= self.ict_from:
            if version not in self._ict:
                f = self.listing.commits[version]
                info = read_commit_info(self.storage, f.path, f.name) or {}
                ict = info.get("inCommitTimestamp")
                self._ict[version] = int(ict) if isinstance(ict, int) else self._mtime[version]
            return self._ict[version]
        return self._mtime[version]

    def version_at(self, timestamp_ms: int) -> int:
        """The latest version committed at or before ``timestamp_ms``."""
        if not self.versions:
            raise VersionNotFoundError("the log holds no commit files to resolve a timestamp against")
        lo, hi = 0, len(self.versions) - 1
        if self(self.versions[0]) > timestamp_ms:
            first = self.versions[0]
            raise VersionNotFoundError(
                f"timestamp {format_ms(timestamp_ms)} is before the earliest available commit "
                f"(version {first} at {format_ms(self(first))})"
            )
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self(self.versions[mid]) <= timestamp_ms:
                lo = mid
            else:
                hi = mid - 1
        return self.versions[lo]


def format_ms(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


#: Milliseconds of 0001-01-01 and 9999-12-31T23:59:59.999 UTC: the times a datetime (and a message) can show.
MIN_TIMESTAMP_MS = -62_135_596_800_000
MAX_TIMESTAMP_MS = 253_402_300_799_999


def parse_timestamp(value: str | int | float | dt.datetime) -> int:
    """Milliseconds since the epoch from an int (ms), a datetime or an ISO-8601 string (UTC if naive).

    Values outside years 1..9999 are refused (InvalidArgumentError): no commit has such
    a time, and reporting one would overflow the platform's time functions.
    """
    if isinstance(value, dt.datetime):
        d = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return _in_range(int(d.timestamp() * 1000), value)
    if isinstance(value, bool):
        raise InvalidArgumentError(f"invalid timestamp {value!r}: a time, not a yes/no")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgumentError(f"invalid timestamp {value!r}")
    if isinstance(value, int | float):
        return _in_range(int(value), value)
    text = str(value).strip()
    if text.lstrip("-").isdigit() and text.count("-") <= 1:
        return _in_range(int(text), value)
    try:
        d = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgumentError(
            f"invalid timestamp {value!r}: use ISO-8601 (2024-05-01T12:00:00Z) or milliseconds since the epoch"
        ) from None
    return parse_timestamp(d)


def _in_range(ms: int, value: object) -> int:
    if not MIN_TIMESTAMP_MS <= ms <= MAX_TIMESTAMP_MS:
        raise InvalidArgumentError(
            f"timestamp {value!r} is out of range: milliseconds since the epoch between {MIN_TIMESTAMP_MS} "
            f"(year 1) and {MAX_TIMESTAMP_MS} (year 9999)"
        )
    return ms


def history(
    storage: Storage, listing: LogListing, ict_from: int | None, limit: int | None = None
) -> list[HistoryEntry]:
    """commitInfo of the newest ``limit`` commits still in the log, newest first."""
    if limit is not None and limit < 1:
        raise InvalidArgumentError(f"limit must be a positive integer, got {limit}")
    versions = sorted(listing.commits, reverse=True)
    if limit is not None:
        versions = versions[:limit]
    stamps = CommitTimestamps(storage, listing, None)
    files = [listing.commits[v] for v in versions]
    contents = read_commit_files(storage, files)
    check_commits((f.name, data) for f, data in zip(files, contents))  # every line, in vectorised batches
    out = []
    for v, f, data in zip(versions, files, contents):
        info = _commit_info(data, f.name) or {}
        ts = info.get("inCommitTimestamp") if ict_from is not None and v >= ict_from else None
        if not isinstance(ts, int):
            ts = stamps(v)
        out.append(
            HistoryEntry(
                version=v,
                timestamp=ts,
                operation=info.get("operation"),
                operationParameters=info.get("operationParameters") or {},
                operationMetrics=info.get("operationMetrics") or {},
                readVersion=info.get("readVersion"),
                isolationLevel=info.get("isolationLevel"),
                isBlindAppend=info.get("isBlindAppend"),
                engineInfo=info.get("engineInfo"),
                userMetadata=info.get("userMetadata"),
            )
        )
    return out
