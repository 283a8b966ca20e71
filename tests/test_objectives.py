"""Issue 34: service-level objectives per table, their breach time, work chosen by them (docs/objectives.md).

- Objectives are settings: the four layers decide them and say where each came from; bad
  values of every kind are refused in one line naming the entry, before any work.
- ``finish_by``: a time of day in a named zone; its deadline, across days and DST changes.
- ``breached_since`` (the rule of ``deltalog.journal.compliance``) on hand-made rows: a run
  broken by a met row or by an objective that was unset, unknown values neither breaking nor
  extending it, one table's rows never another's.
- Days since the last vacuum: the table's own ``VACUUM END`` (a FAILED one does not count),
  the history's vacuum row, a never-vacuumed table since its creation.
- The "Done means" scenario on the CLI: ``deltalog objectives --json`` reports both breaches
  with the right ``breached_since``, a relaxing per-table override named as the source, exit
  4; ``deltalog maintain`` fixes the breached tables first, and afterwards all are met.
- A time budget that cannot cover the breached tables says which stay breached; a missed
  ``finish_by`` is recorded in the history with the run's end.
- The history's schema version 2: a version 1 history is upgraded in place on the next
  append (deltalake reads the old rows with the new columns null); an older deltalog refuses it.
"""

from __future__ import annotations

import datetime as dt
import json
import os

import pyarrow as pa
import pytest

from deltalog.errors import InvalidArgumentError
from deltalog.maintenance.objectives import FinishBy, parse_finish_by
from deltalog.maintenance.policy import FleetPolicy
from helpers import append, make_table, rows
from objectives_helpers import breach_fleet

NOW = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC)


# --- objectives as settings ----------------------------------------------------------------------


def test_objectives_resolve_through_the_four_layers_each_named():
    policy = FleetPolicy.parse(
        {
            "defaults": {"max_small_files": 100, "max_dv_share": 0.1, "finish_by": "06:00 Europe/Berlin"},
            "prefixes": {"/lake/raw": {"max_small_files": 500, "max_versions_since_checkpoint": 40}},
            "tables": {"/lake/raw/events": {"max_small_files": 1000}},
        }
    )
    props = {"deltalog.objective.maxDaysSinceVacuum": "7", "deltalog.objective.maxVersionsSinceCheckpoint": "20"}
    events = {
        name: (target, source) for name, target, source in policy.resolve("/lake/raw/events", props).objective_targets()
    }
    assert events == {
        "max_small_files": (1000, "per-table override tables['/lake/raw/events']"),
        "max_versions_since_checkpoint": (
            20,
            "table property deltalog.objective.maxVersionsSinceCheckpoint = '20'",
        ),
        "max_days_since_vacuum": (7.0, "table property deltalog.objective.maxDaysSinceVacuum = '7'"),
        "max_dv_share": (0.1, "fleet defaults"),
    }
    other = {n: s for n, _, s in policy.resolve("/lake/raw/clicks").objective_targets()}
    assert other["max_small_files"] == "path rule prefixes['/lake/raw']"
    assert policy.resolve("/lake/sales/orders").objective_targets()[0] == ("max_small_files", 100, "fleet defaults")
    assert policy.finish_by == FinishBy(6, 0, "Europe/Berlin")
    assert FleetPolicy.parse({}).resolve("/x").objective_targets() == ()  # unset: not judged


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"defaults": {"max_small_files": -1}}, "max_small_files in defaults"),
        ({"defaults": {"max_small_files": 2.5}}, "max_small_files in defaults"),
        ({"defaults": {"max_small_files": "10"}}, "max_small_files in defaults"),
        ({"defaults": {"max_small_files": True}}, "max_small_files in defaults"),
        ({"prefixes": {"/l": {"max_versions_since_checkpoint": False}}}, "max_versions_since_checkpoint in prefixes"),
        ({"tables": {"t": {"max_days_since_vacuum": -0.5}}}, "max_days_since_vacuum in tables['t']"),
        ({"tables": {"t": {"max_days_since_vacuum": "7d"}}}, "max_days_since_vacuum in tables['t']"),
        ({"tables": {"t": {"max_days_since_vacuum": float("inf")}}}, "max_days_since_vacuum in tables['t']"),
        ({"defaults": {"max_dv_share": 1.5}}, "max_dv_share in defaults"),
        ({"defaults": {"max_dv_share": -0.1}}, "max_dv_share in defaults"),
        ({"defaults": {"max_dv_share": float("nan")}}, "max_dv_share in defaults"),
        ({"defaults": {"finish_by": "25:00 UTC"}}, "finish_by in defaults"),
        ({"defaults": {"finish_by": "06:60 UTC"}}, "finish_by in defaults"),
        ({"defaults": {"finish_by": "06:00 Mars/Olympus_Mons"}}, "finish_by in defaults"),
        ({"defaults": {"finish_by": "06:00"}}, "finish_by in defaults"),
        ({"defaults": {"finish_by": 6}}, "finish_by in defaults"),
        ({"defaults": {"finish_by": "06:00 ../../etc/passwd"}}, "finish_by in defaults"),
        ({"tables": {"t": {"finish_by": "06:00 UTC"}}}, "finish_by in tables['t']"),
        ({"defaults": {"max_smal_files": 3}}, "defaults: unknown setting(s) 'max_smal_files'"),
        ({"tables": {"t": {"max_small_files_per_day": 3}}}, "tables['t']: unknown setting(s)"),
    ],
)
def test_bad_objectives_are_refused_in_one_line_naming_the_entry(settings, named):
    with pytest.raises(InvalidArgumentError) as err:
        FleetPolicy.parse(settings)
    assert named in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("props", "named"),
    [
        (
            {"deltalog.objective.maxSmallFile": "3"},
            "unknown objective in table property 'deltalog.objective.maxSmallFile'",
        ),
        ({"deltalog.objective.maxSmallFiles": "ten"}, "deltalog.objective.maxSmallFiles must be an integer"),
        ({"deltalog.objective.maxSmallFiles": "-3"}, "deltalog.objective.maxSmallFiles must be a non-negative"),
        ({"deltalog.objective.maxDvShare": "2"}, "deltalog.objective.maxDvShare must be a share"),
        ({"deltalog.objective.maxDaysSinceVacuum": "a week"}, "deltalog.objective.maxDaysSinceVacuum must be a number"),
    ],
)
def test_bad_objective_properties_are_refused_naming_the_property(props, named):
    with pytest.raises(InvalidArgumentError, match=named.replace(".", r"\.").replace("(", r"\(")):
        FleetPolicy().resolve("/lake/t", props)


