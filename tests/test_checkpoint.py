"""Checkpoints: content per the protocol, _last_checkpoint, V2 + sidecars, interop, crashes, the hook."""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import subprocess
import sys
import textwrap
import time

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.cli import main
from deltalog.commit.transaction import Transaction
from deltalog.errors import InvalidArgumentError, OperationRefusedError, UnsupportedProtocolError
from deltalog.log.actions import Metadata
from deltalog.log_maintenance import create_checkpoint, last_checkpoint_checksum
from deltalog.protocol.properties import parse_interval_ms
from deltalog.protocol.schema import arrow_schema_to_schema_string
from deltalog.protocol.table_protocol import Protocol
from helpers import append, make_table, rows, write_data_file

DAY_MS = 86_400_000
V2 = Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint",))
HERE = os.path.dirname(os.path.abspath(__file__))


def log_dir(path: str) -> str:
    return os.path.join(path, "_delta_log")


def log_files(path: str) -> list[str]:
    return sorted(os.listdir(log_dir(path)))


def drop_commits_before(path: str, version: int) -> None:
    """Delete the JSON commits before ``version`` so readers must use the checkpoint."""
    for v in range(version):
        p = os.path.join(log_dir(path), f"{v:020d}.json")
        if os.path.exists(p):
            os.unlink(p)


def theirs(path: str, version: int | None = None) -> set[str]:
    d = deltalake.DeltaTable(path, version=version)
    return set(d.get_add_actions(flatten=True).column("path").to_pylist())


def ours(path: str, version: int | None = None) -> set[str]:
    return set(DeltaTable(path).snapshot(version).file_paths())


def remove_action(snapshot, path: str, ts: int) -> dict:
    return {"path": path, "deletionTimestamp": ts, "dataChange": True, "extendedFileMetadata": False}


def populated(path: str, **kw) -> DeltaTable:
    """A partitioned table: 4 appends, one remove, no automatic checkpoints."""
    conf = {"delta.checkpointInterval": "1000", **kw.pop("configuration", {})}
    t = make_table(path, partition_by=["part"], configuration=conf, **kw)
    for i in range(4):
        append(t, rows(3, i * 3, part=f"p{i % 2}"), partition={"part": f"p{i % 2}"})
    snap = t.snapshot()
    txn = Transaction(t.storage, snap, operation="DELETE")
    txn.remove([remove_action(snap, snap.file_paths()[0], snap.files.column("modificationTime")[0].as_py())])
    txn.commit()
    return t


# --- content ------------------------------------------------------------------------------------


def test_tombstones_expire_on_the_tables_clock_not_a_clock_running_ahead(table_path):
    """A maintenance host whose clock runs days ahead keeps the tombstones the table's own time has not expired.

    Delta Spark's VACUUM keeps a removed file only while its tombstone is in the snapshot: a tombstone
    dropped early lets it delete a file that time travel inside the retention still reads.
    """
    t = make_table(table_path, configuration={"delta.checkpointInterval": "1000"})
    for i in range(2):
        append(t, rows(2, i * 2))
    snap = t.snapshot()
    a, b = snap.file_paths()
    now = int(time.time() * 1000)
    txn = Transaction(t.storage, snap, operation="DELETE")
    txn.remove([remove_action(snap, a, now - 8 * DAY_MS), remove_action(snap, b, now - DAY_MS)])
    txn.commit()
    ahead = create_checkpoint(t, now_ms=now + 30 * DAY_MS)
    # On the host's clock both would have expired; on the table's only the eight-day-old one has.
    assert (ahead.num_remove_tombstones, ahead.num_expired_tombstones) == (1, 1)
    kept = pq.read_table(os.path.join(log_dir(table_path), ahead.files[0])).column("remove").to_pylist()
    assert [r["path"] for r in kept if r] == [b]


