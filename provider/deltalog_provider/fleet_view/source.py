"""Where the pages read the maintenance history from, and a cache of what was read.

The location is Airflow configuration, read in the API server: ``[deltalog] history_uri``
(``AIRFLOW__DELTALOG__HISTORY_URI``), and ``[deltalog] history_conn_id`` naming a
``deltalog`` connection whose storage options reach it (its key, secret, endpoint...;
none for a local path or an instance role). Each request lists the history's
``_delta_log`` once; the rows are read again only when a commit landed since.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltalog import DeltaTable
from deltalog.errors import DeltaLogError, NotADeltaTableError
from deltalog.journal import read_history

log = logging.getLogger(__name__)

SECTION = "deltalog"


class HistoryUnavailable(Exception):
    """The page cannot show the history: not configured, not created yet, or unreadable (the message says)."""


@dataclass(frozen=True)
class HistoryLocation:
    uri: str
    conn_id: str | None = None

    def summary_line(self) -> str:
        """The URI and the connection it is read with."""
        return self.uri + (f" (connection {self.conn_id})" if self.conn_id else "")

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "conn_id": self.conn_id}


def configured_location() -> HistoryLocation:
    """``[deltalog] history_uri`` / ``history_conn_id`` from Airflow's configuration."""
    from deltalog_provider.version_compat import conf

    uri = (conf.get(SECTION, "history_uri", fallback="") or "").strip()
    if not uri:
        raise HistoryUnavailable("No maintenance history is configured.")
    conn_id = (conf.get(SECTION, "history_conn_id", fallback="") or "").strip() or None
    return HistoryLocation(uri, conn_id)


def storage_options(location: HistoryLocation) -> dict[str, Any]:
    """The connection's storage options for the history's location (none without a connection)."""
    if location.conn_id is None:
        return {}
    from deltalog_provider.hooks.delta_table import DeltaTableHook

    try:
        return DeltaTableHook(deltalog_conn_id=location.conn_id).storage_options_for(location.uri)
    except Exception as exc:  # noqa: BLE001 - Airflow raises its own not-found class; the page says why
        raise HistoryUnavailable(f"The connection {location.conn_id!r} cannot be read: {exc}") from None


class HistoryCache:
    """The rows of the last ``days`` days, read again only when the history has a new version."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[str, int, dt.date] | None = None
        self._rows: pa.Table | None = None

    def rows(self, location: HistoryLocation, options: dict[str, Any], days: int, today: dt.date) -> pa.Table:
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
        since = today - dt.timedelta(days=days - 1)
        key = (location.uri, int(listing.latest_version or 0), since)
        with self._lock:
            if key == self._key and self._rows is not None:
                return self._rows
        try:
            rows = read_history(
                location.uri, storage_options=options, since=since, snapshot=table.snapshot(listing=listing)
            )
        except (DeltaLogError, OSError) as exc:
            raise HistoryUnavailable(f"The maintenance history {location.uri} cannot be read: {exc}") from None
        with self._lock:
            self._key, self._rows = key, rows
        log.info("maintenance history %s: %d rows since %s (version %d)", location.uri, rows.num_rows, since, key[1])
        return rows


__all__ = ["HistoryCache", "HistoryLocation", "HistoryUnavailable", "configured_location", "storage_options"]
