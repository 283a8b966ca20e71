"""Writer-aware compaction on real small tables whose DML writers' commits are made by hand (issue 43;
the writers: ``tests/writer_helpers.py``)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from deltalog.compaction import CompactionOptions, CompactionPlan, compact, plan_compaction
from deltalog.compaction.writer_aware import MOVING_GATE, TABLE_GATE
from deltalog.errors import InvalidArgumentError
from handmade_logs import set_commit_time
from helpers import append, make_table, rows
from writer_helpers import partitioned, rewrite_partition, writer_commit

B_GATE = 'partition {"part": "b"}'


def gates_of(plan: CompactionPlan) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for b in plan.bins:
        out.setdefault(str(b.gate), []).append(b.partition_values)
    return out


def compact_while_the_writer_commits(
    path: str, wait_s: float, commit: Callable[[], int], *, waiting: str | None = None
) -> tuple[Any, int]:
    """Compaction in a thread; a second later (``waiting``: it must still be waiting then, the message if
    not) the writer's running statement commits; the compaction's result and the writer's version."""
    out: dict = {}
    worker = threading.Thread(target=lambda: out.update(r=compact(path, writer_wait_seconds=wait_s)))
    worker.start()
    time.sleep(1.0)
    if waiting is not None:
        assert worker.is_alive(), waiting
    landed = commit()
    worker.join(timeout=60)
    return out["r"], landed


def test_a_table_without_dml_plans_as_before(tmp_path):
    path = str(tmp_path / "t")
    table = make_table(path, partition_by=["part"])
    for part in ("a", "b"):
        for i in range(3):
            append(table, rows(3, start=10 * i, part=part), {"part": part})
    aware, plain = plan_compaction(path), plan_compaction(path, writer_aware=False)
    assert [b.files for b in aware.bins] == [b.files for b in plain.bins]
    assert all(b.gate is None for b in aware.bins)
    assert aware.writers is not None and aware.writers.aware and not aware.writers.deferred
    assert aware.writers.summary_line() == "writers: no DELETE/UPDATE/MERGE in the recent log"
    assert plain.writers is not None and not plain.writers.aware


def test_cold_partitions_first_hot_ones_behind_their_writers_gate(tmp_path):
    path = partitioned(tmp_path, cycle_ms=10_000, ran_ms=6_000, last_ago_ms=6_000)
    plan = plan_compaction(path)
    assert gates_of(plan) == {"None": [{"part": "a"}], B_GATE: [{"part": "b"}]}
    assert plan.bins[0].partition_values == {"part": "a"}  # cold first
    assert plan.writers is not None and set(plan.writers.gates) == {B_GATE}
    assert "1 bins commit at a quiet moment" in plan.summary_line()
    # The plan file keeps it all.
    again = CompactionPlan.from_json(plan.to_json())
    assert [b.gate for b in again.bins] == [b.gate for b in plan.bins]
    assert again.writers is not None and again.writers.gates[B_GATE].cadence == plan.writers.gates[B_GATE].cadence


def test_a_hot_commit_waits_for_its_writer_and_lands_right_after_it(tmp_path):
    # Every 10 s an UPDATE of b runs 6 s; the last ended 6 s ago: the next one is running now.
    path = partitioned(tmp_path, cycle_ms=10_000, ran_ms=6_000, last_ago_ms=6_000)
    r, landed = compact_while_the_writer_commits(  # the running UPDATE commits
        path,
        30,
        lambda: writer_commit(path, "b", 6_000),
        waiting="the hot batch committed without waiting for its writer",
    )
    assert r.ok and len(r.commits) == 2
    cold, hot = r.commits
    assert cold.writer_wait is None  # part=a: nothing to wait for
    assert hot.version > landed  # after the writer's commit, not inside its transaction
    assert hot.writer_wait is not None and "right after their commit" in hot.writer_wait["reason"]
    assert hot.writer_wait["waited_s"] >= 0.9 and hot.writer_wait["writer_commits"] == 1
    assert "waited" in r.summary_line()


