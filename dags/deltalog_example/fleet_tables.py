"""Which tables a fleet run maintains: an upstream asset's events, the list Variable, or discovery.

Precedence (the first that names tables wins):

1. events on the ``deltalog_fleet_tables`` asset since the previous successful fleet run
   started (a producer DAG emits one with ``extra={"tables": [...]}`` and/or
   ``extra={"list_uri": "s3://bucket/tables.txt"}``; the fleet DAG is also scheduled on the
   asset, so such an event starts a run; several events are merged, in order);
2. the ``deltalog_fleet_tables`` Variable (a JSON list or one URI a line);
3. every table discovered under the ``deltalog_fleet_root`` Variable.

A malformed event is an error (the run fails naming it), never a silent fall back to
discovery: the producer meant a list.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

#: Keys of a table-list event's extra.
TABLES_KEY = "tables"
LIST_URI_KEY = "list_uri"


class TableListError(ValueError):
    """An asset event or Variable that does not hold a table list."""


def parse_table_list(raw: str) -> list[str]:
    """The ``deltalog_fleet_tables`` Variable: a JSON list, or one URI a line (``#`` comments)."""
    raw = raw.strip()
    if raw.startswith("["):
        value = json.loads(raw)
        if not all(isinstance(u, str) and u.strip() for u in value):
            raise TableListError(f"the table list must hold only non-empty strings, got {value!r}")
        return [u.strip() for u in value]
    return [line.strip() for line in raw.splitlines() if line.strip() and not line.strip().startswith("#")]


def tables_from_events(extras: Iterable[dict[str, Any] | None], read_list: Callable[[str], list[str]]) -> list[str]:
    """Table URIs named by asset events' extras (``tables`` and/or ``list_uri``), merged in order, each once.

    ``read_list`` reads a list file by URI (with the connection's storage options).
    """
    out: dict[str, None] = {}
    for i, extra in enumerate(extras):
        if not isinstance(extra, dict) or not ({TABLES_KEY, LIST_URI_KEY} & set(extra)):
            raise TableListError(
                f"asset event {i + 1} carries no table list: its extra needs {TABLES_KEY!r} (a list of URIs) "
                f"or {LIST_URI_KEY!r} (a list file), got {extra!r}"
            )
        tables = extra.get(TABLES_KEY, [])
        if not isinstance(tables, list) or not all(isinstance(u, str) and u.strip() for u in tables):
            raise TableListError(f"asset event {i + 1}: {TABLES_KEY!r} must be a list of table URIs, got {tables!r}")
        uri = extra.get(LIST_URI_KEY)
        if uri is not None and (not isinstance(uri, str) or not uri.strip()):
            raise TableListError(f"asset event {i + 1}: {LIST_URI_KEY!r} must be a URI, got {uri!r}")
        for table in [*tables, *(read_list(uri) if uri else [])]:
            out.setdefault(table.strip(), None)
    return list(out)


def watched_tables_that_started(context: Any, table_list_uri: str) -> list[str] | None:
    """The tables whose commits started the run (the log watchers' events, docs/events.md), each once.

    None when no table asset's event started it (a scheduled or manual run, or table lists on the
    ``deltalog_fleet_tables`` asset: the usual precedence then decides). A run that table assets'
    events started but none of the watchers' (the fleet's own maintenance events on those assets)
    has no table to maintain: ``[]``.
    """
    from deltalog_provider.utils.commit_events import triggering_ranges

    events = context.get("triggering_asset_events") if hasattr(context, "get") else None
    if not events:
        return None
    table_events = False
    for key, evs in events.items():
        if getattr(key, "uri", None) != table_list_uri and list(evs):
            table_events = True
    if not table_events:
        return None
    return list(dict.fromkeys(r.table for r in triggering_ranges(context)))
