"""The table's Asset on an operator: declared as an outlet, given the run's event extra, or withdrawn.

A literal URI/path becomes ``Asset(uri)``; a templated table or a bare name (only known at
run time) is declared through an ``AssetAlias`` named ``deltalog:<dag>.<task>``, which still
produces the event on the concrete ``Asset(uri)``.
"""

from __future__ import annotations

from typing import Any

from deltalog_provider.hooks.connection import is_absolute_location
from deltalog_provider.utils.results import is_templated, table_asset_uri
from deltalog_provider.version_compat import Asset, AssetAlias, alias_event_extra

__all__ = ["declare_table_outlet", "record_table_event", "without_assets"]


def declare_table_outlet(outlets: list[Any], table: Any, alias_name: str) -> list[Any]:
    """``outlets`` plus the table's Asset (or, when the table is only known at run time, an alias)."""
    outlets = list(outlets)
    if isinstance(table, str) and not is_templated(table) and is_absolute_location(table):
        uri = table_asset_uri(table)
        if not any(isinstance(o, Asset) and o.uri == uri for o in outlets):
            outlets.append(Asset(uri=uri))
    elif not any(isinstance(o, AssetAlias) for o in outlets):
        outlets.append(AssetAlias(alias_name))
    return outlets


def record_table_event(outlets: list[Any], events: Any, extra: dict[str, Any]) -> bool:
    """Put ``extra`` on the event of the table's Asset (direct outlet, else through an alias); False if none matches."""
    uri = extra["table"]
    for outlet in outlets:
        if isinstance(outlet, Asset) and outlet.uri == uri:
            events[outlet].extra = extra
            return True
    for outlet in outlets:
        if isinstance(outlet, AssetAlias):
            events[outlet].add(Asset(uri=uri), extra=alias_event_extra(extra))
            return True
    return False


def without_assets(outlets: list[Any]) -> list[Any]:
    """The outlets without concrete Assets: Airflow records one event per ``Asset`` outlet of a successful
    task, read after ``execute`` returns (an alias records only what was added to it, which is nothing)."""
    return [o for o in outlets if not isinstance(o, Asset)]