def test_a_writer_commit_that_rewrote_the_inputs_leaves_the_batch_to_be_planned_at_the_quiet_moment(tmp_path):
    # The commit that opens the quiet moment rewrote every file of part=b (a copy-on-write UPDATE): the
    # plan's bin is stale. Planned again from the snapshot after it, the two new files make the commit.
    path = partitioned(tmp_path, cycle_ms=10_000, ran_ms=6_000, last_ago_ms=6_000)
    r, landed = compact_while_the_writer_commits(path, 30, lambda: rewrite_partition(path, "b", 6_000))
    assert r.ok and len(r.commits) == 2 and r.commits[1].version > landed
    assert not [s for s in r.skipped if s.kind == "conflict"]  # nothing lost to the writer
    replanned = [s for s in r.skipped if s.kind == "replanned"]
    assert [s.bin_id for s in replanned] == [1] and "1 commits" in replanned[0].reason
    new_bin = next(b for b in r.plan.bins if b.id in r.commits[1].bins)
    assert new_bin.partition_values == {"part": "b"} and len(new_bin.files) == 2  # the writer's two new files
    assert r.to_dict()["num_bins_committed"] == 2


def test_a_quiet_moment_takes_as_many_bins_as_it_leaves_time_to_rewrite():
    from deltalog.compaction.quiet_batches import _budget_bytes
    from deltalog.compaction.quiet_moment import QuietMoment
    from deltalog.compaction.writer_aware import WriterGate, lead_ms
    from deltalog.log.writer_activity import Cadence

    gate = WriterGate("table", None, Cadence(((2000, 5000), (2400, 5000), (3000, 6000)), 9, 0, 4))
    assert gate.cadence.quiet_ms() == 2000
    early = QuietMoment(True, 0.0, "quiet", offset_ms=200, decided_at=0.0)
    late = QuietMoment(True, 0.0, "quiet", offset_ms=1900, decided_at=0.0)
    rate = 10_000_000.0
    assert _budget_bytes(gate, early, True, rate) == pytest.approx((2000 - 200 - lead_ms(True)) / 1000 * rate / 2)
    assert _budget_bytes(gate, late, True, rate) == 0  # at least one bin is still taken
    unknown = WriterGate("table", None, Cadence(((None, 5000),), 9, 0, 2))
    assert _budget_bytes(unknown, early, True, rate) == pytest.approx(rate / 2)  # a second's grace


def test_no_quiet_moment_in_time_defers_the_batch_and_deletes_its_files(tmp_path):
    path = partitioned(tmp_path, cycle_ms=10_000, ran_ms=6_000, last_ago_ms=6_000)
    before = {os.path.join(d, f) for d, _, fs in os.walk(os.path.join(path, "part=b")) for f in fs}
    r = compact(path, writer_wait_seconds=0.3)
    assert r.ok and [c.bins for c in r.commits] == [[0]]  # part=a only
    assert r.bins_deferred_for_writers == 1
    skipped = [s for s in r.skipped if s.kind == "deferred"]
    assert len(skipped) == 1 and skipped[0].reason.startswith("deferred for the writers: no quiet moment")
    after = {os.path.join(d, f) for d, _, fs in os.walk(os.path.join(path, "part=b")) for f in fs}
    assert after == before  # the rewritten file of part=b is gone again
    assert r.to_dict()["num_bins_deferred_for_writers"] == 1


def test_a_writer_later_than_ever_is_waited_for_until_its_horizon_then_taken_as_stopped(tmp_path):
    # Cycles of 10 s, the last commit 55 s ago: later than in any cycle (a longer transaction than usual is
    # the likely cause, and a commit now would fail it), so the commit waits; at a minute without a commit
    # (twice the longest cycle, at least a minute) the writer counts as stopped and the commit lands.
    path = partitioned(tmp_path, cycle_ms=10_000, ran_ms=6_000, last_ago_ms=55_000)
    r = compact(path, writer_wait_seconds=30)
    assert r.ok and len(r.commits) == 2
    wait = r.commits[1].writer_wait
    assert wait is not None and "taken as stopped" in wait["reason"] and 3.0 <= wait["waited_s"] < 30


def test_writers_that_leave_no_quiet_moment_have_their_files_deferred(tmp_path):
    # Back to back: each UPDATE of b runs its whole 10 s cycle.
    path = partitioned(tmp_path, cycle_ms=10_000, ran_ms=10_000, last_ago_ms=1_000)
    plan = plan_compaction(path)
    assert gates_of(plan) == {"None": [{"part": "a"}]}
    assert plan.writers is not None
    deferred = plan.writers.deferred
    assert deferred and {f.partition_values["part"] for f in deferred} == {"b"}
    assert all("leave no quiet moment" in f.reason for f in deferred)
    r = compact(path)
    assert r.ok and r.to_dict()["num_files_deferred_for_writers"] == len(deferred)
    assert "files deferred for the writers" in r.summary_line()
    assert {f["path"] for f in r.to_dict()["deferred_files"]} == {f.path for f in deferred}
    # A breached objective wins: nothing deferred (its commit still waits for a quiet moment).
    forced = plan_compaction(path, overriding_objective="objective max_small_files: 9 > 4")
    assert forced.writers is not None and not forced.writers.deferred and B_GATE in gates_of(forced)
    assert "nothing deferred: objective max_small_files" in forced.writers.summary_line()
    # Off: no gate, nothing deferred (part=a was compacted above).
    off = plan_compaction(path, writer_aware=False)
    assert [(b.partition_values, b.gate) for b in off.bins] == [({"part": "b"}, None)]


