"""The writers beside maintenance, learned from handmade logs (issue 43): kinds, scopes, rhythm, overlaps.

Pure over commit records (no table), except the last tests, which read handmade logs from disk.
"""

from __future__ import annotations

import json
import time

import pytest

from deltalog.log.listing import list_log
from deltalog.log.writer_activity import (
    Cadence,
    activity_from_commits,
    cadence_of,
    classify_commit,
    pins_partitions,
    read_recent_commits,
    recent_commit,
)
from deltalog.storage.filesystem import Storage
from handmade_logs import SPARK_ENGINE, commit_info, file_action, set_commit_time, write_commit

DAY = ["day"]
COLUMNS = ["id", "day", "v"]
NOW = 1_800_000_000_000


def dml(
    version: int,
    at: int,
    operation: str = "DELETE",
    *,
    predicate: str = "(day#1 = d7)",
    partition: str | None = "d7",
    ran_ms: int | None = 2000,
    read_version: int | None = None,
    path: str | None = None,
):
    """A Delta Spark DML commit at ``at`` (ms) that took ``ran_ms``, marking one file of ``partition``."""
    part = {"day": partition} if partition else {}
    f = path or (f"day={partition}/f{version}.parquet" if partition else f"f{version}.parquet")
    params = {"predicate": json.dumps([predicate])}
    metrics = {"executionTimeMs": ran_ms} if ran_ms is not None else {}
    actions = [
        commit_info(
            operation,
            read_version=version - 1 if read_version is None else read_version,
            timestamp=at,
            parameters=params,
            metrics=metrics,
        ),
        file_action("remove", f, part),
        file_action("add", f, part),
    ]
    return recent_commit(version, at, actions)


def append(version: int, at: int, partition: str | None = "d7", read_version: int | None = None, operation="WRITE"):
    part = {"day": partition} if partition else {}
    actions = [
        commit_info(
            operation,
            read_version=version - 1 if read_version is None else read_version,
            timestamp=at,
            parameters={"mode": "Append"},
            blind=True,
        ),
        file_action("add", f"day={partition}/a{version}.parquet" if partition else f"a{version}.parquet", part),
    ]
    return recent_commit(version, at, actions)


def ours(version: int, at: int, read_version: int, dropped: int = 0, partition: str | None = "d1"):
    part = {"day": partition} if partition else {}
    actions = [
        commit_info(
            "OPTIMIZE",
            read_version=read_version,
            timestamp=at,
            engine="deltalog/0.1.0",
            metrics={"numBinsDroppedForConflicts": dropped},
        ),
        file_action("remove", "day=d1/small.parquet", part, data_change=False),
        file_action("add", "day=d1/big.parquet", part, data_change=False),
    ]
    return recent_commit(version, at, actions)


def periodic(first_version: int, n: int, start: int, cycle: int, ran: int, **kw):
    """``n`` DML commits ``cycle`` ms apart, each running ``ran`` ms (a writer that pauses between them)."""
    return [dml(first_version + i, start + i * cycle, ran_ms=ran, **kw) for i in range(n)]


# --- kinds ---------------------------------------------------------------------------------


def test_each_kind_of_commit_is_told_apart():
    assert append(1, NOW).kind == "append"
    stream = recent_commit(
        2,
        NOW,
        [
            commit_info("STREAMING UPDATE", read_version=1, blind=True, parameters={"outputMode": "Append"}),
            file_action("add", "day=d7/s.parquet", {"day": "d7"}),
        ],
    )
    assert stream.kind == "append"
    assert dml(3, NOW).kind == "dml"  # a deletion-vector DELETE: remove and re-add of one path
    insert_only = recent_commit(4, NOW, [commit_info("MERGE", read_version=3), file_action("add", "x.parquet")])
    assert insert_only.kind == "dml"  # it read the table to decide what to insert
    assert ours(5, NOW, 4).kind == "deltalog"
    spark_optimize = recent_commit(
        6,
        NOW,
        [
            commit_info("OPTIMIZE", read_version=5),
            file_action("remove", "a", data_change=False),
            file_action("add", "b", data_change=False),
        ],
    )
    assert spark_optimize.kind == "maintenance"
    assert recent_commit(7, NOW, [commit_info("SET TBLPROPERTIES", read_version=6)]).kind == "other"
    # A deltalog commit request adds data: an append, whoever committed it.
    request = recent_commit(
        8, NOW, [commit_info("WRITE", read_version=7, engine="deltalog/0.1.0", blind=True), file_action("add", "c")]
    )
    assert classify_commit(request) == "append"


