"""Where a table lives: one fsspec filesystem plus the table root inside it.

The local filesystem gets direct ``os`` calls on the hot paths (listing the log,
reading commits, the put-if-absent commit primitive) because fsspec's generic
local implementation is slower and its ``mode="create"`` is check-then-write,
which is racy. Every other protocol goes through fsspec with the caller's
storage options.
"""

from __future__ import annotations

import datetime as _dt
import os
import posixpath
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import fsspec

from deltalog.errors import CommitFailedError, InvalidArgumentError, StorageError, TableNotFoundError

LOG_DIR = "_delta_log"


@dataclass(frozen=True)
class FileInfo:
    """One listed object: its path inside the filesystem, size and modification time (ms)."""

    path: str
    size: int
    modification_time: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def _mtime_ms(info: dict[str, Any]) -> int:
    """fsspec implementations report modification times under different keys and types."""
    for key in ("mtime", "LastModified", "last_modified", "created", "modified", "updated"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, _dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=_dt.timezone.utc)
            return int(value.timestamp() * 1000)
        if isinstance(value, int | float):
            return int(value * 1000) if value < 1e11 else int(value)
        if isinstance(value, str):
            try:
                return int(_dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
            except ValueError:
                continue
    return 0


class Storage:
    """A table location: ``uri`` as given, ``fs`` and ``root`` (path inside ``fs``)."""

    def __init__(self, uri: str, storage_options: dict[str, Any] | None = None) -> None:
        if not isinstance(uri, str) or not uri.strip():
            raise InvalidArgumentError("table location must be a non-empty path or URI")
        self.storage_options = dict(storage_options or {})
        parsed = urlparse(uri)
        scheme = parsed.scheme if len(parsed.scheme) > 1 else ""  # "C:" is a drive, not a scheme
        if scheme in ("", "file", "local"):
            path = parsed.path if scheme else uri
            self.is_local = True
            self.protocol = "file"
            self.fs = fsspec.filesystem("file")
            self.root = os.path.abspath(os.path.expanduser(path)).rstrip("/") or "/"
            self.uri = "file://" + self.root
        else:
            self.is_local = False
            try:
                self.fs, root = fsspec.core.url_to_fs(uri, **self.storage_options)
            except (ImportError, ValueError) as exc:
                raise InvalidArgumentError(f"cannot open {uri!r}: {exc}") from None
            self.protocol = scheme
            self.root = root.rstrip("/")
            self.uri = uri.rstrip("/")

    # --- paths ------------------------------------------------------------------

    @property
    def log_dir(self) -> str:
        return self.join(LOG_DIR)

    def join(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts) if not self.is_local else os.path.join(self.root, *parts)

    def relative(self, path: str) -> str:
        """Path of ``path`` relative to the table root (``path`` as the filesystem names it)."""
        root = self.root.rstrip("/") + "/"
        path = self.fs._strip_protocol(path) if not self.is_local else path
        if path.startswith(root):
            return path[len(root) :]
        return path

    def full_uri(self, relative_path: str) -> str:
        """An absolute URI for a table-relative path (used in manifests and errors)."""
        return self.uri.rstrip("/") + "/" + relative_path

    # --- reads --------------------------------------------------------------------

    def root_exists(self) -> bool:
        try:
            return self.fs.exists(self.root) if not self.is_local else os.path.isdir(self.root)
        except OSError as exc:
            raise StorageError(f"cannot reach {self.uri}: {exc}") from None

    def list_dir(self, path: str) -> list[FileInfo]:
        """Files (not directories) directly inside ``path``; an empty list when it does not exist."""
        if self.is_local:
            try:
                with os.scandir(path) as it:
                    out = []
                    for entry in it:
                        if entry.is_file():
                            st = entry.stat()
                            out.append(FileInfo(entry.path, st.st_size, int(st.st_mtime * 1000)))
                    return out
            except FileNotFoundError:
                return []
            except NotADirectoryError:
                return []
            except OSError as exc:
                raise StorageError(f"cannot list {path}: {exc}") from None
        try:
            entries = self.fs.ls(path, detail=True, refresh=True)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {path}: {exc}") from None
        return [
            FileInfo(self.fs._strip_protocol(e["name"]), int(e.get("size") or 0), _mtime_ms(e))
            for e in entries
            if e.get("type") != "directory"
        ]

    def list_log(self) -> list[FileInfo]:
        return self.list_dir(self.log_dir)

    def walk_files(self, path: str | None = None) -> Iterable[FileInfo]:
        """Every file below ``path`` (default: the table root), recursively."""
        top = path or self.root
        if self.is_local:
            for dirpath, _dirs, files in os.walk(top):
                for name in files:
                    full = os.path.join(dirpath, name)
                    try:
                        st = os.stat(full)
                    except FileNotFoundError:
                        continue
                    yield FileInfo(full, st.st_size, int(st.st_mtime * 1000))
            return
        for name, info in self.fs.find(top, detail=True, withdirs=False).items():
            yield FileInfo(self.fs._strip_protocol(name), int(info.get("size") or 0), _mtime_ms(info))

    def read_bytes(self, path: str) -> bytes:
        if self.is_local:
            with open(path, "rb") as fh:
                return fh.read()
        try:
            return self.fs.cat_file(path)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from None

    def exists(self, path: str) -> bool:
        return os.path.exists(path) if self.is_local else self.fs.exists(path)

    def info(self, path: str) -> FileInfo:
        if self.is_local:
            st = os.stat(path)
            return FileInfo(path, st.st_size, int(st.st_mtime * 1000))
        info = self.fs.info(path)
        return FileInfo(path, int(info.get("size") or 0), _mtime_ms(info))

    def open_input(self, path: str):
        """A seekable binary file object (for pyarrow.parquet)."""
        return open(path, "rb") if self.is_local else self.fs.open(path, "rb")

    # --- writes -------------------------------------------------------------------

    @property
    def supports_atomic_create(self) -> bool:
        """Whether :meth:`put_if_absent` is atomic on this filesystem."""
        return self.is_local or self.protocol in ("s3", "s3a", "memory")

    def put_if_absent(self, path: str, data: bytes, *, single_writer: bool = False) -> None:
        """Create ``path`` with ``data`` only if it does not exist: the commit primitive.

        Raises FileExistsError when another writer created it first. Local: write a
        temp file and hard-link it into place (``link`` fails if the target exists and
        never exposes a partial file). S3: a conditional PUT (``If-None-Match: *``).
        """
        if self.is_local:
            self.makedirs(os.path.dirname(path))
            tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)
            finally:
                os.unlink(tmp)
            return
        if self.protocol in ("s3", "s3a"):
            self.fs.pipe_file(path, data, mode="create")
            return
        if self.protocol == "memory":
            # The in-memory filesystem lives in this process; the check and the write run
            # under the GIL with no I/O between them, so they cannot interleave with another thread's.
            if self.fs.exists(path):
                raise FileExistsError(path)
            self.fs.pipe_file(path, data)
            return
        if not single_writer:
            raise CommitFailedError(
                f"the {self.protocol!r} filesystem has no atomic put-if-absent, so concurrent commits could "
                "overwrite each other; pass single_writer=True (CLI: --single-writer) if only one writer "
                "ever commits to this table"
            )
        if self.fs.exists(path):
            raise FileExistsError(path)
        self.fs.pipe_file(path, data)

    def write_atomic(self, path: str, data: bytes) -> None:
        """Write or replace ``path`` so that readers see either the old or the new content."""
        if self.is_local:
            self.makedirs(os.path.dirname(path))
            tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            return
        self.fs.pipe_file(path, data)  # object-store PUTs are atomic

    def makedirs(self, path: str) -> None:
        if self.is_local:
            os.makedirs(path, exist_ok=True)
        else:
            self.fs.makedirs(path, exist_ok=True)

    def delete(self, path: str) -> bool:
        """Delete one file; False when it was already gone."""
        try:
            if self.is_local:
                os.unlink(path)
            else:
                self.fs.rm_file(path)
            return True
        except FileNotFoundError:
            return False

    def remove_empty_dir(self, path: str) -> bool:
        if self.is_local:
            try:
                os.rmdir(path)
                return True
            except OSError:
                return False
        return False  # object stores have no directories to leave behind


def ensure_table_root(storage: Storage) -> None:
    if not storage.root_exists():
        raise TableNotFoundError(f"no table at {storage.uri}: the location does not exist")
