"""The fleet view's pages and JSON, from a real maintenance history, through the app (no browser).

The history is made by real maintenance rounds on real tables (``tests/history_helpers.py``);
the app is built as the API server builds it (``fleet_view_client.py``). Checked here:
every table and its figures, what is due and why, deferred work and refusals, the charts
(a point per day), each setting and its source, finding tables (sort, filters, search,
prefix), money only with prices, one 400 per bad parameter, ``no-store`` on every
response, escaping of every value from the history, and that no parameter makes the app
open anything outside the history and its rollups. The fleet-scale bounds are in
``test_fleet_view_scale.py``, any-row robustness in ``test_fleet_view_robustness.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from typing import Any
from urllib.parse import quote

import pytest
from fleet_view_client import Page, User, assert_no_markup_from_values, client

from deltalog import DeltaTable
from deltalog.journal import OperationSpan, RunContext, append_rows, make_row
from deltalog_provider.fleet_view.charts import Series, _nice_max, line_chart
from deltalog_provider.fleet_view.html import human_bytes
from deltalog_provider.fleet_view.listing import display_paths
from history_helpers import DemoFleet, maintained_fleet

# Our HTML and JSON over history rows, through a test client, with Airflow's auth replaced by a stand-in: no
# Airflow code runs, so the lock's release only; test_fleet_view_plugin.py serves the pages on every release.
pytestmark = [pytest.mark.lock_only]

PRICES = {"cost_per_cpu_hour": "0.5", "cost_per_gb_month": "0.02", "cost_currency": "EUR"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> DemoFleet:
    return maintained_fleet(str(tmp_path_factory.mktemp("lake")), rounds=2)


def _get(c: Any, path: str) -> Any:
    response = c.get(path, headers={"accept": "text/html"})
    assert response.status_code == 200, (path, response.text[:500])
    assert response.headers["cache-control"] == "no-store"
    return response


def _table(uri: str) -> str:
    return f"/table?uri={quote(uri, safe='')}"


# --- the fleet ----------------------------------------------------------------------------------


def test_fleet_page_lists_every_table_with_its_state_and_what_is_due(fleet, monkeypatch):
    page = Page(_get(client(monkeypatch, fleet.history), "/").text)
    by_uri = dict(page.rows)
    assert set(by_uri) == {*fleet.tables.values(), fleet.refused, fleet.deferred}
    orders = DeltaTable(fleet.tables["orders"]).snapshot()
    cells = by_uri[fleet.tables["orders"]]
    assert cells[0] == "orders" and cells[4] == str(orders.version) and cells[5] == str(orders.files.num_rows)
    assert cells[2] == "nothing"  # compaction and checkpoint were due, and ran since
    late = by_uri[fleet.deferred]
    assert (
        late[1].startswith("deferred") and late[2] == "compaction" and late[3].startswith("compaction: 6 small files")
    )
    assert by_uri[fleet.refused][2] == "refused" and by_uri[fleet.refused][1].startswith("refused")
    assert {"tables", "deferred", "refusals", "tile-due", "tile-failed", "filters", "fleet-charts"} <= page.ids
    # Worst first: refused and deferred tables lead the default order (status), healthy ones follow.
    assert [uri for uri, _ in page.rows][:2] == [fleet.refused, fleet.deferred]


def test_fleet_page_lists_deferred_work_and_refusals(fleet, monkeypatch):
    html = _get(client(monkeypatch, fleet.history), "/").text
    deferred = html[html.index('id="deferred"') : html.index("Refusals and failures")]
    assert "late</a> compaction" in deferred and "bins deferred: the time budget was spent" in deferred
    refusals = html[html.index('id="refusals"') :]
    assert "managed</a> measure" in refusals and "catalog-managed" in refusals


def test_finding_tables_sort_filter_search_prefix(fleet, monkeypatch):
    c = client(monkeypatch, fleet.history)

    def listed(query: str) -> list[str | None]:
        return Page(_get(c, "/?" + query).text).tables()

    assert listed("q=ORD") == [fleet.tables["orders"]]  # search: any part of the URI, any case
    assert listed("status=refused") == [fleet.refused]
    assert listed("status=deferred") == [fleet.deferred]
    assert listed("due=compaction") == [fleet.deferred]
    assert listed("status=problem") == [fleet.refused, fleet.deferred]
    sales = os.path.dirname(fleet.tables["orders"]) + "/"
    assert sorted(listed("prefix=" + quote(sales, safe=""))) == sorted(
        [*fleet.tables.values(), fleet.refused, fleet.deferred]
    )
    assert listed("prefix=s3%3A%2F%2Fnowhere") == []
    names = Page(_get(c, "/?sort=table&order=asc").text).cells(0)
    assert names == sorted(names) and len(names) == 5
    sizes = [
        DeltaTable(u).snapshot().files.column("size").to_pylist()
        for u in listed("sort=size&order=desc")
        if u != fleet.refused
    ]
    assert [sum(s) for s in sizes] == sorted((sum(s) for s in sizes), reverse=True)
    head = _get(c, "/?sort=size&order=desc").text
    assert 'data-sort="size"' in head and "&#9660;" in head  # the header shows the current order


def test_tables_with_the_same_name_are_told_apart_and_grouped_by_folder():
    uris = ["s3://lake/sales/raw/history", "s3://lake/ml/raw/history", "s3://lake/ml/raw/orders", "s3://lake/x/history"]
    paths, folders, common = display_paths(uris)
    assert paths == ["sales/raw/history", "ml/raw/history", "orders", "x/history"]
    assert folders[0] == "s3://lake/sales/raw/" and common == "s3://lake/"
    assert len(set(paths)) == len(paths)


def test_table_page_charts_a_point_per_day_and_the_newest_row_of_each_operation(fleet, monkeypatch):
    uri = fleet.tables["orders"]
    html = _get(client(monkeypatch, fleet.history), _table(uri)).text
    charts = dict(re.findall(r'data-chart="([a-z]+)"(.*?)</svg>', html, flags=re.S))
    assert sorted(charts) == ["bytes", "files", "live", "log", "problems", "seconds", "size"]
    assert charts["live"].count("<circle") == 2  # live and small files: one point for the one day
    assert "no data yet" not in html and 'id="lasts"' in html
    page = Page(html)
    assert {"rows", "settings", "charts", "table-uri"} <= page.ids
    assert html.count('data-operation="') == 5  # measure, compaction, checkpoint, vacuum, log cleanup


def test_table_page_shows_each_setting_and_where_it_came_from(fleet, monkeypatch):
    html = _get(client(monkeypatch, fleet.history), _table(fleet.tables["orders"])).text
    settings = dict(
        (name, (value, where))
        for name, value, where in re.findall(
            r'<tr data-setting="(\w+)"><td>\w+</td><td>([^<]*)</td><td>([^<]*)</td></tr>', html
        )
    )
    assert settings["target_file_size"] == (str(64 << 20), "per-table override tables[&#x27;orders&#x27;]")
    assert settings["checkpoint_interval"][0] == "20" and settings["checkpoint_interval"][1].startswith("path rule")
    assert settings["vacuum_retention_hours"] == ("240.0", "fleet defaults")
    assert settings["log_retention_hours"] == ("720.0", "default")


def test_a_tables_rows_and_a_rows_page(fleet, monkeypatch):
    c = client(monkeypatch, fleet.history)
    body = c.get(f"/api/table?uri={quote(fleet.deferred, safe='')}").json()
    ops = {(r["operation"], r["status"]) for r in body["rows"]}
    assert ("compaction", "deferred") in ops and body["total_rows"] == len(body["rows"])
    row = next(r for r in body["rows"] if r["status"] == "deferred")
    page = _get(c, f"/row?day={row['run_date']}&id={quote(row['row_id'])}").text
    assert "bins deferred: the time budget was spent" in page and 'data-column="reason"' in page
    assert c.get(f"/api/row?day={row['run_date']}&id={row['row_id']}").json()["rows"][0]["row_id"] == row["row_id"]
    assert 'id="row-empty"' in _get(c, "/row?day=2020-01-01&id=nothing").text


# --- money --------------------------------------------------------------------------------------


def test_costs_show_at_the_configured_prices_and_no_money_without(fleet, monkeypatch):
    plain = _get(client(monkeypatch, fleet.history), "/").text
    assert "tile-cost" not in plain and "EUR" not in plain and 'data-column="cost"' not in plain
    assert "cost" not in client(monkeypatch, fleet.history).get("/api/fleet").json()["tables"][0]
    priced = client(monkeypatch, fleet.history, prices=PRICES)
    page = _get(priced, "/").text
    assert 'id="tile-cost"' in page and "EUR" in page and 'data-column="cost"' in page
    body = priced.get("/api/fleet?sort=cost&order=desc").json()
    costs = [t["cost"]["cost"] for t in body["tables"]]
    assert costs == sorted(costs, reverse=True) and costs[0] > 0
    orders = next(t for t in body["tables"] if t["table_uri"] == fleet.tables["orders"])
    expected = orders["work"]["cpu_s"] / 3600 * 0.5 + orders["state"]["table_bytes"] / 2**30 * 0.02 * 30 / 30.44
    assert orders["cost"]["cost"] == pytest.approx(expected)
    assert body["totals"]["cost"] == pytest.approx(sum(costs))
    bad = client(monkeypatch, fleet.history, prices={"cost_per_cpu_hour": "cheap"})
    text = _get(bad, "/").text
    assert "cost_per_cpu_hour is not a number" in text and "tile-cost" not in text


# --- small things -------------------------------------------------------------------------------


def test_an_all_zero_chart_says_so_and_its_axis_does_not_repeat():
    t0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    zeros = [Series("reclaimed", [(t0, 0.0), (t0 + dt.timedelta(days=1), 0.0)])]
    svg = line_chart("bytes", zeros, unit=human_bytes)
    ticks = re.findall(r'class="tick">([^<]*)<', svg)
    assert "all zero" in svg and ticks.count("0 B") == 1 and "1 B" not in ticks
    small = line_chart("bytes", [Series("b", [(t0, 0.0), (t0 + dt.timedelta(days=1), 1.0)])], unit=human_bytes)
    labels = [t for t in re.findall(r'class="tick">([^<]*)<', small) if t.endswith(" B")]
    assert len(labels) == len(set(labels))


def test_line_chart_scales_labels_bands_and_says_when_empty():
    t0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    svg = line_chart("files", [Series("a<b", [(t0, 3), (t0 + dt.timedelta(hours=2), 7)])], chart_id="x")
    assert svg.count("<circle") == 2 and "<polyline" in svg and "a&lt;b" in svg
    assert ">10<" in svg and "2030-01-01 00:00<" in svg and "2030-01-01 02:00<" in svg
    assert "no data yet" in line_chart("files", [Series("a", [])])
    assert [_nice_max(v) for v in (0, 0.3, 7, 12, 101, 2400)] == [1.0, 0.5, 10, 20, 200, 2500]
    many = [(t0 + dt.timedelta(hours=i), float(i % 7)) for i in range(5000)]
    big = line_chart("many", [Series("s", many, [(t, v - 1, v + 1) for t, v in many])])
    assert "<circle" not in big and big.count("<polygon") == 1 and len(big) < 20_000
    assert "nan" not in line_chart("odd", [Series("s", [(t0, float("nan")), (t0, float("inf")), (t0, -5.0)])])
    day = dt.timedelta(days=1)
    for extreme in ([1.7e308, 1.7e308], [-1.7e308, 1.7e308], [10**400, 1.0], [5e-324, 0.0], [-(2**63), 2**63 - 1]):
        svg = line_chart("x", [Series("s", [(t0 + i * day, v) for i, v in enumerate(extreme)])], unit=human_bytes)
        assert "nan" not in svg and "inf" not in svg.replace("<title>", ""), extreme


# --- safety -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/?sort=nope",
        "/?sort=why",
        "/?days=0",
        "/?days=367",
        "/?days=abc",
        "/?page=-1",
        "/?status=weird",
        "/?due=Compaction",
        "/?order=sideways",
        "/?limit=5",
        "/?unknown=1",
        "/?days=3&days=4",
        "/api/fleet?limit=501",
        "/api/fleet?limit=0",
        "/table",
        "/table?uri=",
        "/api/table?uri=x&limit=201",
        "/?q=%01",
        "/row?day=2020-13-40&id=x",
        "/row?id=x",
        "/api/row?day=2020-01-01",
    ],
)
def test_a_bad_parameter_is_one_clear_400(fleet, monkeypatch, path):
    c = client(monkeypatch, fleet.history)
    response = c.get(path, headers={"accept": "text/html"})
    assert response.status_code == 400, (path, response.status_code)
    assert response.headers["cache-control"] == "no-store"
    if path.startswith("/api/"):
        assert set(response.json()) == {"detail"} and "\n" not in response.json()["detail"]
    else:
        assert "id=bad-request" in response.text and "Traceback" not in response.text


def test_every_response_is_no_store_and_pages_allow_no_script(fleet, monkeypatch):
    c = client(monkeypatch, fleet.history)
    uri = quote(fleet.tables["orders"], safe="")
    for path in ("/", f"/table?uri={uri}", "/api/fleet", f"/api/table?uri={uri}", "/api/row?day=2020-01-01&id=x"):
        response = c.get(path)
        assert response.status_code == 200 and response.headers["cache-control"] == "no-store", path
        if not path.startswith("/api/"):
            assert "default-src 'none'" in response.headers["content-security-policy"]


def test_no_parameter_reaches_a_path_outside_the_history(fleet, monkeypatch, tmp_path):
    from deltalog.storage.filesystem import Storage

    opened: list[str] = []
    for name in ("open_input", "read_bytes", "list_dir", "exists", "info"):
        real = getattr(Storage, name)

        def spy(self: Any, path: str, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            opened.append(os.path.abspath(path))
            return _real(self, path, *args, **kwargs)

        monkeypatch.setattr(Storage, name, spy)
    rollups = tmp_path / "rollups"
    c = client(monkeypatch, fleet.history, rollups=str(rollups))
    secret = tmp_path / "secret"
    secret.write_text("x")
    for path in (
        f"/table?uri={quote(str(secret), safe='')}",
        "/table?uri=..%2F..%2F..%2Fetc%2Fpasswd",
        f"/row?day=2030-01-01&id={quote('../../' + str(secret), safe='')}",
        f"/?prefix={quote(str(tmp_path), safe='')}",
        "/?q=..%2F..",
        f"/api/table?uri={quote('file://' + str(secret), safe='')}",
    ):
        assert c.get(path).status_code == 200, path
    roots = (os.path.abspath(fleet.history), str(rollups))
    assert opened and all(p.startswith(roots) for p in opened), [p for p in opened if not p.startswith(roots)]


def test_values_from_the_history_are_escaped(tmp_path, monkeypatch):
    now = dt.datetime.now(dt.UTC)
    evil = "s3://lake/<script>alert(1)</script>"
    policy = json.dumps({"<b>x</b>": {"value": "<img src=x onerror=alert(3)>", "source": "<i>", "detail": None}})
    rows = [
        make_row(
            OperationSpan(RunContext(run_id="<svg onload=alert(4)>"), evil, op, now, now),
            "failed",
            reason='"><img src=x onerror=alert(2)>',
            policy=policy if op == "measure" else None,
        )
        for op in ("measure", "vacuum")
    ]
    append_rows(str(tmp_path / "h"), rows)
    c = client(monkeypatch, str(tmp_path / "h"), user=User("viewer"))
    for path in ("/", _table(evil), f"/row?day={rows[0].run_date}&id={rows[0].row_id}", "/?q=%3Cscript%3E"):
        html = _get(c, path).text
        assert_no_markup_from_values(html)
        assert "&lt;script&gt;" in html or "&lt;img" in html or "&lt;svg" in html
