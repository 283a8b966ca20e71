"""Transactions: what a commit writes, in-commit timestamps, isolation, retries, idempotency, hooks, refusals."""

from __future__ import annotations

import json
import os
import time

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from deltalog import DeltaTable, __version__
from deltalog.commit.post_commit import PostCommitHook
from deltalog.commit.transaction import (
    BACKOFF_CAP,
    SERIALIZABLE,
    SNAPSHOT_ISOLATION,
    WRITE_SERIALIZABLE,
    Transaction,
    _backoff,
)
from deltalog.errors import (
    CommitFailedError,
    InvalidArgumentError,
    NonAtomicStorageError,
    OperationRefusedError,
    StorageError,
    TableAlreadyExistsError,
    UnsupportedProtocolError,
)
from deltalog.log.actions import Metadata
from deltalog.protocol.features import FEATURES, Operation
from deltalog.protocol.table_protocol import Protocol
from deltalog.storage.filesystem import Storage
from helpers import append, make_table, rows, write_data_file


def log_actions(table_path: str, version: int) -> list[dict]:
    with open(os.path.join(table_path, "_delta_log", f"{version:020d}.json")) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def versions(table_path: str) -> list[int]:
    names = os.listdir(os.path.join(table_path, "_delta_log"))
    return sorted(int(n[:20]) for n in names if n.endswith(".json") and n[:20].isdigit())


def new_txn(table: DeltaTable, **kw) -> Transaction:
    kw.setdefault("operation", "WRITE")
    kw.setdefault("run_hooks", False)
    return Transaction(table.storage, table.snapshot(), **kw)


# --- what lands in the log ---------------------------------------------------------------


def test_commit_info_fields(table_path: str) -> None:
    table = make_table(table_path)
    txn = new_txn(table, operation_parameters={"mode": "Append", "partitionBy": []}, user_metadata="run 7")
    txn.add([write_data_file(table_path, rows(3))])
    result = txn.commit({"numFiles": 1, "numOutputRows": 3})
    assert (result.version, result.read_version, result.attempts, result.noop) == (1, 0, 1, False)
    actions = log_actions(table_path, 1)
    assert list(actions[0]) == ["commitInfo"], "commitInfo is the first action"
    info = actions[0]["commitInfo"]
    assert info["operation"] == "WRITE"
    assert info["operationParameters"] == {"mode": "Append", "partitionBy": "[]"}
    assert info["readVersion"] == 0
    assert info["isolationLevel"] == SERIALIZABLE
    assert info["isBlindAppend"] is True
    assert info["operationMetrics"] == {"numFiles": "1", "numOutputRows": "3"}
    assert info["engineInfo"] == f"deltalog/{__version__}"
    assert info["userMetadata"] == "run 7"
    assert info["txnId"] == result.txn_id
    assert abs(info["timestamp"] - time.time() * 1000) < 60_000
    assert "inCommitTimestamp" not in info
    add = actions[1]["add"]
    assert add["dataChange"] is True and add["partitionValues"] == {}


def test_app_transaction_is_recorded_and_a_repeat_is_a_noop(table_path: str) -> None:
    table = make_table(table_path)
    txn = new_txn(table)
    txn.set_app_transaction("dag.task", 5)
    txn.add([write_data_file(table_path, rows(2))])
    first = txn.commit()
    txns = [a["txn"] for a in log_actions(table_path, first.version) if "txn" in a]
    assert txns[0]["appId"] == "dag.task" and txns[0]["version"] == 5 and txns[0]["lastUpdated"] > 0
    for requested in (5, 4):
        again = new_txn(table)
        again.set_app_transaction("dag.task", requested)
        again.add([write_data_file(table_path, rows(2))])
        result = again.commit()
        assert result.noop and result.attempts == 0 and result.version == 1
        assert "already at version 5" in result.reason
    assert versions(table_path) == [0, 1], "a no-op writes nothing"
    newer = new_txn(table)
    newer.set_app_transaction("dag.task", 6)
    newer.add([write_data_file(table_path, rows(2))])
    assert newer.commit().version == 2


