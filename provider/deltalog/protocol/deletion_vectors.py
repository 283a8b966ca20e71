"""Reading deletion vectors (PROTOCOL.md: Deletion Vectors, Deletion Vector Format).

Compaction applies a file's deletion vector while rewriting it, so the new
file holds only the rows readers would see and carries no DV. A DV is a set
of row positions in the data file, stored as a 64-bit RoaringBitmap in the
"portable" serialisation behind a magic number, either inline in the log
(storage type ``i``, Z85-encoded) or in a ``deletion_vector_<uuid>.bin`` file
(``u``: path derived from a Z85-encoded UUID; ``p``: absolute path) framed by
a big-endian size and a CRC-32.

Decoding is vectorised with numpy; the result is a sorted ``uint64`` array.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Callable
from typing import Any

import fsspec
import numpy as np

from deltalog.errors import CorruptLogError
from deltalog.protocol.parquet_layout import from_log_path
from deltalog.storage.filesystem import Storage

__all__ = ["deleted_rows", "read_deletion_vector", "z85_decode"]

MAGIC = 1681511377
NATIVE_MAGIC = 1681511376
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}
_SERIAL_COOKIE_NO_RUN = 12346
_SERIAL_COOKIE = 12347
_NO_OFFSET_THRESHOLD = 4
_ARRAY_MAX = 4096


def z85_decode(text: str) -> bytes:
    """Z85 (ZeroMQ Base85) to bytes; Delta pads inline data to a multiple of 4 bytes."""
    if len(text) % 5:
        raise CorruptLogError(f"deletion vector: Z85 text of length {len(text)} is not a multiple of 5")
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for c in text[i : i + 5]:
            try:
                value = value * 85 + _Z85_INDEX[c]
            except KeyError:
                raise CorruptLogError(f"deletion vector: {c!r} is not a Z85 character") from None
        out += value.to_bytes(4, "big")
    return bytes(out)


#: Reads ``length`` bytes at ``offset`` of a DV file: (path, is_absolute, offset, length) -> bytes.
RangeReader = Callable[[str, bool, int, int], bytes]


def dv_location(dv: dict[str, Any]) -> tuple[str, bool]:
    """Where an on-disk DV lives: (path relative to the table root, False) or (absolute path/URI, True)."""
    kind, payload = dv.get("storageType"), dv.get("pathOrInlineDv") or ""
    if kind == "u":
        if len(payload) < 20:
            raise CorruptLogError(f"deletion vector: {payload!r} is too short to hold a Z85-encoded UUID")
        prefix, encoded = payload[:-20], payload[-20:]
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
        return (f"{prefix}/{name}" if prefix else name), False
    if kind == "p":
        return from_log_path(payload), True
    raise CorruptLogError(f"deletion vector storage type {kind!r} has no file")


def storage_reader(storage: Storage) -> RangeReader:
    """A :data:`RangeReader` over the table's storage (absolute paths through fsspec)."""

    def read(path: str, absolute: bool, offset: int, length: int) -> bytes:
        if not absolute:
            opener: Any = open if storage.is_local else storage.fs.open
            target = storage.join(*path.split("/"))
        elif path.startswith("file:") or path.startswith("/"):
            opener, target = open, path[len("file://") :] if path.startswith("file://") else path
        else:
            opener, target = (lambda p, mode: fsspec.open(p, mode, **storage.storage_options).open()), path
        with opener(target, "rb") as fh:
            fh.seek(offset)
            return fh.read(length)

    return read


def load_bitmap_bytes(dv: dict[str, Any], read: RangeReader) -> bytes:
    """The serialized bitmap (magic number + portable RoaringBitmap) of a DV descriptor."""
    size = int(dv.get("sizeInBytes") or 0)
    if dv.get("storageType") == "i":
        return z85_decode(dv.get("pathOrInlineDv") or "")[:size]
    path, absolute = dv_location(dv)
    offset = int(dv.get("offset") or 0)
    try:
        raw = read(path, absolute, offset, size + 8)
    except FileNotFoundError:
        raise CorruptLogError(f"deletion vector file {path} does not exist") from None
    if len(raw) < size + 8:
        raise CorruptLogError(f"deletion vector file {path} is truncated at offset {offset}")
    (data_size,) = struct.unpack(">i", raw[:4])
    if data_size != size:
        raise CorruptLogError(
            f"deletion vector in {path} at offset {offset} has {data_size} bytes, the log says {size}"
        )
    data = raw[4 : 4 + size]
    (checksum,) = struct.unpack(">I", raw[4 + size : 8 + size])
    if zlib.crc32(data) != checksum:
        raise CorruptLogError(f"deletion vector in {path} at offset {offset} fails its CRC-32 check")
    return data


