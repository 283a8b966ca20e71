"""Where a UniForm table's Iceberg metadata lives, how its current version is found and how a new one lands.

The layout is Iceberg's file-system table (``HadoopTableOperations``): under the table
root's ``metadata/`` folder, ``v<N>.metadata.json`` for each version of the Iceberg
table and ``version-hint.text`` holding the newest ``N``, beside the manifests
(``<uuid>-m<k>.avro``) and manifest lists (``snap-<snapshot id>-1-<uuid>.avro``). It is
what Iceberg readers find without a catalog: Spark's Iceberg runtime loads the table by
its path, pyiceberg's ``StaticTable.from_metadata(<table root>)`` reads the hint, and any
catalog registers ``metadata/v<N>.metadata.json`` (Snowflake, BigQuery, a SQL catalog).

A version lands by creating ``v<N>.metadata.json`` with the storage's create-if-absent
(:meth:`Storage.put_if_absent`, the commit primitive of the Delta log too), so of two
writers converting at once exactly one gets each ``N`` and the other starts again from
the winner's; nothing is ever overwritten. The hint is written after it (replaced
atomically) and is only a hint: readers and :func:`read_head` step past it to the
newest ``v<N>`` that exists, so a crash between the two leaves nothing wrong.

Delta's own converter (3.x-4.0, through a Hive metastore) names its files
``<NNNNN>-<uuid>.metadata.json``, the catalog holding the pointer. On a table with such
files and none of ours, the newest of them (by ``NNNNN``) is the base that deltalog's
first version ``v1`` continues.

:class:`StorageFileIO` lets pyiceberg's manifest and manifest-list writers and readers
go through the table's ``Storage`` (same credentials, same clients, local or cloud), for
locations inside the table root only.
"""

from __future__ import annotations

import io
import logging
import posixpath
import re
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlparse

from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile, OutputStream
from pyiceberg.serializers import FromByteStream
from pyiceberg.table.metadata import TableMetadata

from deltalog.errors import OperationRefusedError, StorageError
from deltalog.storage.filesystem import Storage

__all__ = [
    "METADATA_DIR",
    "VERSION_HINT",
    "IcebergHead",
    "StorageFileIO",
    "UniformMetadataError",
    "aliased",
    "metadata_file_name",
    "read_head",
    "table_relative",
    "write_metadata",
]

log = logging.getLogger(__name__)

METADATA_DIR = "metadata"
VERSION_HINT = "version-hint.text"
_OURS = re.compile(r"v([0-9]+)\.metadata\.json")
_DELTAS = re.compile(r"([0-9]+)-[0-9a-fA-F-]+\.metadata\.json")
#: How many versions past the hint are probed one by one before the folder is listed instead.
_PROBES = 8
_S3 = ("s3", "s3a", "s3n")


class UniformMetadataError(OperationRefusedError):
    """The Iceberg metadata beside the table cannot be read or continued (the reason says why)."""


def aliased(fields: dict[str, Any]) -> Any:
    """Keyword arguments for a pyiceberg model named by its aliases (the Iceberg spec's field names, as in the
    JSON), which its typed constructor does not declare."""
    return fields


def metadata_file_name(version: int) -> str:
    return f"v{version}.metadata.json"


def table_relative(storage: Storage, location: str) -> str | None:
    """``location`` relative to the table root, or None when it is not inside it (any spelling of the root:
    ``file:/t``, ``file:///t``, ``/t``; ``s3://`` and ``s3a://``)."""
    parsed = urlparse(location)
    if storage.is_local:
        if parsed.scheme not in ("", "file"):
            return None
        path = parsed.path if parsed.scheme else location
        root = storage.root.rstrip("/") + "/"
    else:
        same = parsed.scheme == storage.protocol or (parsed.scheme in _S3 and storage.protocol in _S3)
        if not same:
            return None
        mine = urlparse(storage.uri)
        if parsed.netloc != mine.netloc:
            return None
        path, root = parsed.path, mine.path.rstrip("/") + "/"
    path = posixpath.normpath(path)
    if not path.startswith(root):
        return None
    rel = path[len(root) :]
    return None if rel in ("", ".") or rel.startswith("../") else rel


class _Written(io.BytesIO):
    """What pyiceberg writes to an output file, uploaded on close."""

    def __init__(self, target: _StorageOutputFile, overwrite: bool) -> None:
        super().__init__()
        self.target = target
        self.overwrite = overwrite

    def close(self) -> None:
        if not self.closed:
            data = self.getvalue()
            self.target.put(data, self.overwrite)
        super().close()

    def __enter__(self) -> _Written:
        return self

    def __exit__(
        self, exctype: type[BaseException] | None, excinst: BaseException | None, exctb: TracebackType | None
    ) -> None:
        if exctype is None:
            self.close()
        else:
            super().close()  # a failed write uploads nothing


class _StorageInputFile(InputFile):
    def __init__(self, storage: Storage, location: str, path: str) -> None:
        super().__init__(location)
        self.storage = storage
        self.path = path
        self._data: bytes | None = None

    def _bytes(self) -> bytes:
        if self._data is None:
            self._data = self.storage.read_bytes(self.path)
        return self._data

    def __len__(self) -> int:
        return len(self._bytes())

    def exists(self) -> bool:
        return self.storage.exists(self.path)

    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self._bytes())


