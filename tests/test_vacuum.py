"""Vacuum: what it deletes, what it keeps and why, refusals, lite mode, inventories, execution.

Histories are built in the past (see vacuum_helpers): commit files and data files
get modification times days ago, so the default 7-day retention has something
to work with and nothing here needs a retention override unless it tests one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.errors import (
    CorruptLogError,
    InvalidArgumentError,
    NotADeltaTableError,
    OperationRefusedError,
    StorageError,
    TableNotFoundError,
    UnsupportedProtocolError,
)
from deltalog.log.history import read_commit_info
from deltalog.protocol.properties import parse_interval_ms
from deltalog.protocol.table_protocol import Protocol
from deltalog.vacuuming import LiteVacuumUnavailableError, execute_vacuum, plan_vacuum, vacuum
from deltalog.vacuuming.paths import PathResolver, dv_file_path, z85_decode
from deltalog.vacuuming.vacuum_plan import read_cursor
from deltalog.write_checks.hidden_paths import HiddenRule
from helpers import rows, write_data_file
from shared_data import golden_copy
from vacuum_helpers import (
    DAY_MS,
    HOUR_MS,
    commit_at,
    commit_path,
    deltalake_ids,
    files_on_disk,
    log_files,
    make_table_at,
    new_file,
    now_ms,
    remove_of,
    set_mtime,
    z85_encode,
)


# The Spark case reaches the run's Delta Spark session by name (request.getfixturevalue): it joins that
# session's group of the parallel run (tests/parallel.py), as a test that names the fixture does.
@pytest.fixture(
    params=[
        "local",
        pytest.param("spark", marks=[pytest.mark.slow, pytest.mark.spark, pytest.mark.xdist_group("delta-spark")]),
    ]
)
def engine(request: pytest.FixtureRequest) -> dict:
    """Where full-mode plans are made: the local engine, or the Spark engine in the test run's one session.

    The tests that take it prove the same safety of both (what they delete is executed by the core
    either way): a Spark plan that named a file a retained version needs would fail them.
    """
    if request.param == "local":
        return {}
    return {"engine": "spark", "spark_options": {"session": request.getfixturevalue("delta_spark")}}


# --- pure functions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "hours"),
    [
        ("interval 1 week", 168),
        ("interval 168 hours", 168),
        ("7 days", 168),
        ("INTERVAL 2 WEEKS", 336),
        ("interval 1 day 12 hours", 36),
        ("interval 90 minutes", 1.5),
        ("interval 0 seconds", 0),
    ],
)
def test_parse_interval(text, hours):
    assert parse_interval_ms(text) == int(hours * HOUR_MS)


@pytest.mark.parametrize("text", ["", "interval", "1 month", "interval 2 years", "7 fortnights", "-1 days", "x days"])
def test_parse_interval_rejects(text):
    with pytest.raises(InvalidArgumentError):
        parse_interval_ms(text)


def test_dv_file_path_follows_the_protocol_examples():
    # PROTOCOL.md, Deletion Vector Descriptor Schema, JSON example 1 (relative path with random prefix).
    assert dv_file_path("u", "ab^-aqEH.-t@S}K{vb[*k^") == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert dv_file_path("u", "^-aqEH.-t@S}K{vb[*k^") == "deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert dv_file_path("p", "s3://t/deletion_vector_x.bin") == "s3://t/deletion_vector_x.bin"
    assert dv_file_path("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L") is None
    assert z85_decode("HelloWorld") == bytes(
        [0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B]
    )  # the Z85 spec's test vector
    assert z85_decode(z85_encode(bytes(range(16)))) == bytes(range(16))
    with pytest.raises(CorruptLogError):
        dv_file_path("u", "short")
    with pytest.raises(CorruptLogError):
        dv_file_path("q", "x" * 20)


def test_hidden_rule():
    rule = HiddenRule(["part", "_p"])
    assert rule.hidden_path("_delta_log/00000000000000000000.json")
    assert rule.hidden_path("part=a/.part-0.parquet.crc")
    assert rule.hidden_path("_tmp/part-0.parquet")
    assert rule.hidden_path(".spark-staging/x")
    assert not rule.hidden_path("_change_data/cdc-0.parquet")
    assert not rule.hidden_path("part=a/part-0.parquet")
    assert not rule.hidden_path("_p=1/part-0.parquet")  # a partition column starting with "_"
    assert rule.hidden_path("_q=1/part-0.parquet")
    assert not rule.hidden_path("deletion_vector_0c6cbaaf-5e04-4c9d-8959-1088814f58ef.bin")
    mask = rule.hidden_mask(pa.array(["a", "_delta_log/x", "part=a/_x", "_change_data/y", "b/.c"]))
    assert mask.to_pylist() == [False, True, True, False, True]


def test_path_resolver_decodes_and_relativizes(tmp_path):
    table = make_table_at(str(tmp_path / "t"), now_ms())
    r = PathResolver(table.storage)
    root = table.storage.root
    assert set(r.resolve_one("part=a%20b/x.parquet")) == {"part=a b/x.parquet", "part=a%20b/x.parquet"}
    assert r.resolve_one(f"file://{root}/sub/x.parquet") == ["sub/x.parquet"]
    assert r.resolve_one(f"{root}/x.parquet") == ["x.parquet"]
    assert r.resolve_one("/elsewhere/x.parquet") == []
    assert r.resolve_one("s3://bucket/x.parquet") == []
    assert r.resolve_one("../outside.parquet") == []
    assert sorted(r.resolve(pa.array(["a.parquet", "a.parquet", "b%3Dc.parquet", None])).to_pylist()) == [
        "a.parquet",
        "b%3Dc.parquet",
        "b=c.parquet",
    ]


# --- a history with every kind of file --------------------------------------------------------


def build_history(path: str) -> dict:
    """A partitioned table 20 days old with deletes, a compaction, junk and in-flight files.

    v0 -20d create | v1 -20d add A(p=a) B(p=b) C(p=b) | v2 -15d remove A | v3 -10d compact B,C -> D(p=b)
    (dataChange=false) | v4 -1d remove D, add E(p=c). With the default 7-day retention, v3 is the state at the
    cutoff, so v3 and v4 must keep D and E; A, B, C and the old junk file (alone in part=j) go.
    """
    now = now_ms()
    table = make_table_at(path, now - 20 * DAY_MS, partition_by=["part"])
    a = new_file(table, rows(2, 0, "a"), {"part": "a"})
    b = new_file(table, rows(2, 10, "b"), {"part": "b"})
    c = new_file(table, rows(2, 20, "b"), {"part": "b"})
    commit_at(table, now - 20 * DAY_MS, adds=[a, b, c])
    commit_at(table, now - 15 * DAY_MS, removes=[remove_of(a)], operation="DELETE")
    d = new_file(table, pa.concat_tables([rows(2, 10, "b"), rows(2, 20, "b")]), {"part": "b"}, data_change=False)
    commit_at(
        table, now - 10 * DAY_MS, adds=[d], removes=[remove_of(b, False), remove_of(c, False)], operation="OPTIMIZE"
    )
    e = new_file(table, rows(3, 30, "c"), {"part": "c"})
    commit_at(table, now - 1 * DAY_MS, adds=[e], removes=[remove_of(d)], operation="DELETE")
    # Junk from a failed writer 20 days ago, a fresh uncommitted file, and hidden files.
    junk_old = write_data_file(path, rows(1), {"part": "j"})["path"]
    set_mtime(os.path.join(path, junk_old), now - 20 * DAY_MS)
    fresh = write_data_file(path, rows(1), {"part": "a"})["path"]
    for hidden in ("part=a/.x.parquet.crc", "_tmp/leftover.parquet"):
        os.makedirs(os.path.dirname(os.path.join(path, hidden)), exist_ok=True)
        with open(os.path.join(path, hidden), "wb") as fh:
            fh.write(b"x")
        set_mtime(os.path.join(path, hidden), now - 20 * DAY_MS)
    return {"table": table, "a": a, "b": b, "c": c, "d": d, "e": e, "junk": junk_old, "fresh": fresh}


def test_dry_run_plans_exactly_the_unneeded_files_and_touches_nothing(engine, tmp_path):
    path = str(tmp_path / "t")
    h = build_history(path)
    before_files, before_log = files_on_disk(path), log_files(path)
    result = vacuum(path, **engine, dry_run=True)
    assert result.dry_run and result.status == "DRY_RUN"
    plan = result.plan
    planned = {r["path"]: r["reason"] for r in plan.files.to_pylist()}
    assert set(planned) == {h["a"]["path"], h["b"]["path"], h["c"]["path"], h["junk"]}
    assert planned[h["a"]["path"]].startswith("expired tombstone")
    assert planned[h["junk"]] == "not referenced by any retained version"
    assert result.fully_readable_from_version == 3 and result.version == 4
    assert result.retention_hours == 168 and result.configured_retention_hours == 168
    assert plan.stats["files_too_new"] == 1  # the fresh uncommitted file
    assert result.num_files_to_delete == 4
    assert result.size_of_data_to_delete == sum(os.path.getsize(os.path.join(path, p)) for p in planned)
    assert files_on_disk(path) == before_files and log_files(path) == before_log
    json.dumps(result.to_dict())  # JSON-able for XCom


def test_vacuum_deletes_keeps_retained_versions_readable_and_logs_start_end(engine, tmp_path):
    path = str(tmp_path / "t")
    h = build_history(path)
    expected_v3, expected_v4 = deltalake_ids(path, 3), deltalake_ids(path, 4)
    result = vacuum(path, **engine)
    assert result.status == "COMPLETED"
    assert result.num_deleted_files == 4 and result.num_already_gone == 0
    remaining = files_on_disk(path)
    for gone in (h["a"]["path"], h["b"]["path"], h["c"]["path"], h["junk"]):
        assert gone not in remaining
    for kept in (h["d"]["path"], h["e"]["path"], h["fresh"], "part=a/.x.parquet.crc", "_tmp/leftover.parquet"):
        assert kept in remaining
    # part=j held only the junk file: it is removed; part=a keeps the fresh file and the hidden .crc.
    assert not os.path.exists(os.path.join(path, "part=j")) and result.num_vacuumed_directories == 1
    assert os.path.isdir(os.path.join(path, "part=a"))
    # Versions inside the window still read, with deltalake too.
    assert deltalake_ids(path, 3) == expected_v3 and deltalake_ids(path, 4) == expected_v4
    # VACUUM START / END commits as Delta Spark writes them.
    table = DeltaTable(path)
    start = read_commit_info(table.storage, commit_path(path, 5), "5")
    end = read_commit_info(table.storage, commit_path(path, 6), "6")
    assert result.start_commit_version == 5 and result.end_commit_version == 6
    assert start["operation"] == "VACUUM START" and end["operation"] == "VACUUM END"
    assert start["operationMetrics"] == {
        "numFilesToDelete": "4",
        "sizeOfDataToDelete": str(result.size_of_data_to_delete),
    }
    assert start["operationParameters"]["defaultRetentionMillis"] == str(7 * DAY_MS)
    assert start["operationParameters"]["retentionCheckEnabled"] == "true"
    assert end["operationParameters"] == {"status": "COMPLETED"}
    assert end["operationMetrics"] == {"numDeletedFiles": "4", "numVacuumedDirectories": "1"}
    with open(commit_path(path, 5)) as fh:
        assert [list(json.loads(line)) for line in fh if line.strip()] == [["commitInfo"]]
    assert deltalake_ids(path) == expected_v4
    assert read_cursor(table.storage) == 3
    # Running again finds nothing more (and still marks the run).
    again = vacuum(path, **engine)
    assert again.num_files_to_delete == 0 and again.status == "COMPLETED"
    assert files_on_disk(path) == remaining


def test_a_file_removed_inside_the_window_is_kept_even_if_its_tombstone_looks_expired(engine, tmp_path):
    """The log, not the tombstone's deletionTimestamp, decides: a checkpoint may already have dropped it."""
    path = str(tmp_path / "t")
    now = now_ms()
    table = make_table_at(path, now - 30 * DAY_MS)
    a = new_file(table, rows(3))
    commit_at(table, now - 30 * DAY_MS, adds=[a])
    # Removed by a commit one day ago whose writer stamped a deletionTimestamp 30 days old (clock skew).
    txn_rm = dict(remove_of(a), deletionTimestamp=now - 30 * DAY_MS)
    from deltalog.commit.transaction import Transaction

    txn = Transaction(table.storage, table.snapshot(), operation="DELETE", run_hooks=False)
    txn.remove([txn_rm])
    v = txn.commit().version
    set_mtime(commit_path(path, v), now - 1 * DAY_MS)
    import deltalake

    deltalake.DeltaTable(path).create_checkpoint()  # drops tombstones older than the retention
    plan = plan_vacuum(path, **engine)
    assert plan.num_files == 0
    assert plan.fully_readable_from == 1
    vacuum(path, **engine)
    assert a["path"] in files_on_disk(path)
    assert deltalake_ids(path, 1) == [0, 1, 2]