@pytest.mark.parametrize("commits", [1, 2])
def test_one_or_two_dml_commits_then_compaction_compacts_their_partition_too(tmp_path, commits):
    # A one-off UPDATE of b a second ago, or two back to back (no rhythm): nothing is gated, deferred or waited for.
    path = partitioned(tmp_path, cycle_ms=1_000, ran_ms=1_000, last_ago_ms=1_000, commits=commits)
    plan = plan_compaction(path)
    assert gates_of(plan) == {"None": [{"part": "a"}, {"part": "b"}]}
    assert plan.writers is not None and not plan.writers.deferred and not plan.writers.gates
    assert plan.writers.activity is not None and plan.writers.activity["dml_commits"] == commits  # still reported
    assert plan.writers.activity["dml_active"] is False
    t0 = time.monotonic()
    r = compact(path, writer_wait_seconds=30)
    assert time.monotonic() - t0 < 10  # no wait for a writer that may never come back
    assert r.ok and len(r.commits) == 1 and r.commits[0].writer_wait is None
    assert r.bins_deferred_for_writers == 0 and r.to_dict()["num_files_deferred_for_writers"] == 0
    assert plan_compaction(path, writer_aware=False).bins == []  # both partitions compacted: nothing small left


def test_three_dml_commits_in_a_rhythm_still_defer_and_gate(tmp_path):
    # Three UPDATEs of b 10 s apart, each running its whole cycle: a rhythm with no quiet moment.
    busy = partitioned(tmp_path / "busy", cycle_ms=10_000, ran_ms=10_000, last_ago_ms=1_000, commits=3)
    plan = plan_compaction(busy)
    assert gates_of(plan) == {"None": [{"part": "a"}]}
    assert plan.writers is not None and {f.partition_values["part"] for f in plan.writers.deferred} == {"b"}
    # Three that pause between transactions: part=b waits behind its writers' gate.
    pausing = partitioned(tmp_path / "pausing", cycle_ms=10_000, ran_ms=6_000, last_ago_ms=6_000, commits=3)
    assert gates_of(plan_compaction(pausing)) == {"None": [{"part": "a"}], B_GATE: [{"part": "b"}]}


def test_a_writer_that_stopped_weeks_ago_leaves_its_partitions_cold(tmp_path):
    path = partitioned(tmp_path, cycle_ms=10_000, ran_ms=10_000, last_ago_ms=20 * 86_400_000)
    plan = plan_compaction(path)
    assert all(b.gate is None for b in plan.bins) and len(plan.bins) == 2
    assert plan.writers is not None and not plan.writers.deferred


def test_whole_table_writers_put_every_bin_behind_one_gate(tmp_path):
    path = str(tmp_path / "t")
    table = make_table(path)
    for i in range(4):
        append(table, rows(3, start=10 * i))
    now = int(time.time() * 1000)
    for v in range(5):
        set_commit_time(path, v, now - 3_600_000 + v)
    for i in range(4):
        v = writer_commit(path, None, 6_000)
        set_commit_time(path, v, now - 6_000 - (3 - i) * 10_000)
    plan = plan_compaction(path)
    assert [b.gate for b in plan.bins] == [TABLE_GATE]
    assert plan.writers is not None and plan.writers.activity["table_wide_dml_active"] is True


