"""Shared builders for the compaction tests (no tests here).

Tables are written by ``deltalake`` (an independent writer) so compaction is
tested against files it did not produce; rows are compared as multisets read
back by ``deltalake`` (its DataFusion reader when the table has deletion
vectors, since ``to_pyarrow_table`` refuses those).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import struct
import uuid
import zlib
from collections import Counter
from typing import Any

import deltalake
import pyarrow as pa
from deltalake import QueryBuilder, write_deltalake

from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.storage.filesystem import Storage

RICH_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("amount", pa.decimal128(12, 2)),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("nested", pa.struct([("a", pa.int32()), ("tags", pa.list_(pa.string()))])),
        pa.field("attrs", pa.map_(pa.string(), pa.int64())),
        pa.field("part", pa.string()),
    ]
)


def rich_rows(n: int, start: int = 0, part: str = "a") -> pa.Table:
    """Rows with nested, decimal, timestamp and null-heavy columns (most names and amounts are null)."""
    ids = list(range(start, start + n))
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"name-{i}" if i % 5 == 0 else None for i in ids]),
            "amount": pa.array([decimal.Decimal(i) / 100 if i % 3 else None for i in ids], pa.decimal128(12, 2)),
            "ts": pa.array(
                [base + dt.timedelta(seconds=i, microseconds=i % 997) for i in ids], RICH_SCHEMA.field("ts").type
            ),
            "nested": pa.array(
                [None if i % 7 == 0 else {"a": i % 100, "tags": [f"t{i % 3}"] * (i % 3)} for i in ids],
                RICH_SCHEMA.field("nested").type,
            ),
            "attrs": pa.array([[("k", i)] if i % 2 else None for i in ids], RICH_SCHEMA.field("attrs").type),
            "part": pa.array([part] * n),
        },
        schema=RICH_SCHEMA,
    )


def make_rich_table(
    path: str,
    partitioned: bool,
    appends: int = 6,
    rows_per_append: int = 50,
    configuration: dict[str, str] | None = None,
) -> str:
    """A table written by deltalake: ``appends`` small files per partition (two partitions when partitioned)."""
    parts = ["a", "b"] if partitioned else ["a"]
    start = 0
    for i in range(appends):
        for p in parts:
            write_deltalake(
                path,
                rich_rows(rows_per_append, start, p),
                mode="append",
                partition_by=["part"] if partitioned else None,
                configuration=configuration if i == 0 and p == parts[0] else None,
            )
            start += rows_per_append
    return path


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_canonical(v) for v in value)
    return value


def read_multiset(path: str) -> Counter:
    """Every row of the table as read by deltalake (DV-aware), as a multiset of canonical tuples."""
    table = deltalake.DeltaTable(path)
    if any(f == "deletionVectors" for f in (table.protocol().reader_features or [])):
        data = pa.table(QueryBuilder().register("t", table).execute("select * from t").read_all())
    else:
        data = table.to_pyarrow_table()
    return multiset_of(data)


def multiset_of(data: pa.Table) -> Counter:
    """Rows of ``data`` as a multiset of canonical tuples (columns in name order)."""
    cols = sorted(data.column_names)
    return Counter(tuple(_canonical(r[c]) for c in cols) for r in data.to_pylist())


# --- deletion vectors (writer for tests; deltalog itself only reads them) -------------------

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85_encode(data: bytes) -> str:
    assert len(data) % 4 == 0
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        chars = []
        for _ in range(5):
            value, r = divmod(value, 85)
            chars.append(_Z85[r])
        out.append("".join(reversed(chars)))
    return "".join(out)


def serialize_bitmap(rows: list[int], runs: bool = False) -> bytes:
    """Delta's bitmap format (magic + 64-bit portable RoaringBitmap) with array, bitmap or run containers."""
    by_key: dict[int, dict[int, list[int]]] = {}
    for r in sorted(set(rows)):
        by_key.setdefault(r >> 32, {}).setdefault((r >> 16) & 0xFFFF, []).append(r & 0xFFFF)
    out = bytearray(struct.pack("<i", 1681511377))
    out += struct.pack("<q", len(by_key))
    for key, containers in sorted(by_key.items()):
        out += struct.pack("<I", key)
        start = len(out)
        n = len(containers)
        if runs:
            out += struct.pack("<I", 12347 | ((n - 1) << 16))
            out += bytes([0xFF] * ((n + 7) // 8))  # every container is a run container
        else:
            out += struct.pack("<II", 12346, n)
        for high, lows in sorted(containers.items()):
            out += struct.pack("<HH", high, len(lows) - 1)
        bodies = []
        for _, lows in sorted(containers.items()):
            if runs:
                spans: list[list[int]] = []
                for v in lows:
                    if spans and v == spans[-1][0] + spans[-1][1] + 1:
                        spans[-1][1] += 1
                    else:
                        spans.append([v, 0])
                bodies.append(struct.pack("<H", len(spans)) + b"".join(struct.pack("<HH", s, ln) for s, ln in spans))
            elif len(lows) > 4096:
                bits = bytearray(8192)
                for v in lows:
                    bits[v >> 3] |= 1 << (v & 7)
                bodies.append(bytes(bits))
            else:
                bodies.append(struct.pack(f"<{len(lows)}H", *lows))
        if not runs or n >= 4:  # the offset header: where each container starts, from the cookie
            offset = len(out) - start + 4 * n
            for body in bodies:
                out += struct.pack("<I", offset)
                offset += len(body)
        for body in bodies:
            out += body
    return bytes(out)


def add_deletion_vector(
    table_path: str,
    file_path: str,
    rows: list[int],
    inline: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Commit a DELETE-by-DV of ``rows`` of one live file (remove + re-add with a DV), as Delta Spark does."""
    data = serialize_bitmap(rows)
    storage = Storage(table_path, storage_options)
    if inline:
        padded = data + b"\0" * (-len(data) % 4)
        dv = {"storageType": "i", "pathOrInlineDv": z85_encode(padded), "sizeInBytes": len(data)}
    else:
        u = uuid.uuid4()
        with storage.fs.open(storage.join(f"deletion_vector_{u}.bin"), "wb") as fh:
            fh.write(b"\x01" + struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data)))
        dv = {"storageType": "u", "pathOrInlineDv": z85_encode(u.bytes), "offset": 1, "sizeInBytes": len(data)}
    dv["cardinality"] = len(set(rows))
    dtable = DeltaTable(table_path, storage_options)
    snap = dtable.snapshot()
    row = next(r for r in snap.files.to_pylist() if r["path"] == file_path)
    stats = json.loads(row["stats"])
    stats["tightBounds"] = False
    add = {
        "path": file_path,
        "partitionValues": dict(row["partitionValues"] or []),
        "size": row["size"],
        "modificationTime": row["modificationTime"],
        "dataChange": True,
        "stats": json.dumps(stats),
        "deletionVector": dv,
    }
    remove = {"path": file_path, "dataChange": True, "partitionValues": add["partitionValues"], "size": row["size"]}
    txn = Transaction(storage, snap, operation="DELETE", operation_parameters={"predicate": "[]"})
    txn.remove([remove])
    txn.add([add])
    txn.commit()
    return dv


def commit_actions(table: DeltaTable | str, version: int, storage_options: dict[str, Any] | None = None) -> list[dict]:
    """The actions of commit ``version``, one dict per line, on any storage the table is on."""
    from deltalog.log.listing import commit_name

    storage = (table if isinstance(table, DeltaTable) else DeltaTable(table, storage_options)).storage
    text = storage.read_bytes(storage.join("_delta_log", commit_name(version))).decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]
