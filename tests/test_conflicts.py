"""The conflict matrix: one test per rule, each with a transaction that loses the race to a winner.

Every case starts two transactions from the same snapshot; the winner commits
first, then the loser's commit either lands at the next version or raises the
rule's exception without writing anything.
"""

from __future__ import annotations

import json
import os

import pytest

from deltalog import DeltaTable
from deltalog.commit.conflicts import (
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentDomainMetadataError,
    ConcurrentTransactionError,
    ConflictError,
    MetadataChangedError,
    ProtocolChangedError,
    WinningCommit,
)
from deltalog.commit.transaction import WRITE_SERIALIZABLE, Transaction
from deltalog.errors import CorruptLogError
from deltalog.log.actions import Metadata
from deltalog.protocol.table_protocol import Protocol
from helpers import make_table, rows, write_data_file


@pytest.fixture
def table(table_path: str) -> DeltaTable:
    """A table partitioned by ``part`` with one file in partitions a and b (version 2)."""
    t = make_table(table_path, partition_by=["part"])
    for part in ("a", "b"):
        txn = Transaction(t.storage, t.snapshot(), operation="WRITE", run_hooks=False)
        txn.add([write_data_file(table_path, rows(2, part=part), {"part": part})])
        txn.commit()
    return t


def txn(table: DeltaTable, operation: str = "WRITE", **kw) -> Transaction:
    return Transaction(table.storage, table.snapshot(), operation=operation, run_hooks=False, **kw)


def live(table: DeltaTable, part: str) -> str:
    snap = table.snapshot()
    paths = snap.files.column("path").to_pylist()
    pvs = snap.files.column("partitionValues").to_pylist()
    return next(p for p, pv in zip(paths, pvs) if dict(pv)["part"] == part)


def new_file(table: DeltaTable, part: str, data_change: bool = True) -> dict:
    return {**write_data_file(table.storage.root, rows(1, part=part), {"part": part}), "dataChange": data_change}


def blind_append(table: DeltaTable, part: str = "a") -> Transaction:
    t = txn(table)
    t.add([new_file(table, part)])
    return t


def delete(table: DeltaTable, part: str) -> Transaction:
    t = txn(table, "DELETE")
    t.remove([{"path": live(table, part)}])
    return t


def compaction(table: DeltaTable, part: str) -> Transaction:
    t = txn(table, "OPTIMIZE")
    t.add([new_file(table, part, data_change=False)])
    t.remove([{"path": live(table, part), "dataChange": False}])
    return t


def race(winner: Transaction, loser: Transaction, expected: type[ConflictError] | None) -> ConflictError | None:
    """Commit ``winner`` then ``loser``; check the loser lands or raises ``expected`` writing nothing."""
    log_dir = os.path.join(winner.storage.root, "_delta_log")
    won = winner.commit()
    before = sorted(os.listdir(log_dir))
    if expected is None:
        result = loser.commit()
        assert result.version == won.version + 1 and result.attempts == 2 and not result.noop
        return None
    with pytest.raises(expected) as info:
        loser.commit()
    assert sorted(os.listdir(log_dir)) == before, "a conflicting commit writes nothing"
    assert info.value.winning_version == won.version
    return info.value


# --- the rules ---------------------------------------------------------------------------


def test_protocol_change(table: DeltaTable) -> None:
    upgrade = txn(table, "UPGRADE PROTOCOL")
    upgrade.update_protocol(Protocol(1, 7, None, ("appendOnly", "invariants", "domainMetadata")))
    race(upgrade, blind_append(table), ProtocolChangedError)


def test_metadata_change(table: DeltaTable) -> None:
    md = table.snapshot().metadata
    alter = txn(table, "SET TBLPROPERTIES")
    alter.update_metadata(Metadata(md.id, md.schema_string, md.partition_columns, {"delta.appendOnly": "true"}))
    race(alter, blind_append(table), MetadataChangedError)


def test_concurrent_append_into_a_partition_we_read(table: DeltaTable) -> None:
    reader = txn(table, "MERGE")
    reader.read_partitions({"part": "a"})
    reader.add([new_file(table, "a")])
    err = race(blind_append(table, "a"), reader, ConcurrentAppendError)
    assert err.paths and err.paths[0].startswith("part=a/")


def test_concurrent_append_elsewhere_does_not_conflict(table: DeltaTable) -> None:
    reader = txn(table, "MERGE")
    reader.read_partitions({"part": ["a", "c"]})
    reader.add([new_file(table, "a")])
    race(blind_append(table, "b"), reader, None)


def test_callable_read_predicate(table: DeltaTable) -> None:
    reader = txn(table, "MERGE")
    reader.read_partitions(lambda pv: pv.get("part") == "b")
    reader.add([new_file(table, "b")])
    race(blind_append(table, "b"), reader, ConcurrentAppendError)


def test_whole_table_read_conflicts_with_any_append(table: DeltaTable) -> None:
    reader = txn(table, "UPDATE")
    reader.read_table()
    reader.add([new_file(table, "b")])
    race(blind_append(table, "a"), reader, ConcurrentAppendError)


def test_write_serializable_lets_blind_appends_through(table: DeltaTable) -> None:
    reader = txn(table, "MERGE", isolation_level=WRITE_SERIALIZABLE)
    reader.read_partitions({"part": "a"})
    reader.add([new_file(table, "a")])
    race(blind_append(table, "a"), reader, None)


