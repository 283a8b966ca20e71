"""Liquid clustering for compaction (Delta Spark's ``OPTIMIZE`` on a clustered table): which files, which curve.

On a table with the ``clustering`` feature and clustering columns in the
``delta.clustering`` domain, Delta Spark's OPTIMIZE does not bin-pack: it
clusters. It reads a *ZCube* of files, range-partitions the rows by a space
filling curve of the clustering columns' rank buckets (a Hilbert curve for two
or more columns, the plain rank for one), writes files of the target size and
tags each with ``clusteringProvider = "liquid"`` and the ``ZCUBE_ID`` /
``ZCUBE_ZORDER_BY`` tags (one id per rewritten group, the clustering columns'
logical names as JSON). Here the same, on the local engine, with the exact ranks
of :mod:`deltalog.compaction.zorder`.

Incremental, file by file (:func:`select_for_clustering`):

- unclustered files (no ``clusteringProvider``) are always taken;
- files this or Delta Spark's implementation clustered (``liquid``) by the current
  columns are left alone when of a good size (at least the small-file threshold),
  and re-clustered with the new files when small;
- files clustered by other columns (an ``ALTER TABLE ... CLUSTER BY`` since) or by
  another implementation are left alone, as Delta Spark leaves them, unless
  ``full`` (Delta's ``OPTIMIZE ... FULL``): then, when there are such files, every
  file is re-clustered by the current columns;
- when nothing unclustered is left and the small clustered files all belong to one
  ZCube, there is nothing to do (Delta Spark's ``filterOutSingleZCubes``): a second
  run right after the first plans nothing.

The domain is never written: the clustering columns are the table's, read from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltalog.errors import OperationRefusedError
from deltalog.log.snapshot import Snapshot
from deltalog.write_checks import clustering

__all__ = [
    "ClusteringSpec",
    "PROVIDER",
    "ZCUBE_ID",
    "ZCUBE_ZORDER_BY",
    "clustering_spec",
    "pack_cubes",
    "select_for_clustering",
]

#: ``clusteringProvider`` of files written by liquid clustering (Delta Spark's ``ClusteredTableUtils``).
PROVIDER = "liquid"
#: AddFile tags of a ZCube (Delta Spark's ``ZCubeInfo``): the group id and its columns as a JSON list.
ZCUBE_ID = "ZCUBE_ID"
ZCUBE_ZORDER_BY = "ZCUBE_ZORDER_BY"
#: Upper bound of one rewritten group (Delta Spark's target cube size default, 150 GiB).
MAX_CUBE_BYTES = 150 * 1024**3


@dataclass(frozen=True)
class ClusteringSpec:
    """The clustering columns as the plan carries them: logical names, physical paths, curve."""

    columns: list[str]
    paths: list[list[str]]
    full: bool = False

    @property
    def curve(self) -> str:
        """Delta Spark's choice: Hilbert for two or more columns, Z-order (the rank itself) for one."""
        return "hilbert" if len(self.columns) > 1 else "zorder"

    @property
    def zorder_by_tag(self) -> str:
        return json.dumps(self.columns, separators=(",", ":"))

    def to_dict(self) -> dict[str, Any]:
        return {"columns": list(self.columns), "paths": [list(p) for p in self.paths], "full": self.full}

    @classmethod
    def from_dict(cls, doc: Any) -> ClusteringSpec | None:
        if doc is None:
            return None
        return cls(
            [str(c) for c in doc["columns"]], [[str(p) for p in path] for path in doc["paths"]], bool(doc["full"])
        )


def _resolve(fields: list[dict[str, Any]], path: list[str]) -> tuple[list[str], Any]:
    """Physical path -> (logical path, Delta type) by walking the schema JSON."""
    logical: list[str] = []
    dtype: Any = {"type": "struct", "fields": fields}
    for part in path:
        if not isinstance(dtype, dict) or dtype.get("type") != "struct":
            raise OperationRefusedError(f"clustering column {'.'.join(path)!r} is not a column of the table's schema")
        match = None
        for f in dtype["fields"]:
            physical = (f.get("metadata") or {}).get("delta.columnMapping.physicalName", f["name"])
            if physical == part or (physical == f["name"] and f["name"] == part):
                match = f
                break
        if match is None:
            raise OperationRefusedError(f"clustering column {'.'.join(path)!r} is not a column of the table's schema")
        logical.append(match["name"])
        dtype = match["type"]
    return logical, dtype