def test_in_flight_writer_files_survive_and_its_commit_succeeds(engine, tmp_path):
    path = str(tmp_path / "t")
    h = build_history(path)
    table = h["table"]
    snapshot = table.snapshot()
    # A writer has written its files but not committed yet...
    pending = [new_file(table, rows(4, 100, "z"), {"part": "z"}), new_file(table, rows(4, 200, "a"), {"part": "a"})]
    # ...while vacuum runs, even with a short (overridden) retention of one hour.
    for kwargs in ({}, {"retention_hours": 1, "allow_short_retention": True}):
        vacuum(path, **engine, **kwargs)
        for p in pending:
            assert p["path"] in files_on_disk(path)
    from deltalog.commit.transaction import Transaction

    txn = Transaction(table.storage, snapshot, operation="WRITE", run_hooks=False)
    txn.add(pending)
    txn.commit()
    ids = deltalake_ids(path)
    assert set(range(100, 104)) | set(range(200, 204)) <= set(ids)


def test_revalidation_keeps_a_file_re_added_after_planning(engine, tmp_path):
    path = str(tmp_path / "t")
    h = build_history(path)
    table = h["table"]
    plan = plan_vacuum(path, **engine)
    assert h["a"]["path"] in plan.files.column("path").to_pylist()
    # A RESTORE-like commit re-adds A between planning and executing.
    commit_at(table, now_ms(), adds=[dict(h["a"], modificationTime=now_ms())], operation="RESTORE")
    result = execute_vacuum(path, plan)
    assert result.num_kept_by_revalidation == 1 and result.num_deleted_files == 3
    assert h["a"]["path"] in files_on_disk(path)
    assert set(range(0, 2)) <= set(deltalake_ids(path))
    assert result.start_commit_version == 6  # after the RESTORE at 5


