"""Which modification times are plausible for a table, so that a unit error cannot pass for "old".

Vacuum deletes an unreferenced file only when it is older than the cutoff. An
inventory whose ``modificationTime`` is in seconds, read as milliseconds, dates
a file written a second ago to January 1970: the newest file looks like the
oldest, and an in-flight writer's file is deleted. Micro- or nanoseconds put
every file millennia in the future instead. Neither is detectable row by row,
but both fall outside the window in which this table's files can have been
written: from shortly before the table's first commit (or its oldest live
file, for converted tables) to now, give or take a small clock skew.

An inventory with a time outside that window is refused, naming the column,
the value and why. Times listed by storage itself carry their unit, so only
values before :data:`FLOOR_MS` are treated as implausible there: such files
are kept, and reported.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.log.listing import LogListing
from deltalog.log.snapshot import Snapshot
from deltalog.storage.filesystem import FileInfo, Storage

__all__ = ["FLOOR_MS", "PlausibleTimes", "describe_ms", "first_implausible", "plausible_times"]

#: No data file of a Delta table was written before 2000-01-01 (seconds read as milliseconds land in 1970).
FLOOR_MS = 946_684_800_000
#: Files may be written a little before the first commit that adds them.
SLACK_MS = 24 * 3_600_000
#: Clocks of writers, storage and this machine may disagree by this much.
FUTURE_SKEW_MS = 3_600_000
#: How much of commit 0 is read to find its commitInfo (writers put it first).
_HEAD_BYTES = 65_536


def _created_by_conversion(storage: Storage, first: FileInfo) -> bool:
    """Whether commit 0 is a CONVERT (its files predate the table), judged from the head of the file."""
    try:
        with storage.open_input(first.path) as fh:
            head = fh.read(_HEAD_BYTES)
    except OSError:
        return False
    return b'"operation":"CONVERT' in head.replace(b" ", b"")


def describe_ms(ms: int) -> str:
    """An ISO date for ``ms``, or a plain statement when it is outside the calendar."""
    try:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return "a date outside the calendar"


@dataclass(frozen=True)
class PlausibleTimes:
    """The window of modification times (ms) this table's files can have, and what bounds it."""

    earliest_ms: int
    latest_ms: int
    earliest_basis: str

    def widened_to(self, oldest_live_ms: int | None) -> PlausibleTimes:
        """The window once a live file of ``oldest_live_ms`` is known (one :func:`plausible_times` could not see).

        For a reader that learns the table's oldest live file apart (the Spark engine reads the
        checkpoint's files in its job): the same rule as :func:`plausible_times`, applied late.
        """
        if oldest_live_ms is None or oldest_live_ms < FLOOR_MS:
            return self
        earliest = max(FLOOR_MS, oldest_live_ms - SLACK_MS)
        if earliest >= self.earliest_ms:
            return self
        return PlausibleTimes(earliest, self.latest_ms, "the oldest live file of the table less a day")

    def why_implausible(self, ms: int) -> str | None:
        """Why ``ms`` cannot be a modification time of this table's files, or None when it can (0 = unknown)."""
        if ms == 0:
            return None
        if ms < self.earliest_ms:
            return f"earlier than {self.earliest_basis} ({describe_ms(self.earliest_ms)})"
        if ms > self.latest_ms:
            return f"more than {FUTURE_SKEW_MS // 60_000} minutes in the future"
        return None


def plausible_times(snapshot: Snapshot, listing: LogListing, now_ms: int | None = None) -> PlausibleTimes:
    """The plausible window for ``snapshot``'s table: from its first commit (or oldest live file) less a day, to now.

    The first commit's time is commit 0's file time when log cleanup left it, else
    the ``createdTime`` of the table's metadata; a converted table's files predate
    it, so the oldest ``modificationTime`` among live files counts too, and when
    commit 0 says CONVERT only the 2000-01-01 floor applies.
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    bounds: list[tuple[int, str]] = []
    first = listing.commits.get(0)
    if first is not None and _created_by_conversion(snapshot.storage, first):
        # Converted Parquet files (and their leftovers) can be years older than the table.
        return PlausibleTimes(FLOOR_MS, now + FUTURE_SKEW_MS, "2000-01-01 (a converted table)")
    if first is not None and first.modification_time >= FLOOR_MS:
        bounds.append((first.modification_time, "the table's first commit"))
    created = snapshot.metadata.created_time
    if isinstance(created, int) and not isinstance(created, bool) and created >= FLOOR_MS:
        bounds.append((created, "the table's creation time"))
    mtimes = snapshot.files.column("modificationTime")
    if len(mtimes):
        oldest = pc.min(pc.filter(mtimes, pc.greater_equal(pc.fill_null(mtimes, 0), FLOOR_MS))).as_py()
        if oldest is not None:
            bounds.append((int(oldest), "the oldest live file of the table"))
    if not bounds:
        return PlausibleTimes(FLOOR_MS, now + FUTURE_SKEW_MS, "2000-01-01")
    ms, basis = min(bounds)
    return PlausibleTimes(max(FLOOR_MS, ms - SLACK_MS), now + FUTURE_SKEW_MS, f"{basis} less a day")


def first_implausible(paths: pa.Array, mtimes: pa.Array, window: PlausibleTimes) -> tuple[str, int, str] | None:
    """(path, time, why) of the first row whose time is outside ``window`` (0 = unknown is accepted), or None."""
    if len(mtimes) == 0:
        return None
    known = pc.not_equal(mtimes, 0)
    bad = pc.and_(known, pc.or_(pc.less(mtimes, window.earliest_ms), pc.greater(mtimes, window.latest_ms)))
    idx = pc.indices_nonzero(pc.fill_null(bad, False))
    if len(idx) == 0:
        return None
    i = idx[0].as_py()
    ms = mtimes[i].as_py()
    return paths[i].as_py(), ms, window.why_implausible(ms) or ""