def test_winning_commit_with_our_app_transaction_is_a_noop(table_path: str) -> None:
    table = make_table(table_path)
    a, b = new_txn(table), new_txn(table)
    for t in (a, b):
        t.set_app_transaction("dag.task", 1)
        t.add([write_data_file(table_path, rows(1))])
    assert a.commit().version == 1
    result = b.commit()
    assert result.noop and result.version == 1 and "concurrent writer" in result.reason
    assert versions(table_path) == [0, 1]


def test_lost_response_is_recognised_by_txn_id(table_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PUT landed but its response was lost and the retry saw 'exists': that is our commit, not a race."""
    table = make_table(table_path)
    txn = new_txn(table)
    txn.add([write_data_file(table_path, rows(1))])
    real = Storage.put_if_absent

    def landed_then_exists(self, path, data):
        real(self, path, data)
        raise FileExistsError(path)

    monkeypatch.setattr(Storage, "put_if_absent", landed_then_exists)
    result = txn.commit()
    assert (result.version, result.noop) == (1, False)
    assert versions(table_path) == [0, 1], "the actions were not committed twice"


def test_stale_snapshot_retries_at_next_version(table_path: str) -> None:
    table = make_table(table_path)
    stale = new_txn(table)
    stale.add([write_data_file(table_path, rows(1))])
    for i in range(3):
        append(table, rows(1, start=10 + i), run_hooks=False)
    result = stale.commit()
    assert (result.version, result.attempts, result.winning_commits) == (4, 2, 3)
    assert result.read_version == 0
    assert log_actions(table_path, 4)[0]["commitInfo"]["readVersion"] == 0


def test_attempt_limit_gives_up_without_writing(table_path: str) -> None:
    table = make_table(table_path)
    txn = new_txn(table, max_attempts=1)
    txn.add([write_data_file(table_path, rows(1))])
    append(table, rows(1), run_hooks=False)
    with pytest.raises(CommitFailedError, match="after 1 attempts"):
        txn.commit()
    assert versions(table_path) == [0, 1]
    with pytest.raises(InvalidArgumentError):
        new_txn(table, max_attempts=0)


def test_backoff_is_immediate_first_then_jittered_and_capped() -> None:
    assert _backoff(1) == 0.0
    samples = [_backoff(n) for n in range(2, 40) for _ in range(5)]
    assert all(0.0 <= s <= BACKOFF_CAP for s in samples)
    assert len(set(samples)) > 10, "jittered"


# --- in-commit timestamps ------------------------------------------------------------------


def ict_table(path: str) -> DeltaTable:
    return make_table(
        path,
        configuration={"delta.enableInCommitTimestamps": "true"},
        protocol=Protocol(1, 7, None, ("inCommitTimestamp",)),
    )


def test_in_commit_timestamps_first_and_monotonic(table_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table = ict_table(table_path)
    info0 = log_actions(table_path, 0)[0]["commitInfo"]
    assert isinstance(info0["inCommitTimestamp"], int)
    r1 = append(table, rows(1), run_hooks=False)
    info1 = log_actions(table_path, 1)[0]["commitInfo"]
    assert list(info1)[0] == "inCommitTimestamp" and info1["inCommitTimestamp"] == r1.in_commit_timestamp
    assert info1["inCommitTimestamp"] > info0["inCommitTimestamp"]
    # The clock jumps back an hour: ICT must still grow by at least 1 ms.
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() - 3600)
    r2 = append(table, rows(1), run_hooks=False)
    assert r2.in_commit_timestamp == r1.in_commit_timestamp + 1
    assert log_actions(table_path, 2)[0]["commitInfo"]["inCommitTimestamp"] == r2.in_commit_timestamp


def test_ict_stays_monotonic_across_a_lost_race(table_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table = ict_table(table_path)
    stale = new_txn(table)
    stale.add([write_data_file(table_path, rows(1))])
    winner = append(table, rows(1), run_hooks=False)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() - 3600)
    result = stale.commit()
    assert result.version == 2 and result.in_commit_timestamp == winner.in_commit_timestamp + 1


def test_enabling_ict_on_an_existing_table_records_where_it_starts(table_path: str) -> None:
    table = make_table(table_path)
    append(table, rows(1), run_hooks=False)
    snap = table.snapshot()
    txn = Transaction(table.storage, snap, operation="SET TBLPROPERTIES", run_hooks=False)
    txn.update_protocol(Protocol(1, 7, None, ("appendOnly", "invariants", "inCommitTimestamp")))
    md = snap.metadata
    txn.update_metadata(
        Metadata(
            md.id,
            md.schema_string,
            md.partition_columns,
            {**md.configuration, "delta.enableInCommitTimestamps": "true"},
        )
    )
    result = txn.commit()
    actions = log_actions(table_path, 2)
    ict = actions[0]["commitInfo"]["inCommitTimestamp"]
    config = next(a["metaData"] for a in actions if "metaData" in a)["configuration"]
    assert config["delta.inCommitTimestampEnablementVersion"] == "2"
    assert config["delta.inCommitTimestampEnablementTimestamp"] == str(ict) == str(result.in_commit_timestamp)
    prev_mtime = int(os.stat(os.path.join(table_path, "_delta_log", f"{1:020d}.json")).st_mtime * 1000)
    assert ict > prev_mtime


def test_ict_property_without_the_feature_is_refused(table_path: str) -> None:
    with pytest.raises(InvalidArgumentError, match="inCommitTimestamp writer feature"):
        make_table(table_path, configuration={"delta.enableInCommitTimestamps": "true"})
    assert not os.path.exists(os.path.join(table_path, "_delta_log", f"{0:020d}.json"))


# --- isolation levels ----------------------------------------------------------------------


def test_isolation_levels(table_path: str) -> None:
    table = make_table(table_path)
    f = append(table, rows(1), run_hooks=False)
    assert f.isolation_level == SERIALIZABLE
    live = table.snapshot().files.column("path").to_pylist()[0]
    compaction = new_txn(table, operation="OPTIMIZE")
    new = write_data_file(table_path, rows(1))
    compaction.add([{**new, "dataChange": False}])
    compaction.remove([{"path": live, "dataChange": False}])
    assert compaction.effective_isolation_level() == SNAPSHOT_ISOLATION
    assert compaction.commit().isolation_level == SNAPSHOT_ISOLATION
    assert log_actions(table_path, 2)[0]["commitInfo"]["isolationLevel"] == SNAPSHOT_ISOLATION
    assert log_actions(table_path, 2)[0]["commitInfo"]["isBlindAppend"] is False
    assert new_txn(table, isolation_level=WRITE_SERIALIZABLE).effective_isolation_level() == WRITE_SERIALIZABLE
    with pytest.raises(InvalidArgumentError, match="isolation level"):
        new_txn(table, isolation_level="ReadCommitted")


def test_table_property_sets_isolation_level(tmp_path) -> None:
    table = make_table(str(tmp_path / "t"), configuration={"delta.isolationLevel": "WriteSerializable"})
    assert new_txn(table).effective_isolation_level() == WRITE_SERIALIZABLE


# --- refusals before anything is written ---------------------------------------------------


def test_append_only_table_refuses_data_removes(table_path: str) -> None:
    table = make_table(table_path, configuration={"delta.appendOnly": "true"})
    append(table, rows(1), run_hooks=False)
    live = table.snapshot().files.column("path").to_pylist()[0]
    txn = new_txn(table, operation="DELETE")
    txn.remove([{"path": live}])
    with pytest.raises(OperationRefusedError, match="append-only"):
        txn.commit()
    assert versions(table_path) == [0, 1]
    rewrite = new_txn(table, operation="OPTIMIZE")
    rewrite.add([{**write_data_file(table_path, rows(1)), "dataChange": False}])
    rewrite.remove([{"path": live, "dataChange": False}])
    assert rewrite.commit().version == 2


def write_table_with_protocol(table_path: str, protocol: Protocol) -> None:
    """Version 0 written by hand: a table whose protocol deltalog itself would refuse to create."""
    schema = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}'
    metadata = {
        "id": "x",
        "format": {"provider": "parquet"},
        "schemaString": schema,
        "partitionColumns": [],
        "configuration": {},
    }
    os.makedirs(os.path.join(table_path, "_delta_log"))
    with open(os.path.join(table_path, "_delta_log", f"{0:020d}.json"), "w") as fh:
        fh.write(json.dumps({"protocol": protocol.to_dict()}) + "\n" + json.dumps({"metaData": metadata}) + "\n")


#: Every feature the feature table refuses for a commit request, and a name no
#: protocol version defines yet: the class of "a feature we do not implement".
_REFUSED_FOR_COMMITS = sorted(name for name, f in FEATURES.items() if not f.cell(Operation.COMMIT_REQUEST).allowed) + [
    "aWriterFeatureFromTheFuture"
]


@pytest.mark.parametrize("feature", _REFUSED_FOR_COMMITS)
def test_unsupported_writer_feature_is_refused_before_writing(table_path: str, feature: str) -> None:
    known = FEATURES.get(feature)
    readers = (feature,) if known is not None and known.kind == "reader-writer" else ()
    write_table_with_protocol(table_path, Protocol(3, 7, readers, (feature,)))
    table = DeltaTable(table_path)
    txn = new_txn(table)
    txn.add([{"path": "x.parquet", "size": 1}])
    with pytest.raises(UnsupportedProtocolError, match=feature):
        txn.commit()
    assert versions(table_path) == [0]


def test_bad_actions_are_refused(table_path: str) -> None:
    table = make_table(table_path, partition_by=["part"])
    add = write_data_file(table_path, rows(1), {"part": "a"})
    twice = new_txn(table)
    twice.add([add, add])
    with pytest.raises(InvalidArgumentError, match="appears twice"):
        twice.commit()
    wrong = new_txn(table)
    wrong.add([{**add, "partitionValues": {"other": "x"}}])
    with pytest.raises(InvalidArgumentError, match="partitioned by"):
        wrong.commit()
    with pytest.raises(InvalidArgumentError):
        new_txn(table).add([{"path": "x.parquet"}])
    with pytest.raises(InvalidArgumentError):
        new_txn(table).set_app_transaction("", 1)
    with pytest.raises(InvalidArgumentError):
        new_txn(table).set_app_transaction("app", -1)
    assert versions(table_path) == [0]


def test_domain_metadata_needs_the_feature_and_system_domains_are_protected(tmp_path) -> None:
    plain = make_table(str(tmp_path / "plain"))
    txn = new_txn(plain)
    txn.set_domain_metadata("com.example.owner", '{"team":"data"}')
    with pytest.raises(OperationRefusedError, match="domainMetadata"):
        txn.commit()
    with pytest.raises(OperationRefusedError, match="system-controlled"):
        new_txn(plain).set_domain_metadata("delta.rowTracking", "{}")
    table = make_table(str(tmp_path / "dm"), protocol=Protocol(1, 7, None, ("domainMetadata",)))
    ok = new_txn(table)
    ok.set_domain_metadata("com.example.owner", '{"team":"data"}')
    assert ok.commit().version == 1
    assert table.snapshot().domain_metadata["com.example.owner"]["configuration"] == '{"team":"data"}'


def test_creating_over_an_existing_version_zero_is_refused(table_path: str) -> None:
    make_table(table_path)
    with pytest.raises(TableAlreadyExistsError, match="created it concurrently"):
        make_table(table_path)


# --- storage primitive ----------------------------------------------------------------------


class NonAtomicFS(MemoryFileSystem):
    protocol = "nonatomic"
    store: dict = {}
    pseudo_dirs = [""]


def test_non_atomic_filesystem_is_always_refused() -> None:
    """No promise opens a store without an atomic create: the old single_writer switch is gone."""
    fsspec.register_implementation("nonatomic", NonAtomicFS, clobber=True)
    storage = Storage("nonatomic://bucket/t")
    with pytest.raises(NonAtomicStorageError, match="'nonatomic' filesystem .*NonAtomicFS") as caught:
        storage.put_if_absent(storage.join("_delta_log", "0.json"), b"x")
    assert not storage.exists(storage.join("_delta_log", "0.json"))
    assert "single" not in str(caught.value) and "--" not in str(caught.value), "no option is suggested"
    with pytest.raises(TypeError):
        storage.put_if_absent(storage.join("_delta_log", "0.json"), b"x", single_writer=True)  # type: ignore[call-arg]


def test_local_put_if_absent_never_overwrites_and_leaves_no_temp(tmp_path) -> None:
    storage = Storage(str(tmp_path))
    path = storage.join("_delta_log", f"{0:020d}.json")
    storage.put_if_absent(path, b"first\n")
    with pytest.raises(FileExistsError):
        storage.put_if_absent(path, b"second\n")
    assert open(path, "rb").read() == b"first\n"
    assert os.listdir(tmp_path / "_delta_log") == [f"{0:020d}.json"]
    durable = Storage(str(tmp_path), {"fsync": "true"})
    durable.put_if_absent(durable.join("_delta_log", f"{1:020d}.json"), b"x\n")
    assert durable.fsync and not storage.fsync


# --- post-commit hooks -----------------------------------------------------------------------


def test_failing_hook_never_fails_a_landed_commit(table_path: str) -> None:
    table = make_table(table_path)
    seen = []

    def good(storage, result):
        seen.append((result.version, dict(result.table_configuration)))
        return {"ok": result.version}

    def bad(storage, result):
        raise RuntimeError("disk on fire")

    txn = Transaction(
        table.storage,
        table.snapshot(),
        operation="WRITE",
        post_commit_hooks=[PostCommitHook("test.good", good), PostCommitHook("test.bad", bad)],
    )
    txn.add([write_data_file(table_path, rows(1))])
    result = txn.commit()
    assert result.version == 1 and not result.noop
    by_name = {h.name: h for h in result.hooks}
    assert list(by_name) == ["test.good", "test.bad"]  # exactly the hooks given, in order
    assert by_name["test.good"].ok and by_name["test.good"].detail == {"ok": 1}
    assert not by_name["test.bad"].ok and "disk on fire" in by_name["test.bad"].detail
    assert seen == [(1, {})]
    assert "table_configuration" not in result.to_dict()
    assert result.to_dict()["hooks"][0]["name"]


def test_standard_hooks_are_an_explicit_list_and_run_by_default(table_path: str) -> None:
    """No import-time registry: the default is ``standard_hooks()``, and it does run."""
    from deltalog.commit.standard_post_commit import standard_hooks

    assert [h.name for h in standard_hooks()] == ["checkpoint", "iceberg_metadata", "log_cleanup", "symlink_manifest"]
    table = make_table(table_path, configuration={"delta.checkpointInterval": "2"})
    append(table, rows(1))
    result = append(table, rows(1, start=1))
    assert [h.name for h in result.hooks if h.ok][:1] == ["checkpoint"]
    assert os.path.exists(os.path.join(table_path, "_delta_log", f"{2:020d}.checkpoint.parquet"))


def test_transaction_conflicts_and_hooks_import_without_a_cycle() -> None:
    """Each imports cleanly on its own in a fresh interpreter (no module needs another half-loaded)."""
    import subprocess
    import sys

    for module in (
        "deltalog.commit.conflicts",
        "deltalog.commit.post_commit",
        "deltalog.commit.transaction",
        "deltalog.commit.standard_post_commit",
    ):
        code = f"import {module}"
        assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0, module
    code = (
        "import sys, deltalog.commit.transaction; "
        "assert 'deltalog.commit.standard_post_commit' not in sys.modules and 'deltalog.log_maintenance' not in sys.modules"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_filesystem_without_hard_links_is_refused(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    storage = Storage(str(tmp_path))
    path = storage.join("_delta_log", f"{0:020d}.json")

    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    with pytest.raises(NonAtomicStorageError, match="refused a hard link"):
        storage.put_if_absent(path, b"x\n")
    assert os.listdir(tmp_path / "_delta_log") == [], "neither the version nor the temp file is left"

    def denied(src, dst):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "link", denied)
    with pytest.raises(PermissionError):
        storage.put_if_absent(path, b"x\n")


def test_a_taken_version_that_cannot_be_read_stops_the_retries(
    table_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Storage that says 'exists' but serves 'not found' must not make a writer spin through every attempt."""
    table = make_table(table_path)
    txn = new_txn(table)
    txn.add([write_data_file(table_path, rows(1))])

    def always_taken(self, path, data):
        raise FileExistsError(path)

    monkeypatch.setattr(Storage, "put_if_absent", always_taken)
    with pytest.raises(StorageError, match="cannot be read back"):
        txn.commit()
