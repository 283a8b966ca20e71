"""Z-order (``OPTIMIZE ... ZORDER BY``) for the local engine: rewrite a partition along a Z curve.

Delta Spark maps each Z-order column to a rank bucket (``range_partition_id``:
the value's rank among the partition's rows, in at most 1000 ranges), interleaves
the bits of those bucket numbers (``interleave_bits``) and range-partitions the
rows by the result, so rows close on every column land in the same file and
each file's min/max stats cover a narrow box. Here the same, exactly rather
than by sampling:

1. **keys**: read only the Z-order columns of every file of the partition
   (deletion vectors applied), rank each column (nulls first, ties equal) and
   scale the rank to ``bits`` bits; interleave them into one ``uint64`` per row;
2. **route**: sort the Z values, cut the order into as many runs as the partition
   needs files of the target size, and stream every input file once more, writing
   each row into the spill file (Arrow IPC, local temp dir) of its run;
3. **write**: per run, read its spill back, order it by Z value and write one
   Parquet file.

Memory holds the key columns of one partition plus one output file's rows,
never the partition's data. Z-order is not incremental (as in Delta Spark):
each run rewrites every file of the partitions it touches.

This module holds the curve and the column checks; :mod:`deltalog.compaction.zorder_writer`
the rewrite.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.compaction.options import check_zorder_shape
from deltalog.errors import InvalidArgumentError, OperationRefusedError
from deltalog.log.snapshot import Snapshot
from deltalog.write_checks import clustering

__all__ = ["MAX_BITS", "check_zorder_columns", "hilbert", "interleave", "rank_scaled"]

#: Bits of one column's rank in the interleaved key (all columns together fit 63 bits).
MAX_BITS = 21


def check_zorder_columns(snapshot: Snapshot, columns: Any) -> list[str]:
    """The Z-order columns, checked: top-level, not partition columns, of sortable types; table not clustered."""
    cols = check_zorder_shape(columns)
    if clustering.is_clustered(snapshot.protocol):
        raise OperationRefusedError(
            "the table uses liquid clustering: Z-order is for tables without clustering "
            "(Delta Spark refuses ZORDER BY on a clustered table too)"
        )
    md = snapshot.metadata
    fields = {f.name: f for f in md.schema}
    for c in cols:
        if c in md.partition_columns:
            raise InvalidArgumentError(
                f"zorder_by column {c!r} is a partition column: every file holds one value of it already"
            )
        if c not in fields:
            raise InvalidArgumentError(
                f"zorder_by column {c!r} is not a top-level column of the table "
                f"(columns: {', '.join(n for n in fields if n not in md.partition_columns)})"
            )
        t = fields[c].type
        if pa.types.is_nested(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_boolean(t):
            raise InvalidArgumentError(f"zorder_by column {c!r} has type {t}, which Z-order does not support")
    return cols


def interleave(ranks: list[np.ndarray], bits: int) -> np.ndarray:
    """Interleave the low ``bits`` bits of each column's value (column 0 most significant per bit)."""
    n = len(ranks[0]) if ranks else 0
    out = np.zeros(n, dtype=np.uint64)
    k = len(ranks)
    for bit in range(bits - 1, -1, -1):
        for j, r in enumerate(ranks):
            out |= ((r >> np.uint64(bit)) & np.uint64(1)) << np.uint64(bit * k + (k - 1 - j))
    return out


def rank_scaled(values: pa.ChunkedArray | pa.Array, bits: int) -> np.ndarray:
    """Each value's rank (nulls first, ties equal) scaled to ``[0, 2**bits)`` (Delta's range id, exact)."""
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    # Ranks put nulls last (all tied); move them first: nulls rank 0, the others shift up.
    ranks = pc.rank(values, sort_keys="ascending", tiebreaker="min").to_numpy(zero_copy_only=False)
    r = ranks.astype(np.uint64) - np.uint64(1)
    nulls = values.null_count
    if nulls:
        is_null = pc.is_null(values).to_numpy(zero_copy_only=False)
        r = np.where(is_null, np.uint64(0), r + np.uint64(nulls))
    top = np.uint64(1 << bits)
    return (r * top // np.uint64(n)).astype(np.uint64)


def hilbert(coords: list[np.ndarray], bits: int) -> np.ndarray:
    """Each point's index along a Hilbert curve over ``len(coords)`` dimensions of ``bits`` bits each.

    Skilling's transpose algorithm ("Programming the Hilbert curve", 2004), vectorised:
    the coordinates are turned into the curve's transposed index in place, whose bits,
    interleaved (dimension 0 most significant), are the index. Consecutive indices are
    neighbouring cells, so a run of the order covers a compact box on every column
    (tighter than a Z curve's, which jumps at every power of two): Delta Spark clusters
    by it (``hilbert_index``) when a table has two or more clustering columns.
    """
    if len(coords) < 2:
        return coords[0].astype(np.uint64) if coords else np.zeros(0, dtype=np.uint64)
    x = [c.astype(np.uint64).copy() for c in coords]
    k = len(x)
    m = np.uint64(1 << (bits - 1))
    q = m
    while q > 1:  # inverse undo
        p = q - np.uint64(1)
        for i in range(k):
            high = (x[i] & q) != 0
            x[0] = np.where(high, x[0] ^ p, x[0])  # invert the low bits of x[0]
            t = np.where(high, np.uint64(0), (x[0] ^ x[i]) & p)  # else exchange them with x[i]'s
            x[0] ^= t
            x[i] ^= t
        q >>= np.uint64(1)
    for i in range(1, k):  # Gray encode
        x[i] ^= x[i - 1]
    t = np.zeros_like(x[0])
    q = m
    while q > 1:
        t = np.where((x[k - 1] & q) != 0, t ^ (q - np.uint64(1)), t)
        q >>= np.uint64(1)
    for i in range(k):
        x[i] ^= t
    return interleave(x, bits)
