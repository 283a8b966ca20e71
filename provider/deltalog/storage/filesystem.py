"""Where a table lives: one fsspec filesystem plus the table root inside it.

The local filesystem gets direct ``os`` calls on the hot paths (listing the log,
reading commits, the put-if-absent commit primitive) because fsspec's generic
local implementation is slower and its ``mode="create"`` is check-then-write,
which is racy. Every other protocol goes through fsspec with the caller's
storage options.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import functools
import os
import posixpath
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import fsspec

from deltalog.errors import (
    InvalidArgumentError,
    NonAtomicStorageError,
    StorageError,
    TableNotFoundError,
    UnsupportedFileNameError,
)
from deltalog.storage import azure_gcs, azure_gcs_reads, dynamodb_commits, s3_reads
from deltalog.storage.hadoop_checksums import refresh_sidecar

__all__ = [
    "FileInfo",
    "LOG_DIR",
    "Storage",
    "canonical_uri",
    "check_utf8_names",
    "ensure_table_root",
    "is_remote",
    "is_remote_error",
    "mtime_ms",
]

LOG_DIR = "_delta_log"

#: errno values meaning "this filesystem does not do hard links".
_NO_LINK_ERRNOS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV, errno.EMLINK}

#: How often a conditional PUT is re-sent after S3's 409 ConditionalRequestConflict.
_S3_CONFLICT_RETRIES = 5


def _is_conditional_conflict(exc: OSError) -> bool:
    text = str(exc)
    return exc.errno == errno.EBUSY or "ConditionalRequestConflict" in text or "409" in text


def _fsync_dir(path: str) -> None:
    """Persist a directory entry (a new link or a rename) across a power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class FileInfo:
    """One listed object: its path inside the filesystem, size and modification time (ms)."""

    path: str
    size: int
    modification_time: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def check_utf8_names(names: Iterable[str], where: str) -> None:
    """UnsupportedFileNameError naming the first name that is not valid UTF-8 (local listings decode such
    bytes to lone surrogates, which no Delta log path, Arrow string or JSON document can hold)."""
    for name in names:
        if name.isascii():
            continue
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raw = os.fsencode(name)
            raise UnsupportedFileNameError(
                f"{where} holds a file or folder whose name is not valid UTF-8: {raw!r}; no Delta log can "
                "reference it and deltalog will not guess what it is: rename or move it, then run again"
            ) from None