def test_cli_refuses_bad_objectives_before_any_work(tmp_path, capsys):
    from deltalog.cli import main

    table = make_table(str(tmp_path / "t"))
    append(table, rows(2), run_hooks=False)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"defaults": {"max_dv_share": 2}}))
    history = tmp_path / "history"
    for command in (["objectives"], ["maintain"], ["policy"]):
        extra = ["--history", str(history)] if command != ["policy"] else []
        assert main([*command, str(tmp_path / "t"), "--settings", str(bad), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "max_dv_share in defaults must be a share" in err
    assert not history.exists() and table.snapshot().version == 1  # nothing written


# --- finish_by -------------------------------------------------------------------------------------


def test_finish_by_deadline_is_the_next_such_time_in_its_zone():
    berlin = parse_finish_by("06:00 Europe/Berlin")
    assert berlin.deadline_after(dt.datetime(2026, 11, 20, 1, 0, tzinfo=dt.UTC)) == dt.datetime(
        2026, 11, 20, 5, 0, tzinfo=dt.UTC
    )  # CET = UTC+1
    assert berlin.deadline_after(dt.datetime(2026, 7, 20, 1, 0, tzinfo=dt.UTC)) == dt.datetime(
        2026, 7, 20, 4, 0, tzinfo=dt.UTC
    )  # CEST = UTC+2
    # A run starting after 06:00 Berlin is measured against the next day's.
    assert berlin.deadline_after(dt.datetime(2026, 11, 20, 5, 30, tzinfo=dt.UTC)) == dt.datetime(
        2026, 11, 21, 5, 0, tzinfo=dt.UTC
    )
    # 02:30 does not exist on 2026-03-29 in Berlin (clocks go 02:00 -> 03:00): the moment after the gap.
    gap = parse_finish_by("02:30 Europe/Berlin").deadline_after(dt.datetime(2026, 3, 28, 23, 0, tzinfo=dt.UTC))
    assert gap == dt.datetime(2026, 3, 29, 1, 30, tzinfo=dt.UTC)
    assert parse_finish_by(" 6:05   UTC ").text == "06:05 UTC"
    assert berlin.missed(dt.datetime(2026, 11, 20, 1, tzinfo=dt.UTC), dt.datetime(2026, 11, 20, 5, 1, tzinfo=dt.UTC))


# --- breached_since --------------------------------------------------------------------------------


def _rows(spec: list[tuple[str, int, float | None, float | None]], **columns: list) -> pa.Table:
    """(table, hours before NOW, value, target then) -> measure rows with the columns breached_since reads."""
    return pa.table(
        {
            "table_uri": [t for t, *_ in spec],
            "started_at": pa.array([NOW - dt.timedelta(hours=h) for _, h, _, _ in spec], pa.timestamp("us", tz="UTC")),
            "operation": ["measure"] * len(spec),
            "status": ["done"] * len(spec),
            "objective_max_small_files_value": pa.array([v for *_, v, _ in spec], pa.int64()),
            "objective_max_small_files_target": pa.array([t for *_, t in spec], pa.int64()),
            **columns,
        }
    )


def _since(table: pa.Table, **kw) -> dict[str, tuple[bool | None, dt.datetime | None]]:
    from deltalog.journal import breached_since

    out = breached_since(table, **kw)
    assert out.schema.names == ["table_uri", "objective", "met", "breached_since", "measured_at"]
    return {r["table_uri"]: (r["met"], r["breached_since"]) for r in out.to_pylist()}


def test_breached_since_is_the_start_of_the_unbroken_breach_against_todays_target():
    hours = dt.timedelta(hours=1)
    got = _since(
        _rows(
            [
                # a: over, within, then over 5 for the last three measurements (one unknown among them)
                ("a", 50, 8, 5),
                ("a", 40, 3, 5),
                ("a", 30, 9, 5),
                ("a", 20, None, 5),
                ("a", 10, 10, 5),
                # b: within at the newest measurement
                ("b", 30, 9, 5),
                ("b", 10, 2, 5),
                # c: judged met against 10 then, today's target is 5: breached since the first value over 5
                ("c", 40, 4, 10),
                ("c", 30, 6, 10),
                ("c", 10, 7, 5),
                # c2: the objective unset between two measurements over it: the values say it never stopped
                ("c2", 30, 8, 5),
                ("c2", 20, 9, None),
                ("c2", 10, 8, 5),
                # d: breached since the oldest row given; e: never known; f: a newest unknown row keeps the breach
                ("d", 30, 8, 5),
                ("d", 10, 8, 5),
                ("e", 10, None, 5),
                ("f", 30, 8, 5),
                ("f", 5, None, 5),
                # g: a target raised today to 8: the last value over it begins the breach
                ("g", 30, 7, 5),
                ("g", 10, 9, 8),
            ]
        )
    )
    assert got["a"] == (False, NOW - 30 * hours)
    assert got["b"] == (True, None)
    assert got["c"] == (False, NOW - 30 * hours)
    assert got["c2"] == (False, NOW - 30 * hours)
    assert got["d"] == (False, NOW - 30 * hours)
    assert got["e"] == (None, None)
    assert got["f"] == (False, NOW - 30 * hours)
    assert got["g"] == (False, NOW - 10 * hours)


def test_breached_since_reads_rows_written_before_objectives_and_a_re_created_table():
    """Schema version 1 rows carry the value in ``small_files_after`` only: judged against the target given
    (no row holds one). A row of another table id ends a breach: the table was re-created under its URI."""
    spec = [("v1", 72, None, None), ("v1", 48, None, None), ("v1", 24, None, None), ("v1", 1, None, None)]
    spec += [("re", 48, None, None), ("re", 24, None, None), ("re", 1, None, None)]
    table = _rows(
        spec,
        small_files_after=pa.array([2, 6, 7, 9, 8, 7, 9], pa.int64()),
        table_id=pa.array(["x", "x", None, "x", "old", "new", "new"]),
    )
    assert _since(table) == {}  # no target is known: nothing judged
    got = _since(table, targets={"max_small_files": 5})
    assert got["v1"] == (False, NOW - dt.timedelta(hours=48))
    assert got["re"] == (False, NOW - dt.timedelta(hours=24))  # not 48: that was the table before
    assert _since(table, targets={"max_small_files": 10})["v1"] == (True, None)
    with pytest.raises(InvalidArgumentError, match="unknown objective 'max_small_file'"):
        _since(table, targets={"max_small_file": 5})
    # Days since the last vacuum in a version 1 history: from its vacuum rows (of this table id, done or
    # nothing_due) before the newest measurement, plus the target.
    vacuums = pa.table(
        {
            "table_uri": ["v1", "v1", "v1"],
            "started_at": pa.array([NOW - dt.timedelta(days=d) for d in (10, 2, 20)], pa.timestamp("us", tz="UTC")),
            "ended_at": pa.array([NOW - dt.timedelta(days=d) for d in (10, 2, 20)], pa.timestamp("us", tz="UTC")),
            "operation": ["vacuum"] * 3,
            "status": ["nothing_due", "failed", "done"],
            "table_id": ["x", "x", "x"],
        }
    )
    got = _since(pa.concat_tables([table, vacuums], promote_options="default"), targets={"max_days_since_vacuum": 7})
    assert got["v1"] == (False, NOW - dt.timedelta(days=3))  # the vacuum ten days ago, plus seven


def test_breached_since_skips_failed_measurements_and_other_operations_and_keeps_order_free():
    rows_ = _rows([("a", 30, 8, 5), ("a", 20, 2, 5), ("a", 10, 8, 5)])
    status = pa.array(["done", "failed", "done"])
    rows_ = rows_.set_column(rows_.schema.get_field_index("status"), "status", status)
    shuffled = rows_.take([2, 0, 1])
    assert _since(shuffled)["a"] == (False, NOW - dt.timedelta(hours=30))  # the failed measurement does not break it


def test_breached_since_is_the_same_moment_whatever_the_time_zones():
    """Rows written by another engine with another zone's timestamps, and a ``now`` in another zone: the same
    instants, the answer in UTC."""
    rows_ = _rows([("a", 30, 8, 5), ("a", 10, 9, 5)])
    local = rows_.column("started_at").cast(pa.timestamp("us", tz="+01:00"))
    got = _since(rows_.set_column(rows_.schema.get_field_index("started_at"), "started_at", local))
    assert got["a"] == (False, NOW - dt.timedelta(hours=30))
    assert got["a"][1].utcoffset() == dt.timedelta(0)


# --- the last vacuum ---------------------------------------------------------------------------------


def _commit_info_only(table, operation: str, parameters: dict) -> None:
    from deltalog.commit.transaction import Transaction

    txn = Transaction(table.storage, table.snapshot(), operation=operation, operation_parameters=parameters)
    txn.commit()


def test_days_since_vacuum_from_the_log_the_history_or_the_creation(tmp_path):
    from deltalog import fleet_health
    from deltalog.journal.compliance import ComplianceHistory

    path = str(tmp_path / "t")
    table = make_table(path, configuration={"deltalog.objective.maxDaysSinceVacuum": "7"})
    append(table, rows(2), run_hooks=False)
    _commit_info_only(table, "VACUUM END", {"status": "COMPLETED"})
    _commit_info_only(table, "VACUUM END", {"status": "FAILED"})  # a failed vacuum is not one
    log_dir = os.path.join(path, "_delta_log")
    for v, days in ((0, 20), (1, 20), (2, 9), (3, 1)):
        stamp = (dt.datetime.now(dt.UTC) - dt.timedelta(days=days)).timestamp()
        os.utime(os.path.join(log_dir, f"{v:020d}.json"), (stamp, stamp))

    def days(history=None) -> float:
        (report,) = fleet_health([path], history=history)
        (state,) = report.objectives
        assert state.name == "max_days_since_vacuum"
        return state.value

    assert days() == pytest.approx(9, abs=0.01)  # the COMPLETED one, nine days ago
    (report,) = fleet_health([path])  # breached since seven days after it, by definition: no history needed
    (state,) = report.objectives
    vacuumed = dt.datetime.fromtimestamp(os.stat(os.path.join(log_dir, f"{2:020d}.json")).st_mtime, dt.UTC)
    assert state.breached and abs(state.breached_since - (vacuumed + dt.timedelta(days=7))) < dt.timedelta(seconds=1)
    vacuumed = dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
    view = {table.uri: ComplianceHistory(table.uri, last_vacuum=vacuumed)}
    assert days(view) == pytest.approx(3, abs=0.01)  # the history's vacuum row is newer

    never = make_table(str(tmp_path / "never"), configuration={"deltalog.objective.maxDaysSinceVacuum": "7"})
    append(never, rows(2), run_hooks=False)
    stamp = (dt.datetime.now(dt.UTC) - dt.timedelta(days=12)).timestamp()
    for name in os.listdir(os.path.join(str(tmp_path / "never"), "_delta_log")):
        os.utime(os.path.join(str(tmp_path / "never"), "_delta_log", name), (stamp, stamp))
    (report,) = fleet_health([never.uri])
    (state,) = report.objectives
    assert state.met is False and state.value == pytest.approx(12, abs=0.01)
    assert state.note == "never vacuumed: since the table's creation"
    created = dt.datetime.fromtimestamp(stamp, dt.UTC)
    assert abs(state.breached_since - (created + dt.timedelta(days=7))) < dt.timedelta(seconds=1)  # five days ago


# --- the "Done means" scenario on the CLI ------------------------------------------------------------


def test_done_means_objectives_report_exit_status_and_maintain_fixes_breached_tables_first(tmp_path, capsys):
    from deltalog.cli import main

    lake = breach_fleet(str(tmp_path / "lake"))
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(lake.settings))
    base = ["--root", lake.root, "--settings", str(settings), "--history", lake.history]
    assert main(["objectives", *base, "--json"]) == 4  # an objective is breached
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert set(doc) == {"tables"}
    tables = {os.path.basename(t["table_uri"]): t for t in doc["tables"]}
    assert set(tables) == {"orders", "events", "customers"}
    for t in doc["tables"]:
        assert set(t) == {"table_uri", "met", "objectives"}
        for o in t["objectives"]:
            assert set(o) == {"name", "target", "value", "met", "breached_since", "source"}
    (orders,) = tables["orders"]["objectives"]
    assert (orders["name"], orders["target"], orders["value"], orders["met"]) == ("max_small_files", 5, 12, False)
    assert dt.datetime.fromisoformat(orders["breached_since"]) == lake.orders_since
    assert orders["source"] == "fleet defaults" and tables["orders"]["met"] is False
    events = {o["name"]: o for o in tables["events"]["objectives"]}["max_days_since_vacuum"]
    assert events["met"] is False and events["value"] == pytest.approx(10, abs=0.01) and events["target"] == 7
    # Seven days after the last vacuum (the log's, a few seconds after the history's row), by definition.
    assert abs(dt.datetime.fromisoformat(events["breached_since"]) - lake.events_since) < dt.timedelta(seconds=30)
    assert events["source"] == "table property deltalog.objective.maxDaysSinceVacuum = '7'"
    (customers,) = tables["customers"]["objectives"]
    assert customers["met"] is True and customers["target"] == 50 and customers["value"] == 20
    assert customers["source"] == "per-table override tables['customers']" and customers["breached_since"] is None
    assert err.count("\n") == 1 and "2 table(s) breach an objective" in err

    results = tmp_path / "results.json"
    assert main(["maintain", *base, "--results", str(results)]) == 0
    run = json.loads(results.read_text())
    order = [os.path.basename(p["uri"]) for p in run["planned"]]
    assert set(order[:2]) == {"orders", "events"} and order.index("customers") == 2  # breached first
    planned = {os.path.basename(p["uri"]): p for p in run["planned"]}
    assert planned["customers"]["gain_per_second"] > planned["orders"]["gain_per_second"]  # gain alone: customers
    assert planned["events"]["objective_work"]["vacuum"].startswith("objective max_days_since_vacuum")
    ran = {os.path.basename(t["uri"]): t for t in run["tables"]}
    assert ran["orders"]["ran"][0] == "compaction: 1 bins" and ran["events"]["ran"] == ["vacuum: 0 files"]
    assert ran["orders"]["first_because"].startswith("breached max_small_files: 12 > 5")
    assert all(not t["stays_breached"] for t in run["tables"])
    human = capsys.readouterr().out
    assert "first: orders: breached max_small_files" in human and "first: events: breached" in human

    from deltalog.journal import read_history

    history = read_history(lake.history).to_pylist()
    vacuum_row = next(r for r in history if r["operation"] == "vacuum" and r["run_id"] != "seeded-history")
    assert "objective max_days_since_vacuum" in vacuum_row["reason"]
    measured = [r for r in history if r["operation"] == "measure" and r["run_id"] != "seeded-history"]
    orders_row = next(r for r in measured if r["table_uri"].endswith("/orders"))
    assert orders_row["objectives_breached"] == ["max_small_files"] and orders_row["objectives_met"] is False
    assert (orders_row["objective_max_small_files_value"], orders_row["objective_max_small_files_target"]) == (12, 5)
    assert orders_row["objective_max_small_files_source"] == "fleet defaults"
    assert "objectives: breached max_small_files" in orders_row["reason"]

    assert main(["objectives", *base]) == 0
    assert "3 tables, 3 met" in capsys.readouterr().out

    # An unreadable table is not met: exit 2 (the check did not work), the others still reported.
    with open(os.path.join(lake.orders, "_delta_log", f"{0:020d}.json"), "w") as fh:
        fh.write("{not json")
    assert main(["objectives", *base, "--json"]) == 2
    out, err = capsys.readouterr()
    unreadable = [t for t in json.loads(out)["tables"] if t.get("error")]
    assert [os.path.basename(t["table_uri"]) for t in unreadable] == ["orders"] and unreadable[0]["met"] is False
    assert err.count("\n") == 1 and "1 table(s) could not be judged" in err


def test_done_means_on_a_history_of_schema_version_1(tmp_path, capsys):
    """Issue 41: the history a team already has, written before objectives existed (schema version 1: measure
    rows with ``small_files_after``, vacuum rows, no ``objective_*`` columns): ``orders`` over its small-file
    target for three days, ``events`` last vacuumed ten days ago against seven. ``deltalog objectives --json``
    says since when: 72 hours and 3 days ago."""
    from deltalog.cli import main
    from deltalog.journal import SCHEMA_VERSION_PROPERTY
    from deltalog.log import snapshot_at
    from deltalog.storage import Storage

    now = dt.datetime.now(dt.UTC)
    lake = breach_fleet(str(tmp_path / "lake"), now=now, schema_version=1)
    history = snapshot_at(Storage(lake.history))
    assert history.metadata.configuration[SCHEMA_VERSION_PROPERTY] == "1"
    assert not [f for f in history.metadata.schema_string.split('"name":"')[1:] if f.startswith("objective")]
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(lake.settings))
    base = ["--root", lake.root, "--settings", str(settings), "--history", lake.history]
    assert main(["objectives", *base, "--json"]) == 4
    tables = {os.path.basename(t["table_uri"]): t for t in json.loads(capsys.readouterr().out)["tables"]}
    (orders,) = tables["orders"]["objectives"]
    assert (orders["value"], orders["met"]) == (12, False)
    since = dt.datetime.fromisoformat(orders["breached_since"])
    assert since == lake.orders_since and now - since == dt.timedelta(hours=72)
    events = {o["name"]: o for o in tables["events"]["objectives"]}["max_days_since_vacuum"]
    assert events["met"] is False and events["value"] == pytest.approx(10, abs=0.01)
    since = dt.datetime.fromisoformat(events["breached_since"])
    assert abs(since - lake.events_since) < dt.timedelta(seconds=5)  # the history's vacuum row: ten days ago
    assert abs(now - since - dt.timedelta(days=3)) < dt.timedelta(seconds=5)
    assert tables["customers"]["met"] is True

    # The core says the same, with a ``now`` in another zone, and a history row judged against the objectives.
    from deltalog import check_objectives

    berlin = now.astimezone(dt.timezone(dt.timedelta(hours=1)))
    judged = {
        os.path.basename(t.table_uri): {o.name: o for o in t.objectives}
        for t in check_objectives([lake.orders, lake.events], settings=lake.settings, history=lake.history, now=berlin)
    }
    assert judged["orders"]["max_small_files"].breached_since == lake.orders_since
    assert abs(judged["events"]["max_days_since_vacuum"].breached_since - lake.events_since) < dt.timedelta(seconds=1)


