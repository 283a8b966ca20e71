"""Questions about a table's recent commits, answered from the listing plus a few commitInfo reads.

* ``find_new_commit``: is there a commit newer than a version (optionally of given
  operations)? What the version sensor and trigger poll.
* ``versions_since_vacuum``: how many versions since the last ``VACUUM END``? Reported by
  ``deltalog health`` and compared with the sensors' ``max_versions_since_vacuum``.
* ``last_vacuum``: when did the last successful vacuum end (the ``max_days_since_vacuum``
  objective)?

Both read commits newest first and stop as soon as they know, so polling a long log
costs one listing plus a few small reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from deltalog.errors import NotADeltaTableError
from deltalog.log.history import CommitTimestamps, ict_enablement_version, read_commit_info
from deltalog.log.listing import LogListing, list_log
from deltalog.storage.filesystem import Storage

__all__ = [
    "NewCommit",
    "VACUUM_LOOKBACK",
    "VACUUM_TIME_LOOKBACK",
    "VacuumSighting",
    "find_new_commit",
    "last_vacuum",
    "versions_since_vacuum",
]

#: The commit that marks a finished vacuum (Delta Spark and deltalog write START and END).
VACUUM_END = "VACUUM END"
#: How many versions health reads back looking for the last vacuum (one small read each).
VACUUM_LOOKBACK = 20
#: How many commits ``last_vacuum`` reads back (newest first) looking for the last finished vacuum.
VACUUM_TIME_LOOKBACK = 100


def operation_of(storage: Storage, listing: LogListing, version: int) -> str | None:
    """The commitInfo operation of ``version``; None when its commit file is gone or has none."""
    f = listing.commits.get(version)
    if f is None:  # removed by log cleanup, or only a checkpoint exists at this version
        return None
    info = read_commit_info(storage, f.path, f.name) or {}
    op = info.get("operation")
    return op if isinstance(op, str) else None


@dataclass(frozen=True)
class NewCommit:
    """A commit newer than ``previous_version``; ``latest_version`` is set when operations were filtered."""

    version: int
    previous_version: int
    operation: str | None
    latest_version: int | None = None

    def summary_line(self) -> str:
        """One line for logs: which commit is new."""
        what = f" ({self.operation})" if self.operation else ""
        return f"new commit: version {self.version}{what} after version {self.previous_version}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.latest_version is None:
            del d["latest_version"]
        return d


def find_new_commit(
    storage: Storage,
    after_version: int,
    operations: Iterable[str] | None = None,
    *,
    missing_ok: bool = False,
) -> NewCommit | None:
    """The newest commit after ``after_version`` (the newest of ``operations``, if given), or None.

    ``missing_ok``: a location without a table yet answers None instead of raising.
    """
    try:
        listing = list_log(storage)
    except NotADeltaTableError:
        if missing_ok:
            return None
        raise
    latest = listing.latest_version
    if latest is None or latest <= after_version:
        return None
    wanted = {op.upper() for op in operations} if operations else None
    if not wanted:
        return NewCommit(latest, after_version, None)
    for v in range(latest, after_version, -1):
        op = operation_of(storage, listing, v)
        if op is not None and op.upper() in wanted:
            return NewCommit(v, after_version, op, latest)
    return None


def versions_since_vacuum(storage: Storage, listing: LogListing, latest: int, window: int) -> int:
    """Versions committed since the last ``VACUUM END``, looking back at most ``window`` versions.

    Returns ``latest - v`` for the newest vacuum at ``v``. Without one in sight it returns a
    lower bound: ``window`` when the look-back was cut short (all a threshold of
    ``window - 1`` needs to know), else the number of versions the log still holds
    (``latest + 1`` when it reaches back to version 0).
    """
    versions = sorted((v for v in listing.commits if v <= latest), reverse=True)
    for v in versions:
        if latest - v >= window:
            return window
        if operation_of(storage, listing, v) == VACUUM_END:
            return latest - v
    return latest - versions[-1] + 1 if versions else 0


@dataclass(frozen=True)
class VacuumSighting:
    """The newest finished vacuum among a table's recent commits, or how far back the search looked.

    ``vacuum_ms``: the commit timestamp of the newest ``VACUUM END`` whose status is
    ``COMPLETED`` (Delta Spark's and deltalog's; an END without a status counts, a ``FAILED``
    one does not). Without one, ``oldest_ms`` is the timestamp of the oldest commit read and
    ``reached_start`` says whether that was the table's first commit (version 0): then the
    table was never vacuumed; else the log (cleaned up, or longer than the look-back) may
    hold an older vacuum than the search saw.
    """

    vacuum_ms: int | None
    vacuum_version: int | None
    oldest_ms: int | None
    reached_start: bool
    commits_read: int

    def summary_line(self) -> str:
        """``last vacuum: version 12`` or how far the search looked."""
        if self.vacuum_version is not None:
            return f"last vacuum: version {self.vacuum_version} ({self.commits_read} commits read)"
        reach = "the table's first commit" if self.reached_start else f"the last {self.commits_read} commits"
        return f"no finished vacuum in {reach}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def last_vacuum(
    storage: Storage, listing: LogListing, configuration: dict[str, str], limit: int = VACUUM_TIME_LOOKBACK
) -> VacuumSighting:
    """The newest finished vacuum in the last ``limit`` commits still in the log (see :class:`VacuumSighting`).

    Commit timestamps are the in-commit timestamps where the table has them, else the commit
    files' modification times made monotonic (as time travel reads them).
    """
    stamps = CommitTimestamps(storage, listing, ict_enablement_version(configuration))
    versions = sorted(listing.commits, reverse=True)[: max(limit, 0)]
    for v in versions:
        f = listing.commits[v]
        info = read_commit_info(storage, f.path, f.name) or {}
        if info.get("operation") == VACUUM_END:
            status = (info.get("operationParameters") or {}).get("status")
            if status in (None, "COMPLETED"):
                return VacuumSighting(stamps(v), v, stamps(v), False, versions.index(v) + 1)
    if not versions:
        return VacuumSighting(None, None, None, False, 0)
    return VacuumSighting(None, None, stamps(versions[-1]), versions[-1] == 0, len(versions))
