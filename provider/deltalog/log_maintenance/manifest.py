"""Symlink-format manifests for engines that read a Delta table as plain Parquet.

Presto, Trino, Athena and Redshift Spectrum can read a Delta table through a
"symlink" table whose location is ``<table>/_symlink_format_manifest``: one
``manifest`` file per partition (``<col>=<value>/.../manifest``, or a single one for an
unpartitioned table) listing the absolute URI of every live data file, one per line.

- Full generation writes every partition's manifest and deletes manifests of
  partitions that no longer exist.
- Incremental refresh reads the commits since the last generation (the version
  marker ``_symlink_format_manifest/_deltalog_manifest_version.json``, whose leading
  underscore hides it from those engines) and rewrites only the partitions they
  touched; a partition left without files loses its manifest. Anything that makes the
  marker untrustworthy (missing, another table id, changed partition columns, commits
  no longer in the log) falls back to a full generation.
- Every manifest is written atomically and the marker last, so a crash leaves each
  manifest either old or new and a rerun finishes the job.
- ``dry_run`` reports which manifests would be written and which stale ones deleted,
  and writes or deletes nothing (like every other deleting operation).

Tables with deletion vectors in live files or with column mapping are refused: the
engines would read deleted rows, or columns by the wrong names.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog._flags import require_bools
from deltalog._version import __version__
from deltalog.errors import DeltaLogError, OperationRefusedError
from deltalog.log.commit_lines import check_commits, parse_action
from deltalog.log.listing import LogListing, list_log
from deltalog.log.load import snapshot_at
from deltalog.log.snapshot import Snapshot, read_commit_files
from deltalog.protocol.features import Operation
from deltalog.protocol.table_protocol import check_writable
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage

log = logging.getLogger(__name__)

MANIFEST_DIR = "_symlink_format_manifest"
MANIFEST_NAME = "manifest"
MARKER_NAME = "_deltalog_manifest_version.json"
ENABLED_PROPERTY = "delta.compatibility.symlinkFormatManifest.enabled"
HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: Characters Hive (and so Spark's manifest writer) percent-escapes in partition directory names.
_HIVE_ESCAPED = {chr(c) for c in range(1, 0x20)} | set("\"#%'*/:=?\\\x7f{[]^")


@dataclass(frozen=True)
class ManifestResult:
    """What a manifest generation wrote and deleted."""

    version: int
    mode: str  # "full" | "incremental"
    manifests_written: list[str] = field(default_factory=list)  # paths relative to the table root
    manifests_deleted: list[str] = field(default_factory=list)
    num_partitions: int = 0  # partitions (manifests) the table has at this version
    num_files: int = 0  # data files listed in the manifests written
    since_version: int | None = None  # incremental: the version of the previous generation
    full_reason: str | None = None  # why a requested incremental refresh did a full generation
    duration_seconds: float = 0.0
    dry_run: bool = False  # True: the lists say what would be written/deleted; nothing was

    def summary_line(self) -> str:
        """One line for logs and the CLI."""
        head = f"{self.mode} manifest generation of version {self.version}" + (" (dry run)" if self.dry_run else "")
        if self.mode == "incremental":
            head += f" (changes since version {self.since_version})"
        elif self.full_reason:
            head += f" ({self.full_reason})"
        would = "would be " if self.dry_run else ""
        return (
            f"{head}: {len(self.manifests_written)} manifests {would}written ({self.num_files} files), "
            f"{len(self.manifests_deleted)} stale {would}deleted; {self.num_partitions} partitions in the table"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        out = self.to_dict()
        out["manifests_written"] = len(self.manifests_written)
        out["manifests_deleted"] = len(self.manifests_deleted)
        return out


# --- partition directories and file URIs --------------------------------------------------


def escape_partition_value(value: str | None) -> str:
    """A partition value as a Hive directory name component (null/empty -> the Hive default partition)."""
    if value is None or value == "":
        return HIVE_DEFAULT_PARTITION
    return "".join(f"%{ord(ch):02X}" if ch in _HIVE_ESCAPED else ch for ch in value)


def partition_dir(partition_columns: list[str], values: dict[str, str | None]) -> str:
    return "/".join(f"{escape_partition_value(c)}={escape_partition_value(values.get(c))}" for c in partition_columns)


def _partition_dirs(files: pa.Table, partition_columns: list[str]) -> pa.Array:
    """Each live file's partition directory (``""`` for an unpartitioned table), vectorised."""
    n = files.num_rows
    if not partition_columns:
        return pa.array([""] * n, pa.string())
    pv = files.column("partitionValues").combine_chunks()
    parts = []
    for col in partition_columns:
        raw = pc.map_lookup(pv, pa.scalar(col), "first")
        encoded = raw.dictionary_encode()
        dictionary = [escape_partition_value(v) for v in encoded.dictionary.to_pylist()]
        escaped = pa.DictionaryArray.from_arrays(encoded.indices, pa.array(dictionary, pa.string())).cast(pa.string())
        escaped = pc.fill_null(escaped, HIVE_DEFAULT_PARTITION)
        parts.append(pc.binary_join_element_wise(f"{escape_partition_value(col)}=", escaped, ""))
    return pc.binary_join_element_wise(*parts, "/") if len(parts) > 1 else parts[0]


