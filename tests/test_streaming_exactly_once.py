"""A Spark Structured Streaming query, SIGKILLed mid-batch three times while deltalog maintains its table.

Delta Spark's streaming sink writes a file source's micro-batches (one input file of
known rows each) into a Delta table that deltalog compacts, checkpoints and cleans the
log of, on a clock three days ahead (``now_ms``: a maintenance host whose clock runs
ahead, and log cleanup that deletes every commit before the newest checkpoint). The
table's ``delta.setTransactionRetentionDuration`` is one day, ``delta.checkpointInterval``
1000: every checkpoint and every log cleanup is deltalog's.

Each kill leaves the query mid-batch (its offsets log has the batch, its commits log
does not), verified after the process is dead, and the restarted query must run that
batch again:

- *before the commit*: killed as soon as the batch starts (its offsets are logged); the
  re-run writes it;
- *after the commit*: killed as soon as the batch's Delta commit lands. A process killed
  in the milliseconds between that commit and the query's own commits log holds the
  table's commit but not the query's record of it; when the query wrote its record before
  the kill landed, the test removes that record (``commits/<N>``), leaving exactly that
  state. The re-run must be skipped by the sink's txn check (``Skipping already complete
  epoch N``), and the only record of that txn by then is deltalog's checkpoint: the
  batch's commit was deleted by log cleanup, which the test asserts.

A kill meant for before the commit that lands after it (a loaded machine) is one of the
second kind. A checkpoint that dropped the txn makes the re-run write the batch again: run
against the checkpoints before issue 43 (the txn expired on the skewed clock alone), the
checkpoints held no txn, the sink wrote batches 2 and 4 a second time, and the table ended
with 80 ids twice. At every retained version, after every maintenance round, the rows
are whole batches without a duplicate, growing version by version; at the end, Delta Spark
(the last run of the query's own JVM, time travel) and deltalake read every retained
version alike, the latest with every input row exactly once.

Cost: one driver JVM at a time, four starts (the first and three restarts: about 11 CPU s
each), a few hundred rows, the maintenance in this process: 84 CPU s in all (measured with
``scripts/ci_cost.py``), 160 s wall at load 10.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest

from deltalog import DeltaTable, create_table
from deltalog.compaction import compact
from deltalog.log.listing import list_log
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from streaming_driver import LOG4J2

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(900)]

HERE = Path(__file__).resolve().parent
BATCHES = 7
ROWS = 40
#: Batch id -> where the query is killed.
KILLS = {1: "before-commit", 2: "after-commit", 4: "after-commit"}
#: Log cleanup stops after the last kill: the versions since stay for the readers' check of every version.
LAST_CLEANUP = max(KILLS)
DAY_MS = 86_400_000
#: The maintenance host's clock runs this far ahead.
SKEW_MS = 3 * DAY_MS
TABLE_CONF = {
    "delta.checkpointInterval": "1000",
    "delta.logRetentionDuration": "interval 1 day",
    "delta.enableExpiredLogCleanup": "true",
    "delta.setTransactionRetentionDuration": "interval 1 day",
}
SCHEMA = pa.schema([("id", pa.int64()), ("batch", pa.int32()), ("payload", pa.string())])
START_TIMEOUT = 300
STEP_TIMEOUT = 180


def batch_ids(b: int) -> list[int]:
    return list(range(b * ROWS, (b + 1) * ROWS))


def wait_for(what: str, ready: Any, proc: subprocess.Popen | None = None, timeout: float = STEP_TIMEOUT) -> Any:
    """Poll ``ready()`` every 20 ms until it is truthy; fail naming ``what`` (or the driver's exit).

    20 ms: a kill "before the commit" must land while the batch is written (hundreds of ms). No next
    batch can start before a kill: its input file is added only after.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the streaming driver exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


class StreamingQuery:
    """The driver process (``tests/streaming_driver.py``): started, SIGKILLed, restarted, stopped."""

    def __init__(self, root: Path, table: str) -> None:
        self.root = root
        self.table = table
        self.input = root / "input"
        self.checkpoint = root / "query-checkpoint"
        self.conf_dir = root / "spark-conf"
        self.input.mkdir()
        self.conf_dir.mkdir()
        (self.conf_dir / "log4j2.properties").write_text(LOG4J2)
        self.runs = 0
        self.proc: subprocess.Popen | None = None
        self.query_id: str | None = None
        self.cpu_seconds = 0.0

    def spec(self) -> dict[str, str]:
        return {
            "table": self.table,
            "input": str(self.input),
            "checkpoint": str(self.checkpoint),
            "stop": str(self.root / "stop"),
            "ready": str(self.root / f"ready-{self.runs}"),
            "result": str(self.root / "result.json"),
        }

    def log(self) -> str:
        return (self.root / f"driver-{self.runs}.log").read_text(errors="replace")

    def start(self) -> None:
        self.runs += 1
        env = {**os.environ, "SPARK_CONF_DIR": str(self.conf_dir)}
        with open(self.root / f"driver-{self.runs}.log", "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(HERE / "streaming_driver.py"), json.dumps(self.spec())],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
                start_new_session=True,  # its own process group: the JVM dies with the Python driver
            )
        ready = Path(self.spec()["ready"])
        wait_for(f"run {self.runs} of the query to start", ready.exists, self.proc, START_TIMEOUT)
        query_id = json.loads(ready.read_text())["query_id"]
        assert self.query_id in (None, query_id), "a restart resumes the same query (its checkpoint location)"
        self.query_id = query_id

    def kill(self) -> None:
        """SIGKILL the driver's process group (Python and its JVM)."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._reap()

    def stop(self, versions: list[int]) -> dict[int, list[int]]:
        """Stop the query; the driver reads ``versions`` with Delta Spark first (its rows' ids per version)."""
        assert self.proc is not None
        Path(self.spec()["stop"]).write_text(json.dumps(versions))
        self.proc.wait(STEP_TIMEOUT)
        code = self.proc.returncode
        self._reap()
        assert code == 0, f"the streaming driver failed:\n{self.log()[-4000:]}"
        return {int(v): ids for v, ids in json.loads(Path(self.spec()["result"]).read_text()).items()}

    def _reap(self) -> None:
        assert self.proc is not None
        self.proc.wait(60)
        with contextlib.suppress(ProcessLookupError):  # anything left in the group (none expected)
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc = None

    def add_input(self, b: int) -> None:
        """Batch ``b``'s input file, landed whole (written hidden, then renamed: the source skips dot files)."""
        lines = "".join(json.dumps({"id": i, "batch": b, "payload": f"row-{i}"}) + "\n" for i in batch_ids(b))
        hidden = self.input / f".batch-{b:03d}.json"
        hidden.write_text(lines)
        os.replace(hidden, self.input / f"batch-{b:03d}.json")

    def started(self, b: int) -> bool:
        return (self.checkpoint / "offsets" / str(b)).exists()

    def finished(self, b: int) -> bool:
        return (self.checkpoint / "commits" / str(b)).exists()

    def forget_finished(self, b: int) -> bool:
        """Remove the query's record that batch ``b`` finished (and its checksum file); whether there was one."""
        commits = self.checkpoint / "commits"
        existed = (commits / str(b)).exists()
        for name in (str(b), f".{b}.crc"):
            with contextlib.suppress(FileNotFoundError):
                (commits / name).unlink()
        return existed


class CommitWatch:
    """The sink's txn per commit file of the table, each file read once (commits never change)."""

    def __init__(self, table: str) -> None:
        self.log = Path(table) / "_delta_log"
        self.txns: dict[str, list[dict[str, Any]]] = {}

    def batches(self, query_id: str) -> dict[int, int]:
        """Batch id -> table version, from the commit files still in the log."""
        names = {f.name for f in self.log.glob("*.json") if f.name[:20].isdigit()}
        for name in names - set(self.txns):
            with contextlib.suppress(FileNotFoundError):  # deleted by a log cleanup meanwhile
                lines = (self.log / name).read_text().splitlines()
                self.txns[name] = [json.loads(line)["txn"] for line in lines if line.startswith('{"txn"')]
        return {
            t["version"]: int(name[:20])
            for name in names & set(self.txns)
            for t in self.txns[name]
            if t["appId"] == query_id
        }


def retained_versions(table: str) -> list[int]:
    listing = list_log(DeltaTable(table).storage)
    oldest = listing.oldest_reconstructable_version()
    assert oldest is not None and listing.latest_version is not None
    return list(range(oldest, listing.latest_version + 1))


def ids_at(table: str, version: int) -> list[int]:
    return sorted(deltalake.DeltaTable(table, version=version).to_pyarrow_table(columns=["id"])["id"].to_pylist())


def check_versions(by_version: dict[int, list[int]]) -> None:
    """Every version holds whole input batches, each id once, and never fewer rows than the version before."""
    previous: set[int] = set()
    for v in sorted(by_version):
        ids = by_version[v]
        assert len(ids) == len(set(ids)), f"version {v} holds an id twice"
        batches = {i // ROWS for i in ids}
        assert sorted(ids) == sorted(i for b in batches for i in batch_ids(b)), f"version {v} holds part of a batch"
        assert previous <= set(ids), f"version {v} lost rows of the version before"
        previous = set(ids)


class Maintenance:
    """deltalog's work on the table, on a clock ``SKEW_MS`` ahead."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.rounds = 0
        self.checkpoints: list[Any] = []
        self.deleted_commits = 0

    def compact_and_checkpoint(self) -> Any:
        compact(self.table, target_size="64m")
        cp = create_checkpoint(self.table, now_ms=int(time.time() * 1000) + SKEW_MS)
        self.checkpoints.append(cp)
        self.rounds += 1
        return cp

    def clean(self) -> Any:
        cleaned = cleanup_log(self.table, now_ms=int(time.time() * 1000) + SKEW_MS)
        self.deleted_commits += cleaned.by_kind.get("commit", 0)
        return cleaned


def test_a_killed_streaming_query_writes_every_row_exactly_once(tmp_path: Path) -> None:
    table = str(tmp_path / "table")
    create_table(table, SCHEMA, configuration=TABLE_CONF)
    query = StreamingQuery(tmp_path, table)
    maintenance = Maintenance(table)
    commits = CommitWatch(table)
    skipped_by_txn: list[int] = []
    query.start()
    try:
        for b in range(BATCHES):
            query.add_input(b)
            kill = KILLS.get(b)
            if kill is None:
                # deltalog compacts and checkpoints while the sink writes the batch, cleans the log once it is idle
                maintenance.compact_and_checkpoint()
                wait_for(f"batch {b} to finish", lambda b=b: query.finished(b), query.proc)
                if b < LAST_CLEANUP:
                    maintenance.clean()
                continue
            assert query.query_id is not None
            qid = query.query_id
            if kill == "before-commit":
                wait_for(f"batch {b} to start", lambda b=b: query.started(b), query.proc)
            else:
                wait_for(f"batch {b}'s Delta commit", lambda b=b, qid=qid: b in commits.batches(qid), query.proc)
            query.kill()
            in_table = b in commits.batches(qid)
            if query.forget_finished(b):
                assert in_table, f"the query recorded batch {b} as finished before its Delta commit"
            # Mid-batch, verified with the process dead: the query has started batch b and not finished it.
            assert query.started(b) and not query.finished(b) and not query.started(b + 1)
            # A kill meant for before the commit may land after it on a loaded machine: then it is one of the
            # other kind (still mid-batch), and the re-run must be skipped like theirs.
            assert in_table or kill == "before-commit", f"batch {b}'s commit vanished"
            maintenance.compact_and_checkpoint()
            cleaned = maintenance.clean()
            if in_table:
                # The batch's commit is gone: the stream's txn lives in deltalog's checkpoint alone.
                assert b not in commits.batches(qid), cleaned.summary_line()
                cp = maintenance.checkpoints[-1]
                assert cp.num_txns == 1 and cp.version == list_log(DeltaTable(table).storage).latest_version
                # No version checksum (.crc, which Delta Spark may answer txn versions from) at that version.
                assert not (Path(table) / "_delta_log" / f"{cp.version:020d}.crc").exists()
                assert DeltaTable(table).snapshot().app_transaction_version(qid) == b
                assert deltalake.DeltaTable(table).transaction_version(qid) == b
            check_versions({v: ids_at(table, v) for v in retained_versions(table)})
            query.start()
            wait_for(f"the re-run of batch {b}", lambda b=b: query.finished(b), query.proc)
            log = query.log()
            if in_table:
                assert f"Skipping already complete epoch {b}," in log, log[-4000:]
                assert f"batchId={b}," not in log, "the re-run batch was written again"
                skipped_by_txn.append(b)
            else:
                assert f"batchId={b}," in log, log[-4000:]
        versions = retained_versions(table)
        spark_reads = query.stop(versions)
    finally:
        if query.proc is not None:
            query.kill()
    ours = {v: ids_at(table, v) for v in versions}
    assert spark_reads == ours, "Delta Spark and deltalake read a retained version differently"
    check_versions(ours)
    assert ours[versions[-1]] == list(range(BATCHES * ROWS)), "every input row, exactly once"
    assert len(versions) >= 3 and versions[0] > 0, f"retained {versions}: the log was cleaned"
    assert set(skipped_by_txn) >= {b for b, kill in KILLS.items() if kill == "after-commit"}
    assert maintenance.deleted_commits > 0
    # Every checkpoint in the log is one of deltalog's (Delta Spark wrote none: delta.checkpointInterval).
    assert set(list_log(DeltaTable(table).storage).checkpoints) <= {cp.version for cp in maintenance.checkpoints}
    snap = DeltaTable(table).snapshot()
    assert snap.app_transaction_version(query.query_id or "") == BATCHES - 1
    assert any(e.operation == "OPTIMIZE" for e in DeltaTable(table).history())
