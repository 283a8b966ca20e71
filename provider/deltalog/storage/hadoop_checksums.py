"""Hadoop's checksum sidecars (``.<name>.crc``) kept true when deltalog replaces a file on a local disk.

Delta Spark writes a local table through Hadoop's ``LocalFileSystem``, a ``ChecksumFileSystem``: beside
every file it writes a hidden ``.<name>.crc`` with a CRC32 per 512 bytes, and it verifies the file
against that sidecar on every read. deltalog replaces files such a writer may have made first
(``_last_checkpoint``, Iceberg's ``version-hint.text``): left alone, the old sidecar no longer matches
and every Delta Spark reader of the table fails to read ``_last_checkpoint`` (a ``ChecksumException``),
sleeps a second three times, then lists the log to find the checkpoint itself: three seconds and
three warnings per table load, until the next Delta Spark checkpoint rewrites both.

So when deltalog writes a local file that has a sidecar, it writes the sidecar again for the new
bytes, in Hadoop's format (``crc\\0``, the bytes per checksum as a big-endian int, then each chunk's
CRC32 as a big-endian int), keeping the chunk size the old sidecar declared. A file without a
sidecar gets none (Hadoop reads such a file without checking). Object stores have no sidecars.
"""

from __future__ import annotations

import contextlib
import os
import struct
import uuid
import zlib

__all__ = ["HEADER", "checksum_sidecar", "refresh_sidecar", "sidecar_path"]

#: The first bytes of every Hadoop checksum file (ChecksumFileSystem.CHECKSUM_VERSION).
HEADER = b"crc\x00"
#: Hadoop's default ``file.bytes-per-checksum``.
DEFAULT_BYTES_PER_CHECKSUM = 512


def sidecar_path(path: str) -> str:
    """Where Hadoop keeps the checksums of the local file ``path``: ``<dir>/.<name>.crc``."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.crc")


def checksum_sidecar(data: bytes, bytes_per_checksum: int = DEFAULT_BYTES_PER_CHECKSUM) -> bytes:
    """The sidecar Hadoop's ``ChecksumFileSystem`` would write for a file holding ``data``."""
    sums = b"".join(
        struct.pack(">I", zlib.crc32(data[i : i + bytes_per_checksum])) for i in range(0, len(data), bytes_per_checksum)
    )
    return HEADER + struct.pack(">i", bytes_per_checksum) + sums


def _declared_chunk(sidecar: bytes) -> int:
    """The bytes per checksum an existing sidecar declares (the default when it is not a sidecar)."""
    if len(sidecar) >= 8 and sidecar.startswith(HEADER):
        (chunk,) = struct.unpack(">i", sidecar[4:8])
        if chunk > 0:
            return chunk
    return DEFAULT_BYTES_PER_CHECKSUM


def refresh_sidecar(path: str, data: bytes) -> bool:
    """After ``path`` (a local file) now holds ``data``: rewrite its Hadoop sidecar if it has one.

    Returns whether a sidecar was written. The sidecar is replaced atomically (a temp file and a
    rename), so a Hadoop reader sees the old sidecar or the new one, never half of one.
    """
    sidecar = sidecar_path(path)
    try:
        with open(sidecar, "rb") as fh:
            old = fh.read(8)
    except (FileNotFoundError, NotADirectoryError):
        return False
    tmp = f"{sidecar}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(checksum_sidecar(data, _declared_chunk(old)))
        os.replace(tmp, sidecar)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return True