def _file_uris(storage: Storage, paths: pa.Array) -> pa.Array:
    """Absolute, decoded URIs of the data files (log paths are RFC 2396 URIs, relative or absolute)."""
    if pc.any(pc.match_substring(paths, "%")).as_py():
        paths = pa.array([urllib.parse.unquote(p) for p in paths.to_pylist()], pa.string())
    has_scheme = pc.match_substring_regex(paths, r"^[A-Za-z][A-Za-z0-9+.-]*:")
    rooted = pc.starts_with(paths, "/")
    base = storage.uri.rstrip("/") + "/"
    relative = pc.binary_join_element_wise(base, paths, "")
    local_abs = pc.binary_join_element_wise("file://", paths, "")
    return pc.if_else(has_scheme, paths, pc.if_else(rooted, local_abs, relative))


# --- the version marker and incremental scope --------------------------------------------


def _read_marker(storage: Storage) -> dict[str, Any] | None:
    try:
        doc = json.loads(storage.read_bytes(storage.join(MANIFEST_DIR, MARKER_NAME)))
        return doc if isinstance(doc, dict) and isinstance(doc.get("version"), int) else None
    except (OSError, ValueError):
        return None


def _touched_partitions(
    storage: Storage, listing: LogListing, snapshot: Snapshot, marker: dict[str, Any] | None
) -> tuple[set[str] | None, str | None]:
    """Partition directories touched by the commits after the marker, or (None, why a full run is needed)."""
    if marker is None:
        return None, "no previous generation (version marker missing or unreadable)"
    if marker.get("tableId") != snapshot.metadata.id:
        return None, "the version marker belongs to another table id"
    if marker.get("partitionColumns") != snapshot.partition_columns:
        return None, "the partition columns changed since the previous generation"
    since = marker["version"]
    if since > snapshot.version:
        return None, f"the version marker ({since}) is newer than the table ({snapshot.version})"
    missing = [v for v in range(since + 1, snapshot.version + 1) if v not in listing.commits]
    if missing:
        return None, f"commit {missing[0]} since the previous generation is no longer in the log"
    cols = snapshot.partition_columns
    touched: set[str] = set()
    added: dict[str, str] = {}
    unknown: set[str] = set()  # removes without partitionValues (the field is optional)
    files = [listing.commits[v] for v in range(since + 1, snapshot.version + 1)]
    contents = read_commit_files(storage, files)
    check_commits((f.name, data) for f, data in zip(files, contents))
    for f, data in zip(files, contents):
        for lineno, line in enumerate(data.split(b"\n"), start=1):
            head = line[:12]
            if b'"add"' not in head and b'"remove"' not in head:
                continue
            ((kind, action),) = parse_action(line, f.name, lineno).items()
            values = action.get("partitionValues")
            if values is None and cols:
                unknown.add(action.get("path"))
                continue
            d = partition_dir(cols, values or {})
            touched.add(d)
            if kind == "add":
                added[action.get("path")] = d
    unknown -= added.keys()  # added within the range: its partition is already touched
    if unknown:
        # Where those files lived is in the state at the previous generation.
        try:
            before = snapshot_at(storage, since, listing=listing)
        except DeltaLogError as exc:
            return None, f"removes without partitionValues and version {since} cannot be read ({exc})"
        dirs = _partition_dirs(before.files, cols).to_pylist()
        where = dict(zip(before.file_paths(), dirs))
        if not unknown <= where.keys():
            return None, "a remove without partitionValues names a file unknown at the previous generation"
        touched.update(where[p] for p in unknown)
    return touched, None


# --- generation ---------------------------------------------------------------------------


def _refuse_unsupported(snapshot: Snapshot) -> None:
    if snapshot.metadata.column_mapping_mode != "none":
        raise OperationRefusedError(
            f"refusing to generate symlink manifests: the table uses column mapping "
            f"(mode {snapshot.metadata.column_mapping_mode!r}), so engines reading the manifests would "
            "resolve columns by the wrong names"
        )
    dv = snapshot.files.column("deletionVector")
    if len(dv) - dv.null_count:
        raise OperationRefusedError(
            f"refusing to generate symlink manifests: {len(dv) - dv.null_count} live files have deletion "
            "vectors, which engines reading the manifests would ignore (they would return deleted rows); "
            "purge them first (rewrite the files)"
        )


