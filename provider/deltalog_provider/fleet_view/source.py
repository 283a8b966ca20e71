"""Where the pages read the maintenance history from, and what they keep of it between requests.

The location is Airflow configuration, read in the API server: ``[deltalog] history_uri``
(``AIRFLOW__DELTALOG__HISTORY_URI``), and ``[deltalog] history_conn_id`` naming a
``deltalog`` connection whose storage options reach it (its key, secret, endpoint...;
none for a local path or an instance role). ``[deltalog] rollup_uri`` says where the
history's day rollups are kept (a cache, :mod:`deltalog.journal.rollup_store`): by
default ``$AIRFLOW_HOME/deltalog/rollups`` on the API server's disk; a shared location
(read and written with the same connection) lets every API server use one; ``memory``
keeps them in the process only.

Each request lists the history's ``_delta_log`` once. The snapshot is loaded again only
when a commit landed; a window's rollups are then refreshed for the days whose files
changed, and what the pages show (the fleet's listing, the per-day figures) is derived
once per window and kept (a few windows, least recently used first out). Work that reads
is done by one request at a time per key (the others wait for its result, they do not
repeat it) and by at most :data:`HEAVY_AT_ONCE` requests at once overall, so concurrent
viewers cannot multiply the API server's memory.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from deltalog import DeltaTable
from deltalog.errors import DeltaLogError, NotADeltaTableError
from deltalog.journal import (
    BREACH_RUNS,
    COMPLIANCE_HISTORY_DAYS,
    RollupStore,
    RollupWindow,
    check_history_table,
    day_figures,
    history_row,
    merge_rollups,
    table_rows,
    table_summaries,
)
from deltalog.log import Snapshot

log = logging.getLogger(__name__)

SECTION = "deltalog"
#: Requests that read or aggregate at the same time (the rest wait): bounds the server's memory.
HEAVY_AT_ONCE = 2
#: Results kept, least recently used first out: windows and the fleet's figures (a few windows at a time),
#: tables' figures (the tables viewers open), listings at some prices.
KEPT_WINDOWS = 8
KEPT_TABLES = 32

T = TypeVar("T")


class HistoryUnavailable(Exception):
    """The page cannot show the history: not configured, not created yet, or unreadable (the message says)."""


@dataclass(frozen=True)
class HistoryLocation:
    uri: str
    conn_id: str | None = None
    #: Where the rollups are kept (None: in memory only).
    rollup_uri: str | None = None

    def summary_line(self) -> str:
        """The URI and the connection it is read with."""
        return self.uri + (f" (connection {self.conn_id})" if self.conn_id else "")

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "conn_id": self.conn_id, "rollup_uri": self.rollup_uri}


def _default_rollups() -> str:
    home = os.environ.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    return os.path.join(home, "deltalog", "rollups")


def configured_location() -> HistoryLocation:
    """``[deltalog] history_uri`` / ``history_conn_id`` / ``rollup_uri`` from Airflow's configuration."""
    from deltalog_provider.version_compat import conf

    uri = (conf.get(SECTION, "history_uri", fallback="") or "").strip()
    if not uri:
        raise HistoryUnavailable("No maintenance history is configured.")
    conn_id = (conf.get(SECTION, "history_conn_id", fallback="") or "").strip() or None
    rollups = (conf.get(SECTION, "rollup_uri", fallback="") or "").strip()
    rollup_uri = None if rollups.lower() == "memory" else (rollups or _default_rollups())
    return HistoryLocation(uri, conn_id, rollup_uri)


def storage_options(location: HistoryLocation) -> dict[str, Any]:
    """The connection's storage options for the history's location (none without a connection)."""
    if location.conn_id is None:
        return {}
    from deltalog_provider.hooks.delta_table import DeltaTableHook

    try:
        return DeltaTableHook(deltalog_conn_id=location.conn_id).storage_options_for(location.uri)
    except Exception as exc:  # noqa: BLE001 - Airflow raises its own not-found class; the page says why
        raise HistoryUnavailable(f"The connection {location.conn_id!r} cannot be read: {exc}") from None


