"""The fleet view shows service-level objectives as ``deltalog objectives`` judges them (issues 34 and 35).

The history is the issue's "Done means" fleet (``tests/objectives_helpers.py``): ``orders`` over its
small-file objective for three days, ``events`` unvacuumed for ten days against seven (its table
property), ``customers`` met through a per-table override that relaxes the fleet's target; each
table then measured now as a fleet run measures it, and the fleet's own ``fleet_run`` rows (one met
``finish_by``, one missed). Checked through the app (``fleet_view_client.py``), against ``deltalog
objectives --json`` on the same history: each table's compliance (breached since when, met), each
objective's target, value, state, source; the filter and the tiles (the breached tables two clicks
away); the order by compliance; compliance per day (tables counted, not rows); a table's objectives
over time; the missed finishing time; ``fleet_run`` rows never listed as tables; JSON and HTML
saying the same; rollups made before this change are not reused (rebuilt, nothing fails). The
view's judgement against the command's and its column run on every release; the rest (the same app,
no Airflow beyond it) on the lock only.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pytest
from fleet_view_client import Page, assert_no_markup_from_values, client

from deltalog.journal import HISTORY_SCHEMA, HistoryRecorder, RunContext
from deltalog.storage.filesystem import canonical_uri
from objectives_helpers import DAY, BreachFleet, breach_fleet, measure_now
from synthetic_history import append_as_another_writer

# Our HTML and JSON over history rows, through a test client, with Airflow's auth replaced by a stand-in: no
# Airflow code runs, so the lock's release only; test_fleet_view_plugin.py serves the pages on every release.
pytestmark = [pytest.mark.lock_only]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> BreachFleet:
    from deltalog import finish_by_row, parse_finish_by

    lake = breach_fleet(str(tmp_path_factory.mktemp("slo") / "lake"))
    measure_now(lake)
    # The fleet's own rows: a run two days ago met 06:00 UTC, yesterday's missed it by half an hour.
    recorder = HistoryRecorder(lake.history, context=RunContext(run_id="nightly"), measure=False)
    finish = parse_finish_by("06:00 UTC")
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with recorder.batch():
        for days, fleet, start, end in ((2, lake.root, (5, 0), (5, 40)), (1, "deltalog_fleet", (5, 30), (6, 30))):
            day = today - days * DAY
            started, ended = (day + dt.timedelta(hours=h, minutes=m) for h, m in (start, end))
            recorder.record([finish_by_row(recorder, finish, fleet, started, ended)])
    # Another writer's fleet run row naming no table at all.
    fields = [pa.field(f.name, f.type) for f in HISTORY_SCHEMA if f.name != "run_date"]
    now = dt.datetime.now(dt.UTC)
    row = {f.name: None for f in fields} | {"run_id": "other", "row_id": "fr-empty", "table_uri": "", "status": "done"}
    row |= {"operation": "fleet_run", "started_at": now, "ended_at": now, "finish_by_met": True}
    append_as_another_writer(
        lake.history,
        pa.table({f.name: pa.array([row[f.name]], f.type) for f in fields}, schema=pa.schema(fields)),
        now.date(),
    )
    return lake


@pytest.fixture(scope="module")
def c(lake: BreachFleet) -> Iterator[Any]:
    """One app for the module's reads (as one API server serves many viewers)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield client(monkeypatch, lake.history)


def _uris(lake: BreachFleet) -> dict[str, str]:
    return {name: canonical_uri(getattr(lake, name)) for name in ("orders", "events", "customers")}