def test_classic_checkpoint_holds_the_reconciled_state(table_path):
    t = make_table(
        table_path,
        partition_by=["part"],
        configuration={"delta.checkpointInterval": "1000"},
        protocol=Protocol(1, 7, None, ("domainMetadata",)),
    )
    # Tombstones expire on the table's clock (the earlier of this one and the version's commit time).
    now = int(time.time() * 1000)
    for i in range(3):
        append(t, rows(2, i * 2, part="a"), partition={"part": "a"})
    snap = t.snapshot()
    a, b, c = snap.file_paths()
    txn = Transaction(t.storage, snap, operation="DELETE")
    txn.remove([remove_action(snap, a, now - 8 * DAY_MS), remove_action(snap, b, now - DAY_MS)])
    txn.set_app_transaction("dag.task", 7)
    txn.set_domain_metadata("my.domain", '{"k":1}')
    txn.commit()
    result = create_checkpoint(t, now_ms=now)
    assert (result.version, result.kind, result.files) == (4, "classic", ["00000000000000000004.checkpoint.parquet"])
    assert (result.num_add_files, result.num_remove_tombstones, result.num_expired_tombstones) == (1, 1, 1)
    table = pq.read_table(os.path.join(log_dir(table_path), result.files[0]))
    assert "commitInfo" not in table.column_names and "cdc" not in table.column_names
    assert {f.name for f in table.schema.field("remove").type} & {"stats", "tags"} == set()
    actions = [{k: v for k, v in r.items() if v is not None} for r in table.to_pylist()]
    kinds = [next(iter(a)) for a in actions]
    assert sorted(kinds) == sorted(["protocol", "metaData", "txn", "domainMetadata", "add", "remove"])
    by_kind = {next(iter(a)): next(iter(a.values())) for a in actions}
    assert by_kind["add"]["path"] == c
    assert by_kind["remove"]["path"] == b  # the expired tombstone (a) is gone
    assert by_kind["txn"]["appId"] == "dag.task" and by_kind["txn"]["version"] == 7
    assert by_kind["domainMetadata"] == {"domain": "my.domain", "configuration": '{"k":1}', "removed": False}
    assert by_kind["protocol"]["writerFeatures"] == ["domainMetadata"]
    assert result.num_actions == table.num_rows == 6
    # Readers that must use the checkpoint see the same state.
    drop_commits_before(table_path, 4)
    snap = DeltaTable(table_path).snapshot()
    assert snap.file_paths() == [c] and snap.app_transaction_version("dag.task") == 7
    assert set(snap.domain_metadata) == {"my.domain"}
    assert theirs(table_path) == {c}


def test_last_checkpoint_fields_and_checksum(table_path):
    t = populated(table_path)
    result = create_checkpoint(t)
    doc = json.loads(open(os.path.join(log_dir(table_path), "_last_checkpoint")).read())
    assert list(doc)[:2] == ["version", "size"]
    assert doc["version"] == result.version == 5
    assert doc["size"] == result.num_actions
    assert doc["numOfAddFiles"] == result.num_add_files == 3
    assert doc["sizeInBytes"] == os.path.getsize(os.path.join(log_dir(table_path), result.files[0]))
    assert "parts" not in doc
    names = [f["name"] for f in doc["checkpointSchema"]["fields"]]
    assert {"add", "remove", "metaData", "protocol", "txn"} <= set(names)
    assert doc["checksum"] == last_checkpoint_checksum(doc)
    assert len(doc["checksum"]) == 32
    assert deltalake.DeltaTable(table_path).version() == 5


def test_checksum_matches_the_protocol_example():
    doc = {
        "k0": "'v 0'",
        "checksum": "adsaskfljadfkjadfkj",
        "k1": {"k2": 2, "k3": ["v3", [1, 2], {"k4": "v4", "k5": ["v5", "v6", "v7"]}]},
    }
    assert last_checkpoint_checksum(doc) == "6a92d155a59bf2eecbd4b4ec7fd1f875"


STATS_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("amount", pa.decimal128(10, 2)),
        ("nested", pa.struct([("x", pa.int32())])),
        ("p_int", pa.int32()),
        ("p_date", pa.date32()),
    ]
)


