"""Table creation: the protocol follows the features used, existing tables are refused, deltalake reads the result."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.create import choose_protocol, create_table
from deltalog.errors import InvalidArgumentError, TableAlreadyExistsError, UnsupportedProtocolError
from deltalog.ingest import commit_request
from deltalog.protocol.table_protocol import Protocol

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.date32())])
DELTALOG = os.path.join(os.path.dirname(sys.executable), "deltalog")


def first_commit(path: str) -> list[dict]:
    with open(os.path.join(path, "_delta_log", f"{0:020d}.json")) as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.mark.parametrize(
    ("schema", "config", "expected"),
    [
        (SCHEMA, {}, Protocol(1, 2)),
        (SCHEMA, {"delta.appendOnly": "true"}, Protocol(1, 2)),
        (SCHEMA, {"delta.enableInCommitTimestamps": "true"}, Protocol(1, 7, None, ("inCommitTimestamp",))),
        (
            SCHEMA,
            {"delta.enableDeletionVectors": "true"},
            Protocol(3, 7, ("deletionVectors",), ("deletionVectors",)),
        ),
        (
            SCHEMA.append(pa.field("ts", pa.timestamp("us"))),
            {},
            Protocol(3, 7, ("timestampNtz",), ("timestampNtz",)),
        ),
        (
            SCHEMA.append(pa.field("ts", pa.timestamp("us"))),
            {"delta.appendOnly": "true", "delta.enableInCommitTimestamps": "true"},
            Protocol(3, 7, ("timestampNtz",), ("appendOnly", "inCommitTimestamp", "timestampNtz")),
        ),
        (SCHEMA, {"delta.constraints.positive": "id > 0"}, Protocol(1, 7, None, ("checkConstraints",))),
        (SCHEMA, {"delta.feature.domainMetadata": "supported"}, Protocol(1, 7, None, ("domainMetadata",))),
        (SCHEMA.append(pa.field("ts", pa.timestamp("us", tz="UTC"))), {}, Protocol(1, 2)),
    ],
)
def test_protocol_is_chosen_from_needed_features(tmp_path, schema, config, expected) -> None:
    path = str(tmp_path / "t")
    result = create_table(path, schema, configuration=config, run_hooks=False)
    assert result.version == 0 and result.operation == "CREATE TABLE"
    snap = DeltaTable(path).snapshot()
    assert snap.protocol == expected
    assert snap.metadata.configuration == {k: v for k, v in config.items() if not k.startswith("delta.feature.")}
    dl = deltalake.DeltaTable(path)  # deltalake opens every one of them and sees the same protocol
    assert (dl.protocol().min_reader_version, dl.protocol().min_writer_version) == (
        expected.min_reader_version,
        expected.min_writer_version,
    )
    assert sorted(dl.protocol().writer_features or []) == sorted(expected.writer_features or [])
    if "deletionVectors" not in (expected.reader_features or ()):  # deltalake's pyarrow reader refuses DVs
        assert dl.to_pyarrow_table().num_rows == 0


def test_in_commit_timestamps_from_version_zero(tmp_path) -> None:
    path = str(tmp_path / "t")
    result = create_table(path, SCHEMA, configuration={"delta.enableInCommitTimestamps": "true"}, run_hooks=False)
    actions = first_commit(path)
    assert list(actions[0]) == ["commitInfo"]
    assert actions[0]["commitInfo"]["inCommitTimestamp"] == result.in_commit_timestamp
    config = next(a["metaData"] for a in actions if "metaData" in a)["configuration"]
    assert "delta.inCommitTimestampEnablementVersion" not in config  # enabled since creation


def test_column_mapping_gives_ids_and_physical_names(tmp_path) -> None:
    path = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("s", pa.struct([("x", pa.int32())])), ("p", pa.string())])
    create_table(path, schema, partition_by=["p"], configuration={"delta.columnMapping.mode": "name"}, run_hooks=False)
    snap = DeltaTable(path).snapshot()
    assert snap.protocol == Protocol(3, 7, ("columnMapping",), ("columnMapping",))
    md = next(a["metaData"] for a in first_commit(path) if "metaData" in a)
    fields = json.loads(md["schemaString"])["fields"]
    ids = [
        fields[0]["metadata"]["delta.columnMapping.id"],
        fields[1]["type"]["fields"][0]["metadata"]["delta.columnMapping.id"],
    ]
    assert all(isinstance(i, int) for i in ids)
    names = [f["metadata"]["delta.columnMapping.physicalName"] for f in fields]
    assert len(set(names)) == 3 and all(n.startswith("col-") for n in names)
    assert md["configuration"]["delta.columnMapping.maxColumnId"] == "4"
    assert deltalake.DeltaTable(path).schema().to_arrow().names == ["id", "s", "p"]


def test_partitioned_table_and_deltalake_reads_our_appends(tmp_path) -> None:
    path = str(tmp_path / "t")
    create_table(path, SCHEMA, partition_by=["day"], configuration={"delta.appendOnly": "true"}, run_hooks=False)
    os.makedirs(os.path.join(path, "day=2024-05-01"))
    pq.write_table(
        pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}),
        os.path.join(path, "day=2024-05-01", "f.parquet"),
    )
    commit_request(path, {"add": ["day=2024-05-01/f.parquet"]}, run_hooks=False)
    dl = deltalake.DeltaTable(path)
    assert dl.metadata().partition_columns == ["day"]
    got = sorted(dl.to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert got == [
        {"id": 1, "name": "a", "day": dt.date(2024, 5, 1)},
        {"id": 2, "name": "b", "day": dt.date(2024, 5, 1)},
    ]


def test_existing_tables_are_refused(tmp_path) -> None:
    ours = str(tmp_path / "ours")
    create_table(ours, SCHEMA, run_hooks=False)
    before = os.listdir(os.path.join(ours, "_delta_log"))
    with pytest.raises(TableAlreadyExistsError, match="already exists"):
        create_table(ours, SCHEMA, run_hooks=False)
    assert os.listdir(os.path.join(ours, "_delta_log")) == before
    theirs = str(tmp_path / "theirs")
    deltalake.write_deltalake(theirs, pa.table({"id": [1]}))
    with pytest.raises(TableAlreadyExistsError):
        create_table(theirs, SCHEMA, run_hooks=False)
    assert TableAlreadyExistsError("x").exit_code == 1


def test_concurrent_creates_exactly_one_wins(tmp_path) -> None:
    path = str(tmp_path / "t")
    outcomes: list[str] = []

    def create() -> None:
        try:
            create_table(path, SCHEMA, run_hooks=False)
            outcomes.append("created")
        except TableAlreadyExistsError:
            outcomes.append("refused")

    threads = [threading.Thread(target=create) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["created"] + ["refused"] * 5
    assert sorted(os.listdir(os.path.join(path, "_delta_log"))) == [f"{0:020d}.json"]


def test_unsupported_features_are_refused_before_writing(tmp_path) -> None:
    path = str(tmp_path / "t")
    with pytest.raises(UnsupportedProtocolError, match="rowTracking"):
        create_table(path, SCHEMA, configuration={"delta.enableRowTracking": "true"})
    ident = pa.schema([pa.field("id", pa.int64(), metadata={"delta.identity.start": "1"})])
    with pytest.raises(UnsupportedProtocolError, match="identityColumns"):
        create_table(path, ident)
    assert not os.path.exists(path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"partition_by": ["nope"]}, "not in the schema"),
        ({"partition_by": ["id", "name", "day"]}, "at least one data column"),
        ({"schema": pa.schema([("a", pa.int64()), ("A", pa.int64())])}, "unique regardless of case"),
        (
            {"schema": pa.schema([("a", pa.int64()), ("s", pa.struct([("x", pa.int8())]))]), "partition_by": ["s"]},
            "nested",
        ),
        ({"schema": pa.schema([])}, "no columns"),
        ({"configuration": {"delta.columnMapping.mode": "magic"}}, "none, name or id"),
        ({"configuration": {"delta.minWriterVersion": "7"}}, "not supported"),
        ({"configuration": {"k": None}}, "string value"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, message) -> None:
    path = str(tmp_path / "t")
    args = {"schema": SCHEMA, **kwargs}
    with pytest.raises(InvalidArgumentError, match=message):
        create_table(path, **args)
    assert not os.path.exists(path)


def test_choose_protocol_is_minimal() -> None:
    assert choose_protocol(set()) == Protocol(1, 2)
    assert choose_protocol({"invariants"}) == Protocol(1, 2)
    assert choose_protocol({"invariants", "columnMapping"}) == Protocol(
        3, 7, ("columnMapping",), ("columnMapping", "invariants")
    )


def test_cli_create(tmp_path) -> None:
    src = tmp_path / "sample.parquet"
    pq.write_table(
        pa.table({"id": pa.array([1], pa.int64()), "name": ["x"], "day": pa.array([dt.date(2024, 1, 1)])}), src
    )
    path = str(tmp_path / "t")
    out = subprocess.run(
        [
            DELTALOG,
            "create",
            path,
            "--schema-from",
            str(src),
            "--partition-by",
            "day",
            "--property",
            "delta.appendOnly=true",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["version"] == 0
    snap = DeltaTable(path).snapshot()
    assert snap.partition_columns == ["day"] and snap.metadata.configuration == {"delta.appendOnly": "true"}
    assert snap.schema.names == ["id", "name", "day"]
    again = subprocess.run(
        [DELTALOG, "create", path, "--schema-from", str(src)], capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 1 and again.stderr.startswith("error: a Delta table already exists")
    missing = subprocess.run(
        [DELTALOG, "create", str(tmp_path / "u"), "--schema-from", str(tmp_path / "no.parquet")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr
    assert not os.path.exists(tmp_path / "u")