def _roaring32(buf: memoryview, pos: int) -> tuple[np.ndarray, int]:
    """One 32-bit RoaringBitmap (portable format) starting at ``pos``: (values, end position)."""
    (cookie,) = struct.unpack_from("<I", buf, pos)
    pos += 4
    if cookie & 0xFFFF == _SERIAL_COOKIE:
        size = (cookie >> 16) + 1
        run_flags = np.unpackbits(np.frombuffer(buf, np.uint8, (size + 7) // 8, pos), bitorder="little")[:size]
        pos += (size + 7) // 8
        has_offsets = size >= _NO_OFFSET_THRESHOLD
    elif cookie == _SERIAL_COOKIE_NO_RUN:
        (size,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        run_flags = np.zeros(size, np.uint8)
        has_offsets = True
    else:
        raise CorruptLogError(f"deletion vector: unknown RoaringBitmap cookie {cookie}")
    header = np.frombuffer(buf, "<u2", 2 * size, pos).reshape(size, 2)
    pos += 4 * size
    if has_offsets:
        pos += 4 * size
    parts = []
    for i in range(size):
        high = np.uint32(header[i, 0]) << np.uint32(16)
        card = int(header[i, 1]) + 1
        if run_flags[i]:
            (n_runs,) = struct.unpack_from("<H", buf, pos)
            runs = np.frombuffer(buf, "<u2", 2 * n_runs, pos + 2).reshape(n_runs, 2).astype(np.uint32)
            pos += 2 + 4 * n_runs
            lows = np.concatenate([np.arange(s, s + n + 1, dtype=np.uint32) for s, n in runs]) if n_runs else None
        elif card > _ARRAY_MAX:
            words = np.frombuffer(buf, np.uint8, 8192, pos)
            pos += 8192
            lows = np.flatnonzero(np.unpackbits(words, bitorder="little")).astype(np.uint32)
        else:
            lows = np.frombuffer(buf, "<u2", card, pos).astype(np.uint32)
            pos += 2 * card
        if lows is not None:
            parts.append(lows | high)
    values = np.concatenate(parts) if parts else np.empty(0, np.uint32)
    return values, pos


def decode_bitmap(data: bytes) -> np.ndarray:
    """Row positions (sorted ``uint64``) of a serialized Delta bitmap.

    The protocol's format is the magic number 1681511377 followed by the 64-bit
    "portable" RoaringBitmap (little-endian). Delta Spark also reads its older
    "native" layout (magic 1681511376: a bitmap count, then per bitmap its size
    and a 32-bit RoaringBitmap for the next 2^32 positions); PROTOCOL.md's inline
    example uses it with big-endian header integers, so both orders are accepted.
    """
    try:
        buf = memoryview(data)
        (magic,) = struct.unpack_from("<i", buf, 0)
        (magic_be,) = struct.unpack_from(">i", buf, 0)
        out = []
        if magic == MAGIC:
            (buckets,) = struct.unpack_from("<q", buf, 4)
            pos = 12
            for _ in range(buckets):
                (key,) = struct.unpack_from("<I", buf, pos)
                values, pos = _roaring32(buf, pos + 4)
                out.append(values.astype(np.uint64) | (np.uint64(key) << np.uint64(32)))
        elif NATIVE_MAGIC in (magic, magic_be):
            order = "<" if magic == NATIVE_MAGIC else ">"
            (count,) = struct.unpack_from(order + "i", buf, 4)
            pos = 8
            for key in range(count):
                (size,) = struct.unpack_from(order + "i", buf, pos)
                values, _ = _roaring32(buf, pos + 4)
                pos += 4 + size
                out.append(values.astype(np.uint64) | (np.uint64(key) << np.uint64(32)))
        else:
            raise CorruptLogError(f"deletion vector: bad magic number {magic} (expected {MAGIC})")
    except (struct.error, ValueError) as exc:
        raise CorruptLogError(f"deletion vector: the bitmap is truncated or malformed ({exc})") from None
    return np.sort(np.concatenate(out)) if out else np.empty(0, np.uint64)


def deleted_rows(dv: dict[str, Any], read: RangeReader) -> np.ndarray:
    """The deleted row positions of a DV descriptor; the count is checked against its cardinality."""
    rows = decode_bitmap(load_bitmap_bytes(dv, read))
    cardinality = dv.get("cardinality")
    if cardinality is not None and int(cardinality) != len(rows):
        raise CorruptLogError(
            f"deletion vector {dv.get('storageType')}{dv.get('pathOrInlineDv')} holds {len(rows)} rows, "
            f"the log says {cardinality}"
        )
    return rows


def read_deletion_vector(storage: Storage, dv: dict[str, Any]) -> np.ndarray:
    """:func:`deleted_rows` for a DV of a table on ``storage``."""
    return deleted_rows(dv, storage_reader(storage))