def _stats_table(path: str, stats: list[str | None], conf: dict[str, str] | None = None) -> DeltaTable:
    t = make_table(
        path,
        STATS_SCHEMA,
        partition_by=["p_int", "p_date"],
        configuration={
            "delta.checkpoint.writeStatsAsStruct": "true",
            "delta.checkpointInterval": "1000",
            **(conf or {}),
        },
    )
    data = pa.table({"id": [1]})
    adds = []
    for i, s in enumerate(stats):
        add = write_data_file(path, data, {"p_int": str(i), "p_date": "2024-02-0" + str(i + 1)})
        add["stats"] = s
        adds.append(add)
    adds[-1]["partitionValues"]["p_int"] = ""  # an empty partition value is null
    txn = Transaction(t.storage, t.snapshot(), operation="WRITE")
    txn.add(adds)
    txn.commit()
    return t


def test_stats_parsed_and_partition_values_parsed(table_path):
    good = json.dumps(
        {
            "numRecords": 5,
            "minValues": {
                "id": 1,
                "name": "a",
                "day": "2024-01-01",
                "ts": "2024-01-01T10:00:00.000Z",
                "amount": 1.25,
                "nested": {"x": 3},
            },
            "maxValues": {
                "id": 9,
                "name": "z",
                "day": "2024-01-31",
                "ts": "2024-01-02T00:00:00.000Z",
                "amount": "99.99",
                "nested": {"x": 4},
            },
            "nullCount": {"id": 0, "name": 2, "nested": {"x": 1}},
            "tightBounds": True,
            "unknownStat": 1,
        }
    )
    t = _stats_table(table_path, [good, None])
    result = create_checkpoint(t)
    assert result.warnings == []
    add = pq.read_table(os.path.join(log_dir(table_path), result.files[0]), columns=["add"]).column("add")
    adds = sorted(
        (a for a in add.to_pylist() if a), key=lambda a: a["size"] + a["partitionValues_parsed"]["p_date"].day
    )
    parsed = {a["partitionValues_parsed"]["p_date"]: a for a in adds}
    first = parsed[dt.date(2024, 2, 1)]
    assert first["partitionValues_parsed"] == {"p_int": 0, "p_date": dt.date(2024, 2, 1)}
    sp = first["stats_parsed"]
    assert sp["numRecords"] == 5 and sp["tightBounds"] is True
    assert sp["minValues"]["day"] == dt.date(2024, 1, 1)
    assert sp["minValues"]["ts"] == dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC)
    assert str(sp["minValues"]["amount"]) == "1.25" and str(sp["maxValues"]["amount"]) == "99.99"
    assert sp["maxValues"]["nested"] == {"x": 4} and sp["nullCount"] == {
        "id": 0,
        "name": 2,
        "day": None,
        "ts": None,
        "amount": None,
        "nested": {"x": 1},
    }
    second = parsed[dt.date(2024, 2, 2)]
    assert second["partitionValues_parsed"]["p_int"] is None
    assert second["stats_parsed"] is None
    assert json.loads(first["stats"])["numRecords"] == 5  # writeStatsAsJson stays on by default
    drop_commits_before(table_path, result.version)
    assert theirs(table_path) == ours(table_path) and len(ours(table_path)) == 2


def test_unparsable_stats_leave_out_the_parsed_columns_with_a_warning(table_path):
    t = _stats_table(table_path, ['{"numRecords":1,"minValues":{"day":"not a date"}}', None])
    result = create_checkpoint(t)
    assert any("stats_parsed" in w for w in result.warnings)
    fields = {f.name for f in pq.read_schema(os.path.join(log_dir(table_path), result.files[0])).field("add").type}
    assert "stats_parsed" not in fields and "partitionValues_parsed" not in fields
    drop_commits_before(table_path, result.version)
    assert len(ours(table_path)) == 2 == len(theirs(table_path))


def test_write_stats_as_json_false_leaves_out_stats(table_path):
    t = _stats_table(table_path, ['{"numRecords":1}'], {"delta.checkpoint.writeStatsAsJson": "false"})
    result = create_checkpoint(t)
    fields = {f.name for f in pq.read_schema(os.path.join(log_dir(table_path), result.files[0])).field("add").type}
    assert "stats" not in fields and "stats_parsed" in fields


