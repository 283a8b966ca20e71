"""Commit requests: filling what is missing, refusing what is wrong (writing nothing), idempotency, CLI, interop."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import subprocess
import sys

import deltalake
import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.errors import InvalidCommitRequestError, UnsupportedProtocolError
from deltalog.ingest import (
    commit_request,
    from_log_path,
    load_commit_request,
    partition_values_from_path,
    to_log_path,
)
from deltalog.protocol.table_protocol import Protocol
from helpers import make_table, rows

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string()), ("n", pa.int32()), ("part", pa.string())])
DELTALOG = os.path.join(os.path.dirname(sys.executable), "deltalog")


def data(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "value": [f"v{i}" for i in range(start, start + n)],
            "n": pa.array([i % 7 if i % 5 else None for i in range(start, start + n)], pa.int32()),
        }
    )


def put(table_path: str, rel: str, table: pa.Table) -> str:
    full = os.path.join(table_path, rel)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    pq.write_table(table, full)
    return rel


def versions(table_path: str) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(os.path.join(table_path, "_delta_log")) if n.endswith(".json"))


def read_rows(table_path: str) -> list[dict]:
    return sorted(deltalake.DeltaTable(table_path).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


@pytest.fixture
def table(table_path: str) -> DeltaTable:
    return make_table(table_path, schema=SCHEMA, partition_by=["part"])


# --- filling in ---------------------------------------------------------------------------


def test_size_partition_values_and_stats_are_filled_in(table: DeltaTable, table_path: str) -> None:
    rel = put(table_path, "part=x/f1.parquet", data(10))
    result = commit_request(table, {"add": [{"path": rel}]}, run_hooks=False)
    assert (result.version, result.noop) == (1, False)
    assert result.operation_metrics["numOutputRows"] == 10 and result.operation_metrics["numFiles"] == 1
    add = table.snapshot().files.to_pylist()[0]
    assert add["path"] == rel and add["size"] == os.path.getsize(os.path.join(table_path, rel))
    assert dict(add["partitionValues"]) == {"part": "x"} and add["dataChange"] is True
    stats = json.loads(add["stats"])
    assert stats["numRecords"] == 10
    assert stats["minValues"] == {"id": 0, "value": "v0", "n": 0}
    assert stats["maxValues"] == {"id": 9, "value": "v9", "n": 6}
    assert stats["nullCount"] == {"id": 0, "value": 0, "n": 2}
    assert "part" not in stats["minValues"]
    assert read_rows(table_path) == [{**r, "part": "x"} for r in data(10).to_pylist()]


def test_given_fields_are_kept(table: DeltaTable, table_path: str) -> None:
    rel = put(table_path, "part=x/f1.parquet", data(3))
    size = os.path.getsize(os.path.join(table_path, rel))
    commit_request(
        table,
        {
            "add": [
                {
                    "path": rel,
                    "size": size,
                    "partitionValues": {"part": "x"},
                    "modificationTime": 12345,
                    "stats": {"numRecords": 3},
                    "tags": {"source": "spark"},
                }
            ],
            "operation": "STREAMING UPDATE",
            "operationParameters": {"outputMode": "Append", "epochId": 4},
            "userMetadata": "batch 4",
        },
        run_hooks=False,
    )
    add = table.snapshot().files.to_pylist()[0]
    assert add["modificationTime"] == 12345 and json.loads(add["stats"]) == {"numRecords": 3}
    assert dict(add["tags"]) == {"source": "spark"}
    info = DeltaTable(table_path).history(limit=1)[0]
    assert info.operation == "STREAMING UPDATE" and info.userMetadata == "batch 4"
    assert info.operationParameters == {"outputMode": "Append", "epochId": "4"}


def test_hive_escapes_and_null_partition(tmp_path) -> None:
    """Directories written the way deltalake/Hive escape them decode to the real values."""
    path = str(tmp_path / "t")
    t = make_table(path, schema=SCHEMA, partition_by=["part"])
    odd = "a b:c%/d=é"
    escaped = "part=a%20b%3Ac%25%2Fd%3D%C3%A9"
    assert partition_values_from_path(f"{escaped}/f.parquet") == {"part": odd}
    rels = [
        put(path, f"{escaped}/f1.parquet", data(2)),
        put(path, "part=__HIVE_DEFAULT_PARTITION__/f2.parquet", data(2, 2)),
    ]
    commit_request(t, {"add": rels}, run_hooks=False)
    files = {f["path"]: dict(f["partitionValues"]) for f in t.snapshot().files.to_pylist()}
    assert files == {to_log_path(rels[0]): {"part": odd}, to_log_path(rels[1]): {"part": None}}
    assert from_log_path(to_log_path(rels[0])) == rels[0]
    got = read_rows(path)
    assert [r["part"] for r in got] == [odd, odd, None, None]


def test_compaction_request_removes_and_adds_with_data_change_false(table: DeltaTable, table_path: str) -> None:
    old = [put(table_path, f"part=x/small{i}.parquet", data(2, 2 * i)) for i in range(3)]
    commit_request(table, {"add": old}, run_hooks=False)
    big = put(table_path, "part=x/big.parquet", data(6))
    result = commit_request(
        table,
        {
            "operation": "OPTIMIZE",
            "add": [big],
            "remove": old,
            "dataChange": False,
            "operationParameters": {"predicate": "[]"},
        },
        run_hooks=False,
    )
    assert result.isolation_level == "SnapshotIsolation"
    assert result.operation_metrics["numRemovedFiles"] == 3
    snap = table.snapshot()
    assert snap.file_paths() == [big]
    tomb = {r["path"]: r for r in snap.tombstones.to_pylist()}
    assert set(tomb) == set(old)
    r = tomb[old[0]]
    assert (
        r["dataChange"] is False and r["extendedFileMetadata"] is True and dict(r["partitionValues"]) == {"part": "x"}
    )
    assert r["size"] == os.path.getsize(os.path.join(table_path, old[0]))
    assert len(read_rows(table_path)) == 6


def test_absolute_paths_inside_the_table_are_made_relative(table: DeltaTable, table_path: str) -> None:
    rel = put(table_path, "part=x/f1.parquet", data(1))
    commit_request(table, {"add": [os.path.join(table_path, rel)]}, run_hooks=False)
    assert table.snapshot().file_paths() == [rel]


# --- refusals: one clear error, nothing written ------------------------------------------------


BAD_REQUESTS = [
    ({"add": [{"path": "part=x/missing.parquet"}]}, "does not exist"),
    ({"add": [{"path": "../outside.parquet"}]}, "outside the table"),
    ({"add": [{"path": "/etc/passwd"}]}, "outside the table"),
    ({"add": [{"path": "_delta_log/00000000000000000000.json"}]}, "hidden"),
    ({"add": [{"path": "part=x/.hidden.parquet"}]}, "hidden"),
    ({"add": [{"path": "nopart.parquet"}]}, "no hive-style directory for 'part'"),
    ({"add": [{"path": "part=x/ok.parquet", "partitionValues": {"other": "1"}}]}, "partitioned by"),
    ({"add": [{"path": "part=x/ok.parquet", "partitionValues": {"part": "y"}}]}, "the path says part='x'"),
    ({"add": [{"path": "part=x/ok.parquet", "size": 1}]}, "bytes on storage but the request says 1"),
    ({"add": [{"path": "part=x/ok.parquet"}, {"path": "part=x/ok.parquet"}]}, "listed twice"),
    ({"add": [{"path": "part=x/notparquet.parquet"}]}, "not a readable Parquet file"),
    ({"add": [{"path": "part=x/extra.parquet"}]}, "column surprise is in the file but not in the table schema"),
    ({"remove": ["part=x/ok.parquet"]}, "not a live file"),
    ({"add": ["part=x/ok.parquet"], "remove": ["part=x/ok.parquet"]}, "both added and removed"),
    ({"add": [{"path": "part=x/ok.parquet"}], "colour": "blue"}, "unknown field(s) colour"),
    ({"add": [{"path": "part=x/ok.parquet", "sizes": 3}]}, "unknown field(s) sizes"),
    ({"add": [{"path": "part=x/ok.parquet"}], "appId": "a"}, "both an app id and a transaction version"),
    ({"add": [{"path": "part=x/ok.parquet"}], "txnVersion": -1, "appId": "a"}, "non-negative"),
    ({"add": [{"path": "part=x/ok.parquet", "stats": "{nope"}]}, "stats is not valid JSON"),
    ({}, "neither adds nor removes"),
    ([], "give a JSON file path or a dict"),
    ({"add": [{"path": "part=x/ok.parquet"}], "dataChange": "yes"}, "'dataChange' must be true or false"),
]


@pytest.mark.parametrize(("request_doc", "message"), BAD_REQUESTS)
def test_bad_requests_are_refused_writing_nothing(table: DeltaTable, table_path: str, request_doc, message) -> None:
    put(table_path, "part=x/ok.parquet", data(2))
    put(table_path, "nopart.parquet", data(2))
    put(table_path, "part=x/.hidden.parquet", data(2))
    put(table_path, "part=x/extra.parquet", data(2).append_column("surprise", pa.array([1, 2])))
    with open(os.path.join(table_path, "part=x", "notparquet.parquet"), "w") as fh:
        fh.write("hello")
    with pytest.raises(InvalidCommitRequestError) as info:
        commit_request(table, request_doc, run_hooks=False)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert versions(table_path) == [0]


def test_partition_value_must_fit_the_column_type(tmp_path) -> None:
    path = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("year", pa.int32()), ("day", pa.date32())])
    t = make_table(path, schema=schema, partition_by=["year", "day"])
    body = pa.table({"id": [1]})
    bad = put(path, "year=abc/day=2024-01-01/f.parquet", body)
    with pytest.raises(InvalidCommitRequestError, match="'abc' of column 'year' is not a valid integer"):
        commit_request(t, {"add": [bad]}, run_hooks=False)
    bad_day = put(path, "year=2024/day=yesterday/f.parquet", body)
    with pytest.raises(InvalidCommitRequestError, match="'yesterday' of column 'day'"):
        commit_request(t, {"add": [bad_day]}, run_hooks=False)
    good = put(path, "year=2024/day=2024-01-01/f.parquet", body)
    assert commit_request(t, {"add": [good]}, run_hooks=False).version == 1
    assert read_rows(path) == [{"id": 1, "year": 2024, "day": dt.date(2024, 1, 1)}]


def test_adding_a_live_file_again_is_refused(table: DeltaTable, table_path: str) -> None:
    rel = put(table_path, "part=x/f1.parquet", data(1))
    commit_request(table, {"add": [rel]}, run_hooks=False)
    with pytest.raises(InvalidCommitRequestError, match="already in the table"):
        commit_request(table, {"add": [rel]}, run_hooks=False)
    assert versions(table_path) == [0, 1]


def test_protocol_gate_runs_before_anything(table_path: str) -> None:
    from test_transaction import write_table_with_protocol

    features = ("variantType", "someFutureFeature")
    write_table_with_protocol(table_path, Protocol(3, 7, features, features))
    rel = put(table_path, "f.parquet", pa.table({"id": [1]}))
    with pytest.raises(UnsupportedProtocolError, match="someFutureFeature"):
        commit_request(table_path, {"add": [rel]}, run_hooks=False)
    assert versions(table_path) == [0]


# --- idempotency ----------------------------------------------------------------------------


def test_same_request_with_app_transaction_lands_once(table: DeltaTable, table_path: str) -> None:
    rel = put(table_path, "part=x/f1.parquet", data(4))
    request = {"add": [rel], "appId": "dag.ingest", "txnVersion": 7}
    first = commit_request(table, request, run_hooks=False)
    second = commit_request(table, request, run_hooks=False)
    assert not first.noop and second.noop and second.version == first.version
    assert "already at version 7" in second.reason
    os.remove(os.path.join(table_path, rel))  # e.g. vacuumed later: a retry must still be a no-op
    assert commit_request(table, request, run_hooks=False).noop
    assert versions(table_path) == [0, 1]


def test_caller_app_transaction_overrides_and_must_agree(table: DeltaTable, table_path: str) -> None:
    rel = put(table_path, "part=x/f1.parquet", data(1))
    result = commit_request(table, {"add": [rel]}, app_id="cli.app", txn_version=2, run_hooks=False)
    assert table.snapshot().app_transaction_version("cli.app") == 2 and result.app_id == "cli.app"
    with pytest.raises(InvalidCommitRequestError, match="but the caller gave"):
        commit_request(table, {"add": [rel], "appId": "x", "txnVersion": 1}, app_id="y", txn_version=1)
    with pytest.raises(InvalidCommitRequestError, match="both an app id"):
        commit_request(table, {"add": [rel]}, app_id="y")


# --- loading ----------------------------------------------------------------------------


def test_load_from_file_and_errors(tmp_path) -> None:
    good = tmp_path / "req.json"
    good.write_text(json.dumps({"add": [{"path": "a=1/f.parquet", "size": 3}], "remove": [{"path": "old.parquet"}]}))
    req = load_commit_request(str(good))
    assert req.add[0].path == "a=1/f.parquet" and req.remove == ["old.parquet"]
    assert req.operation == "WRITE" and req.operationParameters == {"mode": "Append"} and req.dataChange is True
    assert req.to_dict()["add"] == [{"path": "a=1/f.parquet", "size": 3}]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidCommitRequestError, match="not valid JSON"):
        load_commit_request(str(bad))
    with pytest.raises(InvalidCommitRequestError, match="does not exist"):
        load_commit_request(str(tmp_path / "nope.json"))


# --- CLI --------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([DELTALOG, *args], capture_output=True, text=True, timeout=120)


def test_cli_commit(table: DeltaTable, table_path: str, tmp_path) -> None:
    rel = put(table_path, "part=x/f1.parquet", data(2))
    req = tmp_path / "req.json"
    req.write_text(json.dumps({"add": [rel]}))
    out = run_cli("commit", table_path, "--request", str(req), "--app-id", "cli", "--txn-version", "1", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["version"] == 1 and doc["noop"] is False and doc["app_id"] == "cli"
    again = run_cli("commit", table_path, "--request", str(req), "--app-id", "cli", "--txn-version", "1")
    assert again.returncode == 0 and again.stdout.startswith("no-op: ")
    req.write_text(json.dumps({"add": ["part=x/missing.parquet"]}))
    bad = run_cli("commit", table_path, "--request", str(req), "--json")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("error: invalid commit request:") and bad.stderr.count("\n") == 1
    half = run_cli("commit", table_path, "--request", str(req), "--app-id", "x")
    assert half.returncode == 2 and "--txn-version" in half.stderr
    assert versions(table_path) == [0, 1]


# --- interop ----------------------------------------------------------------------------


def test_deltalake_table_gets_our_appends(tmp_path) -> None:
    """deltalake creates and writes; deltalog commits a request and a Transaction; deltalake reads all rows."""
    path = str(tmp_path / "dl")
    first = pa.table({"id": pa.array([1, 2], pa.int64()), "part": ["a", "b"]})
    deltalake.write_deltalake(path, first, partition_by=["part"])
    put(path, "part=c/ours.parquet", pa.table({"id": pa.array([3], pa.int64())}))
    result = commit_request(path, {"add": ["part=c/ours.parquet"]}, app_id="x", txn_version=1, run_hooks=False)
    assert result.version == 1
    deltalake.write_deltalake(path, pa.table({"id": pa.array([4], pa.int64()), "part": ["a"]}), mode="append")
    dl = deltalake.DeltaTable(path)
    assert dl.version() == 2 and dl.transaction_version("x") == 1
    got = sorted(dl.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert got == [{"id": 1, "part": "a"}, {"id": 2, "part": "b"}, {"id": 3, "part": "c"}, {"id": 4, "part": "a"}]
    assert DeltaTable(path).snapshot().num_files == 4


def test_rows_helper_table_round_trip(table_path: str) -> None:
    t = make_table(table_path, partition_by=["part"])
    rel = put(table_path, "part=q/f.parquet", rows(5, part="q").drop_columns(["part"]))
    commit_request(t, {"add": [rel]}, run_hooks=False)
    assert sorted(r["id"] for r in read_rows(table_path)) == list(range(5))


@pytest.mark.s3
def test_commit_request_on_s3(s3_table_uri, s3_storage_options, s3_deltalake_options) -> None:
    from deltalog.create import create_table

    create_table(s3_table_uri, SCHEMA, partition_by=["part"], storage_options=s3_storage_options, run_hooks=False)
    storage = DeltaTable(s3_table_uri, s3_storage_options).storage
    buf = io.BytesIO()
    pq.write_table(data(4), buf)
    storage.fs.pipe_file(storage.join("part=x y", "f0.parquet"), buf.getvalue())
    storage.list_dir(storage.join("part=x y"))  # this process now has a cached listing of the folder...
    other = fsspec.filesystem("s3", skip_instance_cache=True, **s3_storage_options)
    other.pipe_file(storage.join("part=x y", "f1.parquet"), buf.getvalue())  # ...that another writer outdates
    request = {"add": ["part=x y/f1.parquet"], "appId": "s3.app", "txnVersion": 1}
    first = commit_request(s3_table_uri, request, storage_options=s3_storage_options, run_hooks=False)
    again = commit_request(s3_table_uri, request, storage_options=s3_storage_options, run_hooks=False)
    assert (first.version, first.noop, again.noop) == (1, False, True)
    add = DeltaTable(s3_table_uri, s3_storage_options).snapshot().files.to_pylist()[0]
    assert add["size"] == len(buf.getvalue()) and json.loads(add["stats"])["numRecords"] == 4
    got = deltalake.DeltaTable(s3_table_uri, storage_options=s3_deltalake_options).to_pyarrow_table().to_pylist()
    assert sorted(r["id"] for r in got) == [0, 1, 2, 3] and {r["part"] for r in got} == {"x y"}
    with pytest.raises(FileExistsError):
        storage.put_if_absent(storage.join("_delta_log", f"{1:020d}.json"), b"{}\n")