def _cli(lake: BreachFleet, tmp_path: Any, capsys: Any) -> dict[str, dict[str, Any]]:
    """``deltalog objectives --json`` as a user runs it: its own process, its stdout (in this process,
    Airflow 3.0's logging writes to stdout too)."""
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(lake.settings))
    args = ["objectives", "--root", lake.root, "--settings", str(settings), "--history", lake.history, "--json"]
    deltalog = os.path.join(os.path.dirname(sys.executable), "deltalog")
    proc = subprocess.run([deltalog, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    return {t["table_uri"]: t for t in out["tables"]}


def _when(value: str | None) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


#: How far the view's and the command's starts of a vacuum breach may lie apart: the view counts from the
#: measurement's time less its days (rounded to four decimals: 9 s), the command from the vacuum itself.
VACUUM_SLACK = dt.timedelta(seconds=30)


def _close(got: dt.datetime | None, want: dt.datetime | None, slack: dt.timedelta) -> bool:
    return got == want if got is None or want is None else abs(got - want) <= slack


def _agrees(lake: BreachFleet, c: Any, tmp_path: Any, capsys: Any) -> dict[str, dict[str, Any]]:
    """``/api/fleet``'s compliance of each table against ``deltalog objectives --json`` on the same history:
    the view's per table (by URI)."""
    cli = _cli(lake, tmp_path, capsys)
    body = c.get("/api/fleet").json()
    view = {t["table_uri"]: t["compliance"] for t in body["tables"]}
    assert set(cli) == set(_uris(lake).values()) and set(cli) <= set(view)
    for uri, judged in cli.items():
        mine = view[uri]
        assert (mine["state"] == "breached") == (judged["met"] is False), uri
        assert [o["name"] for o in mine["objectives"]] == [o["name"] for o in judged["objectives"]]
        for o, expected in zip(mine["objectives"], judged["objectives"], strict=True):
            assert (o["target"], o["met"], o["source"]) == (expected["target"], expected["met"], expected["source"])
            slack = VACUUM_SLACK if o["name"] == "max_days_since_vacuum" else dt.timedelta(0)
            assert _close(_when(o["breached_since"]), _when(expected["breached_since"]), slack), (uri, o, expected)
            # The view shows the newest measurement's value; the command measures again, a moment later.
            assert o["value"] == pytest.approx(expected["value"], abs=0.01)
    assert body["totals"]["tables_breached"] == 2 and body["totals"]["tables_met"] == 1
    return view


def test_the_view_judges_as_deltalog_objectives_does(lake, c, tmp_path, capsys):
    view = _agrees(lake, c, tmp_path, capsys)
    uris = _uris(lake)
    orders, events, customers = (view[uris[n]] for n in ("orders", "events", "customers"))
    assert _when(orders["breached_since"]) == lake.orders_since
    assert _close(_when(events["breached_since"]), lake.events_since, VACUUM_SLACK)  # 7 days after the vacuum
    (relaxed,) = customers["objectives"]
    assert customers["state"] == "met" and (relaxed["target"], relaxed["value"]) == (50, 20)
    assert relaxed["source"] == "per-table override tables['customers']" and relaxed["breached_since"] is None
    assert isinstance(orders["objectives"][0]["target"], int)  # a count is an integer, as the command says


def test_the_view_judges_a_history_of_schema_version_1_as_deltalog_objectives_does(
    monkeypatch, tmp_path_factory, tmp_path, capsys
):
    """Issue 41: a history written before objectives existed (its measure rows carry ``small_files_after``, its
    vacuum rows the last vacuum), then one fleet run's measurements: the view's breach starts are the
    command's, 72 hours and 3 days ago, in ``/api/fleet``, ``/api/table`` and the page. (The view's code is
    the core's and the app's, the same on every release: on the lock only.)"""
    old = breach_fleet(str(tmp_path_factory.mktemp("slo-v1") / "lake"), schema_version=1)
    measure_now(old)  # a fleet run of today's deltalog: the history upgraded in place, today's targets judged
    app = client(monkeypatch, old.history)
    view = _agrees(old, app, tmp_path, capsys)
    uris = _uris(old)
    now = dt.datetime.now(dt.UTC)
    orders, events = view[uris["orders"]], view[uris["events"]]
    assert _when(orders["breached_since"]) == old.orders_since
    assert abs(now - _when(orders["breached_since"]) - dt.timedelta(hours=72)) < dt.timedelta(minutes=5)
    assert _close(_when(events["breached_since"]), old.events_since, VACUUM_SLACK)
    assert abs(now - _when(events["breached_since"]) - dt.timedelta(days=3)) < dt.timedelta(minutes=5)
    table = app.get(f"/api/table?uri={quote(uris['orders'], safe='')}").json()["table"]["compliance"]
    assert _when(table["breached_since"]) == old.orders_since and table["state"] == "breached"
    cells = {uri: cells[2] for uri, cells in Page(app.get("/").text).rows}
    assert cells[uris["orders"]].startswith(f"breached since {old.orders_since:%Y-%m-%d %H:%M} UTC")


def test_the_compliance_column_says_breached_since_or_met(lake, c):
    page = Page(c.get("/").text)
    uris = _uris(lake)
    headers = [a.get("data-column") for tag, a in page.tags if tag == "th" and a.get("data-column")]
    assert headers[:4] == ["table", "status", "compliance", "due"]
    cells = {uri: cells[2] for uri, cells in page.rows}
    since = lake.orders_since.strftime("%Y-%m-%d %H:%M UTC")
    assert cells[uris["orders"]] == f"breached since {since} max_small_files 12 > 5"
    events = next(t for t in c.get("/api/fleet").json()["tables"] if t["table_uri"] == uris["events"])
    since_events = _when(events["compliance"]["breached_since"])
    assert since_events is not None and _close(since_events, lake.events_since, VACUUM_SLACK)
    assert cells[uris["events"]].startswith(f"breached since {since_events:%Y-%m-%d %H:%M} UTC max_days_since_vacuum")
    assert cells[uris["customers"]] == "met"
    assert "tile-breached" in page.ids and "tile-at-risk" in page.ids


def test_the_breached_tables_are_two_clicks_away_oldest_breach_first(lake, c):
    fleet = c.get("/").text
    tile = re.search(r'id="tile-breached" href="([^"]+)"', fleet)
    assert tile and ">2<" in fleet[tile.end() : tile.end() + 20]
    breached = c.get("/" + tile.group(1).replace("&amp;", "&").removeprefix("./"))  # click 1: the tile
    uris = _uris(lake)
    assert Page(breached.text).tables() == [uris["orders"], uris["events"]]  # three days breached, then two
    table = c.get(f"/table?uri={quote(uris['orders'], safe='')}")  # click 2: the table
    assert 'data-objective="max_small_files"' in table.text


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("breached", ["events", "orders"]),
        ("met", ["customers"]),
        ("at_risk", []),
        ("none", []),
        ("max_small_files", ["orders"]),
        ("max_days_since_vacuum", ["events"]),
        ("max_dv_share", []),
    ],
)
def test_the_objectives_filter(lake, c, value, names):
    listed = Page(c.get(f"/?objectives={value}&sort=table").text).tables()
    assert sorted(listed) == sorted(_uris(lake)[n] for n in names)
    api = c.get(f"/api/fleet?objectives={value}").json()
    assert api["matching_tables"] == len(names) and api["query"]["filters"] == {"objectives": value}
    assert c.get("/?objectives=breachd").status_code == 400