# --- where: predicates ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "predicate, pinned",
    [
        ("((day#479 = d1) AND ((id#478L % 7) = 3))", True),  # Delta Spark: an unquoted string literal
        ("(id#1378L = 205)", False),
        ("((day#3142 = day#3145) AND (id#3141L = id#3144L))", False),  # MERGE ON t.day = s.day: reads all
        ("((day#5882 = d0) AND (id#5881L = id#5884L))", True),
        ("day = '2024-05-01' AND id > 3", True),  # delta-rs
        ("t.day = s.day AND t.id = s.id", False),
        ("day IN ('d1', 'd2')", True),
        ("day IN ('d1', s.day)", False),
        ("(day = 'd1') OR (id = 3)", False),  # an OR reads both sides
        ("day >= 5", True),
        ("'d1' = day", True),
        ("v = day", False),  # a column against a column
    ],
)
def test_a_predicate_pins_partitions_only_with_literals(predicate, pinned):
    assert pins_partitions([predicate], DAY, COLUMNS) is pinned


def test_predicates_on_an_unpartitioned_table_pin_nothing():
    assert pins_partitions(["(id = 3)"], [], ["id"]) is False


def test_pinned_and_whole_table_writers_are_scoped_as_delta_spark_conflicts_them():
    pinned = dml(3, NOW)
    merge = dml(4, NOW + 10, "MERGE", predicate="((day#1 = day#2) AND (id#3L = id#4L))")
    act = activity_from_commits([pinned, merge], DAY, COLUMNS, now_ms=NOW + 20)
    by_version = {d.version: d for d in act.dml}
    assert not by_version[3].table_wide and by_version[3].partitions == {(("day", "d7"),)}
    assert by_version[4].table_wide  # it conflicts with a commit in any partition
    assert by_version[3].touches((("day", "d7"),)) and not by_version[3].touches((("day", "d1"),))
    assert by_version[4].touches((("day", "d1"),))
    flat = activity_from_commits([dml(3, NOW, partition=None, predicate="(id#1L = 7)")], [], ["id"], now_ms=NOW)
    assert flat.dml[0].table_wide  # an unpartitioned table: every commit meets it


def test_an_overwrite_is_whole_table_unless_dynamic_or_replace_where():
    overwrite = recent_commit(
        3,
        NOW,
        [
            commit_info("WRITE", read_version=2, parameters={"mode": "Overwrite"}),
            file_action("remove", "day=d1/a", {"day": "d1"}),
        ],
    )
    dynamic = recent_commit(
        4,
        NOW,
        [
            commit_info("WRITE", read_version=3, parameters={"mode": "Overwrite", "partitionOverwriteMode": "DYNAMIC"}),
            file_action("remove", "day=d2/a", {"day": "d2"}),
        ],
    )
    replace_where = recent_commit(
        5,
        NOW,
        [
            commit_info(
                "WRITE", read_version=4, parameters={"mode": "Overwrite", "predicate": json.dumps(["(day = 'd3')"])}
            ),
            file_action("remove", "day=d3/a", {"day": "d3"}),
        ],
    )
    act = activity_from_commits([overwrite, dynamic, replace_where], DAY, COLUMNS, now_ms=NOW)
    assert [d.table_wide for d in act.dml] == [True, False, False]


# --- when: durations and rhythm --------------------------------------------------------------


