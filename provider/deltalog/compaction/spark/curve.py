"""The Spark engine's curve key (Z-order and liquid clustering), in plain Spark SQL.

Delta Spark orders rows by ``interleave_bits(range_partition_id(c1, 1000), ...)``: each
column's value becomes the id of its range among boundaries sampled from the data, and the
ids' bits are interleaved. Neither expression exists outside Delta's jars, so here:

- **range id**: boundaries are quantiles of a sample of the column taken on the driver
  (:func:`sample_boundaries`, at most ``2**bits - 1`` distinct values), and each row's id is
  the number of boundaries at or below its value, found by a balanced tree of comparisons
  (:func:`range_id`, ``bits`` comparisons per row); nulls get id 0 (nulls first);
- **interleave**: shifts and bitwise ORs into one ``bigint`` (:func:`interleave_expr`,
  the first column most significant per bit, as :func:`deltalog.compaction.zorder.interleave`).

The rows are then range-partitioned by the key into the bin's number of output files and
sorted within each. Only Spark SQL expressions: executors need no Python package. Both
modes use the Z curve here (the local engine clusters along a Hilbert curve; both are
curves Delta Spark uses, and the tags and commit are the same).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["SAMPLE_ROWS", "bits_for", "interleave_expr", "range_id", "sample_boundaries"]

#: Bits of one column's range id (Delta Spark: 1000 range ids, about 10 bits).
MAX_BITS = 8
#: Sampled values per column on the driver.
SAMPLE_ROWS = 20_000


def bits_for(columns: int) -> int:
    """Bits per column so that all columns fit in a signed 64-bit key."""
    return max(1, min(MAX_BITS, 63 // max(1, columns)))


def sample_boundaries(values: list[Any], bits: int) -> list[Any]:
    """Up to ``2**bits - 1`` distinct, sorted range boundaries at even quantiles of ``values``.

    Nulls and NaNs are left out (nulls get range id 0; Spark orders NaN above every
    number, so it lands in the top range anyway).
    """
    clean = sorted(v for v in values if v is not None and v == v)
    if not clean:
        return []
    ranges = 1 << bits
    picks = [clean[min(len(clean) - 1, math.floor(i * len(clean) / ranges))] for i in range(1, ranges)]
    out: list[Any] = []
    for v in picks:
        if not out or v > out[-1]:
            out.append(v)
    return out


def range_id(col: Any, boundaries: list[Any]) -> Any:
    """A Column: how many ``boundaries`` are at or below ``col`` (0 for null), by a balanced comparison tree."""
    from pyspark.sql import functions as F

    def tree(lo: int, hi: int) -> Any:
        # ids lo..hi remain: lo boundaries are known to be <= col, boundaries[lo:hi] are undecided.
        if lo == hi:
            return F.lit(lo)
        mid = (lo + hi + 1) // 2  # is boundaries[mid - 1] <= col?
        return F.when(col >= F.lit(boundaries[mid - 1]), tree(mid, hi)).otherwise(tree(lo, mid - 1))

    return F.when(col.isNull(), F.lit(0)).otherwise(tree(0, len(boundaries))).cast("long")


def interleave_expr(ids: list[Any], bits: int) -> Any:
    """A Column: the ids' low ``bits`` bits interleaved, column 0 most significant per bit."""
    from pyspark.sql import functions as F

    k = len(ids)
    out = F.lit(0).cast("long")
    for bit in range(bits):
        for j, rid in enumerate(ids):
            term = F.shiftleft(F.shiftright(rid, bit).bitwiseAND(F.lit(1).cast("long")), bit * k + (k - 1 - j))
            out = out.bitwiseOR(term)
    return out