def test_sorting_by_compliance_and_fleet_runs_are_no_table(lake, c):
    uris = _uris(lake)
    ordered = Page(c.get("/?sort=compliance&order=asc").text).tables()
    assert ordered == [uris["orders"], uris["events"], uris["customers"]]
    assert Page(c.get("/?sort=compliance&order=desc").text).tables() == ordered[::-1]
    body = c.get("/api/fleet").json()
    listed = {t["table_uri"] for t in body["tables"]}
    assert listed == set(uris.values()) and body["total_tables"] == 3
    for name in (lake.root, "deltalog_fleet", ""):
        assert name not in listed
        assert f'data-table="{name}"' not in c.get("/").text
    assert c.get(f"/table?uri={quote(lake.root, safe='')}").status_code == 200


def test_compliance_and_missed_finish_by_per_day(lake, c):
    body = c.get("/api/fleet").json()
    series = body["series"]
    today = dt.datetime.now(dt.UTC).date()

    def on(days_ago: int) -> dict[str, Any]:
        i = series["days"].index((today - dt.timedelta(days=days_ago)).isoformat())
        return {k: v[i] for k, v in series["objectives"].items()}

    # Tables by their day's newest judgement: events met until three days ago, orders met five and four days
    # ago, breached since; customers measured today only.
    assert on(9) == {"breached": 0, "at_risk": 0, "met": 1}
    assert on(4) == {"breached": 0, "at_risk": 0, "met": 2}
    assert on(3) == {"breached": 1, "at_risk": 0, "met": 1}
    assert on(1) == {"breached": 2, "at_risk": 0, "met": 0}
    assert on(0) == {"breached": 2, "at_risk": 0, "met": 1}
    finish = series["finish_by"]
    assert sum(finish["missed"]) == 1 and sum(finish["met"]) == 2  # the other writer's row met too
    (missed,) = body["missed_finish_by"]
    assert missed["fleet"] == "deltalog_fleet" and missed["finish_by"] == "06:00 UTC"
    assert _when(missed["ended_at"]) - _when(missed["deadline"]) == dt.timedelta(minutes=30)
    html = c.get("/").text
    assert 'data-chart="objectives"' in html and 'data-chart="finish_by"' in html
    misses = html[html.index('id="missed-finish-by"') :]
    assert "06:00 UTC: ended" in misses and "30.0 min late" in misses and missed["row"].replace("&", "&amp;") in misses