def test_column_mapping_uses_physical_names_in_parsed_columns(table_path):
    schema = pa.schema(
        [
            pa.field(
                "id", pa.int64(), metadata={"delta.columnMapping.id": "1", "delta.columnMapping.physicalName": "col-a"}
            ),
            pa.field(
                "p", pa.string(), metadata={"delta.columnMapping.id": "2", "delta.columnMapping.physicalName": "col-b"}
            ),
        ]
    )
    t = make_table(
        table_path,
        schema,
        partition_by=["p"],
        configuration={
            "delta.columnMapping.mode": "name",
            "delta.columnMapping.maxColumnId": "2",
            "delta.checkpoint.writeStatsAsStruct": "true",
        },
        protocol=Protocol(2, 5),
    )
    add = write_data_file(table_path, pa.table({"col-a": [1]}))
    add["partitionValues"] = {"col-b": "x"}
    add["stats"] = '{"numRecords":1,"minValues":{"col-a":1},"maxValues":{"col-a":1},"nullCount":{"col-a":0}}'
    txn = Transaction(t.storage, t.snapshot(), operation="WRITE")
    txn.add([add])
    txn.commit()
    result = create_checkpoint(t)
    rec = next(
        a for a in pq.read_table(os.path.join(log_dir(table_path), result.files[0])).column("add").to_pylist() if a
    )
    assert rec["partitionValues_parsed"] == {"col-b": "x"}
    assert rec["stats_parsed"]["minValues"] == {"col-a": 1}


# --- V2 -----------------------------------------------------------------------------------------


def test_v2_checkpoint_with_sidecars(table_path):
    t = populated(table_path, protocol=V2)
    result = create_checkpoint(t, sidecar_max_actions=2)
    assert result.kind == "v2" and len(result.sidecars) == 2  # 3 adds + 1 recent tombstone, 2 per sidecar
    (top,) = result.files
    assert top.startswith("00000000000000000005.checkpoint.") and top.endswith(".json")
    lines = [json.loads(x) for x in open(os.path.join(log_dir(table_path), top)).read().splitlines()]
    assert lines[0] == {"checkpointMetadata": {"version": 5}}
    kinds = [next(iter(x)) for x in lines]
    assert "add" not in kinds and "remove" not in kinds and kinds.count("sidecar") == 2
    for s in (x["sidecar"] for x in lines if "sidecar" in x):
        full = os.path.join(log_dir(table_path), "_sidecars", s["path"])
        assert os.path.getsize(full) == s["sizeInBytes"]
        assert set(pq.read_schema(full).names) == {"add", "remove"}
    doc = json.loads(open(os.path.join(log_dir(table_path), "_last_checkpoint")).read())
    assert doc["version"] == 5 and doc["numOfAddFiles"] == 3 and doc["checksum"] == last_checkpoint_checksum(doc)
    expected = ours(table_path)
    drop_commits_before(table_path, 5)
    assert ours(table_path) == expected == theirs(table_path)
    assert DeltaTable(table_path).snapshot().segment.checkpoint.kind == "v2"


def test_checkpoint_policy_v2_without_the_feature_writes_classic(table_path):
    t = populated(table_path, configuration={"delta.checkpointPolicy": "v2"})
    result = create_checkpoint(t)
    assert result.kind == "classic" and "v2Checkpoint" in result.warnings[0]
    assert not os.path.exists(os.path.join(log_dir(table_path), "_sidecars"))


# --- interop ------------------------------------------------------------------------------------


def test_deltalake_reads_every_retained_version_after_our_checkpoints(table_path):
    t = populated(table_path)
    create_checkpoint(t, version=2)
    for i in range(3):
        append(t, rows(2, 100 + i, part="p9"), partition={"part": "p9"})
    create_checkpoint(t, version=6)
    append(t, rows(1, 200, part="p9"), partition={"part": "p9"})
    drop_commits_before(table_path, 2)  # as log cleanup would: version 2 is now the oldest
    latest = DeltaTable(table_path).version()
    for v in range(2, latest + 1):
        assert theirs(table_path, v) == ours(table_path, v), v
    assert theirs(table_path) == ours(table_path) and len(ours(table_path)) == 7