def test_a_table_re_created_under_its_uri_has_no_breach_from_before(tmp_path):
    """The history measured a table over its target for days, then the table was dropped and created again at
    the same URI: the new table's breach is not the old one's, and the old one's vacuum is no vacuum of it."""
    import shutil

    from deltalog import check_objectives

    now = dt.datetime.now(dt.UTC)
    lake = breach_fleet(str(tmp_path / "lake"), now=now, schema_version=1)
    for name in ("orders", "events"):
        shutil.rmtree(getattr(lake, name))
    table = make_table(lake.orders)
    for i in range(12):
        append(table, rows(3, start=i * 3), run_hooks=False)
    append(make_table(lake.events, configuration={"deltalog.objective.maxDaysSinceVacuum": "7"}), rows(2))
    judged = {
        os.path.basename(t.table_uri): {o.name: o for o in t.objectives}
        for t in check_objectives([lake.orders, lake.events], settings=lake.settings, history=lake.history, now=now)
    }
    orders = judged["orders"]["max_small_files"]
    assert orders.met is False and orders.breached_since is None  # breached since after the last measurement
    vacuum = judged["events"]["max_days_since_vacuum"]
    assert vacuum.met is True and vacuum.value == pytest.approx(0, abs=0.01)  # created now, not vacuumed 10 days ago


