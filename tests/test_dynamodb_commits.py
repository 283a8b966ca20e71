"""S3 commits coordinated through DynamoDB (deltalog.storage.dynamodb_commits), against the moto test server.

The protocol is Delta Spark's S3DynamoDBLogStore (and delta-rs's): the entry put only
if absent is the commit point, the temp file then the version file, the entry marked
complete; a reader or writer finishes a commit whose writer died in between.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest

from deltalog import DeltaTable
from deltalog.commit.conflicts import ConflictError
from deltalog.create import create_table
from deltalog.errors import InvalidArgumentError, StorageError
from deltalog.storage.dynamodb_commits import CommitEntry, DynamoDBCommits, table_path_for
from deltalog.storage.filesystem import Storage

pytestmark = [pytest.mark.s3]

SCHEMA = pa.schema([("id", pa.int64())])


def _client(endpoint: str) -> Any:
    import botocore.session

    from s3_server import ACCESS_KEY, REGION, SECRET_KEY

    return botocore.session.get_session().create_client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )


@pytest.fixture
def ddb_table(s3_server: str) -> str:
    """A fresh DynamoDB table with Delta's key schema, on the test server."""
    name = f"delta_log_{uuid.uuid4().hex[:8]}"
    _client(s3_server).create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "tablePath", "AttributeType": "S"},
            {"AttributeName": "fileName", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "tablePath", "KeyType": "HASH"},
            {"AttributeName": "fileName", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


@pytest.fixture
def options(s3_storage_options: dict[str, Any], s3_server: str, ddb_table: str) -> dict[str, Any]:
    return {
        **s3_storage_options,
        "AWS_S3_LOCKING_PROVIDER": "dynamodb",
        "DELTA_DYNAMO_TABLE_NAME": ddb_table,
        "AWS_ENDPOINT_URL_DYNAMODB": s3_server,
    }


@pytest.fixture
def uri(s3_bucket: str) -> str:
    return f"s3a://{s3_bucket}/table"


def _entries(endpoint: str, table: str, table_path: str) -> dict[str, CommitEntry]:
    items = _client(endpoint).query(
        TableName=table,
        KeyConditionExpression="tablePath = :p",
        ExpressionAttributeValues={":p": {"S": table_path}},
        ConsistentRead=True,
    )["Items"]
    return {e.file_name: e for e in map(CommitEntry.from_item, items)}


def _append(uri: str, options: dict[str, Any], name: str) -> int:
    dt = DeltaTable(uri, storage_options=options)
    txn = dt.transaction(operation="WRITE")
    txn.add([{"path": name, "size": 1, "partitionValues": {}, "modificationTime": 0, "dataChange": True}])
    return txn.commit().version


def _name(v: int) -> str:
    return f"{v:020d}.json"


def test_commits_land_with_complete_entries_in_delta_sparks_schema(uri, options, s3_server, ddb_table):
    create_table(uri, SCHEMA, storage_options=options)
    assert _append(uri, options, "a.parquet") == 1
    storage = Storage(uri, options)
    entries = _entries(s3_server, ddb_table, "s3a://" + uri.split("://")[1])
    assert sorted(entries) == [_name(0), _name(1)]
    # The raw items, attribute for attribute as S3DynamoDBLogStore's dbResultToCommitEntry reads them.
    raw = _client(s3_server).get_item(
        TableName=ddb_table, Key={"tablePath": {"S": uri}, "fileName": {"S": _name(1)}}, ConsistentRead=True
    )["Item"]
    assert {k: next(iter(v)) for k, v in raw.items()} == {
        "tablePath": "S",
        "fileName": "S",
        "tempPath": "S",
        "complete": "S",
        "expireTime": "N",
    }
    assert raw["complete"]["S"] == "true" and raw["expireTime"]["N"].isdigit()
    now = time.time()
    for name, entry in entries.items():
        assert entry.complete and entry.table_path == uri
        assert entry.temp_path.startswith(f".tmp/{name}.")
        assert now + 86_000 < entry.expire_time < now + 86_800  # a day on, as Delta Spark's default
        # The version file holds what the temp file holds (the temp file is left, as Delta Spark leaves it).
        temp = storage.read_bytes(storage.join("_delta_log", *entry.temp_path.split("/")))
        assert storage.read_bytes(storage.join("_delta_log", name)) == temp
    assert DeltaTable(uri, storage_options=options).snapshot().files.num_rows == 1


def test_racing_writers_of_one_version_exactly_one_wins(uri, options, s3_server, ddb_table):
    create_table(uri, SCHEMA, storage_options=options)
    storage = Storage(uri, options)
    target = storage.join("_delta_log", _name(1))
    outcomes: list[str] = []
    barrier = threading.Barrier(6)

    def write(i: int) -> None:
        barrier.wait()
        try:
            Storage(uri, options).put_if_absent(target, f'{{"commitInfo":{{"n":{i}}}}}\n'.encode())
            outcomes.append(f"won {i}")
        except FileExistsError:
            outcomes.append("lost")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o.startswith("won")]
    assert len(winners) == 1 and len(outcomes) == 6, outcomes
    assert storage.read_bytes(target) == f'{{"commitInfo":{{"n":{winners[0].split()[1]}}}}}\n'.encode()
    # The losers' temp files are gone: only the winner's entry names one.
    temps = [f.name for f in storage.list_dir(storage.join("_delta_log", ".tmp"))]
    assert sorted(temps) == sorted(e.temp_path.split("/")[1] for e in _entries(s3_server, ddb_table, uri).values())