def test_a_transaction_starts_by_its_own_timer_else_before_the_commit_after_its_read_version():
    # executionTimeMs: the writer's own clock, no skew between writers enters.
    timed = activity_from_commits([dml(3, NOW, ran_ms=4000)], DAY, COLUMNS, now_ms=NOW).dml[0]
    assert NOW - timed.start_ms == pytest.approx(4000, abs=300)
    # No timer: it read version 1, so it started before version 2 (an append) landed.
    untimed = [append(1, NOW - 9000), append(2, NOW - 6000), dml(3, NOW, ran_ms=None, read_version=1)]
    d = activity_from_commits(untimed, DAY, COLUMNS, now_ms=NOW).dml[0]
    assert d.start_ms == NOW - 6000
    # It read the commit just before it: nothing says when it started.
    unknown = activity_from_commits([dml(3, NOW, ran_ms=None)], DAY, COLUMNS, now_ms=NOW).dml[0]
    assert unknown.start_ms is None
    # A timer that started after the snapshot (a loaded driver's analysis): the commit after its read
    # version landed 6 s before its commit, so it started at least that early, whatever its 2 s timer says.
    late_timer = [append(1, NOW - 9000), append(2, NOW - 6000), dml(3, NOW, ran_ms=2000, read_version=1)]
    assert activity_from_commits(late_timer, DAY, COLUMNS, now_ms=NOW).dml[0].start_ms == NOW - 6000
    # The bound is later than the timer's start: the timer's start stands.
    early = [append(1, NOW - 9000), append(2, NOW - 1000), dml(3, NOW, ran_ms=4000, read_version=1)]
    assert NOW - activity_from_commits(early, DAY, COLUMNS, now_ms=NOW).dml[0].start_ms == pytest.approx(4000, abs=300)


def test_a_writer_that_pauses_leaves_a_quiet_moment_after_each_commit():
    # Every 3 s: 2 s running, 1 s thinking.
    cad = cadence_of(activity_from_commits(periodic(3, 8, NOW, 3000, 2000), DAY, COLUMNS, now_ms=NOW).dml)
    assert cad is not None and cad.commits == 8
    assert cad.risk(300) == 0.0  # right after a commit: no transaction of it runs yet
    assert cad.risk(2000) == 1.0  # in the middle of its next one
    # Later than in any cycle: most likely in a longer transaction than usual, not gone; stopped only past
    # the horizon (twice the longest cycle, at least a minute).
    assert cad.risk(3000 * 1.3) == 1.0 and not cad.overdue(3000 * 1.3)
    assert cad.horizon_ms == 60_000 and not cad.overdue(60_000) and cad.overdue(60_001)
    assert "quiet for 0.8 s" in cad.describe() or "quiet for 0.7 s" in cad.describe()


def test_a_writer_running_back_to_back_leaves_none():
    cad = cadence_of(activity_from_commits(periodic(3, 8, NOW, 3000, 3000), DAY, COLUMNS, now_ms=NOW).dml)
    assert cad is not None and cad.risk(300) == 1.0


def test_two_writers_overlapping_leave_none_between_them():
    # Writer A commits every 4 s, B 2 s after A; each runs 3 s: one is always running.
    times = sorted([NOW + i * 4000 for i in range(6)] + [NOW + 2000 + i * 4000 for i in range(6)])
    commits = [dml(3 + n, at, ran_ms=3000) for n, at in enumerate(times)]
    act = activity_from_commits(commits, DAY, COLUMNS, now_ms=times[-1])
    cad = act.cadence((("day", "d7"),))
    assert cad is not None and cad.risk(300) == 1.0


def test_unknown_starts_give_no_risk_only_commits():
    cad = cadence_of(activity_from_commits(periodic(3, 5, NOW, 3000, None), DAY, COLUMNS, now_ms=NOW).dml)
    assert cad is not None and cad.pairs and cad.risk(300) is None
    assert "not recorded" in cad.describe()


def test_cadence_survives_the_plan_file():
    cad = cadence_of(activity_from_commits(periodic(3, 4, NOW, 3000, 2000), DAY, COLUMNS, now_ms=NOW).dml)
    assert cad is not None and Cadence.from_dict(json.loads(json.dumps(cad.to_dict()))) == cad


# --- alive, stopped, skew ---------------------------------------------------------------------


def test_partitions_are_hot_while_their_writer_works_and_cold_when_it_stopped():
    commits = periodic(3, 6, NOW, 3000, 2000)
    active = activity_from_commits(commits, DAY, COLUMNS, now_ms=NOW + 5 * 3000 + 500)
    assert active.hot_partitions() == [(("day", "d7"),)]
    assert not active.table_wide_alive()
    weeks = activity_from_commits(commits, DAY, COLUMNS, now_ms=NOW + 21 * 86_400_000)
    assert weeks.hot_partitions() == []  # a writer that stopped weeks ago: cold again
    cad = weeks.cadence((("day", "d7"),))
    assert cad is not None and not cad.alive(weeks.now_ms)