def test_a_crash_mid_way_is_finished_by_running_again(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    h = build_history(path)
    import deltalog.vacuuming.delete as ex

    calls = {"n": 0}
    real = ex._unlink

    def flaky(p):
        calls["n"] += 1
        if calls["n"] == 3:
            raise PermissionError(13, "Permission denied", p)
        real(p)

    monkeypatch.setattr(ex, "_unlink", flaky)
    monkeypatch.setattr(ex, "LOCAL_CHUNK", 1)
    with pytest.raises(StorageError, match="run it again"):
        vacuum(path, max_workers=1)
    end = read_commit_info(h["table"].storage, commit_path(path, 6), "6")
    assert end["operation"] == "VACUUM END" and end["operationParameters"] == {"status": "FAILED"}
    assert end["operationMetrics"]["numDeletedFiles"] == "2"
    assert read_cursor(h["table"].storage) is None  # the cursor only moves after a complete run
    monkeypatch.setattr(ex, "_unlink", real)
    result = vacuum(path)
    assert result.num_deleted_files == 2 and result.status == "COMPLETED"
    assert not {h["a"]["path"], h["b"]["path"], h["c"]["path"], h["junk"]} & files_on_disk(path)
    assert deltalake_ids(path, 3) == [10, 11, 20, 21]


def test_empty_directories_are_removed_but_fresh_ones_kept(tmp_path):
    path = str(tmp_path / "t")
    now = now_ms()
    table = make_table_at(path, now - 20 * DAY_MS, partition_by=["part"])
    a = new_file(table, rows(1, 0, "a"), {"part": "x/nested"})
    commit_at(table, now - 20 * DAY_MS, adds=[a])
    commit_at(table, now - 19 * DAY_MS, removes=[remove_of(a)])
    os.makedirs(os.path.join(path, "part=fresh"))
    os.makedirs(os.path.join(path, "part=old"))
    set_mtime(os.path.join(path, "part=old"), now - 20 * DAY_MS)
    result = vacuum(path)
    assert result.num_deleted_files == 1
    assert not os.path.exists(os.path.join(path, "part=x")) and not os.path.exists(os.path.join(path, "part=old"))
    assert os.path.isdir(os.path.join(path, "part=fresh"))
    assert result.num_vacuumed_directories == 3  # part=x/nested, part=x, part=old


def test_percent_encoded_log_paths_protect_their_physical_files(engine, tmp_path):
    path = str(tmp_path / "t")
    now = now_ms()
    table = make_table_at(path, now - 20 * DAY_MS, partition_by=["part"])
    add = new_file(table, rows(2, 0, "a b"), {"part": "a b"})
    physical = add["path"]
    add["path"] = quote(physical, safe="/=")  # how Delta writers encode the path: part=a%20b/...
    assert add["path"] != physical
    commit_at(table, now - 20 * DAY_MS, adds=[add])
    result = vacuum(path, **engine, retention_hours=0, allow_short_retention=True)
    assert result.num_deleted_files == 0
    assert physical in files_on_disk(path)
    assert deltalake_ids(path) == [0, 1]


def test_deletion_vectors_used_by_live_files_or_retained_tombstones_are_kept(engine, tmp_path):
    import uuid

    path = str(tmp_path / "t")
    now = now_ms()
    proto = Protocol(3, 7, ("deletionVectors",), ("deletionVectors",))
    table = make_table_at(path, now - 20 * DAY_MS, protocol=proto)

    def dv_file(prefix: str) -> tuple[dict, str]:
        u = uuid.uuid4()
        encoded = z85_encode(u.bytes)
        rel = f"{prefix}/deletion_vector_{u}.bin" if prefix else f"deletion_vector_{u}.bin"
        full = os.path.join(path, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as fh:
            fh.write(b"\x00" * 40)
        set_mtime(full, now - 20 * DAY_MS)
        desc = {
            "storageType": "u",
            "pathOrInlineDv": prefix + encoded,
            "offset": 1,
            "sizeInBytes": 34,
            "cardinality": 1,
        }
        return desc, rel

    live_dv, live_dv_path = dv_file("ab")
    tomb_dv, tomb_dv_path = dv_file("")
    _, orphan_dv_path = dv_file("")
    a = new_file(table, rows(3))
    b = new_file(table, rows(3, 10))
    commit_at(table, now - 20 * DAY_MS, adds=[dict(a, deletionVector=live_dv), dict(b, deletionVector=tomb_dv)])
    # b (with its DV) is removed two days ago: its tombstone and DV are inside the window.
    commit_at(table, now - 2 * DAY_MS, removes=[dict(remove_of(b), deletionVector=tomb_dv)])
    plan = plan_vacuum(path, **engine)
    assert plan.files.column("path").to_pylist() == [orphan_dv_path]
    assert plan.files.column("reason").to_pylist() == ["deletion vector not used by any retained version"]
    vacuum(path, **engine)
    on_disk = files_on_disk(path)
    assert {live_dv_path, tomb_dv_path, a["path"], b["path"]} <= on_disk and orphan_dv_path not in on_disk
    # With a zero retention, b and its DV go; a's DV stays while a lives.
    vacuum(path, **engine, retention_hours=0, allow_short_retention=True)
    on_disk = files_on_disk(path)
    assert live_dv_path in on_disk and a["path"] in on_disk
    assert tomb_dv_path not in on_disk and b["path"] not in on_disk


# --- refusals: nothing deleted, nothing written -------------------------------------------------


def _unchanged(path: str, before: tuple[set, set]) -> bool:
    return (files_on_disk(path), log_files(path)) == before


def test_short_retention_is_refused_naming_both_values(tmp_path):
    path = str(tmp_path / "t")
    build_history(path)
    before = (files_on_disk(path), log_files(path))
    with pytest.raises(OperationRefusedError, match=r"retention of 1 hour.*168 hours \('interval 1 week'\)"):
        vacuum(path, retention_hours=1)
    with pytest.raises(OperationRefusedError):
        plan_vacuum(path, retention_hours=0)
    with pytest.raises(InvalidArgumentError):
        vacuum(path, retention_hours=-1, allow_short_retention=True)
    assert _unchanged(path, before)
    # A longer retention than the table's is always fine (and deletes less).
    assert vacuum(path, retention_hours=24 * 30, dry_run=True).num_files_to_delete == 0


def test_zero_retention_needs_the_override_even_when_the_table_configures_zero(tmp_path):
    path = str(tmp_path / "t")
    now = now_ms()
    table = make_table_at(path, now - DAY_MS, configuration={"delta.deletedFileRetentionDuration": "interval 0 hours"})
    a = new_file(table, rows(1))
    commit_at(table, now - DAY_MS, adds=[a])
    commit_at(table, now - DAY_MS, removes=[remove_of(a)])
    with pytest.raises(OperationRefusedError):
        vacuum(path)
    assert a["path"] in files_on_disk(path)
    assert vacuum(path, allow_short_retention=True).num_deleted_files == 1


def test_unsupported_features_refused_before_anything_is_deleted(tmp_path):
    path = str(tmp_path / "t")
    build_history(path)
    # Rewrite version 0's protocol to ask for a writer feature deltalog does not implement.
    v0 = commit_path(path, 0)
    with open(v0) as fh:
        actions = [json.loads(line) for line in fh if line.strip()]
    for a in actions:
        if "protocol" in a:
            a["protocol"] = {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["vacuumProtocolCheck"],
                "writerFeatures": ["vacuumProtocolCheck", "someFutureFeature"],
            }
    mtime = os.path.getmtime(v0)
    with open(v0, "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")
    os.utime(v0, (mtime, mtime))
    before = (files_on_disk(path), log_files(path))
    with pytest.raises(UnsupportedProtocolError, match="someFutureFeature"):
        vacuum(path)
    with pytest.raises(UnsupportedProtocolError):
        vacuum(path, dry_run=True)
    assert _unchanged(path, before)


def test_vacuum_protocol_check_table_is_vacuumed(tmp_path):
    """``vacuumProtocolCheck`` (reader+writer feature) is supported: such a table is vacuumed, not refused."""
    path = str(tmp_path / "t")
    now = now_ms()
    feature = ("vacuumProtocolCheck",)
    table = make_table_at(path, now - 30 * DAY_MS, protocol=Protocol(3, 7, feature, feature))
    old, kept = new_file(table, rows(3)), new_file(table, rows(3, 3))
    commit_at(table, now - 30 * DAY_MS, adds=[old, kept])
    commit_at(table, now - 20 * DAY_MS, removes=[remove_of(old)])
    for name in (old["path"], kept["path"]):
        set_mtime(os.path.join(path, name), now - 30 * DAY_MS)
    planned = vacuum(path, dry_run=True)
    assert planned.status == "DRY_RUN" and planned.num_files_to_delete == 1
    assert vacuum(path).num_deleted_files == 1
    assert files_on_disk(path) == {kept["path"]}


def test_vacuum_protocol_check_golden_table_is_vacuumed(tmp_path):
    """Extra check on Delta Spark's golden table with the feature (skips without ../shared)."""
    result = vacuum(golden_copy("basic-with-vacuum-protocol-check-feature", tmp_path), dry_run=True)
    assert result.status == "DRY_RUN" and result.num_files_to_delete == 0


def test_not_a_table(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotADeltaTableError):
        vacuum(str(tmp_path / "empty"))
    with pytest.raises(TableNotFoundError):
        vacuum(str(tmp_path / "missing"))
    assert os.listdir(tmp_path / "empty") == []


def test_bad_parameters(tmp_path):
    path = str(tmp_path / "t")
    build_history(path)
    before = (files_on_disk(path), log_files(path))
    with pytest.raises(InvalidArgumentError, match="mode"):
        vacuum(path, mode="medium")
    with pytest.raises(InvalidArgumentError, match="lite"):
        vacuum(path, mode="lite", inventory="x.parquet")
    with pytest.raises(InvalidArgumentError, match="max_workers"):
        vacuum(path, max_workers=0)
    assert _unchanged(path, before)


def test_malformed_retention_property_is_refused(tmp_path):
    path = str(tmp_path / "t")
    make_table_at(path, now_ms(), configuration={"delta.deletedFileRetentionDuration": "one week"})
    with pytest.raises(InvalidArgumentError, match="deletedFileRetentionDuration"):
        vacuum(path)


def test_warns_when_file_retention_exceeds_log_retention(tmp_path):
    path = str(tmp_path / "t")
    make_table_at(path, now_ms(), configuration={"delta.deletedFileRetentionDuration": "interval 40 days"})
    plan = plan_vacuum(path)
    assert any("logRetentionDuration" in w for w in plan.warnings)


# --- inventories ---------------------------------------------------------------------------------


def _inventory_rows(path: str, absolute: bool) -> pa.Table:
    rel = sorted(files_on_disk(path))
    full = [os.path.join(path, p) for p in rel]
    return pa.table(
        {
            "path": [("file://" + f) if absolute else p for p, f in zip(rel, full)],
            "size": pa.array([os.path.getsize(f) for f in full], pa.int64()),
            "modificationTime": pa.array([int(os.path.getmtime(f) * 1000) for f in full], pa.int64()),
        }
    )


@pytest.mark.parametrize("fmt", ["parquet", "csv", "table"])
def test_inventory_gives_the_same_plan_as_listing(tmp_path, fmt):
    path = str(tmp_path / "t")
    build_history(path)
    listed = plan_vacuum(path)
    inv = _inventory_rows(path, absolute=fmt != "csv")
    if fmt == "parquet":
        source = str(tmp_path / "inv.parquet")
        pq.write_table(inv, source)
    elif fmt == "csv":
        source = str(tmp_path / "inv.csv")
        pacsv.write_csv(inv, source)
    else:
        source = inv
    planned = plan_vacuum(path, inventory=source)
    assert planned.source == "inventory"
    assert planned.files.column("path").to_pylist() == listed.files.column("path").to_pylist()
    assert planned.stats["hidden_entries_skipped"] == 2


def test_inventory_with_spark_schema_and_missing_rows(tmp_path):
    path = str(tmp_path / "t")
    h = build_history(path)
    inv = _inventory_rows(path, absolute=True)
    keep_out = inv.column("path").to_pylist().index("file://" + os.path.join(path, h["junk"]))
    inv = inv.filter(pa.array([i != keep_out for i in range(inv.num_rows)]))
    inv = inv.rename_columns(["path", "length", "modificationTime"])
    inv = inv.append_column("isDir", pa.array([False] * inv.num_rows))
    extra = pa.table(
        {
            "path": ["file:///somewhere/else.parquet"],
            "length": pa.array([1], pa.int64()),
            "modificationTime": pa.array([1], pa.int64()),
            "isDir": [False],
        }
    )
    result = vacuum(path, inventory=pa.concat_tables([inv, extra]))
    assert result.num_deleted_files == 3
    assert h["junk"] in files_on_disk(path)  # not in the inventory, so never deleted
    assert result.plan.stats["rows_outside_table"] == 1


def test_inventory_in_delta_sparks_file_colon_slash_spelling(tmp_path):
    """``file:/abs/path`` (one slash: how Hadoop and Delta Spark write local paths) is a path, not a hidden name."""
    path = str(tmp_path / "t")
    build_history(path)
    listed = plan_vacuum(path)
    inv = _inventory_rows(path, absolute=False)
    spark_style = ["file:" + os.path.join(path, p) for p in inv.column("path").to_pylist()]
    inv = inv.set_column(0, "path", pa.array(spark_style))
    planned = plan_vacuum(path, inventory=inv)
    assert planned.files.column("path").to_pylist() == listed.files.column("path").to_pylist()
    assert planned.stats["rows_outside_table"] == 0 and planned.stats["hidden_entries_skipped"] == 2


def test_inventory_read_in_small_batches_gives_the_same_plan_and_counts_every_empty_value(tmp_path, monkeypatch):
    """The inventory is streamed batch by batch (memory bounded at ten million rows): same plan, same refusals."""
    import deltalog.vacuuming.inventory as inventory_module

    path = str(tmp_path / "t")
    build_history(path)
    whole = plan_vacuum(path, inventory=_inventory_rows(path, absolute=True))
    monkeypatch.setattr(inventory_module, "BATCH_ROWS", 2)
    source = str(tmp_path / "inv.parquet")
    pq.write_table(_inventory_rows(path, absolute=True), source, row_group_size=3)
    batched = plan_vacuum(path, inventory=source)
    assert batched.files.column("path").to_pylist() == whole.files.column("path").to_pylist()
    assert batched.stats == whole.stats
    inv = _inventory_rows(path, absolute=True)
    sizes = inv.column("size").to_pylist()
    sizes[0] = sizes[-1] = None  # in the first and the last batch
    pq.write_table(inv.set_column(1, "size", pa.array(sizes, pa.int64())), source, row_group_size=3)
    with pytest.raises(InvalidArgumentError, match="column 'size' has 2 empty value"):
        plan_vacuum(path, inventory=source)


def test_inventory_paths_made_relative_in_bulk_match_the_per_row_rule(tmp_path):
    """The vectorised root stripping gives, row for row, what ``PathResolver.relative_literal`` gives."""
    from deltalog.vacuuming.inventory import _SPECIAL_ROW, _relativise

    path = str(tmp_path / "t")
    build_history(path)
    os.symlink(path, str(tmp_path / "alias"))
    storage = DeltaTable(path).storage
    resolver = PathResolver(storage)
    alias = str(tmp_path / "alias")
    rows_ = [
        "part=a/f.parquet",
        f"{path}/part=a/f.parquet",
        f"file:{path}/part=a/f.parquet",
        f"file://{path}/part=a/f.parquet",
        f"file://localhost{path}/x.parquet",
        f"file:{path}/part=a/../part=b/g.parquet",
        f"file:{path}/./h.parquet",
        f"{path}//double.parquet",
        f"file:{path}/q?x=1",
        f"file:{path}/frag#1",
        f"{alias}/via-link.parquet",
        f"file:{alias}/via-link.parquet",
        "/somewhere/else.parquet",
        "file:/somewhere/else.parquet",
        "s3://bucket/x.parquet",
        "./dot.parquet",
        "../outside.parquet",
        f"{path}/",
        f"file:{path}",
    ]
    arr = pa.array(rows_, pa.string())
    special = pc.match_substring_regex(arr, _SPECIAL_ROW)
    got = _relativise(arr, special, resolver).to_pylist()
    want = [resolver.relative_literal(p) if s else p for p, s in zip(rows_, special.to_pylist())]
    assert got == want
    assert got[1] == got[2] == got[3] == "part=a/f.parquet" and got[12] is None and got[13] is None


@pytest.mark.parametrize(
    ("inventory", "message"),
    [
        (pa.table({"path": ["a"], "modificationTime": [1]}), "lacks column"),
        (pa.table({"path": ["a"], "size": ["big"], "modificationTime": [1]}), "size"),
        (pa.table({"path": ["a"], "size": [1], "modificationTime": [1.5]}), "modificationTime"),
        (pa.table({"path": pa.array([None], pa.string()), "size": [1], "modificationTime": [1]}), "empty"),
        (pa.table({"path": ["s3://other/x"], "size": [1], "modificationTime": [1]}), "inside the table"),
        (
            pa.table(
                {
                    "path": pa.array([], pa.string()),
                    "size": pa.array([], pa.int64()),
                    "modificationTime": pa.array([], pa.int64()),
                }
            ),
            "no rows",
        ),
    ],
)
def test_bad_inventory_is_refused(tmp_path, inventory, message):
    path = str(tmp_path / "t")
    build_history(path)
    before = (files_on_disk(path), log_files(path))
    with pytest.raises(InvalidArgumentError, match=message):
        vacuum(path, inventory=inventory)
    assert _unchanged(path, before)


def test_unreadable_inventory_file_is_refused(tmp_path):
    path = str(tmp_path / "t")
    build_history(path)
    bad = tmp_path / "inv.parquet"
    bad.write_bytes(b"not parquet")
    before = (files_on_disk(path), log_files(path))
    with pytest.raises(InvalidArgumentError, match="not a readable Parquet"):
        vacuum(path, inventory=str(bad))
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        vacuum(path, inventory=str(tmp_path / "nope.csv"))
    assert _unchanged(path, before)


# --- lite mode ---------------------------------------------------------------------------------


def build_lite_history(path: str) -> dict:
    now = now_ms()
    table = make_table_at(path, now - 20 * DAY_MS)
    a, b, c = (new_file(table, rows(2, 10 * i)) for i in range(3))
    commit_at(table, now - 20 * DAY_MS, adds=[a, b, c])
    commit_at(table, now - 15 * DAY_MS, removes=[remove_of(a)])
    commit_at(table, now - 9 * DAY_MS, removes=[remove_of(b)])
    commit_at(table, now - 1 * DAY_MS, removes=[remove_of(c)])
    junk = write_data_file(path, rows(1))["path"]
    set_mtime(os.path.join(path, junk), now - 20 * DAY_MS)
    return {"table": table, "a": a, "b": b, "c": c, "junk": junk}


def test_lite_mode_reads_removes_since_the_cursor(tmp_path):
    path = str(tmp_path / "t")
    h = build_lite_history(path)
    first = vacuum(path, mode="lite")
    assert first.plan.lite_range == (0, 3) and first.plan.source == "log"
    assert first.num_deleted_files == 2
    on_disk = files_on_disk(path)
    assert h["a"]["path"] not in on_disk and h["b"]["path"] not in on_disk
    assert h["c"]["path"] in on_disk  # removed inside the window
    assert h["junk"] in on_disk  # lite never lists, so untracked files stay
    assert read_cursor(h["table"].storage) == 3
    # Nothing new outside the window: the next lite run reads no commits.
    second = vacuum(path, mode="lite", dry_run=True)
    assert second.plan.lite_range is None and second.num_files_to_delete == 0
    # A shorter (overridden) retention moves the window past version 4.
    third = vacuum(path, mode="lite", retention_hours=12, allow_short_retention=True)
    assert third.plan.lite_range == (4, 4)  # 5 and 6 (the first run's START/END) are inside the window
    assert third.num_deleted_files == 1 and h["c"]["path"] not in files_on_disk(path)
    assert deltalake_ids(path) == []


def test_lite_mode_refuses_when_commits_were_cleaned_and_can_fall_back(tmp_path):
    import deltalake

    path = str(tmp_path / "t")
    h = build_lite_history(path)
    deltalake.DeltaTable(path).create_checkpoint()
    for v in (0, 1):
        os.remove(commit_path(path, v))
    before = (files_on_disk(path), log_files(path))
    with pytest.raises(LiteVacuumUnavailableError, match="commit 0 and later ones are gone"):
        vacuum(path, mode="lite")
    assert _unchanged(path, before)
    result = vacuum(path, mode="lite", full_fallback=True)
    assert result.mode == "full" and any("falling back" in w for w in result.warnings)
    assert result.num_deleted_files == 3  # a, b and the junk file
    assert h["c"]["path"] in files_on_disk(path)


# --- CLI -----------------------------------------------------------------------------------------


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process (the subprocess case below checks the real entry point once)."""
    from deltalog.cli import main

    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_dry_run_json_and_errors(tmp_path, capsys):
    path = str(tmp_path / "t")
    h = build_history(path)
    code, out, err = _cli(capsys, "vacuum", path, "--dry-run", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["status"] == "DRY_RUN" and doc["num_files_to_delete"] == 4
    assert {f["path"] for f in doc["plan"]["files"]} == {h["a"]["path"], h["b"]["path"], h["c"]["path"], h["junk"]}
    assert doc["fully_readable_versions"] == "3..4"
    code, out, _ = _cli(capsys, "vacuum", path, "--dry-run", "--json", "--no-file-list")
    assert code == 0 and "files" not in json.loads(out)["plan"]
    code, _, err = _cli(capsys, "vacuum", path, "--retention-hours", "1")
    assert code == 1 and err.startswith("error: refusing to vacuum") and "Traceback" not in err
    code, _, err = _cli(capsys, "vacuum", str(tmp_path / "nope"), "--json")
    assert code == 2 and err.startswith("error: ")
    code, _, err = _cli(capsys, "vacuum", path, "--inventory", str(tmp_path / "nope.parquet"))
    assert code == 2 and "does not exist" in err
    code, _, err = _cli(capsys, "vacuum", path, "--mode", "lite", "--inventory", "x.parquet")
    assert code == 2
    assert h["a"]["path"] in files_on_disk(path)  # nothing so far deleted anything


def test_cli_subprocess_deletes_and_reports(tmp_path):
    path = str(tmp_path / "t")
    h = build_history(path)
    proc = subprocess.run(
        [sys.executable, "-m", "deltalog", "vacuum", path], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "deleted 4 files" in proc.stdout and "versions 3..4 (and later) keep all their files" in proc.stdout
    assert h["a"]["path"] not in files_on_disk(path)


# --- commits written by hand: change data files, in-commit timestamps ---------------------------


def write_commit(path: str, version: int, actions: list[dict], at_ms: int) -> None:
    with open(commit_path(path, version), "x") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")
    set_mtime(commit_path(path, version), at_ms)


def test_change_data_files_of_retained_commits_are_kept(engine, tmp_path):
    path = str(tmp_path / "t")
    now = now_ms()
    make_table_at(path, now - 20 * DAY_MS)
    os.makedirs(os.path.join(path, "_change_data"))
    for name, at in (("cdc-old.parquet", now - 20 * DAY_MS), ("cdc-new.parquet", now - DAY_MS)):
        with open(os.path.join(path, "_change_data", name), "wb") as fh:
            fh.write(b"cdc")
        set_mtime(os.path.join(path, "_change_data", name), now - 20 * DAY_MS)  # both files look old
        version = 1 if name == "cdc-old.parquet" else 2
        cdc = {"cdc": {"path": f"_change_data/{name}", "partitionValues": {}, "size": 3, "dataChange": False}}
        write_commit(path, version, [{"commitInfo": {"timestamp": at, "operation": "UPDATE"}}, cdc], at)
    plan = plan_vacuum(path, **engine)
    assert plan.files.to_pylist() == [
        {
            "path": "_change_data/cdc-old.parquet",
            "size": 3,
            "modificationTime": plan.files.column("modificationTime")[0].as_py(),
            "reason": "change data file of a commit before the cutoff",
        }
    ]


def test_in_commit_timestamps_decide_the_window_not_file_times(engine, tmp_path):
    """With ICT enabled, commit files copied or rewritten today still count from their in-commit time."""
    path = str(tmp_path / "t")
    now = now_ms()
    proto = Protocol(1, 7, None, ("inCommitTimestamp",))
    conf = {"delta.enableInCommitTimestamps": "true", "delta.inCommitTimestampEnablementVersion": "0"}
    table = make_table_at(path, now, protocol=proto, configuration=conf)
    a, b = new_file(table, rows(2)), new_file(table, rows(2, 10))
    history = [
        (now - 20 * DAY_MS, [{"add": dict(a, modificationTime=now - 20 * DAY_MS)}, {"add": b}]),
        (now - 15 * DAY_MS, [{"remove": dict(remove_of(a), deletionTimestamp=now - 15 * DAY_MS)}]),
        (now - 1 * DAY_MS, [{"remove": dict(remove_of(b), deletionTimestamp=now - 1 * DAY_MS)}]),
    ]
    # Rewrite version 0's commitInfo with an in-commit timestamp older than everything.
    with open(commit_path(path, 0)) as fh:
        v0 = [json.loads(line) for line in fh if line.strip()]
    for act in v0:
        if "commitInfo" in act:
            act["commitInfo"]["inCommitTimestamp"] = now - 21 * DAY_MS
    os.remove(commit_path(path, 0))
    write_commit(path, 0, v0, now)
    for version, (ict, actions) in enumerate(history, start=1):
        info = {"commitInfo": {"inCommitTimestamp": ict, "timestamp": ict, "operation": "WRITE"}}
        write_commit(path, version, [info, *actions], now)  # every file dated today
    for f in (a, b):
        set_mtime(os.path.join(path, f["path"]), now - 20 * DAY_MS)
    plan = plan_vacuum(path, **engine)
    assert plan.window_start == 2 and plan.fully_readable_from == 2
    assert plan.files.column("path").to_pylist() == [a["path"]]
    result = vacuum(path, **engine)
    assert result.num_deleted_files == 1
    start = read_commit_info(table.storage, commit_path(path, result.start_commit_version), "start")
    assert start["inCommitTimestamp"] > now - DAY_MS  # our marker commits carry in-commit timestamps too


def test_a_cursor_beyond_the_table_is_ignored(tmp_path):
    path = str(tmp_path / "t")
    h = build_lite_history(path)
    with open(os.path.join(path, "_delta_log", "_last_vacuum_info"), "w") as fh:
        json.dump({"latestCommitVersionOutsideOfRetentionWindow": 99}, fh)
    result = vacuum(path, mode="lite", dry_run=True)
    assert result.plan.lite_range == (0, 3) and any("re-created" in w for w in result.warnings)
    assert result.num_files_to_delete == 2 and h["a"]["path"] in files_on_disk(path)