def generate_manifest(
    table: TableRef,
    *,
    full: bool = False,
    dry_run: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> ManifestResult:
    """Write the symlink-format manifests of the latest version (incremental unless ``full``).

    ``dry_run`` plans the same generation and returns it without writing or deleting anything.
    ``table`` may also be a ``Storage``: the post-commit refresh passes the committer's.
    """
    started = time.perf_counter()
    require_bools(full=full, dry_run=dry_run)
    storage = table_storage(table, storage_options)
    listing = list_log(storage)
    snapshot = snapshot_at(storage, listing=listing)
    check_writable(snapshot.protocol, "generate symlink manifests", Operation.MANIFEST, snapshot.metadata.configuration)
    _refuse_unsupported(snapshot)

    mode, since_version, full_reason = "full", None, None
    scope: set[str] | None = None
    marker = _read_marker(storage)
    if not full:
        scope, full_reason = _touched_partitions(storage, listing, snapshot, marker)
        if scope is not None and marker is not None:
            mode, since_version = "incremental", marker["version"]

    files = snapshot.files
    cols = snapshot.partition_columns
    dirs = _partition_dirs(files, cols)
    uris = _file_uris(storage, files.column("path").combine_chunks())
    grouped = _group(dirs, uris)
    written: list[str] = []
    deleted: list[str] = []
    num_files = 0

    targets = grouped.keys() if scope is None else scope & grouped.keys()
    for d in sorted(targets):
        rel = f"{MANIFEST_DIR}/{d}/{MANIFEST_NAME}" if d else f"{MANIFEST_DIR}/{MANIFEST_NAME}"
        if not dry_run:
            storage.write_atomic(storage.join(rel), ("\n".join(grouped[d]) + "\n").encode())
        written.append(rel)
        num_files += len(grouped[d])
    stale = _existing_manifests(storage) - set(grouped) if scope is None else scope - set(grouped)
    for d in sorted(stale):
        rel = f"{MANIFEST_DIR}/{d}/{MANIFEST_NAME}" if d else f"{MANIFEST_DIR}/{MANIFEST_NAME}"
        if dry_run:
            if storage.exists(storage.join(rel)):
                deleted.append(rel)
            continue
        if storage.delete(storage.join(rel)):
            deleted.append(rel)
        _remove_empty_parents(storage, d)

    marker_doc = {
        "version": snapshot.version,
        "tableId": snapshot.metadata.id,
        "partitionColumns": cols,
        "generatedAt": int(time.time() * 1000),
        "generator": f"deltalog/{__version__}",
    }
    if not dry_run:
        storage.write_atomic(storage.join(MANIFEST_DIR, MARKER_NAME), json.dumps(marker_doc).encode())
    result = ManifestResult(
        version=snapshot.version,
        mode=mode,
        manifests_written=written,
        manifests_deleted=deleted,
        num_partitions=len(grouped),
        num_files=num_files,
        since_version=since_version,
        full_reason=full_reason,
        duration_seconds=round(time.perf_counter() - started, 3),
        dry_run=dry_run,
    )
    log.info(
        "%s manifest generation of version %d%s: %d written, %d deleted (%d partitions)",
        result.mode,
        result.version,
        " (dry run, nothing written)" if dry_run else "",
        len(result.manifests_written),
        len(result.manifests_deleted),
        result.num_partitions,
    )
    return result


def _group(dirs: pa.Array, uris: pa.Array) -> dict[str, list[str]]:
    """URIs per partition directory, each list sorted (stable, diff-friendly manifests)."""
    if len(dirs) == 0:
        return {}
    order = pc.sort_indices(pa.table({"d": dirs, "u": uris}), sort_keys=[("d", "ascending"), ("u", "ascending")])
    d_sorted = dirs.take(order)
    u_sorted = uris.take(order).to_pylist()
    runs = pc.run_end_encode(d_sorted)
    out: dict[str, list[str]] = {}
    start = 0
    for value, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist()):
        out[value] = u_sorted[start:end]
        start = end
    return out


def _existing_manifests(storage: Storage) -> set[str]:
    """Partition directories (relative to the manifest dir) that hold a manifest file now."""
    root = storage.join(MANIFEST_DIR)
    if not storage.exists(root):
        return set()
    out = set()
    prefix = storage.relative(root).rstrip("/") + "/"
    for f in storage.walk_files(root):
        rel = storage.relative(f.path)
        if f.name != MANIFEST_NAME or not rel.startswith(prefix):
            continue
        inner = rel[len(prefix) :]
        out.add(inner[: -len(MANIFEST_NAME)].rstrip("/"))
    return out


def _remove_empty_parents(storage: Storage, partition: str) -> None:
    parts = partition.split("/") if partition else []
    while parts:
        if not storage.remove_empty_dir(storage.join(MANIFEST_DIR, *parts)):
            return
        parts.pop()


__all__ = ["ENABLED_PROPERTY", "ManifestResult", "generate_manifest", "partition_dir"]
