"""The log watcher's core: which versions are new, what they did, when to announce them, what to log.

``CommitWatch`` is pure: the tests below drive it with handmade poll results and chosen times.
``read_tail`` reads real logs: written by deltalog, by hand (gaps, torn lines, replaced and deleted
tables), by deltalake (no deltalog on the writer side) and on the S3 test server, where the requests
of a poll are counted (one LIST while nothing is new, one GET per new commit).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from deltalog import CommitRange, CommitWatch, LogPosition, LogTail, TailProblem, WatchSettings, read_tail
from deltalog.errors import InvalidArgumentError
from deltalog.log.tail import CommitSummary, access_problem, latest_position
from deltalog.storage import Storage
from handmade_logs import add_action, metadata_action, write_commit
from helpers import append, make_table, rows

TABLE = "s3://lake/t"


def commit(version: int, operation: str = "WRITE", *, added: int = 1, removed: int = 0, blind: bool = True) -> Any:
    return CommitSummary(
        version=version,
        timestamp_ms=1_700_000_000_000 + version,
        operation=operation,
        engine_info="Apache-Spark/4.1.0 Delta-Lake/4.0.0" if operation != "OPTIMIZE" else "deltalog/0.1.0",
        blind_append=blind and not removed,
        files_added=added,
        bytes_added=100 * added,
        files_removed=removed,
        bytes_removed=50 * removed,
        changes_metadata=False,
        size=400,
        modified_ms=1_700_000_000_000 + version,
        crc32=version,
    )


def tail(watch: CommitWatch, *commits: CommitSummary, problem: TailProblem | None = None, **kw: Any) -> LogTail:
    return LogTail(watch.position, tuple(commits), problem=problem, **kw)


def drive(watch: CommitWatch, now: float, *versions: int, op: str = "WRITE") -> CommitRange | None:
    """One poll at ``now`` seeing ``versions``; the event fired then (recorded as announced), if any."""
    watch.observe(tail(watch, *(commit(v, op) for v in versions)), now)
    event = watch.ready(now)
    if event is not None:
        watch.fired_range(event)
    return event


def settings(**kw: Any) -> WatchSettings:
    return WatchSettings(
        **{"poll_interval": 10, "quiet_seconds": 30, "max_commits": 100, "max_wait_seconds": 600, **kw}
    )


# --- debouncing ---------------------------------------------------------------------------------


def test_a_quiet_period_collapses_a_burst_into_one_event_covering_every_version():
    watch = CommitWatch(TABLE, settings(), LogPosition(4))
    assert drive(watch, 0, 5, 6) is None
    assert drive(watch, 10, 7) is None  # a new commit: the quiet period starts again
    assert watch.next_poll_in(20) == 10  # the poll interval, the quiet period ends later
    assert watch.next_poll_in(35) == pytest.approx(5)  # the next poll is when the quiet period ends
    assert drive(watch, 39) is None
    event = drive(watch, 40)
    assert event is not None and (event.from_version, event.to_version, event.commits) == (5, 7, 3)
    assert event.reason == "quiet" and event.operations == {"WRITE": 3} and event.files_added == 3
    assert event.blind_append_only and watch.fired.version == 7 and watch.waiting == 0
    assert drive(watch, 100) is None  # nothing new, nothing to say


def test_max_commits_fires_without_waiting_and_covers_everything_seen():
    watch = CommitWatch(TABLE, settings(max_commits=3), LogPosition(0))
    event = drive(watch, 0, 1, 2, 3, 4, 5)
    assert event is not None and (event.from_version, event.to_version, event.reason) == (1, 5, "max_commits")


def test_a_table_that_never_goes_quiet_still_fires_every_max_wait():
    watch = CommitWatch(TABLE, settings(quiet_seconds=30, max_wait_seconds=60), LogPosition(-1))
    fired = [e for t in range(0, 200, 10) if (e := drive(watch, t, t // 10)) is not None]
    assert [(e.from_version, e.to_version, e.reason) for e in fired] == [(0, 6, "max_wait"), (7, 13, "max_wait")]


def test_maintenance_commits_never_start_an_event_and_ride_along_in_the_next():
    watch = CommitWatch(TABLE, settings(quiet_seconds=0), LogPosition(9))
    assert drive(watch, 0, 10, 11, op="OPTIMIZE") is None  # compaction alone: nothing to announce
    assert drive(watch, 100, 12, op="VACUUM START") is None
    assert watch.waiting == 3 and watch.next_poll_in(100) == 10
    event = drive(watch, 110, 13)
    assert event is not None and (event.from_version, event.to_version) == (10, 13)
    assert event.operations == {"OPTIMIZE": 2, "VACUUM START": 1, "WRITE": 1}
    assert event.writers == {"Apache-Spark/4.1.0 Delta-Lake/4.0.0": 2, "deltalog/0.1.0": 2}
    quiet = CommitWatch(TABLE, settings(quiet_seconds=0, quiet_operations=frozenset()), LogPosition(9))
    assert drive(quiet, 0, 10, op="optimize") is not None  # quiet_operations=() : every commit counts


def test_not_a_blind_append_is_said_and_its_versions_listed():
    watch = CommitWatch(TABLE, settings(quiet_seconds=0), LogPosition(0))
    watch.observe(tail(watch, commit(1), commit(2, "MERGE", removed=2), commit(3, "WRITE", blind=False)), 0)
    event = watch.ready(0)
    assert event is not None and not event.blind_append_only
    assert (event.not_blind_append_commits, event.not_blind_append_versions) == (2, (2, 3))
    assert (event.files_removed, event.bytes_removed) == (2, 100)
    doc = event.to_dict()
    assert CommitRange.from_dict(json.loads(json.dumps(doc))) == event  # what an asset event's extra holds
    assert "MERGE 1" in event.summary_line() and "not only blind appends" in event.summary_line()
    with pytest.raises(ValueError, match="not an event"):
        CommitRange.from_dict({**doc, "watcher": "other"})


def test_a_restart_from_the_recorded_position_announces_every_version_once():
    """What the trigger does: record the position an event announces up to, then fire it; a new watcher made
    from the recorded position (a restarted triggerer) goes on from there."""
    recorded = LogPosition(-1)
    announced: list[tuple[int, int]] = []
    watch = CommitWatch(TABLE, settings(quiet_seconds=20, max_commits=4), recorded)
    log_end, now = -1, 0.0
    for step in range(40):
        if step == 17:  # a restart while commits wait (not announced yet): they are seen again
            assert watch.waiting > 0
            watch = CommitWatch(TABLE, settings(quiet_seconds=20, max_commits=4), recorded)
        new = list(range(log_end + 1, log_end + 1 + (step % 3 if step < 30 else 0)))
        log_end += len(new)
        watch.observe(tail(watch, *(commit(v) for v in range(watch.position.version + 1, log_end + 1))), now)
        event = watch.ready(now)
        if event is not None:
            recorded = watch.position_after(event)
            watch.fired_range(event)
            announced.append((event.from_version, event.to_version))
        now += 10
    covered = [v for a, b in announced for v in range(a, b + 1)]
    assert covered == list(range(log_end + 1)), announced  # contiguous, no overlap, every version


def test_settings_are_checked():
    for bad in ({"poll_interval": 0}, {"quiet_seconds": -1}, {"max_commits": 0}, {"max_commits": True}):
        with pytest.raises(InvalidArgumentError, match=next(iter(bad))):
            WatchSettings(**bad)
    assert WatchSettings(quiet_operations=frozenset({"optimize"})).quiet_operations == frozenset({"OPTIMIZE"})
    with pytest.raises(InvalidArgumentError, match=r"versions \.\.5 are not the ones waiting"):
        CommitWatch(TABLE, settings(), LogPosition(3)).position_after(
            CommitRange.from_dict({**_event_doc(), "from_version": 4, "to_version": 5})
        )


def _event_doc() -> dict[str, Any]:
    watch = CommitWatch(TABLE, settings(quiet_seconds=0), LogPosition(0))
    watch.observe(tail(watch, commit(1)), 0)
    event = watch.ready(0)
    assert event is not None
    return event.to_dict()


# --- bad tables: one line per problem ------------------------------------------------------------


def test_a_gap_is_logged_once_after_its_grace_reminded_then_resolved_and_never_crossed():
    watch = CommitWatch(TABLE, settings(quiet_seconds=0, grace_seconds=30, problem_log_seconds=300), LogPosition(3))
    gap = TailProblem("gap", "commit 6 is missing while commit 7 exists", 6)
    lines = []
    for now in range(0, 700, 10):  # a poll every 10 s for almost 12 minutes
        lines += [(now, n.message) for n in watch.observe(tail(watch, problem=gap), now)]
        assert watch.ready(now) is None  # nothing is announced past the hole
    assert [t for t, _ in lines] == [30, 330, 630]
    assert "commit 6 is missing" in lines[0][1] and "still gap (" in lines[1][1]
    resolved = watch.observe(tail(watch, commit(4), commit(5)), 700)
    assert [n.level for n in resolved] == ["info"] and "gap resolved after 700s (70 polls)" in resolved[0].message
    event = watch.ready(700)
    assert event is not None and (event.from_version, event.to_version) == (4, 5)


def test_a_local_log_is_listed_whole_now_and_then_and_while_a_problem_lasts():
    from deltalog.log.commit_watch import THOROUGH_SECONDS

    watch = CommitWatch(TABLE, settings(grace_seconds=0), LogPosition(3))
    assert watch.thorough(0)  # never listed yet
    watch.observe(tail(watch), 0)
    assert not watch.thorough(10)
    watch.observe(LogTail(watch.position, listed=False), 20)  # the two-stat shortcut
    assert not watch.thorough(THOROUGH_SECONDS - 1) and watch.thorough(THOROUGH_SECONDS)
    watch.observe(tail(watch, problem=TailProblem("gap", "commit 5 is missing", 5)), 30)
    assert watch.thorough(31)


def test_a_blip_shorter_than_the_grace_leaves_no_line():
    watch = CommitWatch(TABLE, settings(grace_seconds=30), LogPosition(3))
    assert watch.failed(access_problem(ConnectionError("connection reset")), 0) == []
    assert watch.failed(access_problem(ConnectionError("connection reset")), 10) == []
    assert watch.observe(tail(watch), 20) == []  # recovered before anything was said
    assert watch.problems == {}


def test_expired_credentials_and_an_unreachable_store_are_named():
    denied = access_problem(OSError("An error occurred (ExpiredToken): The provided token has expired."))
    assert denied.kind == "denied" and "refused the credentials" in denied.message
    assert access_problem(OSError("AccessDenied: 403 Forbidden")).kind == "denied"
    assert access_problem(ConnectionError("Could not connect to the endpoint URL")).kind == "unreachable"
    watch = CommitWatch(TABLE, settings(grace_seconds=0), LogPosition(3))
    lines = watch.failed(denied, 0) + watch.failed(denied, 10)
    assert len(lines) == 1 and lines[0].level == "warning" and "s3://lake/t: the store refused" in lines[0].message
    switched = watch.failed(access_problem(ConnectionError("down")), 20)  # another problem: the first ends
    assert [n.level for n in switched] == ["info", "warning"] and "denied resolved" in switched[0].message


def test_a_replaced_table_starts_over_and_the_old_tables_waiting_versions_are_not_mixed_in():
    watch = CommitWatch(TABLE, settings(quiet_seconds=100), LogPosition(10))
    watch.observe(tail(watch, commit(11), commit(12)), 0)
    lines = watch.observe(
        tail(watch, problem=TailProblem("replaced", "another table now lives here", 12), restart=LogPosition(-1)), 10
    )
    assert len(lines) == 1 and "dropped" in lines[0].message and watch.fired == LogPosition(-1)
    watch.observe(tail(watch, commit(0), commit(1)), 20)
    event = watch.ready(200)
    assert event is not None and (event.from_version, event.to_version, event.replaced_table) == (0, 1, True)
    watch.fired_range(event)
    watch.observe(tail(watch, commit(2)), 300)
    assert (again := watch.ready(500)) is not None and not again.replaced_table


def test_a_poll_that_skips_versions_is_refused():
    watch = CommitWatch(TABLE, settings(), LogPosition(3))
    with pytest.raises(InvalidArgumentError, match="returned version 5"):
        watch.observe(tail(watch, commit(5)), 0)


# --- read_tail on real logs ----------------------------------------------------------------------


def _table(tmp_path: Path, commits: int = 2) -> Any:
    table = make_table(str(tmp_path / "t"))
    for i in range(commits):
        append(table, rows(3, start=3 * i))
    return table


def test_read_tail_reads_only_the_new_commits(tmp_path, monkeypatch):
    table = _table(tmp_path)
    storage = Storage(table.uri)
    start = latest_position(storage)
    assert start.version == 2 and start.size and start.crc32 is not None
    listed: list[str] = []
    real = Storage.list_log_after

    def counting(self: Storage, name: str) -> Any:
        listed.append(name)
        return real(self, name)

    monkeypatch.setattr(Storage, "list_log_after", counting)
    idle = read_tail(storage, start)
    assert (idle.commits, idle.problem, listed) == ((), None, [])  # two stat calls, no listing
    append(table, rows(2, start=100))
    table.compact()  # an OPTIMIZE: removes the small files it rewrote
    found = read_tail(storage, start)
    assert listed == ["00000000000000000001.json"]  # from the last version seen on
    assert [(c.version, c.operation, c.blind_append) for c in found.commits] == [
        (3, "WRITE", True),
        (4, "OPTIMIZE", False),
    ]
    assert found.commits[1].files_removed == 3 and found.commits[1].files_added == 1
    assert found.commits[0].engine_info.startswith("deltalog/")
    assert found.end.version == 4 and read_tail(storage, found.end).commits == ()
    limited = read_tail(storage, start, max_commits=1)
    assert [c.version for c in limited.commits] == [3] and limited.problem is None


def test_read_tail_waits_for_a_table_to_exist_then_reads_it_from_version_0(tmp_path):
    storage = Storage(str(tmp_path / "later"))
    start = latest_position(storage)
    assert start == LogPosition(-1) and read_tail(storage, start) == LogTail(start)
    _table(tmp_path / "x", 0)
    shutil.copytree(tmp_path / "x" / "t", tmp_path / "later")
    assert [c.version for c in read_tail(storage, start).commits] == [0]


def _handmade(path: Path, versions: int) -> None:
    write_commit(str(path), 0, [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, metadata_action([])])
    for v in range(1, versions):
        (path / f"f{v}.parquet").write_bytes(b"x" * 10)
        write_commit(str(path), v, [{"commitInfo": {"operation": "WRITE"}}, add_action(str(path), f"f{v}.parquet")])


def test_read_tail_never_reads_past_a_gap_or_a_corrupt_commit(tmp_path):
    path = tmp_path / "t"
    _handmade(path, 3)
    storage = Storage(str(path))
    start = latest_position(storage)
    write_commit(str(path), 4, [{"commitInfo": {"operation": "WRITE"}}])  # 3 is missing
    assert read_tail(storage, start).listed is False  # two stat calls: commit 3 is not there yet
    gap = read_tail(storage, start, thorough=True)  # what a watcher asks for now and then: the hole is seen
    assert gap.commits == () and gap.problem is not None and (gap.problem.kind, gap.problem.version) == ("gap", 3)
    assert gap.latest_listed == 4
    log = path / "_delta_log"
    (log / f"{3:020d}.json").write_bytes(b'{"commitInfo":{"operation":"WRITE"}}\n{"add":{"path":"f3.par')  # torn
    torn = read_tail(storage, start)  # commit 3 exists: the log is listed
    assert torn.commits == () and torn.problem is not None and torn.problem.kind == "corrupt"
    assert "commit 3 cannot be read" in torn.problem.message and "line 2" in torn.problem.message
    (log / f"{3:020d}.json").write_bytes(b"")
    empty = read_tail(storage, start)
    assert empty.problem is not None and empty.problem.kind == "corrupt" and "empty" in empty.problem.message
    write_commit(str(path), 3, [{"commitInfo": {"operation": "DELETE", "isBlindAppend": False}}])
    fixed = read_tail(storage, start)
    assert [(c.version, c.operation, c.blind_append) for c in fixed.commits] == [
        (3, "DELETE", False),
        (4, "WRITE", True),
    ]


def test_read_tail_tells_a_replaced_a_deleted_and_a_no_longer_delta_table(tmp_path):
    path = tmp_path / "t"
    _handmade(path, 4)
    storage = Storage(str(path))
    start = latest_position(storage)
    os.utime(path / "_delta_log" / f"{3:020d}.json", (1, 1))  # touched, same bytes: still the same table
    touched = read_tail(storage, start)
    assert touched.problem is None and touched.position.modified_ms == 1000 and touched.position.crc32 == start.crc32
    shutil.rmtree(path)
    _handmade(path, 2)  # created again, fewer versions
    replaced = read_tail(storage, touched.position)
    assert replaced.problem is not None and replaced.problem.kind == "replaced" and replaced.restart == LogPosition(-1)
    shutil.rmtree(path)
    _handmade(path, 4)  # created again up to the same version: its commit 3 is another file
    write_commit(str(path), 3, [{"commitInfo": {"operation": "WRITE", "engineInfo": "someone else"}}])
    assert read_tail(storage, start).problem.kind == "replaced"
    shutil.rmtree(path / "_delta_log")
    gone_log = read_tail(storage, start)
    assert gone_log.problem is not None and gone_log.problem.kind == "not_delta"
    shutil.rmtree(path)
    gone = read_tail(storage, start)
    assert gone.problem is not None and gone.problem.kind == "missing" and "does not exist" in gone.problem.message


def test_read_tail_goes_on_when_log_cleanup_removed_the_last_commit_seen(tmp_path):
    path = tmp_path / "t"
    _handmade(path, 6)
    storage = Storage(str(path))
    at_3 = read_tail(storage, LogPosition(2)).commits[0].position
    for v in range(0, 4):  # cleanup up to a checkpoint at 4
        os.remove(path / "_delta_log" / f"{v:020d}.json")
    later = read_tail(storage, at_3)
    assert later.problem is None and [c.version for c in later.commits] == [4, 5]


def test_deltalake_commits_are_summarised_as_they_are(tmp_path):
    """delta-rs writes the log (no deltalog on the writer side): its operations, writer and blind appends."""
    deltalake = pytest.importorskip("deltalake")
    uri = str(tmp_path / "rs")
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    deltalake.write_deltalake(uri, data)
    storage = Storage(uri)
    start = latest_position(storage)
    deltalake.write_deltalake(uri, data, mode="append")
    deltalake.DeltaTable(uri).delete("id = 2")
    found = read_tail(storage, start)
    assert [(c.operation, c.blind_append) for c in found.commits] == [("WRITE", True), ("DELETE", False)]
    assert all(c.engine_info and c.engine_info.startswith("delta-rs") for c in found.commits)
    assert found.commits[1].files_removed >= 1


@pytest.mark.s3
def test_an_idle_poll_on_s3_is_one_list_and_new_commits_one_get_each(
    s3_request_counter, s3_table_uri, s3_storage_options, s3_deltalake_options
):
    """However long the log, an idle poll is one LIST that starts after the last version seen."""
    deltalake = pytest.importorskip("deltalake")

    def write(i: int) -> None:
        data = pa.table({"id": pa.array([i], pa.int64())})
        deltalake.write_deltalake(s3_table_uri, data, mode="append", storage_options=s3_deltalake_options)

    for i in range(30):
        write(i)
    storage = Storage(s3_table_uri, s3_storage_options)
    start = latest_position(storage)
    assert start.version == 29
    before = s3_request_counter.snapshot()
    assert read_tail(storage, start).commits == ()
    assert s3_request_counter.since(before) == {"LIST": 1}
    write(99)
    write(98)
    before = s3_request_counter.snapshot()
    found = read_tail(storage, start)
    assert [c.version for c in found.commits] == [30, 31]
    assert s3_request_counter.since(before) == {"GET": 2, "LIST": 1}


# --- which commits started a run, in its history rows ----------------------------------------------------------


def test_a_runs_history_rows_say_which_commits_started_it(tmp_path):
    """The ``triggered_by_*`` columns (schema version 3): rows of the announced table carry them, others none."""
    from deltalog.journal import HistoryRecorder, RunContext, TriggeredBy, read_history
    from deltalog.storage.filesystem import canonical_uri

    watched, other = _table(tmp_path / "w"), _table(tmp_path / "o")
    watch = CommitWatch(watched.uri, settings(quiet_seconds=0), LogPosition(0))
    watch.observe(read_tail(watched.storage, LogPosition(0)), 0)
    event = watch.ready(0)
    assert event is not None and (event.from_version, event.to_version) == (1, 2)
    context = RunContext(
        dag_id="on_change", airflow_run_id="asset_triggered__1", task_id="compact",
        triggered_by={canonical_uri(watched.uri): TriggeredBy.of_ranges([event])},
    )  # fmt: skip
    recorder = HistoryRecorder(str(tmp_path / "history"), context=context)
    for table in (watched, other):
        with recorder.operation(table, "compaction", engine="local") as op:
            op.result = table.compact()
    rows = {r["table_uri"]: r for r in read_history(str(tmp_path / "history")).to_pylist()}
    mine = rows[canonical_uri(watched.uri)]
    assert (mine["triggered_by_from_version"], mine["triggered_by_to_version"]) == (1, 2)
    assert (mine["triggered_by_commits"], mine["triggered_by_events"], mine["triggered_by_operations"]) == (
        2,
        1,
        ["WRITE"],
    )
    assert mine["triggered_by_writers"][0].startswith("deltalog/") and mine["triggered_by_blind_append_only"] is True
    assert rows[canonical_uri(other.uri)]["triggered_by_from_version"] is None
