"""Assets that watch themselves: a Delta table's log as an ``Asset`` with a watcher.

``watched_table_asset(table)`` is the Asset of the table's log (``<table URI>/_delta_log``) with an
``AssetWatcher`` running :class:`~deltalog_provider.triggers.delta_log.DeltaLogEventTrigger` in the
triggerer: every commit any writer makes (Spark, Databricks, Flink, delta-rs, a streaming query,
deltalog) becomes, debounced, an asset event, and the DAGs scheduled on the asset start.
``watched_tables_under(root)`` does it for every table discovered under a root; on Airflow 3.3 their
watchers share one polling loop per root.

Why the log's URI and not the table's: Airflow keeps one set of watchers per asset, taken from the
DAG file it parsed last, and the table's own Asset is every deltalog operator's outlet, declared
without watchers in other DAGs (the ingest DAG's commit): a watcher on it would be removed and made
again at every parse of such a file. Schedule on both (``table_asset | log_asset``) to start on the
operators' events at once as well.

Both run when the DAG file is parsed. A full URI or path needs nothing; a table *name* is resolved
under the connection's root, and ``watched_tables_under`` lists the root, so those read the
connection (and the store) at parse time: the discovery is kept in a small cache file for
``refresh_seconds`` (an hour by default) so that the DAG processor does not list a lake of a
thousand tables every time it parses the file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from typing import Any

from airflow.sdk import Asset, AssetWatcher

from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.triggers.delta_log import DEFAULT_POLL_INTERVAL, DeltaLogEventTrigger
from deltalog_provider.utils.results import table_asset_uri

__all__ = [
    "DEFAULT_REFRESH_SECONDS",
    "WATCHER_NAME",
    "discovered_tables",
    "watched_table_asset",
    "watched_tables_under",
]

log = logging.getLogger(__name__)

#: The name of the watcher on each table's Asset.
WATCHER_NAME = "deltalog_log_watch"
#: How long a discovery of a root is reused by default (seconds).
DEFAULT_REFRESH_SECONDS = 3600.0


def _resolve(table: str, deltalog_conn_id: str) -> str:
    """A URI or absolute path as given; a name under the connection's root (read now)."""
    if "://" in table or os.path.isabs(os.path.expanduser(table)):
        return table
    return DeltaTableHook(deltalog_conn_id).resolve_uri(table)


def watched_table_asset(
    table: str,
    *,
    deltalog_conn_id: str = DeltaTableHook.default_conn_name,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    quiet_seconds: float = 30.0,
    max_commits: int = 100,
    max_wait_seconds: float = 600.0,
    quiet_operations: list[str] | None = None,
    grace_seconds: float = 120.0,
    problem_log_seconds: float = 900.0,
    share_root: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Asset:
    """The Asset of ``table``'s log (a URI, a path, or a name under the connection's root) with a watcher.

    Its URI is the table's Asset URI + ``/_delta_log`` (:func:`log_asset_uri`); its events' payloads name the
    table itself.

    The watcher's settings are :class:`~deltalog_provider.triggers.delta_log.DeltaLogEventTrigger`'s
    (docs/events.md); ``share_root``: the root the table was found under (3.3 polls the tables of one
    root in one loop). ``extra`` becomes the asset's extra.
    """
    uri = table_asset_uri(_resolve(table, deltalog_conn_id))  # the event names the table as its Asset does
    trigger = DeltaLogEventTrigger(
        table_uri=uri,
        deltalog_conn_id=deltalog_conn_id,
        poll_interval=poll_interval,
        quiet_seconds=quiet_seconds,
        max_commits=max_commits,
        max_wait_seconds=max_wait_seconds,
        quiet_operations=quiet_operations,
        grace_seconds=grace_seconds,
        problem_log_seconds=problem_log_seconds,
        share_root=share_root,
    )
    return Asset(
        uri=log_asset_uri(uri), extra={"table": uri, **(extra or {})}, watchers=[AssetWatcher(WATCHER_NAME, trigger)]
    )


def log_asset_uri(table: str) -> str:
    """The URI of a table's log Asset, the one :func:`watched_table_asset` watches: ``<table's Asset URI>/_delta_log``."""
    return table_asset_uri(table).rstrip("/") + "/_delta_log"


def _cache_path(root: str, cache_dir: str | None) -> str:
    digest = hashlib.sha256(root.encode()).hexdigest()[:16]
    return os.path.join(cache_dir or tempfile.gettempdir(), f"deltalog-watched-tables-{digest}.json")


def _read_cache(path: str, root: str) -> tuple[float, list[str]] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        tables = doc["tables"]
        if doc.get("root") != root or not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
            return None
        return float(doc["found_at"]), tables
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cache(path: str, root: str, tables: list[str]) -> None:
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".deltalog-watched-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"root": root, "found_at": time.time(), "tables": tables}, fh)
    os.replace(tmp, path)


def discovered_tables(
    root: str,
    *,
    deltalog_conn_id: str = DeltaTableHook.default_conn_name,
    refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
    cache_dir: str | None = None,
) -> list[str]:
    """The URIs of the tables under ``root``: the cached discovery while it is younger than ``refresh_seconds``,
    else a new one (kept in the cache). A discovery that fails keeps the last one it found (logged)."""
    hook = DeltaTableHook(deltalog_conn_id)
    uri = _resolve(root, deltalog_conn_id)
    path = _cache_path(uri, cache_dir)
    cached = _read_cache(path, uri)
    if cached is not None and time.time() - cached[0] < refresh_seconds:
        return cached[1]
    from deltalog import discover_tables

    try:
        found = discover_tables(uri, storage_options=hook.storage_options_for(uri))
    except Exception as exc:  # noqa: BLE001 - the DAG still parses: the last tables found, or none
        log.warning(
            "cannot discover the tables under %s (%s: %s); using the last ones found", uri, type(exc).__name__, exc
        )
        return cached[1] if cached is not None else []
    for error in found.errors:
        log.warning("cannot read %s: %s", error["uri"], error["error"])
    tables = sorted(t.uri for t in found.tables)
    try:
        _write_cache(path, uri, tables)
    except OSError as exc:
        log.warning("cannot keep the tables found under %s in %s: %s", uri, path, exc)
    log.info("watching %d tables discovered under %s", len(tables), uri)
    return tables


def watched_tables_under(
    root: str,
    *,
    deltalog_conn_id: str = DeltaTableHook.default_conn_name,
    refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
    cache_dir: str | None = None,
    share: bool = True,
    **watch: Any,
) -> list[Asset]:
    """A watched Asset (:func:`watched_table_asset`) for every table discovered under ``root``.

    ``share``: on Airflow 3.3 the root's watchers run in one polling loop (False: one loop per table, as
    3.0-3.2 always run them). ``watch``: the watcher settings of :func:`watched_table_asset`
    (``poll_interval``, ``quiet_seconds``, ...).
    """
    uri = _resolve(root, deltalog_conn_id)
    tables = discovered_tables(
        uri, deltalog_conn_id=deltalog_conn_id, refresh_seconds=refresh_seconds, cache_dir=cache_dir
    )
    together = uri if share else None
    return [watched_table_asset(t, deltalog_conn_id=deltalog_conn_id, share_root=together, **watch) for t in tables]
