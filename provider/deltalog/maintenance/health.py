"""Table health: the numbers that say whether maintenance is due.

Feeds ``deltalog health``, the health-check operator and the maintenance-due
sensor, so every field is cheap to compute from one snapshot plus the listing.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog._arrow_utils import column_sum, count_true
from deltalog.log.activity import VACUUM_LOOKBACK, versions_since_vacuum
from deltalog.log.snapshot import Snapshot
from deltalog.protocol.sizes import target_file_size

__all__ = ["TableHealth", "compute_health"]


@dataclass(frozen=True)
class TableHealth:
    version: int
    num_files: int
    size_in_bytes: int
    target_file_size: int
    small_file_threshold: int
    num_small_files: int
    small_file_share: float
    num_partitions: int
    files_per_partition_min: int
    files_per_partition_median: float
    files_per_partition_max: int
    last_checkpoint_version: int | None
    commits_since_checkpoint: int
    num_tombstones: int
    tombstone_bytes: int
    oldest_readable_version: int | None
    num_commit_files: int
    #: Versions since the last ``VACUUM END``; a lower bound (``vacuum_lookback``) when none is
    #: that recent; None when not looked for (``vacuum_lookback=0``).
    versions_since_vacuum: int | None = None
    #: What a reader should know about the version measured (a catalog-managed table read without its catalog).
    warnings: list[str] = field(default_factory=list)

    def summary_line(self) -> str:
        """One line for logs and the CLI: files, small files, commits since the last checkpoint."""
        return (
            f"version {self.version}: {self.num_files} files ({self.size_in_bytes} bytes), {self.num_small_files} "
            f"small, {self.num_tombstones} tombstones, {self.commits_since_checkpoint} commits since checkpoint"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def files_per_partition(partition_values: pa.ChunkedArray | pa.Array) -> list[int]:
    """How many files each distinct partition (set of partition values) holds, in no particular order.

    Files written by one writer spell their partition map alike (same keys, same order),
    so the values at each key position are grouped with Arrow's hash aggregation: no
    Python object per file (ten million files took minutes and gigabytes as dicts). Maps
    whose keys differ in number or order, or null maps, are counted one by one by their
    sorted entries, as before.
    """
    arr = partition_values.combine_chunks() if isinstance(partition_values, pa.ChunkedArray) else partition_values
    n = len(arr)
    if n == 0:
        return []
    offsets = arr.offsets.to_numpy()  # absolute positions in .keys / .items, which ignore slicing
    lengths = np.diff(offsets) if arr.null_count == 0 else None
    width = int(lengths[0]) if lengths is not None else 0
    if width > 0 and bool(np.all(lengths == width)):
        start = int(offsets[0])
        keys, values = arr.keys.slice(start, n * width), arr.items.slice(start, n * width)
        first = keys.slice(0, width).to_pylist()
        columns = {}
        same_keys = True
        for i in range(width):
            at = pa.array(np.arange(i, n * width, width, dtype=np.int64))
            if not pc.all(pc.equal(keys.take(at), pa.scalar(first[i], keys.type))).as_py():
                same_keys = False
                break
            columns[f"k{i}"] = values.take(at)
        if same_keys and len(set(first)) == width:
            grouped = pa.table(columns).group_by(list(columns)).aggregate([([], "count_all")])
            return grouped.column("count_all").to_pylist()
    counts: dict[tuple, int] = {}
    for pv in arr.to_pylist():
        k = tuple(sorted(pv or []))
        counts[k] = counts.get(k, 0) + 1
    return list(counts.values())


def compute_health(
    snapshot: Snapshot, target: int | str | None = None, *, vacuum_lookback: int = VACUUM_LOOKBACK
) -> TableHealth:
    """The health numbers of ``snapshot``; ``vacuum_lookback`` bounds the search for the last vacuum."""
    files = snapshot.files
    tgt = target_file_size(snapshot.metadata.configuration, target)
    threshold = tgt // 2
    sizes = files.column("size")
    num_small = count_true(pc.less(sizes, threshold)) if files.num_rows else 0
    if snapshot.partition_columns and files.num_rows:
        per_partition = files_per_partition(files.column("partitionValues"))
    else:
        per_partition = [files.num_rows] if files.num_rows else []
    listing = snapshot.segment.listing
    cps = [v for v in listing.checkpoints if v <= snapshot.version]
    last_cp = max(cps) if cps else None
    return TableHealth(
        version=snapshot.version,
        num_files=files.num_rows,
        size_in_bytes=snapshot.size_in_bytes,
        target_file_size=tgt,
        small_file_threshold=threshold,
        num_small_files=num_small,
        small_file_share=round(num_small / files.num_rows, 4) if files.num_rows else 0.0,
        num_partitions=len(per_partition),
        files_per_partition_min=min(per_partition) if per_partition else 0,
        files_per_partition_median=float(statistics.median(per_partition)) if per_partition else 0.0,
        files_per_partition_max=max(per_partition) if per_partition else 0,
        last_checkpoint_version=last_cp,
        commits_since_checkpoint=snapshot.version - last_cp if last_cp is not None else snapshot.version + 1,
        num_tombstones=snapshot.tombstones.num_rows,
        tombstone_bytes=column_sum(snapshot.tombstones, "size"),
        oldest_readable_version=listing.oldest_reconstructable_version(),
        num_commit_files=len(listing.commits),
        versions_since_vacuum=(
            versions_since_vacuum(snapshot.storage, listing, snapshot.version, vacuum_lookback)
            if vacuum_lookback > 0
            else None
        ),
        warnings=list(snapshot.warnings),
    )