def test_a_conflicting_second_writer_gets_a_conflict_error(uri, options):
    create_table(uri, SCHEMA, storage_options=options)
    _append(uri, options, "a.parquet")
    first = DeltaTable(uri, storage_options=options).transaction(operation="DELETE")
    second = DeltaTable(uri, storage_options=options).transaction(operation="DELETE")
    for txn in (first, second):
        txn.remove([{"path": "a.parquet", "deletionTimestamp": 0, "dataChange": True}])
    assert first.commit().version == 2
    with pytest.raises(ConflictError):
        second.commit()


def _crash_after_entry(storage: Storage, commits: DynamoDBCommits, version: int, body: bytes) -> None:
    """What a Delta Spark writer that died right after its commit point leaves: a temp file and an
    incomplete entry, put as S3DynamoDBLogStore's createPutItemRequest puts it (raw, not through our code)."""
    temp = f".tmp/{_name(version)}.{uuid.uuid4()}"
    storage.write_atomic(storage.join("_delta_log", *temp.split("/")), body)
    item = {
        "tablePath": {"S": commits.table_path},
        "fileName": {"S": _name(version)},
        "tempPath": {"S": temp},
        "complete": {"S": "false"},
    }
    commits.client.put_item(TableName=commits.table_name, Item=item, Expected={"fileName": {"Exists": False}})