def _breach_runs(
    store: RollupStore,
    snapshot: Snapshot,
    window: RollupWindow,
    loaded: list[pa.Table],
    lookback: RollupWindow,
    uri: str | None = None,
) -> pa.Table:
    """Per table (``uri``'s only, when given), each objective's breach folded over the ``lookback``'s judging
    rows: the window's day rollups ``loaded`` already are used as they are, only the lookback's other days
    are loaded (a window's rollups may be more than the store keeps in memory)."""
    have = {d.digest for d in window.days}
    extra = replace(lookback, days=tuple(d for d in lookback.days if d.digest not in have))
    more = store.tables(extra, snapshot, table_uri=uri) if extra.days else []
    parts = []
    for rollup in [*loaded, *more]:
        measured = rollup.filter(pc.fill_null(pc.equal(rollup.column("operation"), "measure"), False))
        parts.append(measured.select(["run_date", "table_uri", "operation", *BREACH_RUNS]))
    return merge_rollups(parts, by=("table_uri",), measures=BREACH_RUNS)


@dataclass(frozen=True)
class FleetData:
    """A window of the fleet: one row per table (the listing's base) and one per day (the charts)."""

    window: RollupWindow
    tables: pa.Table
    days: pa.Table

    def summary_line(self) -> str:
        """One line: the window, its tables and days."""
        return f"{self.window.summary_line()}: {self.tables.num_rows} tables"

    def to_dict(self) -> dict[str, Any]:
        return {"window": self.window.to_dict(), "tables": self.tables.num_rows, "days": self.days.num_rows}


