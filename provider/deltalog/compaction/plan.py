"""Compaction planning: which small files to merge into which new files.

Per partition, files below the small-file threshold (half the target size by
default) are sorted smallest first and packed greedily into bins of at most
the target size (Delta Spark's ``groupFilesIntoBins``). Bins with fewer than
``min_files`` files are dropped: rewriting one file alone buys nothing, and it
is what makes a second run right after the first plan nothing.

The plan is a JSON document carrying everything an engine needs to execute it
(snapshot version, table id, schema, partition columns, column-mapping mode,
codec, and per bin the input files with sizes, partition values and deletion
vectors), so it can be written by one process and run by another (the Spark
job, or a later Airflow task).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.commit import row_tracking
from deltalog.compaction.liquid import ClusteringSpec, clustering_spec, pack_cubes, select_for_clustering
from deltalog.compaction.options import CompactionOptions
from deltalog.compaction.predicate import PartitionFilter, parse_where
from deltalog.compaction.purge import purge_mask
from deltalog.compaction.writer_aware import DeferredFile, WriterPlan, choose, lead_ms
from deltalog.compaction.zorder import check_zorder_columns
from deltalog.errors import InvalidArgumentError, OperationRefusedError, UnsupportedProtocolError
from deltalog.log.actions import Metadata, dv_unique_id
from deltalog.log.load import snapshot_at
from deltalog.log.replay import int64_array
from deltalog.log.snapshot import Snapshot
from deltalog.log.writer_activity import WriterActivity, partition_key, writer_activity
from deltalog.protocol.features import Operation
from deltalog.protocol.parquet_layout import compression_codec, iceberg_compat_version, materializes_partition_columns
from deltalog.protocol.partition_values import PartitionValueError, partition_value_array
from deltalog.protocol.schema import void_write_problem
from deltalog.protocol.sizes import DEFAULT_TARGET_FILE_SIZE, parse_size, target_file_size
from deltalog.protocol.table_protocol import check_writable, refuse_geospatial_writes
from deltalog.storage.table_ref import TableRef, table_storage
from deltalog.write_checks import clustering

__all__ = [
    "Bin",
    "CompactionPlan",
    "PlanFile",
    "check_compactable",
    "compaction_operation",
    "plan_compaction",
    "plan_from_snapshot",
    "plan_row_tracking",
]

log = logging.getLogger(__name__)

#: 2: every key snake_case (1 had camelCase keys).
PLAN_FORMAT = 2
DEFAULT_TARGET_SIZE = DEFAULT_TARGET_FILE_SIZE


@dataclass(frozen=True)
class PlanFile:
    """One input file of a bin, as the log names it (``deletion_vector``: the log's descriptor, verbatim)."""

    path: str
    size: int
    deletion_vector: dict[str, Any] | None = None
    #: Row tracking fields of the live add (the rows' fresh IDs and commit versions).
    base_row_id: int | None = None
    default_row_commit_version: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path, "size": self.size}
        if self.deletion_vector:
            d["deletion_vector"] = self.deletion_vector
        if self.base_row_id is not None:
            d["base_row_id"] = self.base_row_id
        if self.default_row_commit_version is not None:
            d["default_row_commit_version"] = self.default_row_commit_version
        return d

    @classmethod
    def from_dict(cls, f: dict[str, Any]) -> PlanFile:
        base, version = f.get("base_row_id"), f.get("default_row_commit_version")
        return cls(
            str(f["path"]),
            int(f["size"]),
            f.get("deletion_vector"),
            None if base is None else int(base),
            None if version is None else int(version),
        )

    @property
    def key(self) -> tuple[str, str | None]:
        """(path, DV unique id): the logical file this entry stands for."""
        return self.path, dv_unique_id(self.deletion_vector)


@dataclass(frozen=True)
class Bin:
    """Files of one partition that become one new file."""

    id: int
    partition_values: dict[str, str | None]
    files: list[PlanFile]
    #: The writers' gate its commit waits behind (:mod:`deltalog.compaction.writer_aware`; None: commits at once).
    gate: str | None = None

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "partition_values": dict(self.partition_values),
            "size": self.size,
            "files": [f.to_dict() for f in self.files],
        }
        if self.gate is not None:
            out["gate"] = self.gate
        return out