def test_one_or_two_dml_commits_keep_no_partition_hot_a_third_gives_a_rhythm():
    # One DELETE a second ago: nothing says its writer comes back; reported, never hot.
    one = activity_from_commits([append(1, NOW - 60_000), dml(3, NOW, ran_ms=1000)], DAY, COLUMNS, now_ms=NOW + 1000)
    cad = one.cadence((("day", "d7"),))
    assert cad is not None and not cad.has_rhythm and cad.horizon_ms is None and not cad.alive(one.now_ms)
    assert one.hot_partitions() == [] and not one.table_wide_alive()
    d = one.to_dict()
    assert d["dml_commits"] == 1 and d["dml_active"] is False and d["hot_partitions"] == []
    assert d["cadence"].startswith("1 commit (")  # its duration, reported
    assert "1 DELETE/UPDATE/MERGE commits of 2 (no rhythm yet (1 commit " in one.summary_line()
    assert "nothing deferred for them" in one.summary_line()
    # A lone whole-table DML (an unpartitioned table's) keeps nothing hot either.
    flat = activity_from_commits([dml(3, NOW, partition=None, predicate="(id#1L = 5)")], [], COLUMNS, now_ms=NOW + 1000)
    assert flat.dml[0].table_wide and not flat.table_wide_alive()
    # A script's UPDATE then DELETE, back to back: one interval, one sample; still no rhythm.
    script = [dml(3, NOW, "UPDATE", ran_ms=800), dml(4, NOW + 900, ran_ms=800)]
    two = activity_from_commits(script, DAY, COLUMNS, now_ms=NOW + 2000)
    pair = two.cadence((("day", "d7"),))
    assert pair is not None and len(pair.pairs) == 1 and pair.risk(300) == 1.0  # that one sample: back to back
    assert not pair.has_rhythm and two.hot_partitions() == [] and two.to_dict()["dml_active"] is False
    # The writer repeats its cycle: a rhythm, its partition hot until twice its longest cycle has passed.
    three = [dml(3, NOW, ran_ms=1000), dml(4, NOW + 30_000, ran_ms=1000), dml(5, NOW + 60_000, ran_ms=1000)]
    soon = activity_from_commits(three, DAY, COLUMNS, now_ms=NOW + 61_000)
    assert soon.hot_partitions() == [(("day", "d7"),)]
    rhythm = soon.cadence((("day", "d7"),))
    assert rhythm is not None and rhythm.has_rhythm and rhythm.horizon_ms == 60_000
    assert "active; working on 1 partitions" in soon.summary_line()
    assert not activity_from_commits(three, DAY, COLUMNS, now_ms=NOW + 60_000 + 61_000).hot_partitions()


def test_a_writer_clock_ahead_of_ours_counts_as_now():
    # The commits claim to be 10 minutes in our future (the writer's clock is ahead): they are just now.
    act = activity_from_commits(periodic(3, 4, NOW + 600_000, 3000, 2000), DAY, COLUMNS, now_ms=NOW)
    assert act.now_ms == NOW + 600_000 + 3 * 3000
    assert act.hot_partitions() == [(("day", "d7"),)]
    # Durations come from the writer's own timer, untouched by the skew.
    assert all(d.duration_ms == pytest.approx(2000, abs=300) for d in act.dml)


def test_a_table_without_dml_has_no_writer_to_mind():
    act = activity_from_commits([append(i, NOW + i) for i in range(1, 20)], DAY, COLUMNS, now_ms=NOW + 100)
    assert not act.any_dml and act.kinds["append"] == 19
    assert act.cadence(None) is None and act.hot_partitions() == []
    assert "no DELETE/UPDATE/MERGE" in act.summary_line()


# --- what the log shows of the conflicts we caused --------------------------------------------------


