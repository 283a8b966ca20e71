"""App transactions (``txn``) through checkpoints and log cleanup: what makes a restarted stream exactly-once.

A streaming writer records ``(appId, batch id)`` with each batch and, restarted, skips a
batch the table already records. These tests commit batches the way Delta Spark's sink
does (a data file and the stream's txn in one commit), run deltalog's checkpoints and
log cleanup, and re-run a batch as a restarted stream would: it must be skipped, its rows
read once (by deltalog and deltalake). The live Spark stream, killed and restarted while
deltalog maintains its table, is ``tests/test_streaming_exactly_once.py``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable, create_table
from deltalog.commit.result import CommitResult
from deltalog.commit.transaction import Transaction
from deltalog.compaction import compact, plan_compaction
from deltalog.errors import InvalidArgumentError
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.protocol.table_protocol import Protocol
from helpers import DEFAULT_SCHEMA, make_table, rows, write_data_file

DAY_MS = 86_400_000
APP = "7f3c2a10-stream-query"
RETENTION = "delta.setTransactionRetentionDuration"
V2 = Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint",))
#: No automatic checkpoints: each test says which versions it checkpoints.
QUIET = {"delta.checkpointInterval": "1000"}
#: Log files expire after a day: cleanup run on a clock days ahead deletes everything before the cutoff checkpoint.
SHORT_LOG = {"delta.logRetentionDuration": "interval 1 day"}


def now_ms() -> int:
    return int(time.time() * 1000)


def commit_file(path: str, version: int) -> str:
    return os.path.join(path, "_delta_log", f"{version:020d}.json")


def batch(table: DeltaTable, batch_id: int, *, app: str = APP, n: int = 3) -> CommitResult:
    """One micro-batch as Delta Spark's sink commits it: ``n`` rows (ids ``batch_id * n`` on) and the stream's txn."""
    add = write_data_file(table.storage.root, rows(n, batch_id * n))
    txn = Transaction(table.storage, table.snapshot(), operation="STREAMING UPDATE", run_hooks=False)
    txn.add([add])
    txn.set_app_transaction(app, batch_id)
    return txn.commit()


def ids_read_by_both(path: str) -> list[int]:
    """The table's ids in the files deltalog's and deltalake's log replays find (asserted equal), sorted.

    deltalake's own Parquet reader refuses the v2Checkpoint reader feature; its replay (the file list) does not.
    """

    def ids(files: list[str]) -> list[int]:
        return sorted(i for f in files for i in pq.read_table(os.path.join(path, f)).column("id").to_pylist())

    ours = ids(DeltaTable(path).snapshot().file_paths())
    theirs = ids(deltalake.DeltaTable(path).get_add_actions(flatten=True).column("path").to_pylist())
    assert ours == theirs
    return ours


def age(path: str, version: int, days: float) -> None:
    """Give commit ``version`` the file time of ``days`` ago (a table written back then)."""
    t = time.time() - days * 86_400
    os.utime(commit_file(path, version), (t, t))


def spaced(path: str) -> None:
    """Commit file times a second apart, oldest first: commits made within one millisecond would make log
    cleanup keep older commit files to hold their timestamps (as Delta Spark does), which these tests do not test."""
    log = os.path.join(path, "_delta_log")
    versions = sorted(int(n[:20]) for n in os.listdir(log) if n.endswith(".json") and n[:20].isdigit())
    for v in versions:
        t = time.time() - (versions[-1] - v + 1)
        os.utime(commit_file(path, v), (t, t))


def rewrite_checkpoint_txns(path: str, version: int, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> None:
    """Rewrite the classic checkpoint of ``version`` with ``change`` applied to each txn (None drops it):
    a checkpoint another writer (another clock, another expiry rule) wrote."""
    f = os.path.join(path, "_delta_log", f"{version:020d}.checkpoint.parquet")
    table = pq.read_table(f)
    out = []
    for row in table.to_pylist():
        if row["txn"] is not None:
            row["txn"] = change(row["txn"])
            if row["txn"] is None:
                continue
        out.append(row)
    pq.write_table(pa.Table.from_pylist(out, schema=table.schema), f)


# --- checkpoints keep every live txn --------------------------------------------------------


@pytest.mark.parametrize("v2", [False, True], ids=["classic", "v2-sidecars"])
def test_a_maintenance_clock_days_ahead_keeps_the_stream_exactly_once(table_path: str, v2: bool) -> None:
    """A host whose clock runs 3 days ahead checkpoints and cleans the log: the stream's txn survives.

    With a retention of 1 day, a checkpoint on that host's clock alone dropped the txn the
    stream wrote a moment ago; log cleanup then deleted the commits holding it, and the
    restarted stream wrote its last batch again.
    """
    conf = {**QUIET, RETENTION: "interval 1 day", **SHORT_LOG}
    t = make_table(table_path, configuration=conf, protocol=V2 if v2 else None)
    batch(t, 0)
    batch(t, 1)  # version 2
    ahead = now_ms() + 3 * DAY_MS
    cp = create_checkpoint(t, now_ms=ahead, sidecar_max_actions=1)
    assert (cp.version, cp.kind, cp.num_txns, cp.num_expired_txns) == (2, "v2" if v2 else "classic", 1, 0)
    if v2:
        assert len(cp.sidecars) == 2  # the txn is in the top-level file, the adds in the sidecars
        top = [json.loads(line) for line in open(os.path.join(table_path, "_delta_log", cp.files[0]))]
        assert {"txn": {"appId": APP, "version": 1, "lastUpdated": top[3]["txn"]["lastUpdated"]}} in top
    spaced(table_path)
    cleaned = cleanup_log(t, now_ms=ahead)
    assert cleaned.oldest_version_kept == 2 and cleaned.by_kind["commit"] == 2
    assert not os.path.exists(commit_file(table_path, 1))  # the checkpoint is now the txn's only record
    assert DeltaTable(table_path).snapshot().app_transaction_version(APP) == 1
    assert deltalake.DeltaTable(table_path).transaction_version(APP) == 1
    # The stream restarts and re-runs batch 1 (killed before it recorded the batch as done).
    again = batch(t, 1)
    assert again.noop and again.version == 2
    assert ids_read_by_both(table_path) == list(range(6))


def test_a_checkpoint_without_the_txn_makes_the_rerun_write_twice(table_path: str) -> None:
    """The failure these tests (and the streaming test) guard against, shown: lose the txn, get duplicates."""
    t = make_table(table_path, configuration=QUIET)
    batch(t, 0)
    batch(t, 1)
    create_checkpoint(t)
    rewrite_checkpoint_txns(table_path, 2, lambda txn: None)
    for v in (0, 1):  # as a cleanup that trusted the checkpoint would
        os.unlink(commit_file(table_path, v))
    assert batch(t, 1).noop is False
    assert ids_read_by_both(table_path) == sorted([*range(6), 3, 4, 5])


def test_checkpoint_expires_txns_on_the_table_clock_of_its_version(table_path: str, monkeypatch) -> None:
    """``delta.setTransactionRetentionDuration`` measured at the version checkpointed, by its commit time."""
    t = make_table(table_path, configuration={**QUIET, RETENTION: "interval 1 day", **SHORT_LOG})
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() - 5 * 86_400)  # the stream ran 5 days ago
    batch(t, 0)
    monkeypatch.setattr(time, "time", real_time)
    age(table_path, 0, 6)
    age(table_path, 1, 5)
    batch(t, 0, app="another-stream")  # today: version 2
    # Version 1 as of version 1 (5 days ago): the stream's txn was a moment old.
    old = create_checkpoint(t, version=1)
    assert (old.num_txns, old.num_expired_txns) == (1, 0)
    # The latest version: 5 days old, past the 1-day retention; the other stream's is kept.
    new = create_checkpoint(t)
    assert (new.num_txns, new.num_expired_txns) == (1, 1)
    assert DeltaTable(table_path).snapshot().app_transaction_version("another-stream") == 0
    # An expired txn is no live one: log cleanup may delete the commits that held it.
    cleaned = cleanup_log(t, now_ms=now_ms() + 2 * DAY_MS)
    assert cleaned.cutoff_checkpoint == 2 and not os.path.exists(commit_file(table_path, 1))


def test_a_txn_without_last_updated_is_kept(table_path: str) -> None:
    """deltalake writes txns without ``lastUpdated``: their age is unknown, so no checkpoint expires them."""
    t = make_table(table_path, configuration={**QUIET, RETENTION: "interval 0 days"})
    add = write_data_file(table_path, rows(2))
    lines = [
        {"commitInfo": {"timestamp": now_ms(), "operation": "WRITE", "engineInfo": "delta-rs"}},
        {"txn": {"appId": "rs-writer", "version": 9}},
        {"add": add},
    ]
    with open(commit_file(table_path, 1), "w") as fh:
        fh.write("".join(json.dumps(line) + "\n" for line in lines))
    batch(t, 0)  # lastUpdated now, retention 0: expired at once
    cp = create_checkpoint(t)
    assert (cp.num_txns, cp.num_expired_txns) == (1, 1)
    snap = DeltaTable(table_path).snapshot()
    assert snap.app_transaction_version("rs-writer") == 9


def test_an_unreadable_retention_expires_nothing_and_says_so(table_path: str) -> None:
    """A table another engine wrote with a retention deltalog cannot read: the checkpoint keeps every txn."""
    t = make_table(table_path, configuration={**QUIET, RETENTION: "interval 2 months"})
    batch(t, 0)
    cp = create_checkpoint(t, now_ms=now_ms() + 400 * DAY_MS)
    assert cp.num_txns == 1 and cp.num_expired_txns == 0
    assert any(RETENTION in w and "no app transaction expired" in w for w in cp.warnings)


@pytest.mark.parametrize("value", ["interval 2 months", "soon", "-1 day"])
def test_create_refuses_a_retention_checkpoints_could_not_read(tmp_path, value: str) -> None:
    with pytest.raises(InvalidArgumentError, match=RETENTION):
        create_table(str(tmp_path / "t"), DEFAULT_SCHEMA, configuration={RETENTION: value})
    assert not os.path.exists(tmp_path / "t" / "_delta_log")


def test_txn_last_updated_is_the_commit_timestamp_on_an_ict_table(table_path: str, monkeypatch) -> None:
    """With in-commit timestamps, a txn's age is on the table's clock: a writer whose clock runs behind
    the table's (ICT kept monotonic above it) does not record a txn that looks hours old."""
    t = make_table(
        table_path,
        configuration={**QUIET, "delta.enableInCommitTimestamps": "true"},
        protocol=Protocol(1, 7, None, ("inCommitTimestamp",)),
    )
    batch(t, 0)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() - 3600)
    result = batch(t, 1)
    actions = [json.loads(line) for line in open(commit_file(table_path, result.version))]
    txn = next(a["txn"] for a in actions if "txn" in a)
    assert result.in_commit_timestamp is not None
    assert txn["lastUpdated"] == result.in_commit_timestamp > int(real_time() * 1000) - 60_000