def test_a_budget_that_cannot_cover_the_breaches_says_which_stay_breached(tmp_path):
    from deltalog import FleetPolicy, HistoryRecorder, fleet_health, run_fleet
    from deltalog.fleet.report import format_summary

    lake = breach_fleet(str(tmp_path / "lake"))
    tables = [lake.orders, lake.events, lake.customers]
    reports = fleet_health(tables, settings=lake.settings)
    result = run_fleet(
        tables, settings=lake.settings, reports=reports, time_budget_seconds=1e-6, history=HistoryRecorder(lake.history)
    )
    assert {os.path.basename(s["uri"]): s["objectives"] for s in result.stays_breached} == {
        "orders": ["max_small_files"],
        "events": ["max_days_since_vacuum"],
    }
    text = format_summary(result.to_dict())
    assert "stays breached: orders: max_small_files" in text and "stays breached: events" in text
    assert "2 stay breached" in result.summary_line()
    assert FleetPolicy.parse(lake.settings).finish_by is None


def test_a_missed_finish_by_is_recorded_with_the_run_end(tmp_path):
    from deltalog import HistoryRecorder, read_history, run_fleet

    table = make_table(str(tmp_path / "lake" / "t"))
    append(table, rows(2), run_hooks=False)
    now = dt.datetime.now(dt.UTC)
    # The minute that already began: a run starting after it is measured against the same time tomorrow.
    passed = now.replace(second=0, microsecond=0)
    finish = f"{passed:%H:%M} UTC"
    history = str(tmp_path / "history")
    result = run_fleet([table.uri], settings={"defaults": {"finish_by": finish}}, history=HistoryRecorder(history))
    assert result.finish_by is not None and result.finish_by["objective"] == finish and result.finish_by["met"]
    assert dt.datetime.fromisoformat(result.finish_by["deadline"]) - passed == dt.timedelta(days=1)
    row = next(r for r in read_history(history).to_pylist() if r["operation"] == "fleet_run")
    assert row["finish_by"] == finish and row["finish_by_met"] == result.finish_by["met"]
    assert row["finish_by_deadline"] == dt.datetime.fromisoformat(result.finish_by["deadline"])
    assert row["ended_at"] == dt.datetime.fromisoformat(result.finish_by["ended_at"])

    from deltalog import finish_by_row

    late = finish_by_row(
        HistoryRecorder(history), parse_finish_by("06:00 Europe/Berlin"), "fleet", NOW, NOW + dt.timedelta(days=1)
    )
    assert late.finish_by_met is False and "missed finish_by 06:00 Europe/Berlin" in (late.reason or "")
    assert late.finish_by_deadline == dt.datetime(2026, 11, 21, 5, 0, tzinfo=dt.UTC)


