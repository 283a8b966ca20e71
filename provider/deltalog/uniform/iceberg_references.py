"""What the Iceberg snapshots beside a Delta table reference: the files Iceberg readers may still open.

A UniForm table is also an Iceberg table: ``metadata/*.metadata.json`` under the table root
names snapshots, each snapshot a manifest list, each manifest list its manifests, and the
manifests the data and delete files (absolute URIs). Snowflake, Trino, BigQuery, Spark or
pyiceberg read the table through them, and nothing in the Delta log says which files they need.
This module reads that metadata (with pyiceberg: the metadata JSON model, the manifest-list
reader, its Avro reader) and yields, a manifest at a time, the paths the snapshots readers may
still use reference. Vacuum keeps those files (:mod:`deltalog.vacuuming.iceberg_guard`).

**Which metadata file is current.** Delta's converter commits through a catalog (often Hive's
metastore), which names metadata files ``<n>-<uuid>.metadata.json``; Iceberg's Hadoop tables name
them ``v<n>.metadata.json`` beside a ``version-hint.text``. A reader that opens the table by path
takes the newest. Which one that is cannot be known without the catalog, so every candidate
counts as *newest*: the one ``version-hint.text`` names, the one with the highest number in its
name, and the one with the latest ``last-updated-ms``.

**Which snapshots readers may still use** (the rule, with ``cutoff`` = now - retention, the
vacuum's cutoff):

- a metadata file is *in use* when it is a newest one, was written at or after the cutoff, or
  is the newest one written before the cutoff (what a reader at the cutoff time had; Delta's
  "version just before the window" rule);
- of every metadata file in use: its current snapshot, the snapshot of each of its refs
  (branches and tags, whatever their age: a tag is a promise to keep), and the snapshot that was
  current at the cutoff by its ``snapshot-log``;
- of every metadata file: each snapshot committed at or after the cutoff.

A snapshot's files are its manifests' live entries (status ADDED or EXISTING), data files and
delete files (position, equality, deletion-vector Puffin files) alike; a DELETED entry is a file
the snapshot dropped, which its parent (if still used) references itself. The manifest lists,
manifests and statistics files of those snapshots are references too.

**What is refused** (nothing can be proven about files the metadata cannot be read for):
a metadata file that is not valid JSON (torn, partial), not Iceberg table metadata, of a format
version other than 1, 2 or 3, or a v1 snapshot without a manifest list; a manifest list or
manifest that cannot be read (corrupt, or missing while a newest metadata file still lists its
snapshot); a metadata file whose ``location`` is not this table (*foreign*: a copy of another
table's metadata, or a table moved without its metadata being rewritten, whose readers open
another table's files). A manifest list or manifest missing for a snapshot that no newest
metadata file lists any more was expired by Iceberg itself: no reader can open it, and it is
skipped with a warning.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from deltalog.errors import OperationRefusedError
from deltalog.log.history import format_ms
from deltalog.storage.filesystem import FileInfo, Storage

__all__ = [
    "METADATA_DIR",
    "ForeignIcebergMetadataError",
    "IcebergMetadataError",
    "IcebergReferences",
    "MetadataFile",
    "ReaderSnapshot",
    "ReferenceBatch",
    "list_metadata_files",
    "read_iceberg_references",
]

log = logging.getLogger(__name__)

#: Where UniForm (and every Iceberg writer by default) keeps the table's metadata, under its root.
METADATA_DIR = "metadata"
VERSION_HINT = "version-hint.text"
SUPPORTED_FORMAT_VERSIONS = (1, 2, 3)
#: Paths handed out per batch (a manifest's entries are cut into batches of this many).
BATCH_PATHS = 65_536

_CATALOG_NAME = re.compile(r"^(\d+)-.+\.metadata\.json(\.gz)?$")
_HADOOP_NAME = re.compile(r"^v(\d+)(\.gz)?\.metadata\.json(\.gz)?$")

#: Table-relative path of an absolute URI when it lies inside the table root, else None.
Locate = Callable[[str], "str | None"]


class IcebergMetadataError(OperationRefusedError):
    """The Iceberg metadata beside the table cannot be read, so what its readers need cannot be known."""


class ForeignIcebergMetadataError(OperationRefusedError):
    """An Iceberg metadata file under the table root belongs to another location."""


@dataclass(frozen=True)
class MetadataFile:
    """One ``metadata/*.metadata.json``: what vacuum needs of it."""

    name: str
    format_version: int
    location: str
    last_updated_ms: int
    current_snapshot_id: int | None
    #: The number its name carries (``00003-<uuid>``, ``v3``), None when it has none.
    sequence: int | None
    newest: bool = False
    in_use: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "format_version": self.format_version,
            "last_updated": format_ms(self.last_updated_ms),
            "current_snapshot_id": self.current_snapshot_id,
            "newest": self.newest,
            "in_use": self.in_use,
        }


@dataclass(frozen=True)
class ReaderSnapshot:
    """A snapshot Iceberg readers may still use, and why."""

    snapshot_id: int
    timestamp_ms: int
    manifest_list: str
    why: str
    #: Whether a newest metadata file still lists it (else Iceberg has expired it there).
    listed_by_newest: bool

    def describe(self) -> str:
        return f"Iceberg snapshot {self.snapshot_id} ({self.why})"

    def to_dict(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "timestamp": format_ms(self.timestamp_ms), "why": self.why}


@dataclass(frozen=True)
class ReferenceBatch:
    """Paths (absolute URIs, as the metadata writes them) that snapshot ``snapshot`` (an index into
    :attr:`IcebergReferences.snapshots`) references; ``kind``: ``data`` (data and delete files) or
    ``metadata`` (manifest lists, manifests, statistics files)."""

    paths: pa.Array
    snapshot: int
    kind: str


@dataclass
class IcebergReferences:
    """The Iceberg metadata beside a table: its metadata files, the snapshots readers may still use, and
    (:meth:`batches`, read as iterated) the files those snapshots reference."""

    storage: Storage
    locate: Locate
    metadata_files: list[MetadataFile]
    snapshots: list[ReaderSnapshot]
    #: Statistics files (Puffin) of the snapshots kept: (snapshot index, path).
    statistics: list[tuple[int, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    manifests_read: set[str] = field(default_factory=set)
    manifest_lists_read: int = 0
    entries_read: int = 0

    def batches(self, skip_manifests: frozenset[str] | set[str] = frozenset()) -> Iterator[ReferenceBatch]:
        """The referenced paths, a manifest (cut into batches of :data:`BATCH_PATHS`) at a time.

        Each manifest is read once, for the first snapshot (in the order of :attr:`snapshots`:
        current ones first) that lists it; ``skip_manifests`` were read before (a re-validation
        only reads what is new). Raises IcebergMetadataError as described in the module docstring.
        """
        missing: dict[str, int] = {}
        for index, snap in enumerate(self.snapshots):
            try:
                manifests = self._manifest_list(snap)
            except FileNotFoundError:
                self._missing(snap, f"its manifest list {snap.manifest_list}")
                continue
            self.manifest_lists_read += 1
            yield ReferenceBatch(
                pa.array([snap.manifest_list, *(m.manifest_path for m in manifests)], pa.string()), index, "metadata"
            )
            for manifest in manifests:
                path = manifest.manifest_path
                if path in missing:
                    if snap.listed_by_newest:
                        self._missing(snap, f"its manifest {path}")
                    continue
                if path in self.manifests_read or path in skip_manifests:
                    continue
                if not _may_hold_live_entries(manifest):
                    self.manifests_read.add(path)
                    continue
                try:
                    data = self._read(path)
                except FileNotFoundError:
                    missing[path] = index
                    self._missing(snap, f"its manifest {path}")
                    continue
                self.manifests_read.add(path)
                yield from self._entries(path, data, index)
        for index, path in self.statistics:
            yield ReferenceBatch(pa.array([path], pa.string()), index, "metadata")

    # --- reading ---------------------------------------------------------------------------

    def _read(self, uri: str) -> bytes:
        """The bytes of a metadata file the metadata names (absolute URI), read through the table's storage."""
        rel = self.locate(uri)
        if rel is None:
            raise IcebergMetadataError(
                f"the Iceberg metadata names {uri}, outside the table root {self.storage.uri}: deltalog reads Iceberg "
                "metadata only through the table's own storage, so it cannot tell what Iceberg readers need. Nothing "
                "was deleted"
            )
        try:
            return self.storage.read_bytes(self.storage.join(*rel.split("/")))
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise IcebergMetadataError(f"cannot read Iceberg metadata file {uri}: {exc}; nothing was deleted") from None

    def _manifest_list(self, snap: ReaderSnapshot) -> list[Any]:
        from pyiceberg.manifest import read_manifest_list

        data = self._read(snap.manifest_list)
        try:
            return list(read_manifest_list(_input_file(snap.manifest_list, data)))
        except Exception as exc:  # noqa: BLE001 - pyiceberg's Avro reader raises many kinds; one refusal for all
            raise IcebergMetadataError(
                f"the manifest list {snap.manifest_list} of {snap.describe()} is not a readable Iceberg manifest list "
                f"({type(exc).__name__}: {exc}); nothing was deleted"
            ) from None

    def _entries(self, path: str, data: bytes, index: int) -> Iterator[ReferenceBatch]:
        """The live entries' file paths of one manifest, streamed record by record."""
        chunk: list[str] = []
        try:
            for status, file_path in _live_entries(path, data):
                self.entries_read += 1
                if status == _DELETED:
                    continue
                if not isinstance(file_path, str) or not file_path:
                    raise ValueError("an entry without a file_path")
                chunk.append(file_path)
                if len(chunk) >= BATCH_PATHS:
                    yield ReferenceBatch(pa.array(chunk, pa.string()), index, "data")
                    chunk = []
        except IcebergMetadataError:
            raise
        except Exception as exc:  # noqa: BLE001 - see _manifest_list
            raise IcebergMetadataError(
                f"the manifest {path} of {self.snapshots[index].describe()} is not a readable Iceberg manifest "
                f"({type(exc).__name__}: {exc}); nothing was deleted"
            ) from None
        if chunk:
            yield ReferenceBatch(pa.array(chunk, pa.string()), index, "data")

    def _missing(self, snap: ReaderSnapshot, what: str) -> None:
        if snap.listed_by_newest:
            raise IcebergMetadataError(
                f"{what} of {snap.describe()} is missing, and the newest Iceberg metadata still lists that snapshot: "
                "Iceberg readers of it fail already, and vacuum cannot tell which files they need. Nothing was deleted"
            )
        self.warnings.append(
            f"{what} of {snap.describe()} is missing; the newest Iceberg metadata no longer lists that snapshot "
            "(Iceberg expired it), so no reader can use it and it protects nothing"
        )


# --- the Avro side (pyiceberg's reader) ------------------------------------------------------

_DELETED = 2


def _may_hold_live_entries(manifest: Any) -> bool:
    """False only when the manifest list says the manifest has no ADDED and no EXISTING entry."""
    added, existing = manifest.added_files_count, manifest.existing_files_count
    return added is None or existing is None or added > 0 or existing > 0


_INPUT_FILE: list[Any] = []


def _input_file(location: str, data: bytes) -> Any:
    """A pyiceberg ``InputFile`` over bytes read through the table's storage (its credentials, its request counts).

    Its stream hands the bytes over without a copy: pyiceberg's Avro reader reads a file whole, and a
    manifest of a million entries is over a hundred megabytes.
    """
    if not _INPUT_FILE:
        from pyiceberg.io import InputFile

        class BytesInput(InputFile):
            def __init__(self, location: str, data: bytes) -> None:
                super().__init__(location)
                self._data = data

            def __len__(self) -> int:
                return len(self._data)

            def exists(self) -> bool:
                return True

            def open(self, seekable: bool = True) -> Any:
                return _BytesStream(self._data)

        _INPUT_FILE.append(BytesInput)
    return _INPUT_FILE[0](location, data)


class _BytesStream:
    """A read-only stream over ``data`` whose whole-file read returns ``data`` itself (``io.BytesIO`` copies)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def read(self, size: int = -1) -> bytes:
        start = self._pos
        if start == 0 and (size is None or size < 0 or size >= len(self._data)):
            self._pos = len(self._data)
            return self._data
        end = len(self._data) if size is None or size < 0 else min(len(self._data), start + size)
        self._pos = end
        return self._data[start:end]

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._data)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        self._pos = len(self._data)

    def __enter__(self) -> _BytesStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_ENTRY_PROJECTION: list[Any] = []


def _projection() -> tuple[Any, Any]:
    """The manifest-entry read schema vacuum needs (status, data_file.content, data_file.file_path) and a
    partner accessor that lets pyiceberg's resolver skip the fields (maps of statistics included) it leaves out."""
    if not _ENTRY_PROJECTION:
        from pyiceberg.avro.resolver import SchemaPartnerAccessor
        from pyiceberg.schema import Schema
        from pyiceberg.types import IntegerType, ListType, MapType, NestedField, StringType, StructType

        class Projection(SchemaPartnerAccessor):
            # pyiceberg's accessor expects the read schema to hold every list and map of the file's;
            # a field left out of the projection is read past (decoded and dropped) instead.
            def field_partner(self, partner: Any, field_id: int, field_name: str) -> Any:
                return None if partner is None else super().field_partner(partner, field_id, field_name)

            def list_element_partner(self, partner_list: Any) -> Any:
                return partner_list.element_type if isinstance(partner_list, ListType) else None

            def map_key_partner(self, partner_map: Any) -> Any:
                return partner_map.key_type if isinstance(partner_map, MapType) else None

            def map_value_partner(self, partner_map: Any) -> Any:
                return partner_map.value_type if isinstance(partner_map, MapType) else None

        # Field ids of the Iceberg spec's manifest_entry (the same in format versions 1 to 3).
        schema = Schema(
            NestedField(0, "status", IntegerType(), required=True),
            NestedField(
                2,
                "data_file",
                StructType(
                    NestedField(134, "content", IntegerType(), required=False),
                    NestedField(100, "file_path", StringType(), required=True),
                ),
                required=True,
            ),
        )
        _ENTRY_PROJECTION.extend([schema, Projection()])
    return _ENTRY_PROJECTION[0], _ENTRY_PROJECTION[1]


def _live_entries(path: str, data: bytes) -> Iterator[tuple[int, Any]]:
    """(status, file_path) of every entry of the manifest ``data``, decoded one record at a time."""
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.avro.resolver import ReadSchemaResolver
    from pyiceberg.schema import visit_with_partner

    schema, accessor = _projection()
    with AvroFile(_input_file(path, data)) as reader:  # type: ignore[var-annotated]
        reader.reader = visit_with_partner(reader.schema, schema, ReadSchemaResolver(), accessor)  # type: ignore[assignment]
        for record in reader:
            yield record[0], record[1][1]


# --- the metadata JSON (pyiceberg's model) ---------------------------------------------------


def list_metadata_files(storage: Storage) -> list[FileInfo]:
    """The ``metadata/*.metadata.json`` files under the table root (also ``.metadata.json.gz``), by name."""
    folder = storage.join(METADATA_DIR)
    try:
        entries = storage.list_dir(folder)
    except FileNotFoundError:
        return []
    found = [f for f in entries if f.name.endswith((".metadata.json", ".metadata.json.gz"))]
    return sorted(found, key=lambda f: f.name)


def _sequence(name: str) -> int | None:
    match = _CATALOG_NAME.match(name) or _HADOOP_NAME.match(name)
    return int(match.group(1)) if match else None


def _decode(name: str, data: bytes) -> str:
    if data[:2] == b"\x1f\x8b":  # gzip (``.gz.metadata.json``, ``.metadata.json.gz``)
        data = gzip.decompress(data)
    return data.decode("utf-8")


def _parse(name: str, data: bytes) -> Any:
    """pyiceberg's ``TableMetadata`` of one metadata file; IcebergMetadataError names what is wrong."""
    from pyiceberg.table.metadata import TableMetadataUtil

    where = f"{METADATA_DIR}/{name}"
    try:
        text = _decode(name, data)
        doc = json.loads(text)
    except (ValueError, OSError, EOFError) as exc:
        raise IcebergMetadataError(
            f"the Iceberg metadata file {where} is not valid JSON (torn or partly written?): {exc}; vacuum cannot "
            "tell which files Iceberg readers of this table need, so nothing was deleted"
        ) from None
    if not isinstance(doc, dict) or "format-version" not in doc:
        raise IcebergMetadataError(
            f"{where} is not Iceberg table metadata (no format-version); nothing was deleted. Remove or rename it if "
            "it is not the table's Iceberg metadata"
        )
    version = doc["format-version"]
    if version not in SUPPORTED_FORMAT_VERSIONS:
        raise IcebergMetadataError(
            f"{where} is Iceberg format version {version!r}; deltalog reads versions "
            f"{', '.join(map(str, SUPPORTED_FORMAT_VERSIONS))}, so it cannot tell which files its readers need. "
            "Nothing was deleted"
        )
    for snap in doc.get("snapshots") or []:
        if isinstance(snap, dict) and "manifest-list" not in snap:
            raise IcebergMetadataError(
                f"{where}: snapshot {snap.get('snapshot-id')!r} lists its manifests inline (a format version 1 "
                "snapshot without a manifest list), which deltalog does not read; nothing was deleted"
            )
    try:
        return TableMetadataUtil.parse_raw(text)
    except Exception as exc:  # noqa: BLE001 - pydantic/pyiceberg validation errors
        first = str(exc).strip().splitlines()
        raise IcebergMetadataError(
            f"{where} is not valid Iceberg table metadata ({first[0] if first else type(exc).__name__}); "
            "nothing was deleted"
        ) from None


def _version_hint(storage: Storage) -> int | None:
    try:
        text = storage.read_bytes(storage.join(METADATA_DIR, VERSION_HINT)).decode("utf-8", "replace").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning(
            "cannot read %s/%s (%s); the newest metadata file is found by name and time",
            METADATA_DIR,
            VERSION_HINT,
            exc,
        )
        return None
    return int(text) if text.isdigit() else None


def _read_all(storage: Storage, files: list[FileInfo]) -> Iterator[tuple[FileInfo, bytes]]:
    """The metadata files' bytes, a few dozen GETs in flight at a time on object stores."""
    step = 1 if storage.is_local else 32
    for i in range(0, len(files), step):
        part = files[i : i + step]
        try:
            contents = storage.read_many([f.path for f in part])
        except FileNotFoundError as exc:
            # Removed between the listing and the read (an Iceberg writer's metadata cleanup): say so, plan again.
            raise IcebergMetadataError(
                f"the Iceberg metadata file {exc} disappeared while vacuum read the metadata (a concurrent Iceberg "
                "commit?); nothing was deleted, run vacuum again"
            ) from None
        yield from zip(part, contents)


@dataclass
class _Candidate:
    """What one metadata file contributes before the in-use rule is applied."""

    info: MetadataFile
    snapshots: dict[int, tuple[int, str]]  # id -> (timestamp, manifest list)
    refs: list[tuple[str, str, int]]  # (type, name, snapshot id)
    at_cutoff: int | None  # the snapshot current at the cutoff by its snapshot-log
    statistics: list[tuple[int, str]]


def read_iceberg_references(
    storage: Storage, cutoff_ms: int, locate: Locate, *, files: list[FileInfo] | None = None
) -> IcebergReferences | None:
    """The Iceberg metadata beside the table at ``storage``, or None when there is none.

    ``files``: the metadata files, when the caller has listed them (:func:`list_metadata_files`).

    ``locate`` turns an absolute URI into a table-relative path (None outside the root): it decides
    which metadata belongs to this table (a metadata file whose ``location`` it does not place at
    the root is foreign and refused) and where manifest lists and manifests are read.
    """
    if files is None:
        files = list_metadata_files(storage)
    if not files:
        return None
    hint = _version_hint(storage)
    candidates: list[_Candidate] = []
    for info, data in _read_all(storage, files):
        meta = _parse(info.name, data)
        if locate(meta.location.rstrip("/") + "/x") != "x":
            raise ForeignIcebergMetadataError(
                f"the Iceberg metadata file {METADATA_DIR}/{info.name} is for the table at {meta.location}, not this "
                f"one ({storage.uri}): its readers open another location's files, so vacuum cannot tell what they "
                "need here (a copied or moved table?). Nothing was deleted; remove it, or regenerate the Iceberg "
                "metadata for this location"
            )
        candidates.append(_candidate(info, meta, cutoff_ms))
    _mark_newest(candidates, hint)
    snapshots, statistics = _reader_snapshots(candidates, cutoff_ms)
    refs = IcebergReferences(storage, locate, [c.info for c in candidates], snapshots, statistics)
    log.info(
        "Iceberg metadata of %s: %d metadata files (%s newest), %d snapshots readers may still use",
        storage.uri,
        len(candidates),
        ", ".join(c.info.name for c in candidates if c.info.newest),
        len(snapshots),
    )
    return refs


def _candidate(info: FileInfo, meta: Any, cutoff_ms: int) -> _Candidate:
    snapshots = {s.snapshot_id: (int(s.timestamp_ms), str(s.manifest_list)) for s in meta.snapshots}
    current = meta.current_snapshot_id
    where = f"{METADATA_DIR}/{info.name}"
    if current is not None and current not in snapshots:
        raise IcebergMetadataError(
            f"{where} names current snapshot {current}, which it does not list; nothing was deleted"
        )
    refs = []
    for name, ref in sorted(meta.refs.items()):
        if ref.snapshot_id not in snapshots:
            raise IcebergMetadataError(
                f"{where}: ref {name!r} names snapshot {ref.snapshot_id}, which the file does not list; nothing was deleted"
            )
        refs.append((str(getattr(ref.snapshot_ref_type, "value", ref.snapshot_ref_type)), name, ref.snapshot_id))
    at_cutoff = None
    for entry in meta.snapshot_log:
        if entry.timestamp_ms < cutoff_ms and entry.snapshot_id in snapshots:
            at_cutoff = entry.snapshot_id
    stats = [(s.snapshot_id, s.statistics_path) for s in [*meta.statistics, *getattr(meta, "partition_statistics", [])]]
    return _Candidate(
        MetadataFile(
            name=info.name,
            format_version=int(meta.format_version),
            location=meta.location,
            last_updated_ms=int(meta.last_updated_ms),
            current_snapshot_id=current,
            sequence=_sequence(info.name),
        ),
        snapshots,
        refs,
        at_cutoff,
        stats,
    )


def _mark_newest(candidates: list[_Candidate], hint: int | None) -> None:
    """Newest: named by version-hint.text, highest number in the name, latest last-updated-ms (all of them)."""
    newest: set[int] = set()
    if hint is not None:
        newest |= {i for i, c in enumerate(candidates) if _HADOOP_NAME.match(c.info.name) and c.info.sequence == hint}
    numbered = [c.info.sequence for c in candidates if c.info.sequence is not None]
    if numbered:
        top = max(numbered)
        newest |= {i for i, c in enumerate(candidates) if c.info.sequence == top}
    latest = max(c.info.last_updated_ms for c in candidates)
    newest |= {i for i, c in enumerate(candidates) if c.info.last_updated_ms == latest}
    for i, c in enumerate(candidates):
        if i in newest:
            c.info = _replace(c.info, newest=True)


def _replace(info: MetadataFile, **changes: Any) -> MetadataFile:
    import dataclasses

    return dataclasses.replace(info, **changes)


def _reader_snapshots(
    candidates: list[_Candidate], cutoff_ms: int
) -> tuple[list[ReaderSnapshot], list[tuple[int, str]]]:
    """The snapshots readers may still use (module docstring), most important first, each once."""
    before = [c for c in candidates if c.info.last_updated_ms < cutoff_ms]
    at_cutoff_file = max(before, key=lambda c: (c.info.last_updated_ms, c.info.sequence or -1)) if before else None
    for c in candidates:
        if c.info.newest or c.info.last_updated_ms >= cutoff_ms or c is at_cutoff_file:
            c.info = _replace(c.info, in_use=True)
    newest_ids = {sid for c in candidates if c.info.newest for sid in c.snapshots}
    ordered: list[ReaderSnapshot] = []
    seen: dict[tuple[int, str], int] = {}

    def add(c: _Candidate, sid: int, why: str) -> None:
        ts, manifest_list = c.snapshots[sid]
        key = (sid, manifest_list)
        if key not in seen:
            seen[key] = len(ordered)
            ordered.append(ReaderSnapshot(sid, ts, manifest_list, why, sid in newest_ids))

    in_use = sorted(
        (c for c in candidates if c.info.in_use), key=lambda c: (not c.info.newest, -c.info.last_updated_ms)
    )
    for c in in_use:
        where = f"{METADATA_DIR}/{c.info.name}"
        state = "the newest metadata" if c.info.newest else f"written {format_ms(c.info.last_updated_ms)}"
        if c.info.current_snapshot_id is not None:
            add(c, c.info.current_snapshot_id, f"current snapshot of {where}, {state}")
        for kind, name, sid in c.refs:
            add(c, sid, f"{kind} {name!r} of {where}")
    for c in in_use:
        if c.at_cutoff is not None:
            add(
                c,
                c.at_cutoff,
                f"current at the cutoff {format_ms(cutoff_ms)} by the snapshot log of {METADATA_DIR}/{c.info.name}",
            )
    recent = sorted(
        ((ts, sid, c) for c in candidates for sid, (ts, _) in c.snapshots.items() if ts >= cutoff_ms),
        key=lambda t: (-t[0], t[1]),
    )
    for ts, sid, c in recent:
        add(c, sid, f"committed {format_ms(ts)}, inside the retention window")
    statistics = []
    by_id: dict[int, int] = {}
    for i, s in enumerate(ordered):
        by_id.setdefault(s.snapshot_id, i)
    for c in candidates:
        for sid, path in c.statistics:
            if sid in by_id:
                statistics.append((by_id[sid], path))
    return ordered, sorted(set(statistics))