# --- log cleanup never deletes the only record of a live txn ----------------------------------


@pytest.mark.parametrize(
    ("lossy", "problem"),
    [
        (lambda txn: None, "lacks app transaction"),
        (lambda txn: {**txn, "version": 0}, "records app transaction"),
    ],
    ids=["dropped", "stale"],
)
def test_cleanup_keeps_the_commits_a_lossy_checkpoint_would_orphan(table_path: str, lossy, problem: str) -> None:
    """The newest checkpoint before the cutoff was written without the stream's txn (or with an older
    version): it cannot become the oldest state; an older checkpoint that has it can."""
    t = make_table(table_path, configuration={**QUIET, **SHORT_LOG})
    batch(t, 0)
    batch(t, 1)  # version 2: the only record of batch 1
    batch(t, 0, app="another-stream")  # version 3
    create_checkpoint(t)
    rewrite_checkpoint_txns(table_path, 3, lambda txn: lossy(txn) if txn["appId"] == APP else txn)
    ahead = now_ms() + 3 * DAY_MS
    spaced(table_path)
    refused = cleanup_log(t, now_ms=ahead)
    assert refused.num_deleted == 0 and refused.cutoff_checkpoint is None
    assert problem in (refused.skipped_reason or "") and APP in (refused.skipped_reason or "")
    assert all(os.path.exists(commit_file(table_path, v)) for v in range(4))
    # A checkpoint of version 2 holds the txn: cleanup may keep history from there.
    create_checkpoint(t, version=2)
    cleaned = cleanup_log(t, now_ms=ahead)
    assert cleaned.cutoff_checkpoint == 2 and cleaned.by_kind["commit"] == 2
    assert os.path.exists(commit_file(table_path, 2))


