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

import json
import re
import struct
import uuid
import zlib
from collections.abc import Callable
from typing import Any, TypeGuard

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog._arrow_utils import int_scalar, string_scalar
from deltalog.errors import CorruptLogError, MissingDataFileError
from deltalog.protocol.parquet_layout import from_log_path
from deltalog.storage.filesystem import Storage

__all__ = [
    "STORAGE_TYPES",
    "deleted_rows",
    "descriptor_problem",
    "read_deletion_vector",
    "suspect_descriptors",
    "z85_decode",
]

MAGIC = 1681511377
NATIVE_MAGIC = 1681511376
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}
_SERIAL_COOKIE_NO_RUN = 12346
_SERIAL_COOKIE = 12347
_NO_OFFSET_THRESHOLD = 4
_ARRAY_MAX = 4096

#: The storage types PROTOCOL.md allows: UUID-named file, inline, absolute path.
STORAGE_TYPES = ("u", "i", "p")
#: A ``u`` descriptor ends in its file's UUID, 16 bytes as 20 Z85 characters.
Z85_UUID_LENGTH = 20
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_Z85_CLASS = r"[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]"
#: An absolute path (``/x``) or a URI (``s3://b/x``, Hadoop's ``file:/x``): what a ``p`` descriptor holds.
_ABSOLUTE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:|/)")


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


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _num_records(stats: Any) -> int | None:
    """``numRecords`` of a file's stats JSON, or None when the stats do not give it."""
    if not isinstance(stats, str):
        return None
    try:
        doc = json.loads(stats)
    except ValueError:
        return None
    n = doc.get("numRecords") if isinstance(doc, dict) else None
    return n if _is_int(n) else None


def descriptor_problem(dv: Any, stats: Any = None) -> str | None:
    """What breaks PROTOCOL.md's Deletion Vector Descriptor Schema in ``dv`` (a sentence), or None.

    The storage type is one of ``u``, ``i``, ``p``; ``pathOrInlineDv`` has that type's
    shape (``u``: an optional random prefix, which may not climb out of the table, then a
    Z85-encoded UUID of 20 characters; ``i``: Z85 text holding at least ``sizeInBytes``
    bytes; ``p``: an absolute path or URI); ``offset`` is absent for inline DVs, else
    absent or a non-negative Int; ``sizeInBytes`` an Int and ``cardinality`` a Long, both
    non-negative; and a DV cannot delete more rows than its file's ``numRecords``
    (``stats``, when they give it). Checked when the log is read, so that a malformed
    descriptor stops every command before any work rather than a compaction halfway.
    """
    if not isinstance(dv, dict):
        return f"'deletionVector' must be an object, not {dv!r}"
    kind = dv.get("storageType")
    if kind not in STORAGE_TYPES:
        return f"'deletionVector.storageType' must be 'u', 'i' or 'p', not {kind!r}"
    payload = dv.get("pathOrInlineDv")
    if not isinstance(payload, str) or not payload:
        return f"'deletionVector.pathOrInlineDv' must be a non-empty string, not {payload!r}"
    for name, top, required in (
        ("offset", _INT32_MAX, False),
        ("sizeInBytes", _INT32_MAX, True),
        ("cardinality", _INT64_MAX, True),
        ("maxRowIndex", _INT64_MAX, False),
    ):
        value = dv.get(name)
        if value is None and not required:
            continue
        if not _is_int(value) or not 0 <= value <= top:
            return f"'deletionVector.{name}' must be a non-negative integer, not {value!r}"
    if kind == "u":
        if len(payload) < Z85_UUID_LENGTH:
            return (
                f"'deletionVector.pathOrInlineDv' {payload!r} is too short to end in a Z85-encoded UUID "
                f"({Z85_UUID_LENGTH} characters)"
            )
        prefix, encoded = payload[:-Z85_UUID_LENGTH], payload[-Z85_UUID_LENGTH:]
        if not re.fullmatch(f"{_Z85_CLASS}*", encoded):
            return f"'deletionVector.pathOrInlineDv' {payload!r} does not end in a Z85-encoded UUID"
        if prefix.startswith("/") or ".." in prefix.split("/"):
            return f"'deletionVector.pathOrInlineDv' {payload!r} has a prefix that leads out of the table"
    elif kind == "i":
        if dv.get("offset") is not None:
            return "'deletionVector.offset' must be absent for an inline deletion vector (storage type 'i')"
        if len(payload) % 5 or not re.fullmatch(f"{_Z85_CLASS}*", payload):
            return "'deletionVector.pathOrInlineDv' of an inline deletion vector is not Z85 text"
        if dv["sizeInBytes"] > len(payload) // 5 * 4:
            return (
                f"'deletionVector.sizeInBytes' {dv['sizeInBytes']} is more than the "
                f"{len(payload) // 5 * 4} bytes its inline data holds"
            )
    elif not _ABSOLUTE.match(payload):
        return f"'deletionVector.pathOrInlineDv' {payload!r} must be an absolute path or URI (storage type 'p')"
    records = _num_records(stats)
    if records is not None and dv["cardinality"] > records:
        return (
            f"'deletionVector.cardinality' {dv['cardinality']} is more than the file's {records} records (numRecords)"
        )
    return None