def _body(n: str) -> bytes:
    add = {"path": n, "size": 1, "partitionValues": {}, "modificationTime": 0, "dataChange": True}
    import json

    return (json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n" + json.dumps({"add": add}) + "\n").encode()


def test_a_reader_finishes_the_commit_a_crashed_writer_left(uri, options, s3_server, ddb_table):
    create_table(uri, SCHEMA, storage_options=options)
    storage = Storage(uri, options)
    assert storage.dynamodb is not None
    _crash_after_entry(storage, storage.dynamodb, 1, _body("crashed.parquet"))
    assert not storage.exists(storage.join("_delta_log", _name(1)))

    snap = DeltaTable(uri, storage_options=options).snapshot()  # lists the log: recovers v1 first
    assert snap.version == 1 and snap.files.column("path").to_pylist() == ["crashed.parquet"]
    assert storage.read_bytes(storage.join("_delta_log", _name(1))) == _body("crashed.parquet")
    entry = _entries(s3_server, ddb_table, uri)[_name(1)]
    assert entry.complete and entry.expire_time is not None


def test_a_writer_finishes_the_previous_commit_before_its_own(uri, options, s3_server, ddb_table):
    create_table(uri, SCHEMA, storage_options=options)
    storage = Storage(uri, options)
    assert storage.dynamodb is not None
    _crash_after_entry(storage, storage.dynamodb, 1, _body("crashed.parquet"))
    # Straight to version 2, without listing the log first (a writer whose snapshot is from elsewhere).
    storage.put_if_absent(storage.join("_delta_log", _name(2)), _body("next.parquet"))
    assert storage.read_bytes(storage.join("_delta_log", _name(1))) == _body("crashed.parquet")
    assert all(e.complete for e in _entries(s3_server, ddb_table, uri).values())
    assert sorted(DeltaTable(uri, storage_options=options).snapshot().files.column("path").to_pylist()) == [
        "crashed.parquet",
        "next.parquet",
    ]


def test_a_missing_dynamodb_table_is_one_clear_error_and_nothing_is_written(uri, options, s3_storage_options):
    create_table(uri, SCHEMA, storage_options=s3_storage_options)  # v0 without coordination
    bad = {**options, "DELTA_DYNAMO_TABLE_NAME": "no_such_table"}
    storage = Storage(uri, bad)
    with pytest.raises(InvalidArgumentError, match="'no_such_table'.*does not exist") as info:
        storage.put_if_absent(storage.join("_delta_log", _name(1)), _body("x.parquet"))
    assert info.value.exit_code == 2
    assert [f.name for f in Storage(uri, s3_storage_options).list_log()] == [_name(0)]
    with pytest.raises(InvalidArgumentError, match="no_such_table"):
        DeltaTable(uri, storage_options=bad).snapshot()


def test_bad_coordination_options_are_refused(uri, options, tmp_path):
    with pytest.raises(InvalidArgumentError, match="AWS_S3_LOCKING_PROVIDER must be 'dynamodb'"):
        Storage(uri, {**options, "AWS_S3_LOCKING_PROVIDER": "zookeeper"})
    with pytest.raises(InvalidArgumentError, match="not an s3:// or s3a:// URI"):
        Storage(str(tmp_path / "t"), {"AWS_S3_LOCKING_PROVIDER": "dynamodb"})
    with pytest.raises(InvalidArgumentError, match="AWS_S3_LOCKING_PROVIDER is not"):
        Storage(uri, {k: v for k, v in options.items() if k != "AWS_S3_LOCKING_PROVIDER"})


def test_table_path_is_the_uri_without_user_info_or_trailing_slash():
    assert table_path_for("s3a://bucket/path/table/") == "s3a://bucket/path/table"
    assert table_path_for("s3://key:secret@bucket/t") == "s3://bucket/t"
    assert table_path_for("s3a://bucket//a///t") == "s3a://bucket/a/t"


def test_an_unreachable_dynamodb_is_a_storage_error(uri, options, s3_storage_options):
    create_table(uri, SCHEMA, storage_options=s3_storage_options)
    storage = Storage(uri, {**options, "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:9"})
    with pytest.raises(StorageError, match="DynamoDB"):
        storage.list_log()


def test_the_cli_names_a_missing_dynamodb_table_in_one_line(uri, s3_server, s3_storage_options, capsys):
    from deltalog.cli import main

    create_table(uri, SCHEMA, storage_options=s3_storage_options)
    args = ["snapshot", uri]
    for kv in (
        f"endpoint_url={s3_server}",
        "key=testing",
        "secret=testing",
        "AWS_S3_LOCKING_PROVIDER=dynamodb",
        "DELTA_DYNAMO_TABLE_NAME=no_such_table",
        f"AWS_ENDPOINT_URL_DYNAMODB={s3_server}",
        "AWS_REGION_DYNAMODB=us-east-1",
    ):
        args += ["--storage-option", kv]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'no_such_table'" in err[0] and "does not exist" in err[0], err


def test_coordination_options_keep_the_fast_s3_reads(uri, options):
    # The DynamoDB options are deltalog's own: neither s3fs nor obstore sees them (an option
    # obstore does not know would turn its reads off).
    storage = Storage(uri, options)
    assert storage._reads() is not None
    ours = {k for k in options if k.isupper()}
    assert ours and not ours & set(storage.fs.storage_options)


def test_a_writer_that_loses_to_a_crashed_writer_finishes_its_commit_and_retries(uri, options, s3_server, ddb_table):
    create_table(uri, SCHEMA, storage_options=options)
    txn = DeltaTable(uri, storage_options=options).transaction(operation="WRITE")  # reads v0
    storage = Storage(uri, options)
    assert storage.dynamodb is not None
    _crash_after_entry(storage, storage.dynamodb, 1, _body("crashed.parquet"))  # v1 taken, never copied
    txn.add([{"path": "mine.parquet", "size": 1, "partitionValues": {}, "modificationTime": 0, "dataChange": True}])
    result = txn.commit()  # loses v1 in DynamoDB, finishes the crashed v1, lands at v2
    assert result.version == 2 and result.attempts == 2
    assert all(e.complete for e in _entries(s3_server, ddb_table, uri).values())
    paths = DeltaTable(uri, storage_options=options).snapshot().files.column("path").to_pylist()
    assert sorted(paths) == ["crashed.parquet", "mine.parquet"]


def test_an_incomplete_entry_without_its_temp_file_is_a_clear_storage_error(uri, options):
    create_table(uri, SCHEMA, storage_options=options)
    storage = Storage(uri, options)
    assert storage.dynamodb is not None
    _crash_after_entry(storage, storage.dynamodb, 1, _body("lost.parquet"))
    temps = storage.list_dir(storage.join("_delta_log", ".tmp"))
    for f in temps:
        if f.name.startswith(_name(1)):
            storage.delete(f.path)
    with pytest.raises(StorageError, match=r"cannot finish the incomplete commit 0+1\.json .*_delta_log/\.tmp/"):
        DeltaTable(uri, storage_options=options).snapshot()
    assert not storage.exists(storage.join("_delta_log", _name(1)))
