"""Spellings and time units on the S3 test server (issue 13, items 2 and 5); links do not exist on object stores.

The table is opened as ``s3://`` or ``s3a://``, with or without a trailing
slash, and the log names its files relatively, percent-encoded, or absolutely
under ``s3://``, ``s3a://`` or ``s3n://``; a path in another bucket (or a
bucket spelled in capitals, which S3 does not allow) cannot be the table's and
must stop vacuum. Inventories in the wrong unit are refused. The dry run must
plan exactly what the real run deletes.
"""

from __future__ import annotations

import io
import time
import uuid
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.create import create_table
from deltalog.errors import InvalidArgumentError, OperationRefusedError
from deltalog.vacuuming import vacuum

pytestmark = [pytest.mark.s3, pytest.mark.slow]

SCHEMA = pa.schema([("id", pa.int64())])
SETTINGS = settings(
    max_examples=8,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

ROOT_SPELLINGS = ["s3", "s3a", "s3/", "s3a/"]
LOG_SPELLINGS = ["rel", "encoded", "s3", "s3a", "s3n", "s3-encoded", "other-bucket", "CASE"]
BAD_SPELLINGS = {"other-bucket", "CASE"}


def _table(bucket: str, opts: dict) -> tuple[str, DeltaTable]:
    uri = f"s3://{bucket}/t{uuid.uuid4().hex[:8]}"
    create_table(uri, SCHEMA, storage_options=opts, run_hooks=False)
    return uri, DeltaTable(uri, opts)


def _put(table: DeltaTable, name: str, i: int) -> dict:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": [i]}), buf)
    table.storage.fs.pipe(table.storage.join(name), buf.getvalue())
    return {
        "path": name,
        "partitionValues": {},
        "size": len(buf.getvalue()),
        "modificationTime": int(time.time() * 1000),
    }


def _log_path(uri: str, name: str, how: str) -> str:
    enc = quote(name, safe="/=")
    bucket_and_key = uri.removeprefix("s3://")
    return {
        "rel": name,
        "encoded": enc,
        "s3": f"{uri}/{name}",
        "s3a": f"s3a://{bucket_and_key}/{name}",
        "s3n": f"s3n://{bucket_and_key}/{name}",
        "s3-encoded": f"{uri}/{enc}",
        "other-bucket": f"s3://other-{bucket_and_key}/{name}",
        "CASE": f"s3://{bucket_and_key.upper()}/{name}",
    }[how]


def _opened(uri: str, how: str) -> str:
    base = uri if how.startswith("s3/") or how == "s3" else "s3a://" + uri.removeprefix("s3://")
    return base + "/" if how.endswith("/") else base


def _keys(table: DeltaTable) -> set[str]:
    fs = table.storage.fs
    fs.invalidate_cache()
    root = table.storage.root
    return {k[len(root) + 1 :] for k in fs.find(root) if "/_delta_log/" not in k}


def test_s3_absolute_paths_in_another_spelling_protect_and_another_bucket_stops(s3_bucket, s3_storage_options):
    opts = s3_storage_options
    uri, table = _table(s3_bucket, opts)
    a = _put(table, "part=x/a b.parquet", 1)
    b = _put(table, "b.parquet", 2)
    a["path"] = "s3a://" + uri.removeprefix("s3://") + "/part%3Dx/a%20b.parquet"
    b["path"] = f"{uri}/b.parquet"
    txn = Transaction(table.storage, table.snapshot(), operation="WRITE", run_hooks=False)
    txn.add([a, b])
    txn.commit()
    time.sleep(1.1)  # S3 keeps modification times to the second
    result = vacuum(uri + "/", retention_hours=0, allow_short_retention=True, storage_options=opts)
    assert result.num_deleted_files == 0 and _keys(table) == {"part=x/a b.parquet", "b.parquet"}
    c = _put(table, "c.parquet", 3)
    c["path"] = "s3://" + uri.removeprefix("s3://").upper() + "/c.parquet"
    txn = Transaction(table.storage, table.snapshot(), operation="WRITE", run_hooks=False)
    txn.add([c])
    txn.commit()
    time.sleep(1.1)
    with pytest.raises(OperationRefusedError, match="cannot be relativised"):
        vacuum(uri, retention_hours=0, allow_short_retention=True, storage_options=opts)
    assert "c.parquet" in _keys(table)


@SETTINGS
@given(
    files=st.lists(st.tuples(st.sampled_from(LOG_SPELLINGS), st.booleans(), st.booleans()), min_size=1, max_size=4),
    junk=st.booleans(),
    opened=st.sampled_from(ROOT_SPELLINGS),
    mode=st.sampled_from(["full", "lite", "inventory"]),
)
def test_s3_vacuum_never_deletes_a_live_file_whatever_the_spelling(
    s3_bucket, s3_storage_options, files, junk, opened, mode
):
    opts = s3_storage_options
    uri, table = _table(s3_bucket, opts)
    adds = []
    for i, (how, removed, odd) in enumerate(files):
        name = f"{i} x%y.parquet" if odd else f"part-{i}.parquet"
        add = _put(table, name, i)
        add["path"] = _log_path(uri, name, how)
        adds.append((add, name, removed, how))
    txn = Transaction(table.storage, table.snapshot(), operation="WRITE", run_hooks=False)
    txn.add([a for a, _, _, _ in adds])
    txn.commit()
    gone = [a for a, _, r, _ in adds if r]
    if gone:
        txn = Transaction(table.storage, table.snapshot(), operation="DELETE", run_hooks=False)
        txn.remove([{"path": a["path"], "dataChange": True, "size": a["size"], "partitionValues": {}} for a in gone])
        txn.commit()
    if junk:
        _put(table, "junk.parquet", 99)
    time.sleep(1.1)  # S3 keeps modification times to the second
    before = _keys(table)
    kw: dict = {"storage_options": opts, "retention_hours": 0, "allow_short_retention": True}
    if mode == "lite":
        kw["mode"] = "lite"
    if mode == "inventory":
        infos = [table.storage.info(table.storage.join(k)) for k in sorted(before)]
        kw["inventory"] = pa.table(
            {
                "path": [f"s3a://{table.storage.root}/{k}" for k in sorted(before)],
                "size": pa.array([i.size for i in infos], pa.int64()),
                "modificationTime": pa.array([i.modification_time for i in infos], pa.int64()),
            }
        )
    target = _opened(uri, opened)
    bad_live = any(how in BAD_SPELLINGS for _, _, r, how in adds if not r)
    bad_any = any(how in BAD_SPELLINGS for _, _, _, how in adds)
    try:
        dry = vacuum(target, dry_run=True, **kw)
    except OperationRefusedError as exc:
        assert "relativised" in str(exc) and (bad_live or (mode == "lite" and bad_any)), exc
        with pytest.raises(OperationRefusedError):
            vacuum(target, **kw)
        assert _keys(table) == before
        return
    assert not bad_live and not (mode == "lite" and bad_any)
    planned = set(dry.plan.files.column("path").to_pylist())
    vacuum(target, **kw)
    after = _keys(table)
    live = {n for _, n, r, _ in adds if not r}
    assert live <= after, f"live files deleted: {live - after}"
    assert planned == before - after, "the dry run disagrees with the real run"
    removed = {n for _, n, r, _ in adds if r}
    expected = removed if mode == "lite" else removed | ({"junk.parquet"} if junk else set())
    assert before - after == expected


SCALES = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


@SETTINGS
@given(unit=st.sampled_from(sorted(SCALES)), n=st.integers(1, 3))
def test_s3_inventory_in_another_unit_is_refused(s3_bucket, s3_storage_options, unit, n):
    opts = s3_storage_options
    uri, table = _table(s3_bucket, opts)
    names = [f"f{i}.parquet" for i in range(n)]
    for i, name in enumerate(names):
        _put(table, name, i)
    infos = [table.storage.info(table.storage.join(k)) for k in names]
    values = [i.modification_time * SCALES[unit] // 1000 for i in infos]
    inv = pa.table(
        {
            "path": names,
            "size": pa.array([i.size for i in infos], pa.int64()),
            "modificationTime": pa.array(values, pa.int64()),
        }
    )
    kw = {"storage_options": opts, "retention_hours": 0, "allow_short_retention": True, "inventory": inv}
    if unit != "ms":
        with pytest.raises(InvalidArgumentError, match="modificationTime"):
            vacuum(uri, **kw)
        assert _keys(table) == set(names)
        return
    time.sleep(1.1)
    dry = vacuum(uri, dry_run=True, **kw)
    assert set(dry.plan.files.column("path").to_pylist()) == set(names)
    assert vacuum(uri, **kw).num_deleted_files == n and _keys(table) == set()
