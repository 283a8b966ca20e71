"""Liquid clustering (PROTOCOL.md "Clustered Table"): what deltalog's writers keep true on clustered tables.

deltalog does not cluster. On a table with the ``clustering`` feature:

- the ``delta.clustering`` domain (the clustering columns) is never touched: commits
  do not write it and checkpoints copy it;
- files deltalog adds are unclustered (no ``clusteringProvider``), which the protocol
  allows ("a clustering implementation may cluster any files with an unset
  clusteringProvider");
- every file deltalog adds has statistics for every clustering column (the protocol
  requires them), checked here because ``delta.dataSkippingNumIndexedCols`` may leave
  a clustering column out of the default stats;
- compaction bin-packs only unclustered files (``clusteringProvider`` unset), leaving
  files a clustering implementation wrote, and their layout, as they are.
"""

from __future__ import annotations

import json
from typing import Any

from deltalog.errors import OperationRefusedError
from deltalog.protocol.table_protocol import Protocol

__all__ = ["check_clustering_stats", "clustering_columns", "is_clustered"]

DOMAIN = "delta.clustering"


def is_clustered(protocol: Protocol) -> bool:
    return "clustering" in protocol.effective_writer_features()


def clustering_columns(domains: dict[str, dict[str, Any]]) -> list[list[str]]:
    """The clustering columns (physical paths) named by the ``delta.clustering`` domain."""
    domain = domains.get(DOMAIN)
    if not domain or domain.get("removed"):
        return []
    try:
        cols = json.loads(domain.get("configuration") or "{}").get("clusteringColumns", [])
        return [[c] if isinstance(c, str) else [str(p) for p in c] for c in cols]
    except (ValueError, AttributeError, TypeError):
        raise OperationRefusedError(
            f"the {DOMAIN} domain metadata is unreadable ({domain.get('configuration')!r}); cannot tell which "
            "columns need statistics"
        ) from None


def _has_stats(stats: dict[str, Any], path: list[str]) -> bool:
    """A min value for the column, or a null count equal to the row count (all null: no min exists)."""

    def dig(doc: Any) -> Any:
        for p in path:
            if not isinstance(doc, dict) or p not in doc:
                return None
            doc = doc[p]
        return doc

    if dig(stats.get("minValues")) is not None:
        return True
    nulls = dig(stats.get("nullCount"))
    return nulls is not None and nulls == stats.get("numRecords")


def check_clustering_stats(adds: list[dict[str, Any]], columns: list[list[str]]) -> None:
    """Refuse adds without statistics for a clustering column (PROTOCOL.md requires them)."""
    if not columns:
        return
    for a in adds:
        try:
            stats = json.loads(a.get("stats") or "{}")
        except ValueError:
            stats = {}
        for col in columns:
            if not _has_stats(stats, col):
                raise OperationRefusedError(
                    f"{a['path']!r} has no statistics for clustering column {'.'.join(col)!r} (the table is "
                    "clustered and the protocol requires them; is the column beyond "
                    "delta.dataSkippingNumIndexedCols?); nothing committed"
                )