def test_a_tables_objectives_over_time_with_their_targets(lake, c):
    uris = _uris(lake)
    html = c.get(f"/table?uri={quote(uris['orders'], safe='')}").text
    rows = dict(re.findall(r'<tr data-objective="(\w+)">(.*?)</tr>', html, flags=re.S))
    cells = [
        re.sub(r"<[^>]+>", "", td).strip() for td in re.findall(r"<td[^>]*>(.*?)</td>", rows["max_small_files"], re.S)
    ]
    since = lake.orders_since.strftime("%Y-%m-%d %H:%M UTC")
    assert cells == ["max_small_files", "5", "12", "breached", since, "fleet defaults"]
    charts = dict(re.findall(r'data-chart="([a-z_]+)"(.*?)</svg>', html, flags=re.S))
    chart = charts["objective_max_small_files"]
    assert chart.count("<circle") == 12 and 'stroke-dasharray="6 4"' in chart  # six days, value and target
    body = c.get(f"/api/table?uri={quote(uris['orders'], safe='')}").json()
    points = body["series"]["objective_max_small_files"]
    assert [v for v in points["value"] if v is not None] == [3, 4, 8, 10, 12, 12]
    assert set(v for v in points["target"] if v is not None) == {5}
    assert body["table"]["compliance"]["state"] == "breached"
    assert "objective_max_days_since_vacuum" not in body["series"]  # orders sets no such objective
    events = c.get(f"/table?uri={quote(uris['events'], safe='')}").text
    assert "table property deltalog.objective.maxDaysSinceVacuum = &#x27;7&#x27;" in events
    assert 'data-chart="objective_max_days_since_vacuum"' in events
    customers = c.get(f"/table?uri={quote(uris['customers'], safe='')}").text
    assert "per-table override tables[&#x27;customers&#x27;]" in customers and 'id="tile-objectives"' in customers
    for page in (html, events, customers):
        assert_no_markup_from_values(page)


def test_a_fleet_without_objectives_shows_no_compliance(monkeypatch, tmp_path):
    from history_helpers import maintained_fleet

    fleet = maintained_fleet(str(tmp_path / "lake"), rounds=1)
    c = client(monkeypatch, fleet.history)
    html = c.get("/").text
    assert 'data-column="compliance"' not in html and "tile-breached" not in html
    assert 'data-chart="objectives"' not in html and "missed-finish-by" not in html
    body = c.get("/api/fleet").json()
    for t in body["tables"]:
        compliance = t["compliance"]
        assert (compliance["state"], compliance["breached_since"], compliance["objectives"]) == ("none", None, [])
    assert body["totals"]["tables_none"] == len(body["tables"])


def test_rollups_made_before_objectives_are_rebuilt_not_reused(lake, monkeypatch, tmp_path):
    """Rollups of the declarations before this change (no objectives' measures) are named by another format:
    the view rolls the days up again under its own and never reads them."""
    from deltalog.journal import MEASURES, RollupStore, rollup, rollup_store
    from deltalog.log import snapshot_at
    from deltalog.storage import Storage

    rollups = tmp_path / "rollups"
    before = tuple(m for m in MEASURES if m.name in {"rows", "last", "state", "policy", "table_id"})
    with monkeypatch.context() as old:
        old.setattr(rollup, "MEASURES", before)
        old.setattr(rollup_store, "ROLLUP_FORMAT", "before-objectives")
        snapshot = snapshot_at(Storage(lake.history))
        today = dt.datetime.now(dt.UTC).date()
        RollupStore(str(rollups)).window(snapshot, today - dt.timedelta(days=29), today)
    made = {p for p in rollups.rglob("*.parquet")}
    assert made and all("before-objectives" in str(p) for p in made)
    seen: list[str] = []
    real = rollup_store.RollupStore._read

    def read(self: Any, path: str) -> Any:
        seen.append(path)
        return real(self, path)

    monkeypatch.setattr(rollup_store.RollupStore, "_read", read)
    body = client(monkeypatch, lake.history, rollups=str(rollups)).get("/api/fleet").json()
    assert body["totals"]["tables_breached"] == 2
    assert not any("before-objectives" in p for p in seen)
    assert {p for p in rollups.rglob("*.parquet") if "before-objectives" not in str(p)}  # made anew beside
    assert os.path.isdir(rollups)


def test_an_unreadable_table_shows_its_last_judgement_and_when(monkeypatch, tmp_path):
    from deltalog.journal import OperationSpan, append_rows, make_row
    from deltalog.journal.row import objective_columns
    from deltalog.maintenance.objectives import ObjectiveState

    uri = "s3://lake/broken"
    now = dt.datetime.now(dt.UTC)
    then = now - 2 * DAY
    state = ObjectiveState("max_small_files", 5, 9, False, "fleet defaults")
    judged = make_row(
        OperationSpan(RunContext(), uri, "measure", then, then), "done", due_operations=[], **objective_columns([state])
    )
    failed = make_row(OperationSpan(RunContext(), uri, "measure", now, now), "failed", reason="cannot read _delta_log")
    append_rows(str(tmp_path / "h"), [judged, failed])
    cells = dict(Page(client(monkeypatch, str(tmp_path / "h")).get("/").text).rows)[uri]
    assert cells[1].startswith("failed") and cells[3] == "unreadable"
    assert cells[2] == f"breached since {then:%Y-%m-%d %H:%M} UTC as of 2 d ago max_small_files 9 > 5"
