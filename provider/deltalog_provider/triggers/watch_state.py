"""Where a log watcher keeps the last version it announced, so that a restarted triggerer resumes there.

A watcher's trigger is made again from its serialized kwargs (the DAG's, fixed) whenever a
triggerer starts it, so the kwargs cannot say how far it got. It keeps that in the metadata
database instead, one small JSON document per table:

* Airflow 3.3+: the watched asset's own state store (``asset_state_store``, set by the triggerer
  on watcher triggers; removed by the scheduler with the asset), key :data:`STATE_KEY`;
* Airflow 3.0-3.2 (no such store): an Airflow Variable named after the table
  (:func:`variable_key`), which the triggerer reads and writes for triggers on every 3.x release.

The watcher writes its new position *before* it yields the event that announces the versions up to
it (docs/events.md: what a restart can and cannot lose). ``load`` returns None for a watcher that
never ran (it starts at the table's newest version) and for a document it cannot read (logged once;
it starts afresh rather than guess a position).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from typing import Any, Protocol

from deltalog import LogPosition
from deltalog_provider.version_compat import watcher_asset_state

__all__ = ["STATE_FORMAT", "STATE_KEY", "MemoryWatchState", "WatchState", "variable_key", "watch_state_for"]

log = logging.getLogger(__name__)

#: The asset state store's key of a watcher's document (3.3+).
STATE_KEY = "deltalog.log_watch"
#: The document's layout.
STATE_FORMAT = 1
_VARIABLE_PREFIX = "deltalog_log_watch__"


def variable_key(table_uri: str) -> str:
    """The Variable that holds ``table_uri``'s watcher document (before 3.3): a digest, so any URI fits."""
    return _VARIABLE_PREFIX + hashlib.sha256(table_uri.encode()).hexdigest()[:32]


class WatchState(Protocol):
    """A watcher's durable position: ``load`` it once at start, ``save`` it before each announcement."""

    where: str

    async def load(self) -> LogPosition | None: ...

    async def save(self, position: LogPosition) -> None: ...


def _document(table_uri: str, position: LogPosition) -> dict[str, Any]:
    return {
        "format": STATE_FORMAT,
        "table": table_uri,
        "fired": position.to_dict(),
        "saved_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def _position(table_uri: str, doc: Any, where: str) -> LogPosition | None:
    """The position in a stored document, or None (logged) when it is not one of ours for this table."""
    if doc is None:
        return None
    try:
        if isinstance(doc, str):
            doc = json.loads(doc)
        if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT or doc.get("table") != table_uri:
            raise ValueError("not a deltalog log watcher document for this table")
        return LogPosition.from_dict(doc["fired"])
    except (ValueError, KeyError, TypeError) as exc:
        log.warning(
            "%s: the watcher's stored position in %s cannot be read (%s); watching from the table's newest version",
            table_uri,
            where,
            exc,
        )
        return None


class _AssetState:
    """The watched asset's state store (Airflow 3.3+); a Variable when the trigger watches several assets
    (the store then asks which one, and a watcher's position is its table's, not an asset's)."""

    def __init__(self, table_uri: str, store: Any) -> None:
        self.table_uri = table_uri
        self.store = store
        self.fallback: _VariableState | None = None
        self.where = f"the asset state store (key {STATE_KEY})"

    async def load(self) -> LogPosition | None:
        try:
            raw = await _call(self.store, "get", STATE_KEY, default=None)
        except ValueError:  # several assets: the store needs to be told which
            self.fallback = _VariableState(self.table_uri)
            self.where = self.fallback.where
            log.info(
                "%s: the watcher is bound to several assets; its position is kept in %s", self.table_uri, self.where
            )
            return await self.fallback.load()
        return _position(self.table_uri, raw, self.where)

    async def save(self, position: LogPosition) -> None:
        if self.fallback is not None:
            await self.fallback.save(position)
            return
        await _call(self.store, "set", STATE_KEY, _document(self.table_uri, position))


async def _call(store: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """``store.a<name>(...)``; 3.3.0 and 3.3.1 have only the blocking ``<name>``, run in a worker thread."""
    native = getattr(store, f"a{name}", None)
    if native is not None:
        return await native(*args, **kwargs)
    import asyncio

    return await asyncio.to_thread(getattr(store, name), *args, **kwargs)


class _VariableState:
    """An Airflow Variable per table (Airflow 3.0-3.2), read and written through the triggerer."""

    def __init__(self, table_uri: str) -> None:
        self.table_uri = table_uri
        self.key = variable_key(table_uri)
        self.where = f"the Variable {self.key}"

    async def load(self) -> LogPosition | None:
        from airflow.sdk import Variable
        from asgiref.sync import sync_to_async

        raw = await sync_to_async(Variable.get)(self.key, default=None)
        return _position(self.table_uri, raw, self.where)

    async def save(self, position: LogPosition) -> None:
        from airflow.sdk import Variable
        from asgiref.sync import sync_to_async

        text = json.dumps(_document(self.table_uri, position), sort_keys=True)
        description = f"deltalog log watcher of {self.table_uri}: the last version it announced"
        await sync_to_async(Variable.set)(self.key, text, description=description)


class MemoryWatchState:
    """A position kept in memory only (tests, and a watcher run outside a triggerer): lost with the process."""

    def __init__(self, position: LogPosition | None = None) -> None:
        self.position = position
        self.saves = 0
        self.where = "memory"

    async def load(self) -> LogPosition | None:
        return self.position

    async def save(self, position: LogPosition) -> None:
        self.position = position
        self.saves += 1


def watch_state_for(trigger: Any, table_uri: str) -> WatchState:
    """The store of ``trigger`` (a watcher of ``table_uri``): its asset's state store where the triggerer gives
    one (3.3+), else a Variable."""
    store = watcher_asset_state(trigger)
    return _AssetState(table_uri, store) if store is not None else _VariableState(table_uri)