def mtime_ms(info: dict[str, Any]) -> int:
    """fsspec implementations report modification times under different keys and types."""
    for key in ("mtime", "LastModified", "last_modified", "created", "modified", "updated"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, _dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=_dt.UTC)
            return int(value.timestamp() * 1000)
        if isinstance(value, int | float):
            return int(value * 1000) if value < 1e11 else int(value)
        if isinstance(value, str):
            try:
                return int(_dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
            except ValueError:
                continue
    return 0


#: Storage options deltalog itself interprets; they are not passed to fsspec.
_DELTALOG_OPTIONS = frozenset({"fsync", s3_reads.OPTION}) | dynamodb_commits.OPTIONS | azure_gcs.OPTIONS
#: The spellings of the ``fsync`` storage option (a string from ``--storage-option``); anything else is a typo.
_FSYNC_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


#: botocore settings for S3 unless the caller gives ``config_kwargs``: an unreachable endpoint
#: fails in about 1.5 s instead of 7 s (s3fs retries each call 5 times on top of botocore's own
#: attempts), while throttling (SlowDown) is still retried by s3fs.
S3_CONFIG_KWARGS = {"connect_timeout": 5, "retries": {"max_attempts": 2, "mode": "standard"}}
#: Top-level packages whose exceptions are storage failures though not OSError (botocore's
#: EndpointConnectionError, NoCredentialsError, aiohttp's client errors).
_REMOTE_ERROR_PACKAGES = frozenset(
    {"botocore", "aiobotocore", "aiohttp", "s3fs", "azure", "adlfs", "gcsfs", "google", "obstore"}
)


def is_remote_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an object-store client failure that is not an OSError (network, credentials)."""
    return type(exc).__module__.split(".", 1)[0] in _REMOTE_ERROR_PACKAGES


@functools.cache
def _s3fs_option_names() -> frozenset[str]:
    """Every keyword s3fs's filesystem, its fsspec bases and the aiobotocore session it makes accept.

    s3fs hands any keyword it does not know to that session, which fails with a
    TypeError at the first request: a typo or a table property given as a storage
    option must be refused up front, naming it, instead.
    """
    import inspect

    import aiobotocore.session
    import fsspec.asyn
    import fsspec.dircache
    import s3fs

    takers = (
        s3fs.S3FileSystem.__init__,
        fsspec.asyn.AsyncFileSystem.__init__,
        fsspec.dircache.DirCache.__init__,
        aiobotocore.session.AioSession.__init__,
    )
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = {p.name for f in takers for p in inspect.signature(f).parameters.values() if p.kind in named}
    return frozenset(names - {"self"}) | {"skip_instance_cache"}


def check_s3_options(options: dict[str, Any]) -> None:
    """Refuse storage options neither deltalog nor s3fs understands (InvalidArgumentError naming them)."""
    unknown = sorted(k for k in options if k not in _DELTALOG_OPTIONS and k not in _s3fs_option_names())
    if unknown:
        raise InvalidArgumentError(
            f"unknown S3 storage option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: "
            "S3 takes s3fs's options (key, secret, token, endpoint_url, client_kwargs, config_kwargs, ...) "
            "and deltalog's own (fsync, " + ", ".join(sorted(_DELTALOG_OPTIONS - {"fsync"})) + ")"
        )


def _fsspec_options(options: dict[str, Any], scheme: str = "") -> dict[str, Any]:
    """Options for fsspec, with its directory-listing cache off unless asked for.

    The log is re-listed to find new commits; fsspec's cached listings (s3fs keeps
    them per instance, and instances are shared) would answer "not found" for a
    commit another process wrote after the first listing.
    """
    out = {k: v for k, v in options.items() if k not in _DELTALOG_OPTIONS}
    out.setdefault("use_listings_cache", False)
    if scheme in ("s3", "s3a"):
        out.setdefault("config_kwargs", S3_CONFIG_KWARGS)
    return out


@contextlib.contextmanager
def _remote_errors(action: str, path: str) -> Iterator[None]:
    """Turn an object store's OSError into StorageError (retryable), naming the action and path.

    FileNotFoundError and FileExistsError pass through: callers give them meaning
    (already deleted, version taken).
    """
    try:
        yield
    except (FileNotFoundError, FileExistsError):
        raise
    except OSError as exc:
        raise StorageError(f"cannot {action} {path}: {exc}") from None
    except Exception as exc:
        if is_remote_error(exc):
            raise StorageError(f"cannot {action} {path}: {exc}") from None
        raise


def _scheme(location: str) -> str:
    """The URI scheme of ``location`` ("" for a plain path; ``C:`` is a drive, not a scheme)."""
    scheme = urlparse(location).scheme
    return scheme if len(scheme) > 1 else ""


def is_remote(location: str) -> bool:
    """Whether ``location`` is on a remote filesystem (a URI whose scheme is not file/local).

    The one rule for "does this location need the connection's storage options?", the
    same one ``Storage`` uses to choose between the local filesystem and fsspec.
    """
    return _scheme(location) not in ("", "file", "local")


def canonical_uri(location: str) -> str:
    """``location`` as ``Storage(location).uri`` spells it (a local path as an absolute ``file://`` URI, no
    trailing slash), without opening anything: how the maintenance history and settings files compare tables."""
    if is_remote(location):
        return location.rstrip("/")
    path = urlparse(location).path if _scheme(location) else location
    return "file://" + (os.path.abspath(os.path.expanduser(path)).rstrip("/") or "/")


class Storage:
    """A table location: ``uri`` as given, ``fs`` and ``root`` (path inside ``fs``)."""

    def __init__(self, uri: str, storage_options: dict[str, Any] | None = None) -> None:
        if not isinstance(uri, str) or not uri.strip():
            raise InvalidArgumentError("table location must be a non-empty path or URI")
        self.storage_options = dict(storage_options or {})
        fsync = self.storage_options.get("fsync", False)
        if not isinstance(fsync, bool) and str(fsync).strip().lower() not in _FSYNC_WORDS:
            raise InvalidArgumentError(f"storage option fsync must be true or false, got {fsync!r}")
        reads = self.storage_options.get(s3_reads.OPTION, "obstore")
        if str(reads).strip().lower() not in s3_reads.CHOICES:
            raise InvalidArgumentError(
                f"storage option {s3_reads.OPTION} must be one of {', '.join(s3_reads.CHOICES)}, got {reads!r}"
            )
        scheme = _scheme(uri)
        if not is_remote(uri):
            path = urlparse(uri).path if scheme else uri
            self.is_local = True
            self.protocol = "file"
            self.fs = fsspec.filesystem("file")
            self.root = os.path.abspath(os.path.expanduser(path)).rstrip("/") or "/"
            self.uri = "file://" + self.root
        else:
            self.is_local = False
            if scheme in ("s3", "s3a"):
                check_s3_options(self.storage_options)
            azure_gcs.check_options(scheme, self.storage_options)
            try:
                if azure_gcs.kind(scheme) is not None:
                    self.fs, root = azure_gcs.open_filesystem(uri, scheme, _fsspec_options(self.storage_options))
                else:
                    self.fs, root = fsspec.core.url_to_fs(uri, **_fsspec_options(self.storage_options, scheme))
            except (ImportError, ValueError) as exc:
                raise InvalidArgumentError(f"cannot open {uri!r}: {exc}") from None
            self.protocol = scheme
            self.root = root.rstrip("/")
            self.uri = uri.rstrip("/")
        #: Commits coordinated through DynamoDB (storage option AWS_S3_LOCKING_PROVIDER=dynamodb), else None.
        self.dynamodb: dynamodb_commits.DynamoDBCommits | None = None
        if dynamodb_commits.wanted(self.storage_options):
            self.dynamodb = dynamodb_commits.DynamoDBCommits(self.uri, self.storage_options)

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

    @functools.cached_property
    def real_root(self) -> str:
        """The root with every symbolic link in it resolved (local); object stores have no links.

        One location has many spellings (a symlinked parent, ``..``); comparing
        real paths is the only way to tell whether two of them are the same place.
        """
        return os.path.realpath(self.root) if self.is_local else self.root

    def real_relative(self, relative_path: str) -> str | None:
        """Where ``relative_path`` really is, relative to :attr:`real_root`, or None when that is outside the root.

        Local storage resolves every symbolic link on the way (the file itself
        included), so a path that leaves the table through a link is caught;
        object stores have no links, so the path is only normalised.
        """
        if not self.is_local:
            rel = posixpath.normpath(relative_path)
            return None if rel in (".", "..") or rel.startswith(("../", "/")) else rel
        real = os.path.realpath(os.path.join(self.real_root, relative_path))
        prefix = self.real_root.rstrip("/") + "/"
        return real[len(prefix) :] if real.startswith(prefix) else None

    def full_uri(self, relative_path: str) -> str:
        """An absolute URI for a table-relative path (used in manifests and errors)."""
        return self.uri.rstrip("/") + "/" + relative_path

    # --- reads --------------------------------------------------------------------

    @functools.cached_property
    def _fast_reads(self) -> s3_reads.S3Reads | None:
        """obstore for GETs and listings on S3, Azure and GCS when the options allow it (deltalog.storage.s3_reads,
        deltalog.storage.azure_gcs_reads)."""
        store = azure_gcs.kind(self.protocol) if not self.is_local else None
        if store is not None:
            return azure_gcs_reads.reads_for(store, self.fs, self.root.split("/", 1)[0], self.storage_options)
        if self.is_local or self.protocol not in ("s3", "s3a"):
            return None
        options = {k: v for k, v in self.storage_options.items() if k not in dynamodb_commits.OPTIONS}
        return s3_reads.s3_reads_for(self.root.split("/", 1)[0], options)

    def _reads(self) -> s3_reads.S3Reads | None:
        reads = self._fast_reads
        return reads if reads is not None and reads.usable() else None

    def root_exists(self) -> bool:
        try:
            return self.fs.exists(self.root) if not self.is_local else os.path.isdir(self.root)
        except OSError as exc:
            raise StorageError(f"cannot reach {self.uri}: {exc}") from None
        except Exception as exc:
            if is_remote_error(exc):  # e.g. botocore's EndpointConnectionError: not an OSError
                raise StorageError(f"cannot reach {self.uri}: {exc}") from None
            raise

    def list_dir(self, path: str) -> list[FileInfo]:
        """Files (not directories) directly inside ``path``; an empty list when it does not exist."""
        if self.is_local:
            try:
                with os.scandir(path) as it:
                    out = []
                    for entry in it:
                        try:
                            if entry.is_file():
                                st = entry.stat()
                                out.append(FileInfo(entry.path, st.st_size, int(st.st_mtime * 1000)))
                        except FileNotFoundError:
                            continue  # removed while listing (a committer's temp file, log cleanup)
                    return out
            except FileNotFoundError:
                return []
            except NotADirectoryError:
                return []
            except OSError as exc:
                raise StorageError(f"cannot list {path}: {exc}") from None
        return self.list_entries(path)[0]

    def list_entries(self, path: str) -> tuple[list[FileInfo], list[str]]:
        """(files directly inside ``path``, its sub-folders) on a remote store, from one listing.

        Both empty when ``path`` does not exist.
        """
        reads = self._reads()
        if reads is not None:
            try:
                objects, dirs = reads.list(path)
                return [FileInfo(o.path, o.size, o.modification_time) for o in objects], dirs
            except s3_reads.ReadFailed as exc:  # s3fs answers instead, with its own error if it fails too
                s3_reads.log.debug("obstore LIST of %s failed (%s); listing through s3fs", path, exc)
        try:
            entries = self.fs.ls(path, detail=True, refresh=True)
        except FileNotFoundError:
            return [], []
        except Exception as exc:
            if not isinstance(exc, OSError) and not is_remote_error(exc):
                raise
            raise StorageError(f"cannot list {path}: {exc}") from None
        files = [
            FileInfo(self.fs._strip_protocol(e["name"]), int(e.get("size") or 0), mtime_ms(e))
            for e in entries
            if e.get("type") != "directory"
        ]
        dirs = [self.fs._strip_protocol(e["name"]).rstrip("/") for e in entries if e.get("type") == "directory"]
        return files, dirs

    def list_log(self) -> list[FileInfo]:
        """The files in ``_delta_log``; with DynamoDB coordination, after finishing a commit its writer left
        incomplete (as Delta Spark's S3DynamoDBLogStore does before every listing), so no reader sees a hole."""
        if self.dynamodb is not None:
            self.dynamodb.recover(self)
        return self.list_dir(self.log_dir)

    def list_log_after(self, name: str) -> list[FileInfo]:
        """The files in ``_delta_log`` whose names sort after ``name`` (a file name there), sorted by name.

        On S3 (and GCS) through obstore: one LIST that starts after ``name``, however long the log
        is; elsewhere the log's listing, filtered. It reads only: unlike :meth:`list_log` it never
        finishes a DynamoDB-coordinated commit, since a watcher must not write to the table.
        """
        reads = self._reads() if not self.is_local else None
        if reads is not None:
            try:
                found = reads.list_after(self.log_dir, name)
                return sorted((FileInfo(o.path, o.size, o.modification_time) for o in found), key=lambda f: f.name)
            except s3_reads.ReadFailed as exc:  # the whole listing through s3fs, with its own error if it fails too
                s3_reads.log.debug("obstore LIST of %s after %s failed (%s); listing it all", self.log_dir, name, exc)
        return sorted((f for f in self.list_dir(self.log_dir) if f.name > name), key=lambda f: f.name)

    def walk_files(self, path: str | None = None) -> Iterable[FileInfo]:
        """Every file below ``path`` (default: the table root), recursively."""
        top = path or self.root
        if self.is_local:
            for dirpath, _dirs, files in os.walk(top):
                for name in files:
                    full = os.path.join(dirpath, name)
                    check_utf8_names([os.path.relpath(full, top)], self.uri)
                    try:
                        st = os.stat(full)
                    except FileNotFoundError:
                        continue
                    yield FileInfo(full, st.st_size, int(st.st_mtime * 1000))
            return
        for name, info in self.fs.find(top, detail=True, withdirs=False).items():
            yield FileInfo(self.fs._strip_protocol(name), int(info.get("size") or 0), mtime_ms(info))

    def read_bytes(self, path: str) -> bytes:
        if self.is_local:
            with open(path, "rb") as fh:
                return fh.read()
        reads = self._reads()
        if reads is not None and reads.key(path) is not None:
            try:
                return reads.get(path)
            except s3_reads.ReadFailed as exc:  # s3fs answers instead, with its own error if it fails too
                s3_reads.log.debug("obstore GET of %s failed (%s); reading through s3fs", path, exc)
        return self._read_fsspec(path)

    def _read_fsspec(self, path: str) -> bytes:
        try:
            if self.protocol in ("s3", "s3a"):
                # s3fs asks for the size first (a HEAD) to split large reads into parallel
                # ranges; a commit file is small, so one GET does it (half the requests).
                return self.fs.cat_file(path, max_concurrency=1)
            return self.fs.cat_file(path)
        except FileNotFoundError:
            raise
        except Exception as exc:
            if not isinstance(exc, OSError) and not is_remote_error(exc):
                raise
            raise StorageError(f"cannot read {path}: {exc}") from None

    def read_many(self, paths: list[str]) -> list[bytes]:
        """Several small files, in order: one GET each, all in flight together.

        On S3 through obstore (deltalog.storage.s3_reads) when it may be used, else s3fs's batch
        ``cat``, which runs the GETs on its own event loop; missing files raise
        FileNotFoundError as ``read_bytes`` does.
        """
        if self.is_local or self.protocol not in ("s3", "s3a", *azure_gcs.SCHEMES):
            return [self.read_bytes(p) for p in paths]
        reads = self._reads()
        if reads is not None and all(reads.key(p) is not None for p in paths):
            return reads.get_many(paths, self._read_fsspec)
        try:
            found = self.fs.cat(paths, on_error="return", max_concurrency=1)
        except Exception as exc:
            if not isinstance(exc, OSError) and not is_remote_error(exc):
                raise
            raise StorageError(f"cannot read {len(paths)} files under {self.root}: {exc}") from None
        out = []
        for p in paths:
            data = found.get(p)
            if data is None:
                data = found.get(self.fs._strip_protocol(p))
            if isinstance(data, FileNotFoundError) or data is None:
                raise FileNotFoundError(p)
            if isinstance(data, BaseException):
                raise StorageError(f"cannot read {p}: {data}")
            out.append(data)
        return out

    def exists(self, path: str) -> bool:
        if self.is_local:
            return os.path.exists(path)
        with _remote_errors("check", path):
            return self.fs.exists(path)

    def info(self, path: str) -> FileInfo:
        if self.is_local:
            st = os.stat(path)
            return FileInfo(path, st.st_size, int(st.st_mtime * 1000))
        with _remote_errors("stat", path):
            info = self.fs.info(path)
        return FileInfo(path, int(info.get("size") or 0), mtime_ms(info))

    def open_input(self, path: str):
        """A seekable binary file object (for pyarrow.parquet)."""
        return open(path, "rb") if self.is_local else self.fs.open(path, "rb")

    # --- writes -------------------------------------------------------------------

    @property
    def supports_atomic_create(self) -> bool:
        """Whether :meth:`put_if_absent` is atomic on this filesystem."""
        return (
            self.is_local
            or self.protocol in ("s3", "s3a", "memory", *azure_gcs.SCHEMES)
            or bool(getattr(self.fs, "deltalog_atomic_create", False))
        )

    @property
    def fsync(self) -> bool:
        """Whether local writes are flushed to the disk before they become visible.

        Off by default, like Delta Spark's and delta-rs's local log stores: the
        temp-file-then-link scheme already guarantees that a killed process leaves
        either no version file or a complete one; ``fsync`` adds durability across a
        power loss at about 4 ms per commit. Turn it on with the storage option
        ``{"fsync": "true"}`` (local tables only).
        """
        value = self.storage_options.get("fsync", False)
        return value if isinstance(value, bool) else _FSYNC_WORDS[str(value).strip().lower()]

    def _write_temp(self, path: str, data: bytes) -> str:
        """Write ``data`` to a hidden temp file next to ``path`` and return its name."""
        directory = os.path.dirname(path)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            fh = open(tmp, "wb")
        except FileNotFoundError:
            self.makedirs(directory)
            fh = open(tmp, "wb")
        with fh:
            fh.write(data)
            if self.fsync:
                fh.flush()
                os.fsync(fh.fileno())
        return tmp

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data`` only if it does not exist: the commit primitive.

        Raises FileExistsError when another writer created it first. Local: write a
        temp file and hard-link it into place (``link`` fails if the target exists and
        never exposes a partial file; a killed writer leaves at most a hidden temp
        file). S3: a conditional PUT (``If-None-Match: *``), or, with the storage option
        ``AWS_S3_LOCKING_PROVIDER=dynamodb``, Delta Spark's DynamoDB protocol for commit files
        (deltalog.storage.dynamodb_commits: the one every writer of the table must use). Azure
        and GCS: their conditional creates (deltalog.storage.azure_gcs). Any other
        filesystem has no atomic primitive: NonAtomicStorageError, always (see
        :meth:`check_atomic_create`, which the operations call before any work).
        """
        if self.is_local:
            self._put_if_absent_local(path, data)
            return
        if self.protocol in ("s3", "s3a"):
            if self.dynamodb is not None and self.dynamodb.is_commit(self, path):
                self.dynamodb.commit(self, path, data)
            else:
                self.conditional_put(path, data)
            return
        if azure_gcs.kind(self.protocol) is not None:
            # Azure / GCS: a conditional create, settled by reading back when its answer is unclear.
            azure_gcs.put_if_absent(self.fs, self._reads(), path, data)
            return
        if self.protocol == "memory":
            # The in-memory filesystem lives in this process; the check and the write run
            # under the GIL with no I/O between them, so they cannot interleave with another thread's.
            if self.fs.exists(path):
                raise FileExistsError(path)
            self.fs.pipe_file(path, data)
            return
        if getattr(self.fs, "deltalog_atomic_create", False):
            # A filesystem that declares an atomic ``pipe_file(mode="create")`` (raising
            # FileExistsError when the target exists), e.g. a wrapper around one of the above.
            with _remote_errors("write", path):
                self.fs.pipe_file(path, data, mode="create")
            return
        raise NonAtomicStorageError(self._no_atomic_create("commit") + ". The version was not written")

    def check_atomic_create(self, verb: str) -> None:
        """Refuse (NonAtomicStorageError) unless :meth:`put_if_absent` is atomic here; nothing is written.

        The operations call this (through ``deltalog.protocol.write_gate``) before they read
        or write any data, so a store where a commit would be refused never sees work that
        is thrown away. A local directory is probed once per ``Storage``: a hidden file is
        hard-linked and both are removed (FUSE mounts of buckets, SMB and FAT refuse links).
        """
        if not self.is_local:
            if not self.supports_atomic_create:
                raise NonAtomicStorageError(self._no_atomic_create(verb) + ". Nothing was read or written")
            return
        refused = self._local_link_refusal
        if refused is not None:
            raise NonAtomicStorageError(
                f"cannot {verb} at {self.root}: the local filesystem refused a hard link ({refused}), which "
                "deltalog needs for an atomic create-if-absent; nothing was read or written"
            )

    def _no_atomic_create(self, verb: str) -> str:
        return (
            f"cannot {verb} on {self.uri}: the {self.protocol!r} filesystem ({type(self.fs).__name__}) has no atomic "
            "create-if-absent, so two writers could both write the same version and one commit would be lost. "
            "deltalog commits on local disks, S3, Azure and Google Cloud Storage only (docs/commits.md); reads, "
            "health and dry runs work here"
        )

    @functools.cached_property
    def _local_link_refusal(self) -> str | None:
        """Why this local directory cannot hard-link (None: it can, or the probe could not tell)."""
        where = self.root
        for candidate in (os.path.join(self.root, "_delta_log"), self.root):
            if os.path.isdir(candidate):
                where = candidate
                break
        else:  # a table still to be created: the nearest existing parent decides
            while where and not os.path.isdir(where):
                parent = os.path.dirname(where)
                if parent == where:
                    return None
                where = parent
        probe = os.path.join(where, f".deltalog-link-probe.{uuid.uuid4().hex}.tmp")
        try:
            with open(probe, "wb"):
                pass
        except OSError:
            return None  # not writable: the commit itself reports that
        try:
            os.link(probe, probe + ".link")
        except OSError as exc:
            return (exc.strerror or str(exc)) if exc.errno in _NO_LINK_ERRNOS else None
        finally:
            for name in (probe, probe + ".link"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name)
        return None

    def _put_if_absent_local(self, path: str, data: bytes) -> None:
        tmp = self._write_temp(path, data)
        try:
            os.link(tmp, path)
        except OSError as exc:
            if exc.errno not in _NO_LINK_ERRNOS:
                raise  # FileExistsError (another writer won), permissions, a full disk
            # Some filesystems (FUSE mounts, SMB, FAT) refuse hard links; there is no
            # other portable create-if-absent that never exposes a partial file.
            raise NonAtomicStorageError(
                f"cannot commit to {self.root}: the local filesystem refused a hard link ({exc.strerror or exc}), "
                "which deltalog needs for an atomic create-if-absent"
            ) from None
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        refresh_sidecar(path, data)  # a sidecar left by a file of this name that was deleted
        if self.fsync:
            _fsync_dir(os.path.dirname(path))

    def conditional_put(self, path: str, data: bytes) -> None:
        """S3's atomic create: a PUT with ``If-None-Match: *`` (FileExistsError when the key exists)."""
        # S3 answers 409 ConditionalRequestConflict while another conditional write to
        # the same key is in flight; the documented remedy is to send the request again,
        # which then either lands or gets the 412 (FileExistsError) of the winner.
        for attempt in range(_S3_CONFLICT_RETRIES + 1):
            try:
                self.fs.pipe_file(path, data, mode="create")
                return
            except FileExistsError:
                raise
            except OSError as exc:
                if attempt == _S3_CONFLICT_RETRIES or not _is_conditional_conflict(exc):
                    raise StorageError(f"cannot write {path}: {exc}") from None
                time.sleep(0.05 * (attempt + 1))

    def write_atomic(self, path: str, data: bytes) -> None:
        """Write or replace ``path`` so that readers see either the old or the new content."""
        if self.is_local:
            tmp = self._write_temp(path, data)
            try:
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            # A file Delta Spark wrote first has Hadoop's checksum sidecar: keep it true for the new bytes.
            refresh_sidecar(path, data)
            if self.fsync:
                _fsync_dir(os.path.dirname(path))
            return
        with _remote_errors("write", path):
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
                with _remote_errors("delete", path):
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