@pytest.mark.parametrize("last_updated", [True, False], ids=["lastUpdated", "no-lastUpdated"])
def test_cleanup_lets_an_expired_txn_go(table_path: str, last_updated: bool) -> None:
    """A checkpoint that left out a txn past the retention (Delta Spark drops one without ``lastUpdated``
    as soon as a retention is set) is a good cutoff: the txn's age is its lastUpdated, else its commit's time."""
    t = make_table(table_path, configuration={**QUIET, RETENTION: "interval 1 day", **SHORT_LOG})
    stamp = {"lastUpdated": now_ms() - 5 * DAY_MS} if last_updated else {}
    add = write_data_file(table_path, rows(2))
    lines = [{"commitInfo": {"timestamp": now_ms()}}, {"txn": {"appId": APP, "version": 4, **stamp}}, {"add": add}]
    with open(commit_file(table_path, 1), "w") as fh:
        fh.write("".join(json.dumps(line) + "\n" for line in lines))
    age(table_path, 0, 6)
    age(table_path, 1, 5)
    batch(t, 0, app="another-stream")  # version 2, today
    create_checkpoint(t)
    rewrite_checkpoint_txns(table_path, 2, lambda txn: None if txn["appId"] == APP else txn)
    cleaned = cleanup_log(t, now_ms=now_ms() + 2 * DAY_MS)
    assert cleaned.cutoff_checkpoint == 2 and not os.path.exists(commit_file(table_path, 1))


def test_a_compaction_racing_the_stream_keeps_its_txn(table_path: str) -> None:
    """deltalog's compaction commits no txn and reads none: planned before a batch lands and committed
    after it, it lands beside it (no conflict), and the stream's txn stays what the batch recorded."""
    t = make_table(table_path, configuration=QUIET)
    batch(t, 0)
    batch(t, 1)
    plan = plan_compaction(t)
    assert len(plan.bins) == 1
    batch(t, 2)  # version 3, while the compaction runs
    result = compact(t, plan=plan)
    assert [c.version for c in result.commits] == [4] and result.to_dict()["num_files_removed"] == 2
    actions = [json.loads(line) for line in open(commit_file(table_path, 4))]
    assert not any("txn" in a for a in actions)
    assert DeltaTable(table_path).snapshot().app_transaction_version(APP) == 2
    cp = create_checkpoint(t)
    assert (cp.version, cp.num_txns) == (4, 1)
    assert batch(t, 2).noop
    assert ids_read_by_both(table_path) == list(range(9))
