"""Spark's Hadoop FileSystem from the driver, shared by the Spark jobs (ingest and compaction).

Every file the jobs touch (listing the staging folder, moving files into the table,
reading footers, deletion vectors and the plan) goes through the FileSystem Spark
itself uses for the location (``file:``, ``s3a:`` ...), via the JVM gateway, so the
jobs need no credentials beyond the Spark configuration. pyspark is never imported
here: callers pass their ``SparkSession``.
"""

from __future__ import annotations

import io
import os
from typing import Any
from urllib.parse import urlparse

import pyarrow.parquet as pq

from deltalog.errors import InvalidArgumentError, StorageError

__all__ = ["HadoopFs", "STAGING_DIR", "hadoop_uri", "is_data_file"]

#: The private folder inside the table the jobs write into before moving files into place
#: (hidden from Delta readers and vacuum because it starts with ``_``).
STAGING_DIR = "_deltalog_staging"
#: How much of a file's tail is fetched for its footer in one read (most footers are smaller).
_TAIL = 64 * 1024


def is_data_file(name: str) -> bool:
    """Spark's own markers (``_SUCCESS``) and checksums (``.crc``) are not table data."""
    return name.endswith(".parquet") and not name.startswith(("_", "."))


def hadoop_uri(location: str) -> str:
    """The URI Spark's Hadoop layer understands for a deltalog location.

    Local paths become ``file:`` URIs (absolute, so the executors agree with the
    driver) and ``s3://`` becomes ``s3a://``, the connector Spark ships for S3.
    """
    if not isinstance(location, str) or not location.strip():
        raise InvalidArgumentError("table location must be a non-empty path or URI")
    parsed = urlparse(location)
    scheme = parsed.scheme if len(parsed.scheme) > 1 else ""
    if scheme in ("", "file", "local"):
        path = parsed.path if scheme else location
        return "file://" + os.path.abspath(os.path.expanduser(path))
    if scheme in ("s3", "s3n"):
        return "s3a://" + location.split("://", 1)[1]
    return location


class HadoopFs:
    """The Hadoop FileSystem calls the Spark jobs need (listing, moves, deletes, ranged reads), through Spark's JVM gateway."""

    def __init__(self, spark: Any, uri: str) -> None:
        self._jvm = spark._jvm
        conf = spark._jsc.hadoopConfiguration()
        self._path_cls = self._jvm.org.apache.hadoop.fs.Path
        fs = self._path_cls(uri).getFileSystem(conf)
        # The checksummed local filesystem writes a hidden .crc next to every file it
        # creates or moves; the raw one does not, so the table folder stays clean.
        # (Spark may hand out a subclass, e.g. Hive's ProxyLocalFileSystem, hence isInstance.)
        checksummed = self._jvm.java.lang.Class.forName("org.apache.hadoop.fs.ChecksumFileSystem")
        if checksummed.isInstance(fs):
            fs = fs.getRawFileSystem()
        self.fs = fs
        self._io = self._jvm.org.apache.commons.io.IOUtils

    def path(self, uri: str) -> Any:
        return self._path_cls(uri)

    def list_files(self, uri: str) -> list[tuple[str, int, int]]:
        """(path, size, mtime ms) of every file under ``uri``, recursively."""
        out = []
        it = self.fs.listFiles(self.path(uri), True)
        while it.hasNext():
            st = it.next()
            out.append((st.getPath().toUri().getPath(), int(st.getLen()), int(st.getModificationTime())))
        return out

    def move(self, src: str, dst: str) -> None:
        target = self.path(dst)
        self.fs.mkdirs(target.getParent())
        if not self.fs.rename(self.path(src), target):
            raise StorageError(f"could not move {src} to {dst}")

    def status(self, uri: str) -> tuple[int, int]:
        st = self.fs.getFileStatus(self.path(uri))
        return int(st.getLen()), int(st.getModificationTime())

    def delete(self, uri: str) -> None:
        self.fs.delete(self.path(uri), True)

    def delete_if_empty(self, uri: str) -> None:
        """Remove a directory nothing else is using (object stores have no directories to remove)."""
        path = self.path(uri)
        if self.fs.exists(path) and len(self.fs.listStatus(path)) == 0:
            self.fs.delete(path, False)

    def write_text(self, uri: str, text: str) -> None:
        out = self.fs.create(self.path(uri), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def read_range(self, uri: str, offset: int, length: int) -> bytes:
        stream = self.fs.open(self.path(uri))
        try:
            stream.seek(offset)
            return bytes(self._io.toByteArray(stream, length))
        finally:
            stream.close()

    def read_text(self, uri: str) -> str:
        size, _ = self.status(uri)
        return self.read_range(uri, 0, size).decode("utf-8")

    def footer(self, uri: str) -> pq.FileMetaData:
        """The Parquet footer of ``uri`` from one or two tail reads."""
        size, _ = self.status(uri)
        tail = self.read_range(uri, max(0, size - _TAIL), min(size, _TAIL))
        need = int.from_bytes(tail[-8:-4], "little") + 8
        if need > len(tail):
            tail = self.read_range(uri, size - need, need)
        return pq.read_metadata(TailFile(tail, size))


class TailFile(io.RawIOBase):
    """A read-only file of ``size`` bytes of which only the tail is known (all a footer read touches)."""

    def __init__(self, tail: bytes, size: int) -> None:
        self._tail, self._size, self._start, self._pos = tail, size, size - len(tail), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = offset if whence == 0 else (self._pos + offset if whence == 1 else self._size + offset)
        return self._pos

    def readinto(self, b: Any) -> int:
        if self._pos < self._start:
            raise OSError("only the footer of this file is available")
        chunk = self._tail[self._pos - self._start : self._pos - self._start + len(b)]
        b[: len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)