class _Results:
    """Derived results by key: computed once however many requests ask at once, a few kept."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]  # type: ignore[no-any-return]
            pending = self._pending.setdefault(key, threading.Lock())
        with pending:
            with self._lock:
                if key in self._items:
                    return self._items[key]  # type: ignore[no-any-return]
            value = make()
            with self._lock:
                self._items[key] = value
                while len(self._items) > self._size:
                    self._items.popitem(last=False)
                self._pending.pop(key, None)
            return value


class HistoryView:
    """The history as the pages read it: the snapshot per version, rollups per window, results per key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heavy = threading.BoundedSemaphore(HEAVY_AT_ONCE)
        self._snapshots = _Results(2)
        self._windows = _Results(KEPT_WINDOWS)
        self._fleets = _Results(KEPT_WINDOWS)
        self._derived = _Results(KEPT_WINDOWS)
        self._tables = _Results(KEPT_TABLES)
        self._stores: dict[tuple[str | None, str], RollupStore] = {}

    def _store(self, location: HistoryLocation, options: dict[str, Any]) -> RollupStore:
        key = (location.rollup_uri, location.conn_id or "")
        with self._lock:
            if key not in self._stores:
                remote = location.rollup_uri is not None and "://" in location.rollup_uri
                try:
                    self._stores[key] = RollupStore(location.rollup_uri, options if remote else None)
                except DeltaLogError as exc:
                    log.warning("rollups cannot be kept at %s (%s): in memory only", location.rollup_uri, exc)
                    self._stores[key] = RollupStore(None)
            return self._stores[key]

    def derived(self, key: Hashable, make: Callable[[], T]) -> T:
        """A result derived from others (a listing at some prices), made once per key and kept."""
        return self._derived.get(key, make)

    def heavy(self, work: Callable[[], T]) -> T:
        """``work`` while no more than :data:`HEAVY_AT_ONCE` requests read or aggregate."""
        with self._heavy:
            return work()

    def snapshot(self, location: HistoryLocation, options: dict[str, Any]) -> Snapshot:
        """The history's snapshot at its newest version (listed every request, loaded once per version)."""
        table = DeltaTable(location.uri, options)
        try:
            listing = table.list_log()
        except NotADeltaTableError:
            raise HistoryUnavailable(
                f"The maintenance history {location.uri} has no rows yet: it is created by the first "
                "maintenance run that records into it."
            ) from None
        except (DeltaLogError, OSError) as exc:
            raise HistoryUnavailable(f"The maintenance history {location.uri} cannot be read: {exc}") from None

        def load() -> Snapshot:
            try:
                snapshot = self.heavy(lambda: table.snapshot(listing=listing))
                check_history_table(snapshot, location.uri)
            except (DeltaLogError, OSError) as exc:
                raise HistoryUnavailable(f"The maintenance history {location.uri} cannot be read: {exc}") from None
            if snapshot.metadata.column_mapping_mode != "none":
                raise HistoryUnavailable(
                    f"The maintenance history {location.uri} uses column mapping, which its reader refuses."
                )
            return snapshot

        return self._snapshots.get((location.uri, listing.latest_version), load)

    def window(
        self, location: HistoryLocation, options: dict[str, Any], snapshot: Snapshot, days: int, today: dt.date
    ) -> RollupWindow:
        """The rollups of the last ``days`` days (today included), refreshed for this snapshot."""
        store = self._store(location, options)
        since = today - dt.timedelta(days=days - 1)
        key = ("window", snapshot.storage.uri, snapshot.version, since, today)
        return self._windows.get(key, lambda: self.heavy(lambda: store.window(snapshot, since, today)))

    def lookback(
        self, location: HistoryLocation, options: dict[str, Any], snapshot: Snapshot, window: RollupWindow
    ) -> RollupWindow:
        """The window the objectives' breach starts are read from: at least :data:`COMPLIANCE_HISTORY_DAYS`
        days (as ``deltalog objectives`` and the fleet run read them), the page's window when longer."""
        days = (window.until - window.since).days + 1
        if days >= COMPLIANCE_HISTORY_DAYS:
            return window
        return self.window(location, options, snapshot, COMPLIANCE_HISTORY_DAYS, window.until)

    def fleet(
        self,
        location: HistoryLocation,
        options: dict[str, Any],
        snapshot: Snapshot,
        window: RollupWindow,
        lookback: RollupWindow | None = None,
    ) -> FleetData:
        """Every table of the window (one row each; the fleet run's own rows are no table) and every day
        (one row each); each table's breach starts from ``lookback`` (default: the window)."""
        store = self._store(location, options)
        longer = lookback or window

        def make() -> FleetData:
            def work() -> FleetData:
                tables = store.tables(window, snapshot)
                by_table = merge_rollups(tables, by=("table_uri", "operation"))
                runs = _breach_runs(store, snapshot, window, tables, longer)
                # Per day from the day rollups as they are (day, table, operation): a per-day figure may
                # count tables (how many breached an objective that day), not only sum. Each day's rollup
                # holds one row per key already: put side by side, not merged again.
                present = [t for t in tables if t.num_rows]
                days = pa.concat_tables(present, promote_options="permissive") if present else merge_rollups([])
                return FleetData(window, table_summaries(by_table, runs), day_figures(days))

            return self.heavy(work)

        return self._fleets.get(("fleet", window.key, longer.key), make)

    def table(
        self,
        location: HistoryLocation,
        options: dict[str, Any],
        snapshot: Snapshot,
        window: RollupWindow,
        uri: str,
        lookback: RollupWindow | None = None,
    ) -> FleetData:
        """One table of the window: its row (as in the fleet's: none when the URI names only the fleet run's
        own rows) and its days (every row of the URI: the page's rows are counted from them)."""
        store = self._store(location, options)
        longer = lookback or window

        def make() -> FleetData:
            def work() -> FleetData:
                tables = store.tables(window, snapshot, table_uri=uri)
                by_op = merge_rollups(tables, by=("run_date", "table_uri", "operation"))
                by_table = merge_rollups([by_op], by=("table_uri", "operation"))
                runs = _breach_runs(store, snapshot, window, tables, longer, uri)
                return FleetData(window, table_summaries(by_table, runs), day_figures(by_op))

            return self.heavy(work)

        return self._tables.get(("table", window.key, longer.key, uri), make)

    def rows(
        self, snapshot: Snapshot, uri: str, days: pa.Table, *, offset: int, limit: int, text_chars: int
    ) -> pa.Table:
        """A page of the table's rows, newest first (only the days holding the page are read)."""
        counts = list(zip(days.column("run_date").to_pylist(), days.column("rows").to_pylist(), strict=True))
        return self.heavy(lambda: table_rows(snapshot, uri, counts, offset=offset, limit=limit, text_chars=text_chars))

    def row(self, snapshot: Snapshot, day: dt.date, row_id: str, *, text_chars: int) -> pa.Table:
        return self.heavy(lambda: history_row(snapshot, day, row_id, text_chars=text_chars))


__all__ = [
    "HEAVY_AT_ONCE",
    "FleetData",
    "HistoryLocation",
    "HistoryUnavailable",
    "HistoryView",
    "configured_location",
    "storage_options",
]
