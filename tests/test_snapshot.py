"""Snapshot reconstruction: replay rules, checkpoints, time travel, and every error case.

Broken logs are written by hand so each test names exactly the damage it checks.
"""

from __future__ import annotations

import json
import os
import shutil

import deltalake
import pyarrow as pa
import pytest

from deltalog import DeltaTable
from deltalog.errors import (
    CorruptLogError,
    InvalidArgumentError,
    MissingCommitError,
    NoMetadataError,
    NoProtocolError,
    NotADeltaTableError,
    TableNotFoundError,
    UnsupportedProtocolError,
    VersionNotFoundError,
)
from helpers import append, make_table, rows, write_data_file

SCHEMA_STRING = json.dumps(
    {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
)
PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
METADATA = {
    "metaData": {
        "id": "t1",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": SCHEMA_STRING,
        "partitionColumns": [],
        "configuration": {},
    }
}


def add(path: str, size: int = 10, dv: dict | None = None) -> dict:
    a = {"path": path, "partitionValues": {}, "size": size, "modificationTime": 1, "dataChange": True}
    if dv:
        a["deletionVector"] = dv
    return {"add": a}


def remove(path: str, ts: int = 5, dv: dict | None = None) -> dict:
    r = {"path": path, "deletionTimestamp": ts, "dataChange": True}
    if dv:
        r["deletionVector"] = dv
    return {"remove": r}


def write_log(root, commits: dict[int, list[dict]], raw: dict[str, bytes] | None = None) -> str:
    log = os.path.join(str(root), "_delta_log")
    os.makedirs(log, exist_ok=True)
    for v, actions in commits.items():
        with open(os.path.join(log, f"{v:020d}.json"), "w") as fh:
            fh.write("\n".join(json.dumps(a) for a in actions) + "\n")
    for name, data in (raw or {}).items():
        with open(os.path.join(log, name), "wb") as fh:
            fh.write(data)
    return str(root)


def paths(snapshot) -> list[str]:
    return sorted(snapshot.files.column("path").to_pylist())


# --- replay rules ----------------------------------------------------------------------


def test_replay_add_remove_readd(tmp_path):
    root = write_log(
        tmp_path,
        {0: [PROTOCOL, METADATA, add("a"), add("b")], 1: [remove("a")], 2: [add("c"), add("a", size=42)]},
    )
    snap = DeltaTable(root).snapshot()
    assert snap.version == 2
    assert paths(snap) == ["a", "b", "c"]
    sizes = dict(zip(snap.files.column("path").to_pylist(), snap.files.column("size").to_pylist()))
    assert sizes["a"] == 42
    assert snap.tombstones.num_rows == 0  # "a" was re-added after its removal


def test_tombstones_kept_with_deletion_timestamp(tmp_path):
    root = write_log(tmp_path, {0: [PROTOCOL, METADATA, add("a"), add("b")], 1: [remove("a", ts=1234)]})
    snap = DeltaTable(root).snapshot()
    assert paths(snap) == ["b"]
    assert snap.tombstones.column("path").to_pylist() == ["a"]
    assert snap.tombstones.column("deletionTimestamp").to_pylist() == [1234]


def test_deletion_vector_is_part_of_the_file_key(tmp_path):
    dv1 = {
        "storageType": "u",
        "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 2,
    }
    dv2 = dict(dv1, offset=50)
    root = write_log(
        tmp_path,
        {
            0: [PROTOCOL, METADATA, add("a")],
            1: [remove("a"), add("a", dv=dv1)],
            2: [remove("a", dv=dv1), add("a", dv=dv2)],
        },
    )
    snap = DeltaTable(root).snapshot()
    assert paths(snap) == ["a"]
    assert snap.files.column("deletionVector").to_pylist()[0]["offset"] == 50
    assert snap.tombstones.num_rows == 2  # (a, no DV) and (a, dv1)


def test_latest_protocol_metadata_txn_and_domains(tmp_path):
    md2 = json.loads(json.dumps(METADATA))
    md2["metaData"]["configuration"] = {"delta.appendOnly": "false"}
    root = write_log(
        tmp_path,
        {
            0: [PROTOCOL, METADATA, {"txn": {"appId": "app", "version": 1}}],
            1: [md2, {"txn": {"appId": "app", "version": 3}}, {"txn": {"appId": "other", "version": 7}}],
            2: [{"domainMetadata": {"domain": "d1", "configuration": "{}", "removed": False}}],
            3: [{"domainMetadata": {"domain": "d2", "configuration": "{}", "removed": False}}],
            4: [{"domainMetadata": {"domain": "d2", "configuration": "{}", "removed": True}}],
        },
    )
    snap = DeltaTable(root).snapshot()
    assert snap.metadata.configuration == {"delta.appendOnly": "false"}
    assert snap.app_transaction_version("app") == 3
    assert snap.app_transaction_version("other") == 7
    assert set(snap.domain_metadata) == {"d1"}


def test_schema_parsed_to_arrow(tmp_path):
    table = make_table(str(tmp_path / "t"), partition_by=["part"])
    snap = table.snapshot()
    assert snap.schema.field("id").type == pa.int64()
    assert snap.partition_columns == ["part"]


# --- checkpoints and the _last_checkpoint hint ---------------------------------------


@pytest.fixture
def checkpointed_table(tmp_path):
    """A table with 12 commits and a deltalake-written checkpoint at version 10."""
    path = str(tmp_path / "cp")
    table = make_table(path)
    for i in range(10):
        append(table, rows(5, start=i * 5))
    deltalake.DeltaTable(path).create_checkpoint()
    append(table, rows(5, start=50))
    return path


def test_reads_deltalake_checkpoint_and_commits_after(checkpointed_table):
    snap = DeltaTable(checkpointed_table).snapshot()
    assert snap.segment.checkpoint is not None and snap.segment.checkpoint.version == 10
    assert snap.version == 11
    theirs = deltalake.DeltaTable(checkpointed_table)
    assert sorted(theirs.file_uris()) == sorted(
        os.path.join(checkpointed_table, p) for p in snap.files.column("path").to_pylist()
    )


@pytest.mark.parametrize(
    "hint",
    [None, b"{not json", b'{"version": 3, "size": 1}', b'{"version": 99, "size": 4}'],
    ids=["missing", "corrupt", "stale", "points-to-missing-file"],
)
def test_last_checkpoint_is_only_a_hint(checkpointed_table, hint):
    log = os.path.join(checkpointed_table, "_delta_log")
    last = os.path.join(log, "_last_checkpoint")
    if hint is None:
        os.unlink(last)
    else:
        with open(last, "wb") as fh:
            fh.write(hint)
    snap = DeltaTable(checkpointed_table).snapshot()
    assert snap.version == 11 and snap.num_files == 11
    assert snap.segment.checkpoint.version == 10


def test_corrupt_checkpoint_falls_back_to_commits(checkpointed_table):
    cp = os.path.join(checkpointed_table, "_delta_log", f"{10:020d}.checkpoint.parquet")
    with open(cp, "wb") as fh:
        fh.write(b"garbage, not parquet")
    snap = DeltaTable(checkpointed_table).snapshot()
    assert snap.num_files == 11 and snap.segment.checkpoint is None


def test_incomplete_multipart_checkpoint_is_ignored(checkpointed_table):
    log = os.path.join(checkpointed_table, "_delta_log")
    # Only part 1 of 2 at version 11: a writer crashed; readers must not use it.
    shutil.copy(
        os.path.join(log, f"{10:020d}.checkpoint.parquet"),
        os.path.join(log, f"{11:020d}.checkpoint.0000000001.0000000002.parquet"),
    )
    listing = DeltaTable(checkpointed_table).list_log()
    assert 11 in listing.incomplete_checkpoints and 11 not in listing.checkpoints
    snap = DeltaTable(checkpointed_table).snapshot()
    assert snap.segment.checkpoint.version == 10 and snap.num_files == 11


def test_time_travel_below_checkpoint_uses_commits(checkpointed_table):
    snap = DeltaTable(checkpointed_table).snapshot(version=4)
    assert snap.version == 4 and snap.num_files == 4 and snap.segment.checkpoint is None


def test_version_unreachable_after_log_cleanup(checkpointed_table):
    log = os.path.join(checkpointed_table, "_delta_log")
    for v in range(0, 10):
        os.unlink(os.path.join(log, f"{v:020d}.json"))
    assert DeltaTable(checkpointed_table).snapshot().num_files == 11
    assert DeltaTable(checkpointed_table).snapshot(version=10).num_files == 10
    with pytest.raises(VersionNotFoundError, match="version 5"):
        DeltaTable(checkpointed_table).snapshot(version=5)


# --- time travel -----------------------------------------------------------------------


def _set_mtime(root: str, version: int, seconds: float) -> None:
    os.utime(os.path.join(root, "_delta_log", f"{version:020d}.json"), (seconds, seconds))


def test_time_travel_by_version_and_timestamp(tmp_path):
    path = str(tmp_path / "tt")
    table = make_table(path)
    for i in range(3):
        append(table, rows(2, start=i * 2))
    base = 1_700_000_000
    for v in range(4):
        _set_mtime(path, v, base + v * 100)
    t = DeltaTable(path)
    assert t.snapshot(version=2).num_files == 2
    assert t.snapshot(timestamp=(base + 150) * 1000).version == 1
    assert t.snapshot(timestamp="2023-11-14T22:18:20Z").version == 3  # == base + 300 s
    assert t.snapshot(timestamp="2023-11-14T22:16:40Z").version == 2  # == base + 200 s
    assert t.snapshot(timestamp=(base + 100) * 1000).version == 1  # exactly at a commit
    with pytest.raises(VersionNotFoundError, match="before the earliest"):
        t.snapshot(timestamp=(base - 10) * 1000)
    with pytest.raises(InvalidArgumentError):
        t.snapshot(timestamp="yesterday-ish")
    with pytest.raises(InvalidArgumentError):
        t.snapshot(version=1, timestamp=base)


def test_non_monotonic_mtimes_are_made_monotonic(tmp_path):
    path = str(tmp_path / "mono")
    table = make_table(path)
    append(table, rows(1))
    append(table, rows(1, start=1))
    base = 1_700_000_000
    _set_mtime(path, 0, base)
    _set_mtime(path, 1, base + 100)
    _set_mtime(path, 2, base + 50)  # clock skew: older than its predecessor
    assert DeltaTable(path).snapshot(timestamp=(base + 100) * 1000).version == 1
    assert DeltaTable(path).snapshot(timestamp=(base + 101) * 1000).version == 2


def test_in_commit_timestamps_win_over_mtimes(tmp_path):
    md = json.loads(json.dumps(METADATA))
    md["metaData"]["configuration"] = {
        "delta.enableInCommitTimestamps": "true",
        "delta.inCommitTimestampEnablementVersion": "0",
        "delta.inCommitTimestampEnablementTimestamp": "1000",
    }
    proto = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["inCommitTimestamp"]}}
    root = write_log(
        tmp_path,
        {
            0: [{"commitInfo": {"inCommitTimestamp": 1000, "timestamp": 1}}, proto, md],
            1: [{"commitInfo": {"inCommitTimestamp": 2000, "timestamp": 1}}, add("a")],
            2: [{"commitInfo": {"inCommitTimestamp": 3000, "timestamp": 1}}, add("b")],
        },
    )
    # Modification times say the opposite order; in-commit timestamps must decide.
    for v, secs in ((0, 3_000_000), (1, 2_000_000), (2, 1_000_000)):
        _set_mtime(root, v, secs)
    t = DeltaTable(root)
    assert t.snapshot(timestamp=2500).version == 1
    assert t.snapshot(timestamp=3000).version == 2
    assert [r.timestamp for r in t.history()] == [3000, 2000, 1000]


