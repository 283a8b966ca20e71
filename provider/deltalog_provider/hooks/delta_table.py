"""``DeltaTableHook``: turn an Airflow connection into a ``deltalog.DeltaTable``, and read it under one retry policy.

The connection (type ``deltalog``) holds two things an operator should not
repeat in every task: the storage options of the object store (credentials,
endpoint) and, optionally, a table root so tasks can name a table (``events``)
instead of spelling out its URI (the mapping: ``hooks.connection``). Credentials are
read from the connection and handed to fsspec; they are never logged, and never leave
the worker (triggers receive the connection id, not the options).

Operators and sensors keep their hook as a ``cached_property`` (as the official
providers do), so the connection is fetched and logged once per task, not per poke.
Every table read of a sensor's poke, a trigger's poll or an operator's planning runs
through ``run`` / ``arun``: the transient-error policy of ``hooks.retry_policy``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import cached_property
from typing import Any, TypeVar

from deltalog import DeltaTable
from deltalog_provider.hooks.connection import (
    ConnectionSettings,
    named_connections,
    settings_from_connection,
    storage_family,
    with_named_connections,
)
from deltalog_provider.hooks.retry_policy import DEFAULT_RETRY_DELAY, DEFAULT_RETRY_LIMIT, RetryPolicy
from deltalog_provider.version_compat import AirflowNotFoundException, BaseHook, aget_connection

__all__ = ["DeltaTableHook"]

T = TypeVar("T")


class DeltaTableHook(BaseHook):
    """Resolve table names and storage options from a ``deltalog`` connection; read tables with retries.

    A missing *default* connection is not an error: tables given as full URIs or absolute
    paths on storage that needs no credentials (local disks, instance-profile S3) work
    without defining one. A missing connection that was named explicitly is an error.

    :param deltalog_conn_id: the Airflow connection id (type ``deltalog``).
    :param retry_limit: transient failures in a row a read is retried through (see ``RetryPolicy``).
    :param retry_delay: seconds before the first retry; each next one waits twice as long.
    """

    conn_name_attr = "deltalog_conn_id"
    default_conn_name = "deltalog_default"
    conn_type = "deltalog"
    hook_name = "Delta Lake (deltalog)"

    def __init__(
        self,
        deltalog_conn_id: str = default_conn_name,
        *,
        retry_limit: int = DEFAULT_RETRY_LIMIT,
        retry_delay: float = DEFAULT_RETRY_DELAY,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.deltalog_conn_id = deltalog_conn_id
        self.retry_policy = RetryPolicy(retry_limit=retry_limit, retry_delay=retry_delay)

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Same UI behaviour as declared in get_provider_info (for Airflow releases that ask the hook)."""
        from deltalog_provider.get_provider_info import get_provider_info

        return get_provider_info()["connection-types"][0]["ui-field-behaviour"]

    # --- the connection -------------------------------------------------------------

    @cached_property
    def settings(self) -> ConnectionSettings:
        """The connection's root and storage options (fetched and logged once per hook)."""
        try:
            conn = self.get_connection(self.deltalog_conn_id)
        except AirflowNotFoundException:
            if self.deltalog_conn_id != self.default_conn_name:
                raise
            self.log.info(
                "connection %r is not defined; using no table root and no storage options", self.deltalog_conn_id
            )
            return ConnectionSettings()
        settings = with_named_connections(settings_from_connection(conn))
        borrowed = named_connections(settings)
        # Only option *names* are logged; values may be credentials.
        self.log.info(
            "connection %r: table root %s, storage options: %s%s",
            self.deltalog_conn_id,
            settings.root or "(none)",
            sorted(settings.storage_options) or "none",
            f" (credentials from connection {', '.join(map(repr, borrowed))})" if borrowed else "",
        )
        return settings

    @classmethod
    async def aget_settings(cls, deltalog_conn_id: str = default_conn_name) -> ConnectionSettings:
        """The settings fetched without blocking an event loop (for triggers)."""
        try:
            conn = await aget_connection(cls, deltalog_conn_id)
        except AirflowNotFoundException:
            if deltalog_conn_id != cls.default_conn_name:
                raise
            return ConnectionSettings()
        aextra = getattr(conn, "aextra_dejson", None)
        extra = await aextra() if aextra is not None else conn.extra_dejson
        from asgiref.sync import sync_to_async

        # The connections it names are fetched (and their identities resolved) with blocking calls.
        return await sync_to_async(with_named_connections, thread_sensitive=False)(
            settings_from_connection(conn, extra)
        )

    def get_conn(self) -> ConnectionSettings:
        """The resolved connection settings (root and storage options)."""
        return self.settings

    @property
    def root(self) -> str | None:
        return self.settings.root

    @property
    def storage_options(self) -> dict[str, Any]:
        return dict(self.settings.storage_options)

    def resolve_uri(self, table: str) -> str:
        """URI of ``table`` (a name under the connection root, a URI, or an absolute path)."""
        return self.settings.resolve(table)

    def storage_options_for(self, location: str) -> dict[str, Any]:
        """The connection's storage options if they apply to ``location`` (see ``options_for``)."""
        return self.settings.options_for(location)

    # --- tables -----------------------------------------------------------------------

    def get_table(self, table: str) -> DeltaTable:
        """A ``DeltaTable`` for ``table``, with the connection's storage options where they apply."""
        uri = self.resolve_uri(table)
        options = self.settings.options_for(uri)
        if self.settings.storage_options and not options:
            self.log.info(
                "table %s is on %s storage: the storage options of connection %r (for %s) are not applied",
                uri,
                storage_family(uri),
                self.deltalog_conn_id,
                self.settings.root or "remote tables",
            )
        else:
            self.log.info("table %s: storage options %s", uri, sorted(options) or "none")
        return DeltaTable(uri, options)

    async def aget_table(self, table_uri: str) -> DeltaTable:
        """``get_table`` for a trigger: the connection fetched asynchronously, the table opened in a thread."""
        settings = await self.aget_settings(self.deltalog_conn_id)
        return await asyncio.to_thread(DeltaTable, table_uri, settings.options_for(table_uri))

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` (a table read) under the transient-error policy."""
        return self.retry_policy.call(fn, *args, log=self.log, what=_name(fn), **kwargs)

    async def arun(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``run`` from an event loop: each try in a worker thread, the waits without blocking the loop."""
        return await self.retry_policy.acall(fn, *args, log=self.log, what=_name(fn), **kwargs)

    def test_connection(self) -> tuple[bool, str]:
        """List the table root, so a wrong endpoint, bucket or credential shows up in the UI."""
        try:
            root = self.settings.root
            if not root:
                return False, "the connection defines no table root (host or extra 'root') to list"
            from deltalog.storage import Storage

            storage = Storage(root, self.settings.storage_options)
            entries = storage.fs.ls(storage.root, detail=False)
            return True, f"listed {len(entries)} entries under {root}"
        except Exception as exc:  # noqa: BLE001 - any failure is the answer the UI shows
            return False, f"cannot list the table root: {type(exc).__name__}: {exc}"


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__