def test_write_serializable_still_sees_non_blind_appends(table: DeltaTable) -> None:
    reader = txn(table, "MERGE", isolation_level=WRITE_SERIALIZABLE)
    reader.read_partitions({"part": "a"})
    reader.add([new_file(table, "a")])
    other = txn(table, "MERGE")  # read something, so not a blind append
    other.read_partitions({"part": "b"})
    other.add([new_file(table, "a")])
    race(other, reader, ConcurrentAppendError)


def test_delete_of_a_file_we_read(table: DeltaTable) -> None:
    read = live(table, "a")
    reader = txn(table, "UPDATE")
    reader.read_files([read])
    reader.add([new_file(table, "b")])
    err = race(delete(table, "a"), reader, ConcurrentDeleteReadError)
    assert err.paths == [read]


def test_compaction_of_a_file_we_read_is_not_a_conflict(table: DeltaTable) -> None:
    """A dataChange=false remove keeps the rows (in the compacted file), so what we read stays valid."""
    reader = txn(table, "UPDATE")
    reader.read_files([live(table, "a")])
    reader.add([new_file(table, "b")])
    race(compaction(table, "a"), reader, None)


def test_delete_racing_a_compaction_gets_delete_delete(table: DeltaTable) -> None:
    gone = live(table, "a")
    err = race(compaction(table, "a"), delete(table, "a"), ConcurrentDeleteDeleteError)
    assert err.paths == [gone]


def test_compaction_racing_a_delete_gets_delete_delete(table: DeltaTable) -> None:
    gone = live(table, "a")
    err = race(delete(table, "a"), compaction(table, "a"), ConcurrentDeleteDeleteError)
    assert err.paths == [gone]


def test_two_compactions_of_the_same_file(table: DeltaTable) -> None:
    race(compaction(table, "a"), compaction(table, "a"), ConcurrentDeleteDeleteError)


def test_compactions_of_different_partitions_both_land(table: DeltaTable) -> None:
    race(compaction(table, "a"), compaction(table, "b"), None)


def test_append_racing_a_compaction_commits_both(table: DeltaTable) -> None:
    race(compaction(table, "a"), blind_append(table, "a"), None)


def test_compaction_racing_an_append_commits_both(table: DeltaTable) -> None:
    race(blind_append(table, "a"), compaction(table, "a"), None)
    snap = table.snapshot()
    assert snap.num_files == 3  # compacted a, appended a, untouched b


def test_same_app_id_lower_version_concurrently(table: DeltaTable) -> None:
    first, second = blind_append(table), blind_append(table)
    first.set_app_transaction("dag.task", 1)
    second.set_app_transaction("dag.task", 2)
    race(first, second, ConcurrentTransactionError)


def test_same_app_id_same_version_is_a_noop(table: DeltaTable) -> None:
    first, second = blind_append(table), blind_append(table)
    first.set_app_transaction("dag.task", 3)
    second.set_app_transaction("dag.task", 3)
    won = first.commit()
    result = second.commit()
    assert result.noop and result.version == won.version


def test_other_app_ids_do_not_conflict(table: DeltaTable) -> None:
    first, second = blind_append(table), blind_append(table)
    first.set_app_transaction("dag.a", 1)
    second.set_app_transaction("dag.b", 1)
    race(first, second, None)


def test_same_metadata_domain(table_path: str) -> None:
    t = make_table(table_path, protocol=Protocol(1, 7, None, ("domainMetadata",)))
    first, second = txn(t), txn(t)
    first.set_domain_metadata("com.example.owner", "a")
    second.set_domain_metadata("com.example.owner", "b")
    race(first, second, ConcurrentDomainMetadataError)
    third, fourth = txn(t), txn(t)
    third.set_domain_metadata("com.example.x", "1")
    fourth.set_domain_metadata("com.example.y", "2")
    race(third, fourth, None)


def test_blind_appends_never_conflict_with_each_other(table: DeltaTable) -> None:
    loser = blind_append(table, "a")
    for part in ("a", "b", "a"):
        blind_append(table, part).commit()
    result = loser.commit()
    assert result.version == 6 and result.winning_commits == 3


def test_first_violated_rule_in_delta_order_wins(table: DeltaTable) -> None:
    """A winner that changed metadata and deleted our file reports the metadata change (checked first)."""
    md = table.snapshot().metadata
    winner = delete(table, "a")
    winner.update_metadata(Metadata(md.id, md.schema_string, md.partition_columns, {"k": "v"}))
    race(winner, delete(table, "a"), MetadataChangedError)


def test_conflicts_are_commit_failures_with_retryable_flags() -> None:
    assert issubclass(ConflictError, Exception)
    assert ConcurrentAppendError.retryable and ConcurrentDeleteDeleteError.retryable
    assert not MetadataChangedError.retryable and not ProtocolChangedError.retryable
    assert ConflictError("x", 1).exit_code == 1


@pytest.mark.parametrize(
    "action, key",
    [
        ({"add": {"partitionValues": {}, "size": 1, "modificationTime": 0, "dataChange": True}}, "path"),
        ({"remove": {"path": 7, "dataChange": True}}, "path"),
        ({"domainMetadata": {"configuration": "{}", "removed": False}}, "domain"),
    ],
)
def test_a_winning_commit_without_the_keys_the_rules_match_on_is_corrupt(action: dict, key: str) -> None:
    """Before, a missing path or domain became None and silently matched nothing."""
    data = (json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n" + json.dumps(action) + "\n").encode()
    with pytest.raises(CorruptLogError, match=key):
        WinningCommit.parse(3, data)
