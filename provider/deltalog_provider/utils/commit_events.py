"""The log watcher's announcements that started a DAG run, read from the run's context.

A run started by a watched table's asset events (``deltalog_provider.assets``) has them in
``context["triggering_asset_events"]``; the watcher's carry ``{"from_trigger": true, "payload":
<a deltalog.CommitRange>}`` as their extra. These helpers pick those out (an operator's own event on
the same asset, or another trigger's, is left alone), for the tasks that say which commits started
them and for the history rows (``triggered_by_*``).

An event can be lost (a triggerer killed within a second of firing it: docs/events.md, "Restarts"),
and no trigger can read its asset's events back to notice. A task that has the watched asset among
its inlets can: :func:`missed_versions` finds the versions between the newest range the watcher
announced before this run and this run's ranges that no stored event carries, and
:func:`triggered_by` folds them in, so the run's history rows cover a lost event's commits.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from deltalog import CommitRange, TriggeredBy, canonical_uri

__all__ = ["announced_before", "commit_range_of", "missed_versions", "triggered_by", "triggering_ranges"]

log = logging.getLogger(__name__)


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


def announced_before(context: Any) -> dict[str, list[CommitRange]]:
    """Every range the watcher announced on the task's inlet assets, by table (``canonical_uri``).

    Empty when the task has no inlets (or the context has no ``inlet_events``): a task reads its
    asset's stored events only through its inlets (Airflow's ``GetAssetEventByAsset``, one request
    per inlet asset).
    """
    inlet_events = context.get("inlet_events") if hasattr(context, "get") else None
    if not inlet_events:
        return {}
    found: dict[str, list[CommitRange]] = {}
    for inlet in list(inlet_events):
        if not getattr(inlet, "uri", None):  # an alias or a reference: not a watched asset
            continue
        for event in inlet_events[inlet]:
            if r := commit_range_of(getattr(event, "extra", None)):
                found.setdefault(canonical_uri(r.table), []).append(r)
    return found


def missed_versions(ranges: Sequence[CommitRange], earlier: Sequence[CommitRange]) -> list[tuple[int, int]]:
    """The version spans up to this run's last that no announced range carries: lost events' versions.

    ``ranges`` are one table's ranges that started the run, ``earlier`` every range of that table's
    stored events (this run's among them or not). The spans start after the newest stored range that
    ends before this run's first version (nothing is missed before a watcher's first event, and a
    replaced table's first event starts afresh).
    """
    if not ranges:
        return []
    ours = sorted(ranges, key=lambda r: r.from_version)
    first = ours[0]
    before = [r.to_version for r in earlier if r.to_version < first.from_version]
    if first.replaced_table or not before:
        return []
    covered = sorted({(r.from_version, r.to_version) for r in [*ours, *earlier] if r.to_version > max(before)})
    spans: list[tuple[int, int]] = []
    expected = max(before) + 1
    for lo, hi in covered:
        if lo > ours[-1].to_version:
            break
        if lo > expected:
            spans.append((expected, lo - 1))
        expected = max(expected, hi + 1)
    return spans


def triggered_by(context: Any) -> dict[str, TriggeredBy]:
    """The run's announced commits per table (``canonical_uri``), folded: what its history rows record.

    With the watched asset among the task's inlets, versions a lost event carried
    (:func:`missed_versions`) are folded in: the span starts after the newest range announced before
    the run, ``commits`` counts them, and ``blind_append_only`` is unknown (None) since their commits
    were never summarized.
    """
    by_table: dict[str, list[CommitRange]] = {}
    for r in triggering_ranges(context):
        by_table.setdefault(canonical_uri(r.table), []).append(r)
    earlier = announced_before(context) if by_table else {}
    out: dict[str, TriggeredBy] = {}
    for table, ranges in by_table.items():
        folded = TriggeredBy.of_ranges(ranges)
        missed = missed_versions(ranges, earlier.get(table, []))
        if missed:
            log.warning(
                f"{table}: versions {', '.join(f'{lo}..{hi}' for lo, hi in missed)} were announced in no stored "
                "event (lost when a triggerer stopped right after firing it); this run covers them"
            )
            folded = replace(
                folded,
                from_version=min(folded.from_version, missed[0][0]),
                commits=folded.commits + sum(hi - lo + 1 for lo, hi in missed),
                blind_append_only=None,
            )
        out[table] = folded
    return out