@dataclass(frozen=True)
class CompactionPlan:
    """What a compaction will do; JSON-able so another engine or process can run it."""

    table_uri: str
    table_id: str
    snapshot_version: int
    target_size: int
    small_file_threshold: int
    min_files: int
    max_bins: int | None
    where: str | None
    predicate: list[str]
    partition_columns: list[str]
    schema_string: str
    column_mapping_mode: str
    codec: str
    #: ``delta.dataSkipping*`` table properties: which columns get stats in new files.
    stats_configuration: dict[str, str] = field(default_factory=dict)
    #: Row tracking enabled: the materialised columns the rewritten files carry every row's
    #: stable row ID and row commit version in (``row_id_column``, ``row_commit_version_column``).
    row_tracking: dict[str, str] | None = None
    #: The Iceberg compatibility version the table enables: new files follow its rules
    #: (partition values materialised, field ids on every column, nested ids for V2).
    iceberg_compat: int | None = None
    #: New files carry the partition columns after the data columns (the ``materializePartitionColumns``
    #: writer feature, or ``delta.writePartitionColumnsToParquet=true``), as Delta Spark writes them.
    materialize_partitions: bool = False
    #: A deletion-vector purge (REORG ... APPLY (PURGE)): files whose DV hides more than this share.
    purge_min_deleted_share: float | None = None
    #: Z-order columns (OPTIMIZE ... ZORDER BY): every file of a partition is rewritten along the curve.
    zorder_by: list[str] = field(default_factory=list)
    #: Liquid clustering (the table's clustering columns): the chosen files are rewritten along the curve.
    clustering: ClusteringSpec | None = None
    #: Clustered files of a good size (or by other columns) the clustering left alone.
    num_kept_clustered_files: int = 0
    bins: list[Bin] = field(default_factory=list)
    num_files: int = 0
    num_candidate_files: int = 0
    num_bins_deferred: int = 0
    created_at: str = ""
    #: What the plan minded of the table's writers: deferred files, gated commits (None: an older plan).
    writers: WriterPlan | None = None

    @property
    def num_files_deferred_for_writers(self) -> int:
        return len(self.writers.deferred) if self.writers is not None else 0

    @property
    def num_input_files(self) -> int:
        return sum(len(b.files) for b in self.bins)

    @property
    def input_bytes(self) -> int:
        return sum(b.size for b in self.bins)

    @property
    def num_partitions(self) -> int:
        return len({tuple(sorted(b.partition_values.items(), key=lambda kv: kv[0])) for b in self.bins})

    def summary_line(self, head: str = "plan") -> str:
        """One line for logs and the CLI: how many bins of how many files, against which target, what waits for writers."""
        deferred = self.num_files_deferred_for_writers
        gated = sum(1 for b in self.bins if b.gate is not None)
        writers = ""
        if deferred:
            writers += f"; {deferred} files deferred for the writers"
        if gated:
            writers += f"; {gated} bins commit at a quiet moment of the writers"
        return (
            f"{head} for {self.table_uri} at version {self.snapshot_version}: {len(self.bins)} bins, "
            f"{self.num_input_files} of {self.num_files} files ({self.input_bytes} bytes) in "
            f"{self.num_partitions} partitions; target {self.target_size} bytes{writers}"
        )

    def summary(self) -> dict[str, Any]:
        """The plan without its bins (what a result or a log line needs)."""
        return {
            "snapshot_version": self.snapshot_version,
            "target_size": self.target_size,
            "small_file_threshold": self.small_file_threshold,
            "min_files": self.min_files,
            "max_bins": self.max_bins,
            "where": self.where,
            "num_files": self.num_files,
            "num_candidate_files": self.num_candidate_files,
            "num_bins": len(self.bins),
            "num_bins_deferred": self.num_bins_deferred,
            "num_input_files": self.num_input_files,
            "input_bytes": self.input_bytes,
            "num_partitions": self.num_partitions,
            **({"cluster_by": list(self.clustering.columns)} if self.clustering else {}),
            **({"num_kept_clustered_files": self.num_kept_clustered_files} if self.clustering else {}),
            **({"writers": self.writers.summary()} if self.writers is not None else {}),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": PLAN_FORMAT,
            "table_uri": self.table_uri,
            "table_id": self.table_id,
            "snapshot_version": self.snapshot_version,
            "target_size": self.target_size,
            "small_file_threshold": self.small_file_threshold,
            "min_files": self.min_files,
            "max_bins": self.max_bins,
            "where": self.where,
            "predicate": list(self.predicate),
            "partition_columns": list(self.partition_columns),
            "schema_string": self.schema_string,
            "column_mapping_mode": self.column_mapping_mode,
            "codec": self.codec,
            "stats_configuration": dict(self.stats_configuration),
            "row_tracking": dict(self.row_tracking) if self.row_tracking else None,
            "iceberg_compat": self.iceberg_compat,
            "materialize_partitions": self.materialize_partitions,
            "purge_min_deleted_share": self.purge_min_deleted_share,
            "zorder_by": list(self.zorder_by),
            "clustering": self.clustering.to_dict() if self.clustering else None,
            "num_kept_clustered_files": self.num_kept_clustered_files,
            "num_files": self.num_files,
            "num_candidate_files": self.num_candidate_files,
            "num_bins_deferred": self.num_bins_deferred,
            "created_at": self.created_at,
            "writers": self.writers.to_dict() if self.writers is not None else None,
            "bins": [b.to_dict() for b in self.bins],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, doc: Any) -> CompactionPlan:
        """Rebuild a plan from :meth:`to_dict` output; InvalidArgumentError names what is wrong."""
        if not isinstance(doc, dict):
            raise InvalidArgumentError("a compaction plan must be a JSON object")
        found = doc.get("format_version", doc.get("formatVersion"))
        if found != PLAN_FORMAT:
            raise InvalidArgumentError(
                f"compaction plan format_version {found!r} is not supported (expected {PLAN_FORMAT}; plan again)"
            )
        # Whose plan it is comes first: a plan is run only against the table it was made for.
        table_id, version = doc.get("table_id"), doc.get("snapshot_version")
        if not isinstance(table_id, str) or not table_id.strip():
            raise InvalidArgumentError(
                "the compaction plan names no table: 'table_id' must be the id of the table it was made for (a "
                f"non-empty string), got {table_id!r}"
            )
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise InvalidArgumentError(
                "the compaction plan: 'snapshot_version' must be the table version it was made at (a non-negative "
                f"integer), got {version!r}"
            )
        try:
            bins = [
                Bin(
                    id=int(b["id"]),
                    partition_values=dict(b.get("partition_values") or {}),
                    files=[PlanFile.from_dict(f) for f in b["files"]],
                    gate=None if b.get("gate") is None else str(b["gate"]),
                )
                for b in doc.get("bins", [])
            ]
            return cls(
                table_uri=str(doc["table_uri"]),
                table_id=table_id,
                snapshot_version=version,
                target_size=int(doc["target_size"]),
                small_file_threshold=int(doc["small_file_threshold"]),
                min_files=int(doc["min_files"]),
                max_bins=None if doc.get("max_bins") is None else int(doc["max_bins"]),
                where=doc.get("where"),
                predicate=list(doc.get("predicate") or []),
                partition_columns=list(doc.get("partition_columns") or []),
                schema_string=str(doc["schema_string"]),
                column_mapping_mode=str(doc.get("column_mapping_mode") or "none"),
                codec=str(doc.get("codec") or "zstd"),
                stats_configuration={str(k): str(v) for k, v in (doc.get("stats_configuration") or {}).items()},
                row_tracking=_row_tracking_doc(doc.get("row_tracking")),
                iceberg_compat=None if doc.get("iceberg_compat") is None else int(doc["iceberg_compat"]),
                materialize_partitions=doc.get("materialize_partitions") is True,
                purge_min_deleted_share=(
                    None if doc.get("purge_min_deleted_share") is None else float(doc["purge_min_deleted_share"])
                ),
                zorder_by=[str(c) for c in doc.get("zorder_by") or []],
                clustering=ClusteringSpec.from_dict(doc.get("clustering")),
                num_kept_clustered_files=int(doc.get("num_kept_clustered_files") or 0),
                bins=bins,
                num_files=int(doc.get("num_files") or 0),
                num_candidate_files=int(doc.get("num_candidate_files") or 0),
                num_bins_deferred=int(doc.get("num_bins_deferred") or 0),
                created_at=str(doc.get("created_at") or ""),
                writers=WriterPlan.from_dict(doc.get("writers")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"the compaction plan is malformed: {type(exc).__name__} {exc}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> CompactionPlan:
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise InvalidArgumentError(f"the compaction plan is not valid JSON: {exc}") from None
        return cls.from_dict(doc)


def target_size_for(snapshot: Snapshot, target_size: int | str | None) -> int:
    """The explicit target, else ``delta.targetFileSize``, else 128 MiB."""
    return target_file_size(snapshot.metadata.configuration, target_size)


def _pack(files: list[PlanFile], target: int) -> list[list[PlanFile]]:
    """Greedy bin packing, smallest file first (files arrive sorted)."""
    bins: list[list[PlanFile]] = []
    current: list[PlanFile] = []
    current_size = 0
    for f in files:
        if current and current_size + f.size > target:
            bins.append(current)
            current, current_size = [], 0
        current.append(f)
        current_size += f.size
    if current:
        bins.append(current)
    return bins


def plan_row_tracking(snapshot: Snapshot) -> dict[str, str] | None:
    """The materialised row tracking columns when the table enables row tracking (else None).

    PROTOCOL.md: with row tracking enabled, a rewrite preserves every row's stable row ID
    and row commit version by materialising them; merely supported, it cannot.
    """
    config = snapshot.metadata.configuration
    if not row_tracking.enabled(snapshot.protocol, config):
        return None
    cols = row_tracking.materialized_columns(config)
    return {"row_id_column": cols.row_id, "row_commit_version_column": cols.row_commit_version}


def _row_tracking_doc(doc: Any) -> dict[str, str] | None:
    if doc is None:
        return None
    return {
        "row_id_column": str(doc["row_id_column"]),
        "row_commit_version_column": str(doc["row_commit_version_column"]),
    }


def compaction_operation(engine: str) -> Operation:
    """The feature table's column for a compaction run by ``engine``."""
    return Operation.COMPACTION_SPARK if engine == "spark" else Operation.COMPACTION_LOCAL


def check_compactable(snapshot: Snapshot, engine: str | None) -> None:
    """Refuse before planning when the table's features forbid compaction by ``engine``.

    ``engine=None`` (a plan to be run by whichever engine) passes when either engine may
    compact the table; the engine is checked again before it runs and at commit.
    """
    config = snapshot.metadata.configuration
    schema = json.loads(snapshot.metadata.schema_string)
    void = void_write_problem(schema)
    if void:
        raise OperationRefusedError(
            f"refusing to compact: {void}, and no data file can be written for such a schema (PROTOCOL.md 'Void Type')"
        )
    # Engine None (a plan either engine may run): the local engine's rule; the engine is checked again.
    refuse_geospatial_writes(schema, "compact", compaction_operation(engine or "local"))
    if engine is not None:
        check_writable(snapshot.protocol, "compact", compaction_operation(engine), config)
        return
    try:
        check_writable(snapshot.protocol, "compact", Operation.COMPACTION_LOCAL, config)
    except UnsupportedProtocolError:
        check_writable(snapshot.protocol, "compact", Operation.COMPACTION_SPARK, config)


def _check_materialized_values(md: Metadata, bins: list[Bin]) -> None:
    """Refuse, before any file is written, a partition value the new files cannot carry as its column's type.

    Files that carry their partition columns hold each bin's partition value as a value of
    the column's type; one that does not parse (``"abc"`` for an int column) would fail its
    bin after the others had committed.
    """
    types = {}
    for f in md.schema:
        if f.name in md.partition_columns:
            physical = (f.metadata or {}).get(b"delta.columnMapping.physicalName", f.name.encode()).decode()
            types[physical] = (f.name, f.type)
    for b in bins:
        for key, value in b.partition_values.items():
            if key not in types:
                continue
            name, dtype = types[key]
            try:
                partition_value_array(value, 1, dtype)
            except PartitionValueError as exc:
                raise OperationRefusedError(
                    f"refusing to compact: the new files must carry partition column {name!r}, and the partition "
                    f"value of {b.files[0].path} cannot be one: {exc}"
                ) from None


def _mind_writers(
    snapshot: Snapshot,
    candidates: pa.Table,
    opts: CompactionOptions,
    activity: WriterActivity | None,
    whole_partitions: bool,
) -> tuple[pa.Table, dict[tuple, str], WriterPlan]:
    """The candidates writer-aware planning keeps, each kept partition's gate, and the plan's writer section.

    ``whole_partitions``: a Z-order or a clustering rewrites a partition's files together, so a
    partition with a deferred file is deferred whole.
    """
    if not opts.writer_aware:
        return candidates, {}, WriterPlan(aware=False)
    if activity is None:
        activity = writer_activity(snapshot.storage, snapshot)
    n = candidates.num_rows
    if not n or not activity.dml:
        return candidates, {}, WriterPlan(True, opts.overriding_objective, activity.to_dict())
    paths = candidates.column("path").to_pylist()
    sizes = candidates.column("size").to_pylist()
    pvs = [dict(pv or []) for pv in candidates.column("partitionValues").to_pylist()]
    keys = [partition_key(pv) for pv in pvs]
    names = candidates.column_names
    mtimes = candidates.column("modificationTime").to_pylist() if "modificationTime" in names else [None] * n
    choices, gates = choose(
        activity,
        list(zip(paths, sizes, keys, mtimes)),
        lead_ms=lead_ms(snapshot.storage.is_local),
        overriding_objective=opts.overriding_objective,
    )
    reasons = [c.deferred for c in choices]
    if whole_partitions:
        first: dict[tuple, str] = {}
        for key, why in zip(keys, reasons):
            if why is not None:
                first.setdefault(key, why)
        reasons = [f"{first[key]} (the partition is rewritten whole)" if key in first else None for key in keys]
    deferred = [
        DeferredFile(path, size, pv, why) for path, size, pv, why in zip(paths, sizes, pvs, reasons) if why is not None
    ]
    keep = [why is None for why in reasons]
    gate_of = {key: c.gate for key, c, k in zip(keys, choices, keep) if k and c.gate is not None}
    used = {g: gates[g] for g in set(gate_of.values())}
    kept = candidates.filter(pa.array(keep, pa.bool_())) if deferred else candidates
    return kept, gate_of, WriterPlan(True, opts.overriding_objective, activity.to_dict(), used, deferred)


def plan_from_snapshot(
    snapshot: Snapshot,
    table_uri: str,
    options: CompactionOptions | None = None,
    *,
    writers: WriterActivity | None = None,
    **option_values: Any,
) -> CompactionPlan:
    """Plan against an already loaded snapshot (see :func:`plan_compaction`; the planning fields of
    ``options``, or of ``option_values`` as a shorthand, say what to plan).

    On a table with liquid clustering and clustering columns, a compaction (neither a
    purge nor a Z-order) clusters (:mod:`deltalog.compaction.liquid`): unclustered and
    small clustered files are re-clustered along the curve of the clustering columns,
    ``full`` re-clusters files clustered by other columns too (``OPTIMIZE ... FULL``).

    ``zorder_by`` plans a Z-order (:mod:`deltalog.compaction.zorder`): one bin per
    partition holding every file of it, whatever their size (the engine cuts it into
    target-size files).

    ``purge_deletion_vectors`` plans a deletion-vector purge instead of a bin-packing:
    the candidates are the files whose DV hides more than ``min_deleted_share`` of their
    rows (:mod:`deltalog.compaction.purge`), and a bin of one file is worth rewriting.

    ``writer_aware`` (the default) minds the table's DELETE/UPDATE/MERGE writers
    (:mod:`deltalog.compaction.writer_aware`): ``writers`` is their activity, read from the
    table's recent log when not given; deferred files are left out of the bins and listed in
    :attr:`CompactionPlan.writers`, bins where writers work carry the gate their commit waits
    behind, and the bins that need no wait come first.
    """
    opts = CompactionOptions.of(options, option_values, "plan_from_snapshot")
    engine, zorder_by, full, where = opts.engine, opts.zorder_by, opts.full, opts.where
    purge_min_deleted_share = opts.purge_min_deleted_share
    max_bins, min_files = opts.max_bins, opts.min_files
    check_compactable(snapshot, engine)
    zorder = check_zorder_columns(snapshot, zorder_by) if zorder_by is not None else []
    spec = None
    if purge_min_deleted_share is None and zorder_by is None:
        spec = clustering_spec(snapshot, full=full)
    if full and spec is None:
        raise InvalidArgumentError(
            "full re-clusters a table with liquid clustering (OPTIMIZE ... FULL); this run does not cluster"
        )
    target = target_size_for(snapshot, opts.target_size)
    threshold = (
        target // 2
        if opts.small_file_threshold is None
        else parse_size(opts.small_file_threshold, "small file threshold")
    )
    if threshold <= 0:
        raise InvalidArgumentError(f"small file threshold must be positive, got {threshold}")
    md = snapshot.metadata
    mapping = md.column_mapping_mode
    pfilter: PartitionFilter | None = parse_where(where, md.partition_columns, md.schema, mapping != "none")

    files = snapshot.files
    if purge_min_deleted_share is not None:
        mask = purge_mask(files, purge_min_deleted_share)
    elif zorder or spec is not None:
        mask = pa.array([True] * files.num_rows, pa.bool_())
    else:
        # An Arrow scalar, not a Python int: converting one would import pandas (40 MB, 0.3 s).
        mask = pc.less(files.column("size"), int64_array([threshold])[0])
    if pfilter is not None and files.num_rows:
        mask = pc.and_(mask, pfilter.mask(files.column("partitionValues")))
    kept_clustered = 0
    order: list[int] = []
    if spec is not None:
        chosen = select_for_clustering(files, spec, threshold, mask)
        kept_clustered = chosen.kept_clustered + chosen.kept_other_columns
        selected = [False] * files.num_rows
        for i in chosen.rows:
            selected[i] = True
        mask = pa.array(selected, pa.bool_())
        order = chosen.rows
    elif (
        purge_min_deleted_share is None
        and not zorder
        and files.num_rows
        and clustering.is_clustered(snapshot.protocol)
        and "clusteringProvider" in files.column_names
    ):
        # Only unclustered files: those a clustering implementation wrote keep their layout.
        mask = pc.and_(mask, pc.is_null(files.column("clusteringProvider")))
    candidates = files.filter(mask) if files.num_rows else files
    if spec is not None and candidates.num_rows:
        candidates = files.take(pa.array(order, pa.int64()))  # unclustered first, then by ZCube
    candidates, gate_of, writer_plan = _mind_writers(
        snapshot, candidates, opts, writers, whole_partitions=bool(zorder) or spec is not None
    )
    groups: dict[tuple, list[PlanFile]] = {}
    pvs_by_key: dict[tuple, dict[str, str | None]] = {}
    if candidates.num_rows:
        paths = candidates.column("path").to_pylist()
        sizes = candidates.column("size").to_pylist()
        pvs = candidates.column("partitionValues").to_pylist()
        dvs = candidates.column("deletionVector").to_pylist()
        n = candidates.num_rows
        bases = candidates.column("baseRowId").to_pylist() if "baseRowId" in candidates.column_names else [None] * n
        versions = (
            candidates.column("defaultRowCommitVersion").to_pylist()
            if "defaultRowCommitVersion" in candidates.column_names
            else [None] * n
        )
        for path, size, pv, dv, base, version in zip(paths, sizes, pvs, dvs, bases, versions):
            pv = dict(pv or [])
            key = tuple(sorted(pv.items(), key=lambda kv: kv[0]))
            groups.setdefault(key, []).append(
                PlanFile(path, size, {k: v for k, v in dv.items() if v is not None} if dv else None, base, version)
            )
            pvs_by_key[key] = pv
    packed: list[tuple[tuple, list[PlanFile]]] = []
    for key in sorted(groups, key=lambda k: [(c, "" if v is None else v) for c, v in k]):
        if spec is not None:  # the chosen files in their order, in groups of at most one cube
            group = groups[key]
            packed.extend((key, [group[i] for i in cube]) for cube in pack_cubes([f.size for f in group]))
            continue
        group = sorted(groups[key], key=lambda f: (f.size, f.path))
        if zorder:  # the whole partition, along one curve
            packed.append((key, group))
            continue
        fewest = 1 if purge_min_deleted_share is not None else min_files
        packed.extend((key, b) for b in _pack(group, target) if len(b) >= fewest)
    deferred = 0
    if max_bins is not None and len(packed) > max_bins:
        # Keep the bins that remove the most files; the rest wait for the next run.
        order = sorted(range(len(packed)), key=lambda i: (-len(packed[i][1]), i))
        keep = sorted(order[:max_bins])
        deferred = len(packed) - max_bins
        packed = [packed[i] for i in keep]
    # The bins no writer waits on first (cold first): they commit at once, then each gate's bins.
    packed.sort(key=lambda kv: gate_of.get(kv[0]) is not None)
    bins = [
        Bin(id=i, partition_values=dict(pvs_by_key[key]), files=fs, gate=gate_of.get(key))
        for i, (key, fs) in enumerate(packed)
    ]
    materialize = bool(md.partition_columns) and materializes_partition_columns(
        snapshot.protocol.effective_writer_features(), md.configuration
    )
    if materialize or iceberg_compat_version(md.configuration):
        _check_materialized_values(md, bins)
    plan = CompactionPlan(
        table_uri=table_uri,
        table_id=md.id,
        snapshot_version=snapshot.version,
        target_size=target,
        small_file_threshold=threshold,
        min_files=min_files,
        max_bins=max_bins,
        where=where.strip() if where and where.strip() else None,
        predicate=pfilter.describe() if pfilter else [],
        partition_columns=list(md.partition_columns),
        schema_string=md.schema_string,
        column_mapping_mode=mapping,
        codec=compression_codec(md.configuration),
        stats_configuration={k: v for k, v in md.configuration.items() if k.startswith("delta.dataSkipping")},
        row_tracking=plan_row_tracking(snapshot),
        iceberg_compat=iceberg_compat_version(md.configuration),
        materialize_partitions=materialize,
        purge_min_deleted_share=purge_min_deleted_share,
        zorder_by=zorder,
        clustering=spec,
        num_kept_clustered_files=kept_clustered,
        bins=bins,
        num_files=files.num_rows,
        num_candidate_files=candidates.num_rows,
        num_bins_deferred=deferred,
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        writers=writer_plan,
    )
    log.info(
        "compaction plan for %s at version %d: %d bins, %d of %d files (%d bytes)%s; %s",
        table_uri,
        snapshot.version,
        len(bins),
        plan.num_input_files,
        files.num_rows,
        plan.input_bytes,
        f", {deferred} bins deferred by max_bins" if deferred else "",
        writer_plan.summary_line(),
    )
    return plan


def plan_compaction(
    table: TableRef,
    *,
    options: CompactionOptions | None = None,
    storage_options: dict[str, Any] | None = None,
    **option_values: Any,
) -> CompactionPlan:
    """Plan a compaction (or a DV purge, or a Z-order, or a clustering) of the latest version; nothing is written.

    ``options`` (or its fields as keyword arguments) says what to plan; its ``engine``
    (``"local"``/``"spark"``, or None: whichever runs it) checks that engine's protocol
    support first.
    """
    opts = CompactionOptions.of(options, option_values, "plan_compaction")
    storage = table_storage(table, storage_options)
    return plan_from_snapshot(snapshot_at(storage), storage.uri, opts)
