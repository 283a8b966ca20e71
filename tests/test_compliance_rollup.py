"""Compliance from rollups: the fleet view's breach starts are ``breached_since``'s, whatever the grouping.

The fleet view never reads the history's rows for a page: each measured objective's breach is a *run*
(``deltalog.journal.rollup.breach_run``), folded per file, day and window and judged when read against
the newest judgement's target. Checked here, with hypothesis drawing histories of measure rows
(breached, met, unknown, unset, judged against other targets, written before objectives existed
(schema version 1: the value in ``small_files_after`` only), tables re-created under their URI,
failed and other operations among them) split into files and days in any way a history may hold
them and merged in any order: every table's compliance from rollups (``table_summaries``) says what
``deltalog.journal.breached_since`` says from the rows themselves (met, breached, and since when),
the per-day counts count tables by their day's newest judgement, and ``fleet_run`` rows' finishing
times are counted per day.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltalog.journal import breached_since, day_figures, merge_rollups, rollup_rows, table_summaries
from deltalog.journal.rollup import RAW_COLUMNS, duckdb_connection
from deltalog.journal.schema import HISTORY_SCHEMA

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
NAMES = ("max_small_files", "max_days_since_vacuum")


def raw_rows(rows: list[dict[str, Any]]) -> pa.Table:
    """History rows (only the rollup's columns; those not given null), in the history's types."""
    fields = [pa.field(n, HISTORY_SCHEMA.field(n).type) for n in RAW_COLUMNS]
    return pa.table({f.name: pa.array([r.get(f.name) for r in rows], f.type) for f in fields}, schema=pa.schema(fields))


def measure(
    i: int,
    uri: str,
    hour: int,
    status: str = "done",
    op: str = "measure",
    state: dict[str, Any] | None = None,
    **objectives: Any,
) -> dict[str, Any]:
    """A row ``hour`` hours after T0; ``objectives``: name -> (target, value, met) or None (not set);
    ``state``: more columns (``small_files_after``, ``table_id``: what rows of every schema version carry)."""
    at = T0 + dt.timedelta(hours=hour)
    row: dict[str, Any] = {
        "run_id": f"run-{hour}",
        "row_id": f"r{i:05d}",
        "run_date": at.date(),
        "table_uri": uri,
        "operation": op,
        "status": status,
        "started_at": at,
        "ended_at": at,
        "duration_s": 1.0,
        **{c: 0 for c in ("files_read", "bytes_read", "files_written", "bytes_written")},
        **{c: 0 for c in ("files_removed", "bytes_removed", "bytes_reclaimed", "log_files_removed")},
        **(state or {}),
    }
    at_risk = []
    for name, judged in objectives.items():
        if judged is None:
            continue
        target, value, met = judged
        row[f"objective_{name}_target"] = target
        row[f"objective_{name}_value"] = value
        row[f"objective_{name}_met"] = met
        row[f"objective_{name}_source"] = "fleet defaults"
        if met is True and value is not None and value >= target * 0.9:
            at_risk.append(name)
    row["objectives_at_risk"] = at_risk
    return row


judgement = st.one_of(
    st.none(),  # not set (a row of schema version 1 too)
    st.just((5.0, None, None)),  # set, value unknown
    st.sampled_from([(5.0, 3.0, True), (5.0, 8.0, False), (5.0, 4.9, True), (5.0, 5.0, True), (7.0, 12.0, False)]),
    st.sampled_from([(12.0, 8.0, True), (2.0, 3.0, False)]),  # judged against another target than today's
    st.just((None, 8.0, False)),  # judged without a target: another writer's row (its value counts)
)
#: ``small_files_after`` of a row (its value when it carries no ``objective_max_small_files_value``).
state_value = st.one_of(st.none(), st.sampled_from([0, 3, 5, 6, 8, 12]))


@st.composite
def histories(draw: Any) -> list[dict[str, Any]]:
    """Up to 60 tables' rows over six days (one history: a run rolls many tables' sequences up at once); now
    and then a table is re-created under its URI (a new table id), some rows have no table id."""
    tables = draw(st.integers(1, 60))
    hours = draw(st.lists(st.integers(0, 24 * 6), min_size=1, max_size=12 * tables, unique=True))
    incarnation = [0] * tables
    out = []
    for i, hour in enumerate(sorted(hours)):
        t = draw(st.integers(0, tables - 1))
        if draw(st.integers(0, 19)) == 0:
            incarnation[t] += 1
        table_id = None if draw(st.integers(0, 9)) == 0 else f"t{t}-{incarnation[t]}"
        status = draw(st.sampled_from(["done", "done", "done", "failed", "refused"]))
        op = draw(st.sampled_from(["measure", "measure", "measure", "vacuum"]))
        state = {"small_files_after": draw(state_value), "table_id": table_id}
        out.append(measure(i, f"s3://lake/t{t}", hour, status, op, state, **{n: draw(judgement) for n in NAMES}))
    return out


def rolled_up(rows: list[dict[str, Any]], rng: random.Random) -> pa.Table:
    """``rows`` rolled up as a history may hold them: per day, in files of consecutive rows (appends), each
    file in batches; the day's files merged in any order, then the days merged in any order."""
    days: dict[dt.date, list[dict[str, Any]]] = {}
    for r in rows:
        days.setdefault(r["run_date"], []).append(r)
    day_rollups = []
    with duckdb_connection() as con:
        for day_rows in days.values():
            cuts = sorted(rng.sample(range(1, len(day_rows)), k=min(len(day_rows) - 1, rng.randint(0, 3))))
            files = [day_rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(day_rows)], strict=True)]
            parts = [rollup_rows([raw_rows(f[: len(f) // 2]), raw_rows(f[len(f) // 2 :])], con) for f in files]
            rng.shuffle(parts)
            day_rollups.append(merge_rollups(parts, con=con))
        rng.shuffle(day_rollups)
        return merge_rollups(day_rollups, con=con)


def expected(rows: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[bool | None, dt.datetime | None]]:
    got = breached_since(raw_rows(rows))
    return {(r["table_uri"], r["objective"]): (r["met"], r["breached_since"]) for r in got.to_pylist()}


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=histories(), seed=st.integers(0, 2**16))
def test_compliance_from_rollups_is_breached_since_of_the_rows(rows, seed):
    by_day = rolled_up(rows, random.Random(seed))
    summaries = {
        r["table_uri"]: r for r in table_summaries(merge_rollups([by_day], by=("table_uri", "operation"))).to_pylist()
    }
    truth = expected(rows)
    judging = [r for r in rows if r["operation"] == "measure" and r["status"] == "done"]
    for uri in {r["table_uri"] for r in rows}:
        mine = [r for r in judging if r["table_uri"] == uri]
        summary = summaries[uri]
        if not mine:
            assert summary["compliance"] == "none" and summary["objectives"] == []
            continue
        newest = mine[-1]
        shown = {o["name"]: o for o in summary["objectives"]}
        assert set(shown) == {n for n in NAMES if newest.get(f"objective_{n}_target") is not None}
        for name, o in shown.items():
            met = newest[f"objective_{name}_met"]
            assert o["met"] == met and o["source"] == "fleet defaults"
            if met is False:
                # The newest judgement breached: the fold's start is the rule's.
                assert truth[(uri, name)] == (False, o["breached_since"]), (uri, name)
            else:
                assert o["breached_since"] is None
        breached = [o for o in shown.values() if o["met"] is False]
        state = (
            "breached" if breached else "none" if not shown else "at_risk" if newest["objectives_at_risk"] else "met"
        )
        assert summary["compliance"] == state
        assert summary["breached_since"] == (min(o["breached_since"] for o in breached) if breached else None)
        assert summary["judged_at"] == newest["started_at"] and summary["judged_id"] == newest["row_id"]


def test_a_breach_over_three_days_and_a_relaxed_target(tmp_path):
    """The issue's scenario in miniature: met, met, then breached on three days; a measured value within the
    target ends a breach, an unset objective does not (today's target judges the values); a history written
    before objectives existed gives its start; a re-created table's breach starts after its re-creation."""
    v1 = {"table_id": "o-1"}
    rows = [
        measure(0, "s3://lake/orders", 0, max_small_files=(5.0, 3.0, True)),
        measure(1, "s3://lake/orders", 24, max_small_files=(5.0, 8.0, False)),
        measure(2, "s3://lake/orders", 48, max_small_files=(5.0, 10.0, False)),
        measure(3, "s3://lake/orders", 60, max_small_files=(5.0, None, None)),  # unknown: neither breaks nor extends
        measure(4, "s3://lake/orders", 72, max_small_files=(5.0, 12.0, False)),
        measure(5, "s3://lake/events", 0, max_small_files=(5.0, 8.0, False)),
        measure(6, "s3://lake/events", 24, max_small_files=None),  # unset, no value measured
        measure(7, "s3://lake/events", 36, state={"small_files_after": 2}, max_small_files=None),  # within 5: ends
        measure(8, "s3://lake/events", 48, max_small_files=(5.0, 9.0, False)),
        measure(9, "s3://lake/customers", 72, max_small_files=(50.0, 20.0, True)),
        # Schema version 1 rows (small_files_after only), then today's judgement against 3.
        *(
            measure(10 + i, "s3://lake/old", hour, state={"small_files_after": value, **v1})
            for i, (hour, value) in enumerate(((0, 2), (24, 3), (48, 5), (72, 6), (96, 6)))
        ),
        measure(15, "s3://lake/old", 120, state={**v1, "small_files_after": 6}, max_small_files=(3.0, 6.0, False)),
        # Unset a while (nothing measured): the breach goes on.
        measure(19, "s3://lake/paused", 100, max_small_files=(5.0, 8.0, False)),
        measure(20, "s3://lake/paused", 110, max_small_files=None),
        measure(21, "s3://lake/paused", 130, max_small_files=(5.0, 9.0, False)),
        # Over the target for days, then re-created under its URI (a new table id): breached since then only.
        measure(16, "s3://lake/again", 100, state={"table_id": "a-1", "small_files_after": 9}),
        measure(17, "s3://lake/again", 124, state={"table_id": "a-2", "small_files_after": 7}),
        measure(18, "s3://lake/again", 148, state={"table_id": "a-2"}, max_small_files=(5.0, 8.0, False)),
    ]
    by_day = rolled_up(rows, random.Random(1))
    summaries = {
        r["table_uri"]: r for r in table_summaries(merge_rollups([by_day], by=("table_uri", "operation"))).to_pylist()
    }
    assert summaries["s3://lake/orders"]["breached_since"] == T0 + dt.timedelta(hours=24)
    assert summaries["s3://lake/events"]["breached_since"] == T0 + dt.timedelta(hours=48)
    assert summaries["s3://lake/old"]["breached_since"] == T0 + dt.timedelta(hours=48)  # 5 > 3 two days in
    assert summaries["s3://lake/again"]["breached_since"] == T0 + dt.timedelta(hours=124)
    assert summaries["s3://lake/paused"]["breached_since"] == T0 + dt.timedelta(hours=100)
    truth = expected(rows)
    for uri in ("s3://lake/orders", "s3://lake/events", "s3://lake/old", "s3://lake/again", "s3://lake/paused"):
        assert truth[(uri, "max_small_files")] == (False, summaries[uri]["breached_since"]), uri
    assert summaries["s3://lake/customers"]["compliance"] == "met"
    (o,) = summaries["s3://lake/customers"]["objectives"]
    assert (o["target"], o["value"], o["met"], o["breached_since"]) == (50.0, 20.0, True, None)
    days = {r["run_date"]: r for r in day_figures(by_day).to_pylist()}
    first, second, third, fourth = (T0.date() + dt.timedelta(days=d) for d in range(4))
    assert (days[first]["tables_breached"], days[first]["tables_met"]) == (1, 1)  # events breached, orders met
    assert (days[second]["tables_breached"], days[second]["tables_met"]) == (1, 0)  # orders; events set nothing
    # Day three: events breached; orders' newest judgement of the day did not know its value: no breach, so met
    # (as ``deltalog objectives`` counts a table: met unless an objective is breached).
    assert (days[third]["tables_breached"], days[third]["tables_met"]) == (1, 1)
    assert (days[fourth]["tables_breached"], days[fourth]["tables_met"], days[fourth]["tables_at_risk"]) == (1, 1, 0)
    assert pc.sum(day_figures(by_day).column("finish_by_missed")).as_py() == 0


def test_fleet_runs_finishing_times_per_day_and_never_a_table():
    def fleet_run(i: int, hour: int, met: bool | None, uri: str) -> dict[str, Any]:
        row = measure(i, uri, hour, op="fleet_run")
        deadline = T0 + dt.timedelta(hours=hour + (1 if met else -1))
        row.update(finish_by="06:00 Europe/Berlin" if met is not None else None, finish_by_met=met)
        row.update(finish_by_deadline=deadline if met is not None else None)
        return row

    rows = [
        fleet_run(0, 5, True, "s3://lake/"),
        fleet_run(1, 29, False, ""),
        fleet_run(2, 30, False, "s3://lake/"),
        fleet_run(3, 53, None, "s3://lake/"),
        measure(4, "s3://lake/orders", 6, max_small_files=(5.0, 3.0, True)),
    ]
    by_day = rolled_up(rows, random.Random(2))
    days = day_figures(by_day).to_pylist()
    assert [(d["finish_by_kept"], d["finish_by_missed"]) for d in days] == [(1, 0), (0, 2), (0, 0)]
    missed = days[1]["missed"]
    assert missed["id"] == "r00002" and missed["finish_by"] == "06:00 Europe/Berlin" and missed["fleet"] == "s3://lake/"
    assert days[0]["duration_s"] == 1.0  # the measurement's; the fleet run's own row is not maintenance time