def test_a_trend_predicts_a_breach_before_the_next_run(tmp_path):
    from deltalog import ComplianceHistory, ObjectiveState

    series = {
        "max_small_files": tuple(
            (NOW - dt.timedelta(days=d), float(value), True, True) for d, value in ((4, 10), (2, 30))
        )
    }
    view = ComplianceHistory("t", series, next_run_hours=24)
    state = ObjectiveState("max_small_files", 100, 50, True, "fleet defaults")
    (annotated,) = view.annotate([state], NOW)  # 40 files in 4 days: 10 a day, 60 tomorrow
    assert not annotated.at_risk and annotated.predicted == pytest.approx(60)
    (risky,) = view.annotate([ObjectiveState("max_small_files", 55, 50, True, "d")], NOW)
    assert risky.at_risk
    (vac,) = view.annotate([ObjectiveState("max_days_since_vacuum", 7, 6.5, True, "d")], NOW)
    assert vac.at_risk and vac.predicted == pytest.approx(7.5)  # a day older tomorrow, whatever the history


# --- the history's schema version 2 ------------------------------------------------------------------


def test_a_version_1_history_is_upgraded_in_place_and_an_older_deltalog_refuses_it(tmp_path, monkeypatch):
    import deltalake

    import deltalog.journal.write as write
    from deltalog.create import create_table
    from deltalog.errors import OperationRefusedError
    from deltalog.journal import OperationSpan, RunContext, append_rows, make_row, read_history
    from deltalog.journal.schema import (
        PARTITION_COLUMN,
        SCHEMA_VERSION,
        SCHEMA_VERSION_PROPERTY,
        TABLE_PROPERTIES,
        schema_of_version,
    )

    uri = str(tmp_path / "history")
    v1 = schema_of_version(1)
    create_table(
        uri, v1, partition_by=[PARTITION_COLUMN], configuration={**TABLE_PROPERTIES, SCHEMA_VERSION_PROPERTY: "1"}
    )
    span = OperationSpan(RunContext(), "file:///lake/t", "measure", NOW, NOW)
    old = pa.Table.from_pylist([{**make_row(span, "done").to_dict()}]).select(v1.names)
    old = old.set_column(old.schema.get_field_index("run_date"), "run_date", pa.array([NOW.date()], pa.date32()))
    for name in ("started_at", "ended_at"):
        old = old.set_column(old.schema.get_field_index(name), name, pa.array([NOW], pa.timestamp("us", tz="UTC")))
    deltalake.write_deltalake(uri, old.cast(v1), mode="append")  # a row as version 1 wrote it (another writer)

    row = make_row(span, "done", objectives_met=False, objectives_breached=["max_small_files"])
    append_rows(uri, [row])
    table = deltalake.DeltaTable(uri)
    assert table.metadata().configuration[SCHEMA_VERSION_PROPERTY] == str(SCHEMA_VERSION)
    assert table.history(1)[0]["operation"] == "WRITE" and table.history(2)[1]["operation"] == "ADD COLUMNS"
    data = table.to_pyarrow_table()
    assert "objective_max_small_files_target" in data.schema.names
    by_met = sorted(data.column("objectives_met").to_pylist(), key=lambda v: (v is not None, v))
    assert by_met == [None, False]  # the old row reads null, the new one its value
    ours = read_history(uri)
    assert ours.num_rows == 2 and sorted(map(str, ours.column("objectives_breached").to_pylist())) == [
        "None",
        "['max_small_files']",
    ]
    append_rows(uri, [row])  # no second upgrade
    assert deltalake.DeltaTable(uri).history(1)[0]["operation"] == "WRITE"

    monkeypatch.setattr(write, "SCHEMA_VERSION", 1)  # what a deltalog of schema version 1 does
    with pytest.raises(OperationRefusedError, match=f"schema version {SCHEMA_VERSION}, newer than this deltalog.s 1"):
        append_rows(uri, [row])
