"""Which modification times are plausible, so that a unit error cannot pass for "old".

Vacuum deletes an unreferenced file only when it is older than the cutoff. An
inventory whose ``modificationTime`` is in seconds, read as milliseconds, dates
a file written a second ago to January 1970: the newest file looks like the
oldest, and an in-flight writer's file is deleted. Micro- or nanoseconds put
every file millennia in the future instead.

The units are told apart by magnitude, never by the table's history: a time of
today is about 1.7e9 in seconds, 1.7e12 in milliseconds, 1.7e15 in microseconds
and 1.7e18 in nanoseconds. Read as milliseconds, any time in seconds up to the
year 5138 falls before :data:`SECONDS_CEILING_MS` (1973-03-03), and any time in
micro- or nanoseconds after 2001 lies centuries ahead. So an inventory time is
refused when it is before that ceiling or more than :data:`FUTURE_SKEW_MS` in
the future, naming the column, the value and why; an honest old file (the
Parquet files of a converted table, years older than its first commit) is
accepted. Times of storage listings carry their unit; there, as for inventory
rows, a time before :data:`FLOOR_MS` (2000) is not believable for a data file,
and vacuum keeps such files and reports them.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["FLOOR_MS", "SECONDS_CEILING_MS", "PlausibleTimes", "describe_ms", "first_implausible", "plausible_times"]

#: No data file of a Delta table was written before 2000-01-01: vacuum keeps files "older" than that.
FLOOR_MS = 946_684_800_000
#: 1973-03-03 as milliseconds: every time in seconds before the year 5138, read as milliseconds, is earlier.
SECONDS_CEILING_MS = 100_000_000_000
#: Clocks of writers, storage and this machine may disagree by this much.
FUTURE_SKEW_MS = 3_600_000


def describe_ms(ms: int) -> str:
    """An ISO date for ``ms``, or a plain statement when it is outside the calendar."""
    try:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return "a date outside the calendar"


@dataclass(frozen=True)
class PlausibleTimes:
    """The window of modification times (ms) a file can have, and what bounds it."""

    earliest_ms: int
    latest_ms: int
    earliest_basis: str

    def why_implausible(self, ms: int) -> str | None:
        """Why ``ms`` cannot be a modification time in milliseconds, or None when it can (0 = unknown)."""
        if ms == 0:
            return None
        if ms < self.earliest_ms:
            return f"earlier than {self.earliest_basis} ({describe_ms(self.earliest_ms)})"
        if ms > self.latest_ms:
            return f"more than {FUTURE_SKEW_MS // 60_000} minutes in the future"
        return None


def plausible_times(now_ms: int | None = None) -> PlausibleTimes:
    """The window of times in milliseconds: after 1973-03-03 (seconds read as milliseconds land before) to now.

    The same for every table: a converted table's files may be decades older than its
    first commit, so the table's history cannot bound them; the magnitude of a wrong
    unit can (see the module docstring).
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return PlausibleTimes(
        SECONDS_CEILING_MS,
        now + FUTURE_SKEW_MS,
        "the bound below which any time in seconds, read as milliseconds, falls",
    )


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
