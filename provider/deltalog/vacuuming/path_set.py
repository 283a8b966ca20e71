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

__all__ = ["EXACT_UP_TO", "PathSet", "PathSetBuilder", "fingerprints"]

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
    """Membership of table-relative paths; false positives possible (a file kept), false negatives never.

    ``labels`` (optional, one small non-negative integer per path) say why a path is in the set:
    :meth:`labels_of` answers with the smallest label of a path found (the most important reason,
    when labels are given in order of importance).
    """

    def __init__(
        self, paths: pa.Array | pa.ChunkedArray, exact_up_to: int | None = None, labels: np.ndarray | None = None
    ) -> None:
        self.size = len(paths)
        if exact_up_to is None:
            exact_up_to = EXACT_UP_TO
        if labels is not None and len(labels) != self.size:
            raise ValueError(f"{len(labels)} labels for {self.size} paths")
        self._exact: pa.Array | None = None
        self._sorted = np.empty(0, dtype=np.uint64)
        self._labels = labels
        if self.size <= exact_up_to:
            if isinstance(paths, pa.ChunkedArray):
                paths = paths.combine_chunks() if paths.num_chunks else pa.array([], pa.string())
            if labels is not None and self.size:
                # Smallest label first, so a lookup's first match (index_in) is the most important reason.
                order = np.argsort(labels, kind="stable")
                paths, self._labels = paths.take(pa.array(order)), labels[order]
            self._exact = paths
            return
        self._sorted, self._labels = _sorted_fingerprints(fingerprints(paths), labels)

    @classmethod
    def _of_fingerprints(cls, values: np.ndarray, labels: np.ndarray | None) -> PathSet:
        out = cls(pa.array([], pa.string()))
        out.size = len(values)
        out._exact = None
        out._sorted, out._labels = _sorted_fingerprints(values, labels)
        return out

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

    def labels_of(self, paths: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Per path, the smallest label it carries in the set, or -1 when it is not in it (needs ``labels``)."""
        if self._labels is None:
            raise ValueError("this PathSet carries no labels")
        n = len(paths)
        out = np.full(n, -1, dtype=np.int64)
        if n == 0 or not self.size:
            return out
        if self._exact is not None:
            index = pc.index_in(paths, value_set=self._exact)
            hit = index.is_valid()
            at = pc.fill_null(index, 0).to_numpy(zero_copy_only=False)
            found = hit.to_numpy(zero_copy_only=False)
            out[found] = self._labels[at[found]]
            return out
        probe = fingerprints(paths)
        at = np.searchsorted(self._sorted, probe)  # leftmost equal fingerprint: its smallest label
        at[at == len(self._sorted)] = 0
        found = self._sorted[at] == probe
        out[found] = self._labels[at[found]]
        return out


def _sorted_fingerprints(values: np.ndarray, labels: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Fingerprints sorted (a copy: they may be a read-only Arrow view), labels along, smallest first per value."""
    if labels is None:
        return np.sort(values), None
    order = np.lexsort((labels, values))
    return values[order], labels[order]


class PathSetBuilder:
    """A labelled :class:`PathSet` built from batches, without holding the paths once the set is large.

    Paths are kept as they come while there are at most ``exact_up_to`` of them (the set stays
    exact); past that every batch is reduced to its fingerprints on arrival, so building a set of
    ten million paths streamed from manifests holds 16 bytes a path, not the paths.
    """

    def __init__(self, exact_up_to: int | None = None) -> None:
        self.exact_up_to = EXACT_UP_TO if exact_up_to is None else exact_up_to
        self.size = 0
        self._paths: list[pa.Array] | None = []
        self._values: list[np.ndarray] = []
        self._labels: list[np.ndarray] = []

    def add(self, paths: pa.Array, label: int) -> None:
        """``paths`` with ``label`` (a small non-negative integer: 32 bits are kept)."""
        if not 0 <= label < 2**31:
            raise ValueError(f"label {label} is not a small non-negative integer")
        if paths.null_count:
            paths = paths.drop_null()
        if not len(paths):
            return
        self.size += len(paths)
        self._labels.append(np.full(len(paths), label, dtype=np.int32))
        if self._paths is not None:
            self._paths.append(paths)
            if self.size > self.exact_up_to:
                self._values = [fingerprints(p) for p in self._paths]
                self._paths = None
            return
        self._values.append(fingerprints(paths))

    def build(self) -> PathSet:
        labels = np.concatenate(self._labels) if self._labels else np.empty(0, dtype=np.int32)
        if self._paths is not None:
            paths = pa.concat_arrays(self._paths) if self._paths else pa.array([], pa.string())
            return PathSet(paths, exact_up_to=self.exact_up_to, labels=labels)
        return PathSet._of_fingerprints(np.concatenate(self._values), labels)
