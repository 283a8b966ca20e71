"""The log watcher's announcements that started a DAG run, read from the run's context.

A run started by a watched table's asset events (``deltalog_provider.assets``) has them in
``context["triggering_asset_events"]``; the watcher's carry ``{"from_trigger": true, "payload":
<a deltalog.CommitRange>}`` as their extra. These helpers pick those out (an operator's own event on
the same asset, or another trigger's, is left alone), for the tasks that say which commits started
them and for the history rows (``triggered_by_*``).
"""

from __future__ import annotations

from typing import Any

from deltalog import CommitRange, TriggeredBy
from deltalog.storage.filesystem import canonical_uri

__all__ = ["commit_range_of", "triggered_by", "triggering_ranges"]


def commit_range_of(extra: Any) -> CommitRange | None:
    """The range an asset event's extra announces, when the log watcher emitted it; else None."""
    if not isinstance(extra, dict) or not extra.get("from_trigger"):
        return None
    try:
        return CommitRange.from_dict(extra.get("payload"))
    except ValueError:
        return None


def triggering_ranges(context: Any) -> list[CommitRange]:
    """Every range the watcher announced among the events that started the run, oldest first per table."""
    events = context.get("triggering_asset_events") if hasattr(context, "get") else None
    if not events:
        return []
    found = [r for evs in events.values() for e in evs if (r := commit_range_of(getattr(e, "extra", None)))]
    return sorted(found, key=lambda r: (r.table, r.from_version, r.to_version))


def triggered_by(context: Any) -> dict[str, TriggeredBy]:
    """The run's announced commits per table (``canonical_uri``), folded: what its history rows record."""
    by_table: dict[str, list[CommitRange]] = {}
    for r in triggering_ranges(context):
        by_table.setdefault(canonical_uri(r.table), []).append(r)
    return {table: TriggeredBy.of_ranges(ranges) for table, ranges in by_table.items()}
