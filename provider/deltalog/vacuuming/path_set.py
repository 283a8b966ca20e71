"""The protected set at any size: 64-bit fingerprints of paths, sorted once, probed batch by batch.

Vacuum asks one question millions of times: is this listed path referenced by a
retained version? Arrow's ``is_in`` answers it by building a hash table of the value
set, a copy of every string, at every call: at ten million protected paths that is
7.5 CPU seconds and 1.7 GiB for each call, so an inventory can be diffed only whole
and only once. Here every protected path is reduced to a 64-bit fingerprint (DuckDB's
``hash``, vectorised over the Arrow buffers without a copy), the fingerprints are
sorted once (80 MB for ten million paths), and each batch of listed paths is
fingerprinted, sorted and found by binary search: a streamed inventory of any length
costs memory for one batch.

Below :data:`EXACT_UP_TO` paths the set stays exact (Arrow's ``is_in``): rebuilding a
small hash table costs less than importing DuckDB, and small tables are most tables.

Above it, the answer can err on one side only. Equal paths have equal fingerprints, so a
referenced path is always found; two different paths sharing a fingerprint (about
one chance in 10^5 for a table of ten million files against an inventory of as many
objects) make an unreferenced file look referenced, and it is kept: never deleted by
mistake, at worst reclaimed by a later vacuum.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["EXACT_UP_TO", "PathSet", "fingerprints"]

#: Protected sets up to this many paths are probed exactly, with Arrow's ``is_in``.
EXACT_UP_TO = 100_000

_lock = threading.Lock()
_connection: list[Any] = []


def _cursor() -> Any:
    """A cursor on one in-memory DuckDB database per process (imported on first use); one per call and thread."""
    with _lock:
        if not _connection:
            import duckdb

            con = duckdb.connect(":memory:")
            con.execute("SET threads = 2")
            con.execute("SET preserve_insertion_order = true")
            _connection.append(con)
        return _connection[0].cursor()


def fingerprints(paths: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit fingerprint per path (uint64, in order; nulls are not allowed)."""
    n = len(paths)
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    if paths.null_count:
        raise ValueError("paths must not be null")
    cursor = _cursor()
    try:
        cursor.register("deltalog_paths", pa.table({"p": paths}))
        out = cursor.sql("SELECT hash(p) AS h FROM deltalog_paths").to_arrow_table()
    finally:
        cursor.close()
    column = out.column("h")
    if len(column) != n:  # DuckDB keeps the scan's order for a plain projection; checked, not assumed
        raise RuntimeError(f"fingerprinting {n} paths returned {len(column)} values")
    return column.to_numpy()


class PathSet:
    """Membership of table-relative paths; false positives possible (a file kept), false negatives never."""

    def __init__(self, paths: pa.Array | pa.ChunkedArray, exact_up_to: int | None = None) -> None:
        self.size = len(paths)
        if exact_up_to is None:
            exact_up_to = EXACT_UP_TO
        self._exact: pa.Array | None = None
        self._sorted = np.empty(0, dtype=np.uint64)
        if self.size <= exact_up_to:
            if isinstance(paths, pa.ChunkedArray):
                paths = paths.combine_chunks() if paths.num_chunks else pa.array([], pa.string())
            self._exact = paths
            return
        self._sorted = np.sort(fingerprints(paths))  # (a copy: the fingerprints may be a read-only Arrow view)

    @property
    def exact(self) -> bool:
        """Whether membership is decided on the paths themselves (no fingerprints)."""
        return self._exact is not None

    def __len__(self) -> int:
        return self.size

    @property
    def distinct(self) -> int:
        """How many different paths the set holds (by fingerprint above :data:`EXACT_UP_TO`)."""
        if self._exact is not None:
            return int(pc.count_distinct(self._exact).as_py())
        values = self._sorted
        return int(np.count_nonzero(values[1:] != values[:-1]) + 1) if len(values) else 0

    def contains(self, paths: pa.Array | pa.ChunkedArray) -> pa.Array:
        """A boolean per path: whether it (or a path with the same fingerprint) is in the set."""
        n = len(paths)
        if self._exact is not None:
            return pc.fill_null(pc.is_in(paths, value_set=self._exact), False)
        if n == 0 or not len(self._sorted):
            return pa.array(np.zeros(n, dtype=bool))
        probe = fingerprints(paths)
        # Sorted probes: numpy's binary search starts each key where the previous one ended.
        order = np.argsort(probe, kind="stable")
        keys = probe[order]
        at = np.searchsorted(self._sorted, keys)
        at[at == len(self._sorted)] = 0
        found = self._sorted[at] == keys
        mask = np.empty(n, dtype=bool)
        mask[order] = found
        return pa.array(mask)
