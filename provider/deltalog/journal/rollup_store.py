"""Day rollups of a history, kept beside it and refreshed per history version a file at a time.

A day's rollup (:mod:`deltalog.journal.rollup`) is a function of that day's live files: it
is named by a digest of them (path and deletion vector of each, the history's table id,
the rollup's format) and computed only when no rollup of that name exists. When a history
version appends files to a day (what every recorded operation does), the newest rollup of
the day whose files are all still live is the base and only the new files are read; a day
whose files were rewritten (the history compacted, rows deleted) is rolled up again from
its files. Days of a window that did not change are not touched.

The store is a cache, never the source of truth: each rollup names exactly the files it
was made from, is used only when they are the day's live files, and the whole folder may
be deleted at any time (the next read rebuilds what it needs). Writes are atomic (a temp
file renamed, a single object PUT), two writers of one rollup write the same bytes, and a
reader that finds a rollup gone (a newer one replaced it) rebuilds it, so API-server
workers in several processes or machines may share one store. Without a location the
rollups live in this process's memory only (bounded, least recently used first out).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.errors import DeltaLogError, StorageError, UnreadableHistoryFileError
from deltalog.journal.read import file_days, files_in_range, read_file_batches
from deltalog.journal.rollup import RAW_COLUMNS, ROLLUP_FORMAT, duckdb_connection, merge_rollups, rollup_rows
from deltalog.log import Snapshot
from deltalog.storage import Storage

log = logging.getLogger(__name__)

#: Parquet footer keys of a stored rollup: the files it was made from, those it could not read.
SOURCES_KEY = b"deltalog.rollup.sources"
UNREADABLE_KEY = b"deltalog.rollup.unreadable"
#: A superseded rollup is deleted once it is this old (a worker elsewhere may still be reading it).
SUPERSEDED_AFTER_S = 600
#: Rollup rows per row group: a reader of one table's rows skips the other groups by their statistics.
ROW_GROUP_ROWS = 2048


def source_key(add: dict[str, Any]) -> str:
    """What makes a live file's rows: its path and, when it has one, its deletion vector."""
    dv = add.get("deletionVector")
    if not dv:
        return str(add["path"])
    return f"{add['path']}#dv={dv.get('storageType')}:{dv.get('pathOrInlineDv')}@{dv.get('offset')}"


@dataclass(frozen=True)
class DayRollup:
    """One day of the history in aggregate: its name (digest), the files it covers, the files it could not read."""

    day: dt.date
    digest: str
    files: int
    unreadable: tuple[str, ...] = ()

    def summary_line(self) -> str:
        """One line: the day, its files and the unreadable ones."""
        bad = f", {len(self.unreadable)} unreadable" if self.unreadable else ""
        return f"{self.day.isoformat()}: {self.files} files{bad} (rollup {self.digest[:12]})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "day": self.day.isoformat(),
            "digest": self.digest,
            "files": self.files,
            "unreadable": list(self.unreadable),
        }


@dataclass(frozen=True)
class RollupWindow:
    """The day rollups of ``[since, until]`` at one history version; ``key`` names the whole window."""

    history_uri: str
    version: int
    since: dt.date
    until: dt.date
    days: tuple[DayRollup, ...] = field(default_factory=tuple)
    #: Days rolled up (rather than found) to make this window, and history files read for it.
    built_days: int = 0
    files_read: int = 0

    @property
    def key(self) -> str:
        """A digest of the window's days: equal keys, equal rollups."""
        text = f"{self.since}|{self.until}|" + "|".join(d.digest for d in self.days)
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    @property
    def unreadable(self) -> list[str]:
        return [u for d in self.days for u in d.unreadable]

    def summary_line(self) -> str:
        """One line: the window, its days, what had to be rolled up."""
        return (
            f"history {self.history_uri} v{self.version}, {self.since}..{self.until}: {len(self.days)} days, "
            f"{self.built_days} rolled up from {self.files_read} files"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "history_uri": self.history_uri,
            "version": self.version,
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "key": self.key,
            "days": [d.to_dict() for d in self.days],
            "built_days": self.built_days,
            "files_read": self.files_read,
        }