def test_we_read_and_extend_checkpoints_written_by_deltalake(table_path):
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "part": ["a", "b"]})
    deltalake.write_deltalake(table_path, data, partition_by=["part"])
    deltalake.write_deltalake(table_path, data, mode="append", partition_by=["part"])
    deltalake.DeltaTable(table_path).create_checkpoint()
    deltalake.write_deltalake(table_path, data, mode="overwrite", partition_by=["part"])
    drop_commits_before(table_path, 1)
    for v in (1, 2):
        assert ours(table_path, v) == theirs(table_path, v)
    result = create_checkpoint(table_path)
    assert result.version == 2 and result.num_add_files == 2
    drop_commits_before(table_path, 2)
    assert ours(table_path) == theirs(table_path)
    assert deltalake.DeltaTable(table_path).to_pyarrow_table().num_rows == 2


# --- reruns, the hint, refusals -----------------------------------------------------------------


def test_existing_checkpoint_is_reused_and_a_lost_hint_repaired(table_path):
    t = populated(table_path)
    first = create_checkpoint(t)
    os.unlink(os.path.join(log_dir(table_path), "_last_checkpoint"))
    mtime = os.path.getmtime(os.path.join(log_dir(table_path), first.files[0]))
    again = create_checkpoint(t)
    assert again.already_existed and again.last_checkpoint_updated
    assert (again.num_actions, again.num_add_files, again.size_in_bytes) == (
        first.num_actions,
        first.num_add_files,
        first.size_in_bytes,
    )
    assert os.path.getmtime(os.path.join(log_dir(table_path), first.files[0])) == mtime
    doc = json.loads(open(os.path.join(log_dir(table_path), "_last_checkpoint")).read())
    assert doc["version"] == 5 and doc["checksum"] == last_checkpoint_checksum(doc)


def test_an_older_checkpoint_never_moves_the_hint_back(table_path):
    t = populated(table_path)
    create_checkpoint(t)
    result = create_checkpoint(t, version=2)
    assert result.version == 2 and not result.last_checkpoint_updated
    assert json.loads(open(os.path.join(log_dir(table_path), "_last_checkpoint")).read())["version"] == 5
    assert ours(table_path, 3) == theirs(table_path, 3)


def write_commit(path: str, version: int, actions: list[dict]) -> None:
    os.makedirs(log_dir(path), exist_ok=True)
    with open(os.path.join(log_dir(path), f"{version:020d}.json"), "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")


def test_unsupported_protocol_is_refused_before_writing(table_path):
    metadata = Metadata("t", arrow_schema_to_schema_string(pa.schema([("id", pa.int64())])))
    protocol = Protocol(1, 7, None, ("someFutureFeature", "domainMetadata"))
    write_commit(table_path, 0, [{"protocol": protocol.to_dict()}, {"metaData": metadata.to_action()}])
    t = DeltaTable(table_path)
    before = log_files(table_path)
    with pytest.raises(UnsupportedProtocolError, match="someFutureFeature"):
        create_checkpoint(t)
    assert log_files(table_path) == before


def test_checkpoint_protection_forbids_checkpoints_before_its_version(table_path):
    t = populated(
        table_path,
        protocol=Protocol(1, 7, None, ("checkpointProtection",)),
        configuration={"delta.requireCheckpointProtectionBeforeVersion": "4"},
    )
    before = log_files(table_path)
    with pytest.raises(OperationRefusedError, match="checkpointProtection"):
        create_checkpoint(t, version=3)
    assert log_files(table_path) == before
    assert create_checkpoint(t, version=4).version == 4


@pytest.mark.parametrize("bad", [-1, "3", True])
def test_bad_version_argument(table_path, bad):
    t = populated(table_path)
    with pytest.raises(InvalidArgumentError):
        create_checkpoint(t, version=bad)


def test_parse_interval():
    assert parse_interval_ms("interval 7 days") == 7 * DAY_MS
    assert parse_interval_ms("interval 1 week") == 7 * DAY_MS
    assert parse_interval_ms("2 hours 30 minutes") == 9_000_000
    assert parse_interval_ms("INTERVAL 0 DAYS") == 0
    for bad in ("7", "interval 1 month", "soon", "interval 1 day extra"):
        with pytest.raises(InvalidArgumentError):
            parse_interval_ms(bad)