def test_writer_commits_that_landed_after_our_rewrite_unread_are_overlaps():
    log = [
        append(1, NOW),
        dml(2, NOW + 100, read_version=1),
        ours(3, NOW + 200, read_version=2, dropped=1),
        dml(4, NOW + 300, read_version=2),  # started before our rewrite, landed after it: checked against it
        append(5, NOW + 400, read_version=2),  # the same for a blind append (which never conflicts)
        dml(6, NOW + 500, read_version=4),  # read our rewrite: no overlap
    ]
    act = activity_from_commits(log, DAY, COLUMNS, now_ms=NOW + 600)
    assert [(o.version, o.kind, o.deltalog_versions) for o in act.overlaps] == [(4, "dml", (3,)), (5, "append", (3,))]
    assert act.overlap_counts() == {"dml": 1, "append": 1}
    assert act.deltalog_commits == 1 and act.bins_dropped == 1
    doc = act.to_dict()
    assert doc["writer_overlaps"] == {"dml": 1, "append": 1} and doc["bins_dropped_for_conflicts"] == 1


# --- reading the log ----------------------------------------------------------------------------


def _table(tmp_path, configuration=None):
    path = str(tmp_path / "t")
    meta = {
        "metaData": {
            "id": "t1",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(
                {
                    "type": "struct",
                    "fields": [
                        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                        {"name": "day", "type": "string", "nullable": True, "metadata": {}},
                    ],
                }
            ),
            "partitionColumns": ["day"],
            "configuration": configuration or {},
            "createdTime": 1,
        }
    }
    write_commit(
        path,
        0,
        [commit_info("CREATE TABLE", timestamp=1), {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, meta],
    )
    return path


def test_recent_commits_are_read_newest_first_within_count_and_age(tmp_path):
    path = _table(tmp_path)
    now = int(time.time() * 1000)
    for v in range(1, 8):
        write_commit(
            path,
            v,
            [
                commit_info(
                    "DELETE",
                    read_version=v - 1,
                    parameters={"predicate": "[\"(day = 'a')\"]"},
                    metrics={"executionTimeMs": 10},
                ),
                file_action("remove", f"day=a/{v}", {"day": "a"}),
            ],
        )
        set_commit_time(path, v, now - (8 - v) * 1000)
    set_commit_time(path, 0, now - 30 * 86_400_000)  # a month old: out of the window
    storage = Storage(path)
    listing = list_log(storage)
    got = read_recent_commits(storage, listing, {}, now_ms=now)
    assert [c.version for c in got] == list(range(1, 8))  # version 0 is older than the window: not read
    assert [c.version for c in read_recent_commits(storage, listing, {}, max_commits=3, now_ms=now)] == [5, 6, 7]
    assert [c.version for c in read_recent_commits(storage, listing, {}, after_version=5, now_ms=now)] == [6, 7]
    assert got[-1].timestamp_ms == pytest.approx(now - 1000, abs=5)


def test_in_commit_timestamps_date_the_commits_where_the_table_has_them(tmp_path):
    conf = {"delta.enableInCommitTimestamps": "true", "delta.inCommitTimestampEnablementVersion": "2"}
    path = _table(tmp_path, conf)
    now = int(time.time() * 1000)
    for v in (1, 2):
        info = commit_info("WRITE", read_version=v - 1, blind=True)
        info["commitInfo"]["inCommitTimestamp"] = now - 5000 + v
        write_commit(path, v, [info, file_action("add", f"day=a/{v}", {"day": "a"})])
    storage = Storage(path)
    got = read_recent_commits(storage, list_log(storage), conf, now_ms=now)
    by = {c.version: c.timestamp_ms for c in got}
    assert by[2] == now - 5000 + 2  # from the enablement version on: the in-commit timestamp
    assert by[1] != now - 5000 + 1  # before it: the file's time
    assert SPARK_ENGINE.startswith("Apache-Spark")


def test_a_streaming_foreach_batch_merge_has_the_rhythm_of_its_trigger():
    # Every 5 s a micro-batch MERGEs (2 s) into the table under the stream's app transaction.
    def batch(version: int, at: int):
        return recent_commit(
            version,
            at,
            [
                commit_info(
                    "MERGE",
                    read_version=version - 1,
                    timestamp=at,
                    parameters={"predicate": json.dumps(["(id#1L = id#2L)"])},
                    metrics={"executionTimeMs": 2000},
                ),
                {"txn": {"appId": "stream-1", "version": version, "lastUpdated": at}},
                file_action("remove", f"f{version}.parquet"),
                file_action("add", f"g{version}.parquet"),
            ],
        )

    act = activity_from_commits([batch(3 + i, NOW + i * 5000) for i in range(6)], [], ["id"], now_ms=NOW + 25_500)
    cad = act.cadence(None)
    assert act.kinds["dml"] == 6 and act.table_wide_alive()
    assert cad is not None and cad.risk(300) == 0.0 and cad.risk(4000) == 1.0  # quiet right after each batch
    assert cad.quiet_ms() == pytest.approx(2750, abs=10)


def test_a_writer_moving_between_partitions_keeps_the_partitions_it_pins_hot():
    # A corrections job: one statement every 4 s, each pinning one of d4..d6 (2.5 s running, then a pause):
    # no partition has a rhythm of its own yet, the job has one, and its next statement may pin any of them.
    moving = [
        dml(3 + i, NOW + 4000 * i, predicate=f"(day#1 = {d})", partition=d, ran_ms=2500)
        for i, d in enumerate(["d4", "d5", "d6", "d4"])
    ]
    act = activity_from_commits(moving, DAY, COLUMNS, now_ms=NOW + 4000 * 3 + 500)
    assert all(c is not None and not c.has_rhythm for c in (act.cadence((("day", d),)) for d in ("d4", "d5", "d6")))
    assert act.moving_partitions() == [(("day", "d4"),), (("day", "d6"),), (("day", "d5"),)]
    assert act.hot_partitions() == act.moving_partitions()
    assert act.to_dict()["moving_partitions"] == [{"day": "d4"}, {"day": "d6"}, {"day": "d5"}]
    # Stopped (no commit for twice its longest cycle, at least a minute): cold again.
    assert activity_from_commits(moving, DAY, COLUMNS, now_ms=NOW + 4000 * 3 + 61_000).moving_partitions() == []
    # Overlapping writers (each transaction already running when the one before committed): which one comes
    # back where is unknown, so no partition is hot for them.
    busy = [
        dml(3 + i, NOW + 4000 * i, predicate=f"(day#1 = {d})", partition=d, ran_ms=5000)
        for i, d in enumerate(["d4", "d5", "d6", "d4"])
    ]
    assert activity_from_commits(busy, DAY, COLUMNS, now_ms=NOW + 4000 * 3 + 500).moving_partitions() == []
    # Two commits are no rhythm, moving or not.
    assert activity_from_commits(moving[:2], DAY, COLUMNS, now_ms=NOW + 4500).moving_partitions() == []
    # A partition with a rhythm of its own that the moving writer pins too is listed: the writer's rhythm
    # as a whole says when it stopped, not the partition's.
    own = [dml(10 + i, NOW + 4000 * i, ran_ms=2500) for i in range(3)] + [
        dml(13, NOW + 12_000, predicate="(day#1 = d2)", partition="d2", ran_ms=2500)
    ]
    mixed = activity_from_commits(own, DAY, COLUMNS, now_ms=NOW + 12_500)
    assert mixed.moving_partitions() == [(("day", "d2"),), (("day", "d7"),)]
    assert set(mixed.hot_partitions()) == {(("day", "d2"),), (("day", "d7"),)}
    # A writer that stays in one partition is not moving: that partition's own rhythm is the writer's.
    one_day = activity_from_commits(own[:3], DAY, COLUMNS, now_ms=NOW + 8_500)
    assert one_day.moving_partitions() == [] and one_day.hot_partitions() == [(("day", "d7"),)]


def test_a_partition_past_its_own_horizon_stays_hot_while_the_writer_moving_through_it_works():
    # The job pinned d7 three times (4 s apart), then d2 and d3 for 76 s more: d7's own stream is past its
    # horizon (no d7 commit for more than a minute), but the job, which may pin d7 next, still works.
    commits = [dml(3 + i, NOW + 4000 * i, ran_ms=2500) for i in range(3)] + [
        dml(6 + i, NOW + 12_000 + 4000 * i, predicate=f"(day#1 = d{2 + i % 2})", partition=f"d{2 + i % 2}", ran_ms=2500)
        for i in range(20)
    ]
    act = activity_from_commits(commits, DAY, COLUMNS, now_ms=NOW + 12_000 + 4000 * 19 + 500)
    own = act.cadence((("day", "d7"),))
    assert own is not None and not own.alive(act.now_ms)
    assert (("day", "d7"),) in act.moving_partitions() and (("day", "d7"),) in act.hot_partitions()