#: ``numRecords`` where writers put it, first in the stats object.
_NUM_RECORDS = r'^\{\s*"numRecords"\s*:\s*(?P<n>[0-9]{1,18})\s*[,}]'


def suspect_descriptors(dv: pa.Array | pa.ChunkedArray, stats: pa.Array | pa.ChunkedArray | None) -> pa.Array:
    """Rows whose descriptor :func:`descriptor_problem` must look at: every invalid one is among them.

    A vectorised pre-check, so that a table of a million DVs is not checked in Python row
    by row: it passes the descriptors Delta writers produce (an alphanumeric prefix, Z85,
    ``numRecords`` first in the stats) and flags the rest, which may still be valid.
    """
    if isinstance(dv, pa.ChunkedArray):
        dv = dv.combine_chunks() if dv.num_chunks != 1 else dv.chunk(0)
    if isinstance(stats, pa.ChunkedArray):
        stats = stats.combine_chunks() if stats.num_chunks != 1 else stats.chunk(0)
    present = dv.is_valid()
    if dv.null_count == len(dv):
        return present
    zero, four, five = int_scalar(0), int_scalar(4), int_scalar(5)
    kind = pc.struct_field(dv, "storageType")
    payload = pc.struct_field(dv, "pathOrInlineDv")
    offset = pc.cast(pc.struct_field(dv, "offset"), pa.int64())
    size = pc.cast(pc.struct_field(dv, "sizeInBytes"), pa.int64())
    cardinality = pc.struct_field(dv, "cardinality")
    offset_ok = pc.or_kleene(pc.is_null(offset), pc.greater_equal(offset, zero))
    uuid_ok = pc.and_kleene(
        pc.equal(kind, string_scalar("u")),
        pc.match_substring_regex(payload, f"^[0-9A-Za-z]*{_Z85_CLASS}{{{Z85_UUID_LENGTH}}}$"),
    )
    path_ok = pc.and_kleene(pc.equal(kind, string_scalar("p")), pc.match_substring_regex(payload, _ABSOLUTE.pattern))
    inline_ok = pc.and_kleene(
        pc.and_kleene(
            pc.equal(kind, string_scalar("i")), pc.match_substring_regex(payload, f"^(?:{_Z85_CLASS}{{5}})+$")
        ),
        pc.and_kleene(
            pc.is_null(offset),
            pc.less_equal(pc.multiply(size, five), pc.multiply(pc.cast(pc.utf8_length(payload), pa.int64()), four)),
        ),
    )
    ok = pc.or_kleene(pc.and_kleene(pc.or_kleene(uuid_ok, path_ok), offset_ok), inline_ok)
    ok = pc.and_kleene(ok, pc.and_kleene(pc.greater_equal(size, zero), pc.greater_equal(cardinality, zero)))
    if dv.type.get_field_index("maxRowIndex") >= 0:
        max_row = pc.struct_field(dv, "maxRowIndex")
        ok = pc.and_kleene(ok, pc.or_kleene(pc.is_null(max_row), pc.greater_equal(max_row, zero)))
    if stats is not None and stats.null_count < len(stats):
        found = pc.extract_regex(stats, _NUM_RECORDS)
        records = pc.cast(pc.struct_field(found, "n"), pa.int64())
        ok = pc.and_kleene(ok, pc.or_kleene(pc.is_null(stats), pc.less_equal(cardinality, records)))
    return pc.and_(present, pc.invert(pc.and_kleene(ok, pc.is_valid(ok))))  # null: not cleared


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
        raise MissingDataFileError(f"deletion vector file {path} does not exist; the table is missing a file") from None
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