# --- crashes ------------------------------------------------------------------------------------

CRASH_SCRIPT = """
import os, sys
sys.path.insert(0, {here!r})
from deltalog.log_maintenance import create_checkpoint
import deltalog.storage.filesystem as storage_mod
point = {point!r}
if point == "before-rename":
    real = os.replace
    def replace(src, dst):
        if ".checkpoint.parquet" in dst:
            os._exit(9)
        return real(src, dst)
    os.replace = replace
elif point == "before-hint":
    real = storage_mod.Storage.write_atomic
    def write_atomic(self, path, data):
        if path.endswith("_last_checkpoint"):
            os._exit(9)
        return real(self, path, data)
    storage_mod.Storage.write_atomic = write_atomic
elif point == "between-sidecars":
    import deltalog.log_maintenance.checkpoint as cp
    real = cp._publish
    calls = []
    def publish(storage, tmp, final):
        calls.append(final)
        if len(calls) == 2:
            os._exit(9)
        return real(storage, tmp, final)
    cp._publish = publish
create_checkpoint({table!r}, sidecar_max_actions=2)
"""


@pytest.mark.parametrize("point", ["before-rename", "before-hint", "between-sidecars"])
def test_crash_mid_checkpoint_leaves_a_readable_table_and_a_rerun_completes(table_path, point):
    t = populated(table_path, protocol=V2 if point == "between-sidecars" else None)
    expected = ours(table_path)
    script = textwrap.dedent(CRASH_SCRIPT.format(here=HERE, point=point, table=table_path))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    assert ours(table_path) == expected == theirs(table_path)
    if point == "before-rename":
        assert glob.glob(os.path.join(log_dir(table_path), ".*.tmp"))  # only a hidden temp file is left
        assert not any(n.endswith(".checkpoint.parquet") for n in log_files(table_path))
    if point == "between-sidecars":
        published = [n for n in os.listdir(os.path.join(log_dir(table_path), "_sidecars")) if not n.startswith(".")]
        assert len(published) == 1  # an orphan nothing references: readers ignore it
    assert not os.path.exists(os.path.join(log_dir(table_path), "_last_checkpoint"))
    result = create_checkpoint(t)
    assert result.already_existed == (point == "before-hint")
    assert json.loads(open(os.path.join(log_dir(table_path), "_last_checkpoint")).read())["version"] == 5
    drop_commits_before(table_path, 5)
    assert ours(table_path) == expected == theirs(table_path)


# --- the automatic hook and the CLI ------------------------------------------------------------


def test_automatic_checkpoints_follow_the_interval(table_path):
    t = make_table(table_path, configuration={"delta.checkpointInterval": "3"})
    results = [append(t, rows(1, i)) for i in range(7)]
    assert sorted(v for v in DeltaTable(table_path).list_log().checkpoints) == [3, 6]
    by_version = {r.version: {h.name: h for h in r.hooks} for r in results}
    assert by_version[3]["checkpoint"].ok and by_version[3]["checkpoint"].detail["version"] == 3
    assert "checkpoint" not in by_version[4]
    assert json.loads(open(os.path.join(log_dir(table_path), "_last_checkpoint")).read())["version"] == 6


def test_default_interval_is_ten(table_path):
    t = make_table(table_path)
    for i in range(10):
        append(t, rows(1, i))
    assert list(DeltaTable(table_path).list_log().checkpoints) == [10]


