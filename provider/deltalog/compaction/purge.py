"""Deletion-vector purge (Delta Spark's ``REORG TABLE ... APPLY (PURGE)``): which files to rewrite.

A deletion vector hides rows without rewriting the file; readers still read and
filter them, and the hidden rows keep their bytes on storage until the file is
rewritten. A purge rewrites every file whose DV hides more than a share of its
rows (default: any DV at all), applying the DV, with ``dataChange=false``.

The share is the DV's ``cardinality`` over the file's ``numRecords`` (stats);
a file without ``numRecords`` cannot be judged and is selected only when any DV
qualifies (share 0): judging it would mean reading its footer.

The commit is Delta Spark's: operation ``REORG`` with ``applyPurge`` (see
:func:`purge_operation`); the conflict rules are compaction's (SnapshotIsolation,
inputs re-checked before commit).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.log.snapshot import Snapshot

__all__ = ["REORG_OPERATION", "DeletionVectorHealth", "deletion_vector_health", "purge_mask", "purge_operation"]

#: Delta Spark's commitInfo operation for a purge.
REORG_OPERATION = "REORG"


def _num_records(files: pa.Table) -> pa.Array:
    """Each file's stats ``numRecords`` (null when absent), extracted without parsing the JSON."""
    if "stats" not in files.column_names:
        return pa.nulls(files.num_rows, pa.int64())
    stats = files.column("stats").combine_chunks()
    found = pc.extract_regex(stats, r'"numRecords"\s*:\s*(?P<n>\d+)')
    return pc.cast(pc.struct_field(found, "n"), pa.int64())


def _cardinality(files: pa.Table) -> pa.Array:
    """Rows each file's deletion vector hides (0 without a DV)."""
    dv = files.column("deletionVector").combine_chunks()
    return pc.fill_null(pc.struct_field(dv, "cardinality"), 0)


def purge_mask(files: pa.Table, min_share: float) -> pa.Array:
    """True for each live file whose deletion vector hides more than ``min_share`` of its rows.

    A file whose stats lack ``numRecords`` cannot be judged and is taken only at share 0.
    """
    if not files.num_rows:
        return pa.array([], pa.bool_())
    hidden = _cardinality(files)
    has_dv = pc.greater(hidden, 0)
    if min_share == 0:
        return has_dv
    share = pc.divide(pc.cast(hidden, pa.float64()), pc.cast(_num_records(files), pa.float64()))
    return pc.and_(has_dv, pc.fill_null(pc.greater(share, min_share), False))


@dataclass(frozen=True)
class DeletionVectorHealth:
    """Rows deletion vectors hide: what a purge would reclaim."""

    files_with_dvs: int
    rows_hidden: int
    #: Rows hidden over rows in the files' stats (``numRecords`` of every live file); 0 without stats.
    hidden_share: float
    #: Files a default purge (any DV) would rewrite whose share is known; the largest share among them.
    max_file_share: float

    def summary_line(self) -> str:
        """One line for logs: the rows deletion vectors hide."""
        return (
            f"{self.rows_hidden} rows hidden by deletion vectors in {self.files_with_dvs} files "
            f"({self.hidden_share:.1%} of rows; largest share in one file {self.max_file_share:.1%})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "files_with_dvs": self.files_with_dvs,
            "rows_hidden": self.rows_hidden,
            "hidden_share": self.hidden_share,
            "max_file_share": self.max_file_share,
        }


def deletion_vector_health(snapshot: Snapshot) -> DeletionVectorHealth:
    """Count the rows hidden by deletion vectors (from the log: DV cardinality and stats ``numRecords``).

    Vectorised, and the stats are not read at all when no file has a DV (the common case).
    """
    files = snapshot.files
    if not files.num_rows:
        return DeletionVectorHealth(0, 0, 0.0, 0.0)
    hidden = _cardinality(files)
    n_dv = pc.sum(pc.cast(pc.greater(hidden, 0), pa.int64())).as_py() or 0
    if not n_dv:
        return DeletionVectorHealth(0, 0, 0.0, 0.0)
    records = _num_records(files)
    total = pc.sum(records).as_py() or 0
    rows_hidden = pc.sum(hidden).as_py() or 0
    shares = pc.divide(pc.cast(hidden, pa.float64()), pc.cast(records, pa.float64()))
    max_share = pc.max(pc.if_else(pc.greater(hidden, 0), shares, None)).as_py() or 0.0
    share = round(rows_hidden / total, 6) if total else 0.0
    return DeletionVectorHealth(int(n_dv), int(rows_hidden), share, round(float(max_share), 6))


def purge_operation(predicate: list[str]) -> tuple[str, dict[str, str]]:
    """commitInfo operation and parameters of a purge, as Delta Spark writes them (``DeltaOperations.Reorg``)."""
    return REORG_OPERATION, {"predicate": json.dumps(predicate), "applyPurge": "true"}