class RollupStore:
    """Day rollups of histories at ``location`` (a path or URI; None: this process's memory only).

    ``memory_bytes`` bounds the rollups kept in memory (the store's files are read again
    when one was let go). Thread-safe: a day is rolled up by one thread at a time, the others wait
    for it.
    """

    def __init__(
        self, location: str | None, storage_options: dict[str, Any] | None = None, *, memory_bytes: int = 96 << 20
    ) -> None:
        self.storage = Storage(location, storage_options) if location else None
        self.memory_bytes = memory_bytes
        self._memory: OrderedDict[str, tuple[pa.Table, frozenset[str], tuple[str, ...]]] = OrderedDict()
        #: The newest rollup made or found per (history, day): the base of the next one.
        self._latest: dict[tuple[str, dt.date], str] = {}
        self._lock = threading.Lock()
        self._day_locks: dict[tuple[str, dt.date], threading.Lock] = {}
        self._write_failed = False

    # --- naming ------------------------------------------------------------------------------

    @staticmethod
    def _history_key(snapshot: Snapshot) -> str:
        return hashlib.sha256(f"{snapshot.storage.uri}|{snapshot.metadata.id}".encode()).hexdigest()[:20]

    def _day_dir(self, history: str, day: dt.date) -> str:
        assert self.storage is not None
        return self.storage.join(history, ROLLUP_FORMAT, day.isoformat())

    @staticmethod
    def _digest(history: str, day: dt.date, sources: Sequence[str]) -> str:
        text = "\n".join([ROLLUP_FORMAT, history, day.isoformat(), *sorted(sources)])
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    # --- the window ----------------------------------------------------------------------------

    def window(self, snapshot: Snapshot, since: dt.date, until: dt.date) -> RollupWindow:
        """The window's day rollups at ``snapshot``, rolling up (only) the days and files not yet rolled up."""
        files = files_in_range(snapshot, since, until)
        days = file_days(files)
        history = self._history_key(snapshot)
        out = []
        built = read = 0
        by_day: dict[dt.date, list[dict[str, Any]]] = {}
        if files.num_rows:
            for day in pc.unique(days.drop_null()).to_pylist():
                mine = files.filter(pc.fill_null(pc.equal(days, pa.scalar(day, pa.date32())), False))
                by_day[day] = mine.select(["path", "partitionValues", "deletionVector"]).to_pylist()
        with duckdb_connection() as con:
            for day in sorted(by_day):
                rollup, files_read = self._day(snapshot, history, day, by_day[day], con)
                out.append(rollup)
                built += files_read > 0
                read += files_read
        return RollupWindow(snapshot.storage.uri, snapshot.version, since, until, tuple(out), built, read)

    def tables(self, window: RollupWindow, snapshot: Snapshot, *, table_uri: str | None = None) -> list[pa.Table]:
        """The window's day rollups as Arrow tables (from memory, the store, or rolled up again), of one
        table's rows only when ``table_uri`` is given."""
        history = self._history_key(snapshot)
        out = []
        for day in window.days:
            table = self._load(history, day)
            if table is None:  # let go from memory and gone from the store: make it again
                files = files_in_range(snapshot, day.day, day.day)
                self._day(snapshot, history, day.day, files.to_pylist())
                table = self._load(history, day)
                if table is None:
                    raise StorageError(f"the rollup of {day.day} of {window.history_uri} could not be kept")
            out.append(table if table_uri is None else table.filter(pc.equal(table.column("table_uri"), table_uri)))
        return out

    def merged(
        self, window: RollupWindow, snapshot: Snapshot, by: Sequence[str], *, table_uri: str | None = None
    ) -> pa.Table:
        """The window's rollups merged by ``by`` (see :func:`deltalog.journal.rollup.merge_rollups`), of
        one table's rows only when ``table_uri`` is given."""
        return merge_rollups(self.tables(window, snapshot, table_uri=table_uri), by=by)

    # --- one day -----------------------------------------------------------------------------

    def _day(
        self,
        snapshot: Snapshot,
        history: str,
        day: dt.date,
        adds: list[dict[str, Any]],
        con: duckdb.DuckDBPyConnection | None = None,
    ) -> tuple[DayRollup, int]:
        sources = {source_key(a): a for a in adds}
        digest = self._digest(history, day, list(sources))
        with self._lock:
            lock = self._day_locks.setdefault((history, day), threading.Lock())
        with lock:
            found = self._find(history, day, digest)
            if found is not None:
                self._latest[(history, day)] = digest
                return DayRollup(day, digest, len(sources), found), 0
            base = self._base(history, day, set(sources))
            parts: list[pa.Table] = []
            unreadable: list[str] = []
            covered: set[str] = set()
            if base is not None:
                table, keys, bad = base
                parts.append(table)
                covered = set(keys)
                unreadable.extend(bad)
            missing = [key for key in sorted(sources) if key not in covered]
            for key in missing:
                try:
                    parts.append(rollup_rows(read_file_batches(snapshot, sources[key], RAW_COLUMNS), con))
                except (UnreadableHistoryFileError, DeltaLogError, OSError) as exc:
                    log.warning("maintenance history %s: %s", snapshot.storage.uri, exc)
                    unreadable.append(str(exc)[:500])
            table = merge_rollups(parts, con=con) if len(parts) != 1 else parts[0]
            self._keep(history, day, digest, table, frozenset(sources), tuple(unreadable))
            log.info(
                "maintenance history %s: rolled up %s (%d of %d files read)",
                snapshot.storage.uri,
                day,
                len(missing),
                len(sources),
            )
            return DayRollup(day, digest, len(sources), tuple(unreadable)), len(missing)

    def _find(self, history: str, day: dt.date, digest: str) -> tuple[str, ...] | None:
        """The unreadable files of the rollup ``digest`` if it exists (memory or store), else None."""
        with self._lock:
            if digest in self._memory:
                self._memory.move_to_end(digest)
                return self._memory[digest][2]
        if self.storage is None:
            return None
        path = self.storage.join(self._day_dir(history, day), f"{digest}.parquet")
        try:
            with self.storage.open_input(path) as f:
                meta = pq.read_metadata(f).metadata or {}
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException, DeltaLogError) as exc:
            log.warning("rollup %s cannot be read (%s): made again", path, exc)
            return None
        return tuple(json.loads(meta.get(UNREADABLE_KEY, b"[]")))

    def _base(
        self, history: str, day: dt.date, sources: set[str]
    ) -> tuple[pa.Table, frozenset[str], tuple[str, ...]] | None:
        """The largest rollup of ``day`` made from live files only: the new one adds the rest to it."""
        latest = self._latest.get((history, day))
        with self._lock:
            if latest is not None and latest in self._memory and self._memory[latest][1] <= sources:
                return self._memory[latest]
        if self.storage is None:
            return None
        best: tuple[int, str] | None = None
        now_ms = time.time() * 1000
        stale = []
        for info in self.storage.list_dir(self._day_dir(history, day)):
            if not info.name.endswith(".parquet"):
                continue
            try:
                with self.storage.open_input(info.path) as f:
                    meta = pq.read_metadata(f).metadata or {}
                listed = set(json.loads(meta.get(SOURCES_KEY, b"[]")))
            except (OSError, pa.ArrowException, ValueError, DeltaLogError):
                continue
            if listed <= sources:
                if best is None or len(listed) > best[0]:
                    best = (len(listed), info.path)
            if now_ms - info.modification_time > SUPERSEDED_AFTER_S * 1000:
                stale.append(info.path)
        for path in stale:  # older rollups of the day: the base found here, or rollups of files gone
            if best is None or path != best[1]:
                self._forget(path)
        if best is None:
            return None
        try:
            return self._read(best[1])
        except (OSError, pa.ArrowException, ValueError, DeltaLogError):
            return None

    def _read(self, path: str) -> tuple[pa.Table, frozenset[str], tuple[str, ...]]:
        assert self.storage is not None
        with self.storage.open_input(path) as f:
            # ParquetFile reads on this thread: pq.read_table's dataset scan of a Python file object leaves
            # Arrow I/O threads holding its buffers, which can abort the process at its exit (apache/arrow#34314).
            table = pq.ParquetFile(f).read()
        meta = table.schema.metadata or {}
        keys = frozenset(json.loads(meta.get(SOURCES_KEY, b"[]")))
        bad = tuple(json.loads(meta.get(UNREADABLE_KEY, b"[]")))
        return table.replace_schema_metadata(None), keys, bad

    def _load(self, history: str, day: DayRollup) -> pa.Table | None:
        with self._lock:
            if day.digest in self._memory:
                self._memory.move_to_end(day.digest)
                return self._memory[day.digest][0]
        if self.storage is None:
            return None
        path = self.storage.join(self._day_dir(history, day.day), f"{day.digest}.parquet")
        try:
            table, keys, bad = self._read(path)
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException, ValueError, DeltaLogError) as exc:
            log.warning("rollup %s cannot be read (%s): made again", path, exc)
            return None
        self._remember(day.digest, table, keys, bad)
        return table

    def _keep(
        self,
        history: str,
        day: dt.date,
        digest: str,
        table: pa.Table,
        sources: frozenset[str],
        unreadable: tuple[str, ...],
    ) -> None:
        table = table.sort_by([("table_uri", "ascending"), ("operation", "ascending")])
        self._remember(digest, table, sources, unreadable)
        self._latest[(history, day)] = digest
        if self.storage is None:
            return
        path = self.storage.join(self._day_dir(history, day), f"{digest}.parquet")
        meta = {SOURCES_KEY: json.dumps(sorted(sources)).encode(), UNREADABLE_KEY: json.dumps(unreadable).encode()}
        sink = pa.BufferOutputStream()
        pq.write_table(table.replace_schema_metadata(meta), sink, compression="zstd", row_group_size=ROW_GROUP_ROWS)
        try:
            self.storage.makedirs(self._day_dir(history, day))
            self.storage.write_atomic(path, sink.getvalue().to_pybytes())
        except (OSError, DeltaLogError) as exc:
            if not self._write_failed:  # said once: the pages still work, from memory
                log.warning("rollups cannot be written to %s (%s): kept in memory only", self.storage.uri, exc)
            self._write_failed = True

    def _remember(self, digest: str, table: pa.Table, sources: frozenset[str], unreadable: tuple[str, ...]) -> None:
        with self._lock:
            self._memory[digest] = (table, sources, unreadable)
            self._memory.move_to_end(digest)
            used = sum(t.get_total_buffer_size() for t, _, _ in self._memory.values())
            while used > self.memory_bytes and len(self._memory) > 1:
                _, (old, _, _) = self._memory.popitem(last=False)
                used -= old.get_total_buffer_size()

    def _forget(self, path: str) -> None:
        assert self.storage is not None
        try:
            self.storage.delete(path)
        except (OSError, DeltaLogError) as exc:
            log.debug("superseded rollup %s not deleted: %s", path, exc)


__all__ = ["DayRollup", "RollupStore", "RollupWindow", "source_key"]