def test_cli_checkpoint_json(table_path, capsys):
    populated(table_path)
    assert main(["checkpoint", table_path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["version"] == 5 and out["files"] == ["00000000000000000005.checkpoint.parquet"]
    assert out["num_actions"] == 6 and out["size_in_bytes"] > 0 and "duration_seconds" in out
    assert main(["checkpoint", table_path, "--version", "99", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_metadata_with_unknown_fields_round_trips(table_path):
    t = populated(table_path, configuration={"delta.appendOnly": "false"})
    snap = t.snapshot()
    md = Metadata(
        snap.metadata.id, arrow_schema_to_schema_string(snap.schema), ["part"], {"a": "1"}, name="n", description="d"
    )
    txn = Transaction(t.storage, snap, operation="SET TBLPROPERTIES")
    txn.update_metadata(md)
    txn.commit()
    create_checkpoint(t)
    drop_commits_before(table_path, 6)
    got = DeltaTable(table_path).snapshot().metadata
    assert (got.name, got.description, got.configuration) == ("n", "d", {"a": "1"})
    assert deltalake.DeltaTable(table_path).metadata().name == "n"


@pytest.mark.parametrize("statistics", [True, False], ids=["with-statistics", "without-statistics"])
def test_small_actions_read_only_from_row_groups_that_may_hold_them(tmp_path, statistics):
    """The footer's null counts rule out row groups of file actions only; without statistics all are read."""
    from deltalog.log.checkpoint_reader import _groups_holding

    n = 4000
    protocol = [None] * n
    metadata = [None] * n
    protocol[2500] = {"minReaderVersion": 1, "minWriterVersion": 2}
    metadata[2600] = {"id": "x", "configuration": [("k", "v")]}
    table = pa.table(
        {
            "protocol": pa.array(
                protocol, pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
            ),
            "metaData": pa.array(
                metadata, pa.struct([("id", pa.string()), ("configuration", pa.map_(pa.string(), pa.string()))])
            ),
            "add": pa.array([{"path": f"f{i}"} for i in range(n)], pa.struct([("path", pa.string())])),
        }
    )
    path = str(tmp_path / "cp.parquet")
    pq.write_table(table, path, row_group_size=1000, write_statistics=statistics)
    md = pq.read_metadata(path)
    assert md.num_row_groups == 4
    assert _groups_holding(md, ["protocol", "metaData"]) == ([2] if statistics else [0, 1, 2, 3])
    assert _groups_holding(md, ["add"]) == [0, 1, 2, 3]
    assert _groups_holding(md, []) == []


def test_small_action_arrays_built_from_buffers_equal_pyarrows():
    """The checkpoint's protocol/metaData/txn/domain rows, built without pa.array, are what pa.array builds."""
    from deltalog.log.replay import array_from_python
    from deltalog.log_maintenance.checkpoint import _for_arrow

    typ = pa.struct(
        [
            ("id", pa.string()),
            ("n32", pa.int32()),
            ("n64", pa.int64()),
            ("flag", pa.bool_()),
            ("features", pa.list_(pa.string())),
            ("configuration", pa.map_(pa.string(), pa.string())),
            ("format", pa.struct([("provider", pa.string()), ("options", pa.map_(pa.string(), pa.string()))])),
        ]
    )
    rows = [
        {
            "id": "ü-1",
            "n32": 3,
            "n64": 2**40,
            "flag": True,
            "features": ["a", "b"],
            "configuration": {"k": "v", "e": ""},
        },
        None,
        {"id": None, "n32": None, "n64": -1, "flag": False, "features": [], "configuration": {}, "format": None},
        {"format": {"provider": "parquet", "options": {"x": "1"}}, "features": None, "configuration": None},
        {"id": "", "flag": None, "configuration": [("a", "1"), ("b", "2")]},
    ]
    rows = [_for_arrow(r) for r in rows]
    built = array_from_python(rows, typ)
    built.validate(full=True)
    assert built.equals(pa.array(rows, type=typ))
    assert built.to_pylist() == pa.array(rows, type=typ).to_pylist()


def test_checkpoint_does_not_import_pandas(table_path):
    """pyarrow imports pandas on its first Python-value conversion: 0.2-0.3 s and 40 MB per process."""
    t = make_table(table_path, partition_by=["part"])
    for i in range(3):
        append(t, rows(2, i * 2, part="a"), partition={"part": "a"})
    script = textwrap.dedent(
        f"""
        import sys
        from deltalog.log_maintenance import create_checkpoint
        create_checkpoint({table_path!r})
        print("pandas" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == ["False"], out.stdout + out.stderr
