"""Deletion-vector purge (Delta Spark's ``REORG TABLE ... APPLY (PURGE)``): which files to rewrite.

A deletion vector hides rows without rewriting the file; readers still read and
filter them, and the hidden rows keep their bytes on storage until the file is
rewritten. A purge rewrites every file whose DV hides more than a share of its
rows (default: any DV at all), applying the DV, with ``dataChange=false``.

The share is the DV's ``cardinality`` over the file's ``numRecords`` (stats);
a file without ``numRecords`` counts as fully hidden-unknown and is selected only
when any DV qualifies (share 0), since judging it would mean reading its footer.

The commit is Delta Spark's: operation ``REORG`` with ``applyPurge`` (see
:func:`purge_operation`); the conflict rules are compaction's (SnapshotIsolation,
inputs re-checked before commit).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltalog.errors import InvalidArgumentError
from deltalog.snapshot import Snapshot

#: Delta Spark's commitInfo operation for a purge.
REORG_OPERATION = "REORG"


def check_share(share: Any) -> float:
    """A real number in [0, 1) (a bool or a string is refused, never coerced)."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share):
        raise InvalidArgumentError(f"min_deleted_share must be a number from 0 to 1, got {share!r}")
    if not 0 <= share < 1:
        raise InvalidArgumentError(f"min_deleted_share must be at least 0 and below 1, got {share!r}")
    return float(share)


def _num_records(stats: str | None) -> int | None:
    if not stats:
        return None
    try:
        n = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def purge_mask(files: pa.Table, min_share: float) -> pa.Array:
    """True for each live file whose deletion vector hides more than ``min_share`` of its rows."""
    dvs = files.column("deletionVector").to_pylist()
    stats = files.column("stats").to_pylist() if "stats" in files.column_names else [None] * files.num_rows
    out = []
    for dv, st in zip(dvs, stats):
        hidden = int((dv or {}).get("cardinality") or 0)
        if not dv or hidden <= 0:
            out.append(False)
            continue
        total = _num_records(st)
        out.append(min_share == 0 if not total else hidden / total > min_share)
    return pa.array(out, pa.bool_())


@dataclass(frozen=True)
class DeletionVectorHealth:
    """Rows deletion vectors hide: what a purge would reclaim."""

    files_with_dvs: int
    rows_hidden: int
    #: Rows hidden over rows in the files' stats (``numRecords`` of every live file); 0 without stats.
    hidden_share: float
    #: Files a default purge (any DV) would rewrite whose share is known; the largest share among them.
    max_file_share: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "files_with_dvs": self.files_with_dvs,
            "rows_hidden": self.rows_hidden,
            "hidden_share": self.hidden_share,
            "max_file_share": self.max_file_share,
        }


def deletion_vector_health(snapshot: Snapshot) -> DeletionVectorHealth:
    """Count the rows hidden by deletion vectors (from the log: DV cardinality and stats ``numRecords``)."""
    files = snapshot.files
    if not files.num_rows:
        return DeletionVectorHealth(0, 0, 0.0, 0.0)
    dvs = files.column("deletionVector").to_pylist()
    stats = files.column("stats").to_pylist() if "stats" in files.column_names else [None] * files.num_rows
    n_dv = hidden = total = 0
    max_share = 0.0
    for dv, st in zip(dvs, stats):
        records = _num_records(st)
        total += records or 0
        card = int((dv or {}).get("cardinality") or 0)
        if card > 0:
            n_dv += 1
            hidden += card
            if records:
                max_share = max(max_share, card / records)
    share = round(hidden / total, 6) if total else 0.0
    return DeletionVectorHealth(n_dv, hidden, share, round(max_share, 6))


def purge_operation(predicate: list[str]) -> tuple[str, dict[str, str]]:
    """commitInfo operation and parameters of a purge, as Delta Spark writes them (``DeltaOperations.Reorg``)."""
    return REORG_OPERATION, {"predicate": json.dumps(predicate), "applyPurge": "true"}