def test_a_zorder_defers_a_hot_partition_whole(tmp_path):
    path = partitioned(tmp_path, cycle_ms=10_000, ran_ms=10_000, last_ago_ms=1_000)
    plan = plan_compaction(path, zorder_by=["id"])
    assert {b.partition_values["part"] for b in plan.bins} == {"a"}
    assert plan.writers is not None and all("rewritten whole" in f.reason for f in plan.writers.deferred)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"writer_aware": "no"}, "writer_aware"),
        ({"writer_aware": 0}, "writer_aware"),
        ({"writer_wait_seconds": -1}, "writer_wait_seconds"),
        ({"writer_wait_seconds": True}, "writer_wait_seconds"),
        ({"writer_wait_seconds": float("nan")}, "writer_wait_seconds"),
        ({"overriding_objective": " "}, "overriding_objective"),
    ],
)
def test_writer_options_are_checked(values, message):
    with pytest.raises(InvalidArgumentError, match=message):
        CompactionOptions(**values)


def test_a_writer_moving_between_partitions_gates_them_all_and_commits_right_after_its_next_statement(tmp_path):
    # A corrections job pinning b, then c, in turn (two commits each: neither has a rhythm of its own): its
    # next statement, running now, may pin either. part=a at once; b and c behind one gate, right after it.
    path = partitioned(tmp_path, cycle_ms=10_000, ran_ms=6_000, last_ago_ms=6_000, commits=4, pins=("b", "c"))
    plan = plan_compaction(path)
    assert gates_of(plan) == {"None": [{"part": "a"}], MOVING_GATE: [{"part": "b"}, {"part": "c"}]}
    assert plan.writers is not None and plan.writers.gates[MOVING_GATE].scope == "moving"
    assert plan.writers.activity is not None and plan.writers.activity["moving_partitions"] == [
        {"part": "c"},
        {"part": "b"},
    ]
    again = CompactionPlan.from_json(plan.to_json())
    assert again.writers is not None and again.writers.gates[MOVING_GATE] == plan.writers.gates[MOVING_GATE]
    r, landed = compact_while_the_writer_commits(  # its running statement commits
        path,
        8,
        lambda: writer_commit(path, "b", 6_000),
        waiting="the moving writer's partitions committed without waiting for it",
    )
    assert r.ok and r.commits[0].writer_wait is None  # part=a
    gated = r.commits[1:]
    assert gated and all(c.version > landed and c.writer_wait is not None for c in gated)
    assert "right after their commit" in gated[0].writer_wait["reason"]
    # Off: nothing gated.
    assert all(b.gate is None for b in plan_compaction(path, writer_aware=False).bins)


@pytest.mark.parametrize("starved_s, quiet", [(0.05, True), (6.0, False)])
def test_a_writer_commit_seen_late_by_a_starved_poll_opens_no_quiet_moment(tmp_path, starved_s, quiet):
    # Every 10 s an UPDATE of b runs 6 s (quiet for 4 s after each commit). Its next commit appears while
    # the wait sleeps; a poll that came back after 50 ms commits right after it, one starved for 6 s (a
    # loaded machine) knows the commit may be 6 s old, past the writer's quiet gap, and waits on.
    from deltalog.compaction.quiet_moment import wait_for_quiet_moment
    from deltalog.storage.filesystem import Storage

    path = partitioned(tmp_path, cycle_ms=10_000, ran_ms=6_000, last_ago_ms=6_000)
    plan = plan_compaction(path)
    assert plan.writers is not None
    gate = plan.writers.gates[B_GATE]
    now = [0.0]

    def sleep(seconds: float) -> None:
        if now[0] == 0.0:
            writer_commit(path, "b", 6_000)
            now[0] += starved_s
        else:
            now[0] += seconds

    moment = wait_for_quiet_moment(Storage(path), plan, gate, max_wait_s=8.0, clock=lambda: now[0], sleep=sleep)
    assert moment.ok is quiet and moment.writer_commits == 1
    if quiet:
        assert "right after their commit" in moment.reason
    else:
        assert moment.timed_out and "no quiet moment" in moment.reason


def test_partitions_with_a_rhythm_of_their_own_wait_behind_the_moving_writers_gate(tmp_path):
    # Six statements pinning b, c, b, c, ...: each partition has a rhythm of its own, but one job makes both:
    # its rhythm as a whole says when a quiet moment comes and when it stopped, so both wait behind its gate
    # (a partition's own horizon could pass while the job, about to pin it again, still runs).
    path = partitioned(tmp_path, cycle_ms=10_000, ran_ms=6_000, last_ago_ms=6_000, commits=6, pins=("b", "c"))
    plan = plan_compaction(path)
    assert gates_of(plan) == {"None": [{"part": "a"}], MOVING_GATE: [{"part": "b"}, {"part": "c"}]}
    assert plan.writers is not None and plan.writers.gates[MOVING_GATE].cadence.commits == 6