class _StorageOutputFile(OutputFile):
    def __init__(self, storage: Storage, location: str, path: str, written: list[str]) -> None:
        super().__init__(location)
        self.storage = storage
        self.path = path
        self.size = 0
        self.written = written

    def __len__(self) -> int:
        return self.size

    def exists(self) -> bool:
        return self.storage.exists(self.path)

    def to_input_file(self) -> InputFile:
        return _StorageInputFile(self.storage, self.location, self.path)

    def create(self, overwrite: bool = False) -> OutputStream:
        return _Written(self, overwrite)

    def put(self, data: bytes, overwrite: bool) -> None:
        if overwrite:
            self.storage.write_atomic(self.path, data)
        else:
            self.storage.put_if_absent(self.path, data)  # a unique name: never replaces another writer's file
        self.size = len(data)
        self.written.append(self.location)


class StorageFileIO(FileIO):
    """pyiceberg's file access through the table's ``Storage``, confined to the table root."""

    def __init__(self, storage: Storage) -> None:
        super().__init__({})
        self.storage = storage
        #: Locations this IO wrote (so a conversion that loses its race removes what it left).
        self.written: list[str] = []

    def _path(self, location: str) -> str:
        rel = table_relative(self.storage, location)
        if rel is None:
            raise UniformMetadataError(
                f"Iceberg metadata names {location!r}, which is outside the table {self.storage.uri}; deltalog reads "
                "and writes a UniForm table's Iceberg metadata only inside its root"
            )
        return self.storage.join(rel)

    def new_input(self, location: str) -> InputFile:
        return _StorageInputFile(self.storage, location, self._path(location))

    def new_output(self, location: str) -> OutputFile:
        return _StorageOutputFile(self.storage, location, self._path(location), self.written)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        where = location if isinstance(location, str) else location.location
        self.storage.delete(self._path(where))


@dataclass(frozen=True)
class IcebergHead:
    """The newest version of the Iceberg table beside a Delta table."""

    #: ``N`` of ``v<N>.metadata.json`` (0 for a base written by Delta's converter: deltalog's chain starts at v1).
    version: int
    #: The metadata file's location (a URI inside the table root).
    location: str
    metadata: TableMetadata
    #: Written by Delta's converter (``<NNNNN>-<uuid>.metadata.json``), not in deltalog's chain yet.
    foreign: bool = False
    #: The hint named an older version (a crash between the metadata file and the hint): rewrite it.
    stale_hint: bool = False


def _read_metadata(storage: Storage, rel: str) -> TableMetadata:
    data = storage.read_bytes(storage.join(rel))
    try:
        return FromByteStream.table_metadata(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - any parse or validation failure of the JSON
        raise UniformMetadataError(f"cannot read Iceberg metadata {rel}: {exc}".splitlines()[0]) from None


def _listed_versions(storage: Storage) -> tuple[list[int], list[tuple[int, str]]]:
    """Our versions and Delta's converter's ``(NNNNN, name)`` in ``metadata/``."""
    try:
        entries = storage.list_dir(storage.join(METADATA_DIR))
    except FileNotFoundError:
        return [], []
    ours, deltas = [], []
    for entry in entries:
        name = entry.name
        m = _OURS.fullmatch(name)
        if m:
            ours.append(int(m.group(1)))
            continue
        m = _DELTAS.fullmatch(name)
        if m:
            deltas.append((int(m.group(1)), name))
    return sorted(ours), sorted(deltas)


def _hinted(storage: Storage) -> int | None:
    try:
        text = storage.read_bytes(storage.join(METADATA_DIR, VERSION_HINT)).decode("utf-8").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    except StorageError:
        return None
    return int(text) if text.isdigit() else None


def read_head(storage: Storage) -> IcebergHead | None:
    """The newest Iceberg version beside the table (None when there is no Iceberg metadata at all)."""
    hint = _hinted(storage)
    version: int | None = None
    if hint is not None and storage.exists(storage.join(METADATA_DIR, metadata_file_name(hint))):
        version = hint
        for _ in range(_PROBES):
            if not storage.exists(storage.join(METADATA_DIR, metadata_file_name(version + 1))):
                break
            version += 1
        else:
            version = None  # far behind: list instead
    foreign: list[tuple[int, str]] = []
    if version is None:
        ours, foreign = _listed_versions(storage)
        version = ours[-1] if ours else None
    if version is not None:
        rel = posixpath.join(METADATA_DIR, metadata_file_name(version))
        return IcebergHead(version, storage.full_uri(rel), _read_metadata(storage, rel), stale_hint=hint != version)
    if foreign:
        rel = posixpath.join(METADATA_DIR, foreign[-1][1])
        return IcebergHead(0, storage.full_uri(rel), _read_metadata(storage, rel), foreign=True)
    return None


def write_metadata(storage: Storage, version: int, metadata: TableMetadata) -> str:
    """Create ``metadata/v<version>.metadata.json`` (FileExistsError: another writer has that version) and
    point the hint at it; returns its location."""
    rel = posixpath.join(METADATA_DIR, metadata_file_name(version))
    storage.makedirs(storage.join(METADATA_DIR))
    storage.put_if_absent(storage.join(rel), metadata.model_dump_json().encode("utf-8"))
    write_hint(storage, version)
    return storage.full_uri(rel)


def write_hint(storage: Storage, version: int) -> bool:
    """Point ``version-hint.text`` at ``version``; a failure is logged (readers step past a stale hint)."""
    try:
        storage.write_atomic(storage.join(METADATA_DIR, VERSION_HINT), str(version).encode("ascii"))
    except (OSError, StorageError) as exc:
        log.warning(
            "Iceberg metadata v%d of %s landed but its version hint was not updated: %s", version, storage.uri, exc
        )
        return False
    return True