# --- errors (one class each, a clear message, nothing written) -----------------------


def test_not_a_table(tmp_path):
    (tmp_path / "data.parquet").write_bytes(b"x")
    with pytest.raises(NotADeltaTableError, match="no _delta_log"):
        DeltaTable(str(tmp_path)).snapshot()
    with pytest.raises(TableNotFoundError, match="does not exist"):
        DeltaTable(str(tmp_path / "nope")).snapshot()


def test_missing_commit(tmp_path):
    root = write_log(tmp_path, {0: [PROTOCOL, METADATA], 1: [add("a")], 3: [add("b")]})
    with pytest.raises(MissingCommitError, match="commit 2"):
        DeltaTable(root).snapshot()
    assert DeltaTable(root).snapshot(version=1).num_files == 1


def test_no_protocol(tmp_path):
    root = write_log(tmp_path, {0: [METADATA, add("a")]})
    with pytest.raises(NoProtocolError):
        DeltaTable(root).snapshot()


def test_no_metadata(tmp_path):
    root = write_log(tmp_path, {0: [PROTOCOL, add("a")]})
    with pytest.raises(NoMetadataError):
        DeltaTable(root).snapshot()


@pytest.mark.parametrize(
    "protocol,needle",
    [
        ({"minReaderVersion": 4, "minWriterVersion": 7}, "minReaderVersion 4"),
        (
            {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["futureFeature"], "writerFeatures": []},
            "futureFeature",
        ),
    ],
)
def test_unsupported_reader(tmp_path, protocol, needle):
    root = write_log(tmp_path, {0: [{"protocol": protocol}, METADATA]})
    with pytest.raises(UnsupportedProtocolError, match=needle):
        DeltaTable(root).snapshot()