#: Delta types whose values have an order the curve can rank (Delta Spark clusters by data-skipping types).
_RANKABLE = {"byte", "short", "integer", "long", "float", "double", "date", "timestamp", "timestamp_ntz", "string"}


def clustering_spec(snapshot: Snapshot, *, full: bool = False) -> ClusteringSpec | None:
    """The table's clustering columns when it is clustered and names some; None otherwise."""
    if not clustering.is_clustered(snapshot.protocol):
        return None
    paths = clustering.clustering_columns(snapshot.domain_metadata)
    if not paths:
        return None
    fields = json.loads(snapshot.metadata.schema_string).get("fields", [])
    names = []
    for path in paths:
        logical, dtype = _resolve(fields, path)
        if path[0] in snapshot.metadata.partition_columns or logical[0] in snapshot.metadata.partition_columns:
            raise OperationRefusedError(f"clustering column {'.'.join(logical)!r} is a partition column")
        if not (isinstance(dtype, str) and (dtype in _RANKABLE or dtype.startswith("decimal"))):
            raise OperationRefusedError(
                f"clustering column {'.'.join(logical)!r} has type {json.dumps(dtype)}, which deltalog cannot cluster by"
            )
        names.append(".".join(logical))
    return ClusteringSpec(names, [list(p) for p in paths], full)


def _zcube(tags: Any) -> tuple[str | None, list[str] | None]:
    """(ZCUBE_ID, clustering columns) from a file's tags (an Arrow map as a list of pairs), if present."""
    d = dict(tags or [])
    cube = d.get(ZCUBE_ID)
    try:
        cols = json.loads(d[ZCUBE_ZORDER_BY]) if ZCUBE_ZORDER_BY in d else None
    except ValueError:
        cols = None
    return cube, cols if isinstance(cols, list) else None


@dataclass(frozen=True)
class Selection:
    """Which live files to re-cluster (row indices into ``snapshot.files``) and how many were left alone."""

    rows: list[int]
    kept_clustered: int
    kept_other_columns: int


def select_for_clustering(files: pa.Table, spec: ClusteringSpec, threshold: int, mask: pa.Array | None) -> Selection:
    """The files to cluster (see the module docstring); ``mask`` limits the files looked at."""
    n = files.num_rows
    if not n:
        return Selection([], 0, 0)
    providers = (
        files.column("clusteringProvider").to_pylist() if "clusteringProvider" in files.column_names else [None] * n
    )
    tags = files.column("tags").to_pylist() if "tags" in files.column_names else [None] * n
    sizes = files.column("size").to_pylist()
    allowed = mask.to_pylist() if mask is not None else [True] * n
    unclustered: list[int] = []
    small: list[tuple[str, int]] = []
    other: list[int] = []
    kept = 0
    for i in range(n):
        if not allowed[i]:
            continue
        provider = providers[i]
        if provider is None:
            unclustered.append(i)
            continue
        cube, cols = _zcube(tags[i])
        if provider != PROVIDER or (cols is not None and cols != spec.columns):
            other.append(i)
        elif sizes[i] < threshold:
            small.append((cube if cube is not None else f"<untagged {i}>", i))
        else:
            kept += 1
    if spec.full and other:
        # Files clustered by other columns (or another implementation) exist: re-cluster the lot.
        return Selection([i for i in range(n) if allowed[i]], 0, 0)
    if not unclustered and len({c for c, _ in small}) <= 1:
        return Selection([], kept + len(small), len(other))
    # Unclustered files first, then the small clustered ones by ZCube (Delta Spark's order).
    rows = unclustered + [i for _, i in sorted(small)]
    return Selection(rows, kept, len(other))


def pack_cubes(sizes: list[int]) -> list[list[int]]:
    """Consecutive groups (indices into ``sizes``) of at most :data:`MAX_CUBE_BYTES` each."""
    groups: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i, size in enumerate(sizes):
        if current and total + size > MAX_CUBE_BYTES:
            groups.append(current)
            current, total = [], 0
        current.append(i)
        total += size
    if current:
        groups.append(current)
    return groups