def test_corrupt_json_line_names_file_and_line(tmp_path):
    root = write_log(tmp_path, {0: [PROTOCOL, METADATA]}, raw={f"{1:020d}.json": b'{"add": {"path": "a"}}\n{oops\n'})
    with pytest.raises(CorruptLogError, match=r"00000000000000000001\.json: line 2"):
        DeltaTable(root).snapshot()


def test_wrong_types_are_corrupt_not_crashes(tmp_path):
    root = write_log(tmp_path, {0: [PROTOCOL, METADATA], 1: [{"add": {"path": "a", "size": "big"}}]})
    with pytest.raises(CorruptLogError, match="size"):
        DeltaTable(root).snapshot()
    root2 = write_log(tmp_path / "b", {0: [PROTOCOL, METADATA], 1: [{"add": {"size": 1}}]})
    with pytest.raises(CorruptLogError, match="path"):
        DeltaTable(root2).snapshot()


def test_version_out_of_range(tmp_path):
    root = write_log(tmp_path, {0: [PROTOCOL, METADATA], 1: [add("a")]})
    with pytest.raises(VersionNotFoundError, match="latest version is 1"):
        DeltaTable(root).snapshot(version=5)
    with pytest.raises(VersionNotFoundError):
        DeltaTable(root).snapshot(version=-1)


def test_reading_writes_nothing(tmp_path):
    root = write_log(tmp_path, {0: [PROTOCOL, METADATA], 2: [add("a")]})
    before = sorted(os.listdir(os.path.join(root, "_delta_log")))
    with pytest.raises(MissingCommitError):
        DeltaTable(root).snapshot()
    assert sorted(os.listdir(os.path.join(root, "_delta_log"))) == before


def test_operations_refuse_a_table_argument_of_the_wrong_type(tmp_path):
    from deltalog.compaction import compact
    from deltalog.log_maintenance import create_checkpoint

    for call in (lambda: create_checkpoint(tmp_path), lambda: compact(42)):
        with pytest.raises(InvalidArgumentError, match="must be a DeltaTable or a path/URI string"):
            call()


def test_public_api_on_the_table_and_at_the_top(tmp_path):
    """The entry points a user finds: DeltaTable methods (keyword-only options) and deltalog.<op>."""
    import inspect

    import deltalog

    path = str(tmp_path / "t")
    t = make_table(path, configuration={"delta.enableExpiredLogCleanup": "false"})
    for i in range(3):
        append(t, rows(2, start=i * 2))
    assert t.compact(plan_only=True).plan.bins and t.compact().commits[0].version == 4
    assert t.create_checkpoint().version == 4
    assert t.cleanup_log(dry_run=True).dry_run
    assert t.generate_manifest(dry_run=True).dry_run
    assert t.vacuum(dry_run=True).num_files_to_delete == 0
    txn = t.transaction(operation="WRITE")
    txn.add([write_data_file(path, rows(1, start=9))])
    assert txn.commit().version == 5
    assert [h.operation for h in t.history(limit=2)] == ["WRITE", "OPTIMIZE"]
    assert t.health().num_files == 2
    with pytest.raises(TypeError):
        t.history(2)  # keyword-only
    from deltalog.vacuuming import vacuum

    ops = ("compact", "plan_compaction", "plan_vacuum", "create_checkpoint", "cleanup_log", "generate_manifest")
    for name, fn in [("vacuum", vacuum), *((n, getattr(deltalog, n)) for n in ops)]:
        params = list(inspect.signature(fn).parameters.values())
        assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in params[1:]), name  # VAR: options' fields
        assert "storage_options" in inspect.signature(fn).parameters, name
    assert deltalog.create_table is __import__("deltalog.create", fromlist=["x"]).create_table
    with pytest.raises(AttributeError):
        deltalog.no_such_thing  # noqa: B018
