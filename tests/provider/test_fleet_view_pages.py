"""The fleet view's pages and charts, rendered from a real maintenance history (no Airflow, no browser).

The browser test (tests/provider/test_fleet_view_browser.py) checks what a real API
server serves and Chromium shows; here the rendering itself is checked closely: every
table and its figures, what is due and why, deferred work, refusals, the charts' points,
and that values from the history are escaped.
"""

from __future__ import annotations

import datetime as dt
import re
from html.parser import HTMLParser

import pyarrow.compute as pc
import pytest

from deltalog import DeltaTable
from deltalog.journal import OperationSpan, RunContext, append_rows, make_row, read_history
from deltalog_provider.fleet_view.charts import Series, _nice_max, line_chart
from deltalog_provider.fleet_view.pages import fleet_page, table_page
from history_helpers import maintained_fleet

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


class Cells(HTMLParser):
    """Rows of ``<table id=tables>`` (text per cell) and every element's id."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.ids: set[str] = set()
        self._in_table = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "table" and a.get("id") == "tables":
            self._in_table = True
        elif self._in_table and tag == "tr":
            self.rows.append([])
        elif self._in_table and tag == "td":
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_table = False
        elif tag == "td" and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    return maintained_fleet(str(tmp_path_factory.mktemp("lake")), rounds=2)


def test_fleet_page_lists_every_table_with_its_state_and_what_is_due(fleet):
    rows = read_history(fleet.history)
    parser = Cells()
    parser.feed(fleet_page(rows, source=fleet.history, days=30, now=NOW))
    by_name = {r[0]: r for r in parser.rows if r}
    assert sorted(by_name) == ["customers", "events", "late", "managed", "orders"]
    orders = DeltaTable(fleet.tables["orders"]).snapshot()
    assert by_name["orders"][1:4] == [str(orders.version), str(orders.files.num_rows), "1"]
    assert by_name["orders"][7] == "nothing"  # compaction and checkpoint were due, and ran since
    assert by_name["late"][7] == "compaction" and by_name["late"][8].startswith("compaction: 6 small files")
    assert by_name["managed"][7] == "refused"
    assert {"tables", "deferred", "refusals", "tile-due"} <= parser.ids


def test_fleet_page_lists_deferred_work_and_refusals(fleet):
    html = fleet_page(read_history(fleet.history), source=fleet.history, days=30, now=NOW)
    deferred = html[html.index('id="deferred"') : html.index("Refusals and failures")]
    assert "late</a> compaction" in deferred and "bins deferred: the time budget was spent" in deferred
    refusals = html[html.index('id="refusals"') :]
    assert "managed</a> measure" in refusals and "catalog-managed" in refusals


def test_table_page_charts_have_a_point_per_recorded_state(fleet):
    rows = read_history(fleet.history)
    uri = fleet.tables["orders"]
    mine = rows.filter(pc.equal(rows.column("table_uri"), uri))
    html = table_page(mine, table_uri=uri, source=fleet.history, days=30, now=NOW)
    charts = dict(re.findall(r'data-chart="([a-z]+)"(.*?)</svg>', html, flags=re.S))
    assert sorted(charts) == ["bytes", "files", "log", "reclaimed", "seconds"]
    states = sum(1 for r in mine.to_pylist() if r["live_files_after"] is not None)
    assert charts["files"].count("<circle") == 2 * states  # live and small files
    assert charts["reclaimed"].count("<circle") == 2  # one per run
    assert "no data yet" not in html


def test_values_from_the_history_are_escaped(tmp_path):
    now = dt.datetime.now(dt.UTC)
    evil = "s3://lake/<script>alert(1)</script>"
    row = make_row(
        OperationSpan(RunContext(), evil, "vacuum", now, now), "failed", reason='"><img src=x onerror=alert(2)>'
    )
    append_rows(str(tmp_path / "h"), [row])
    rows = read_history(str(tmp_path / "h"))
    for html in (
        fleet_page(rows, source="h", days=1, now=now),
        table_page(rows, table_uri=evil, source="h", days=1, now=now),
    ):
        assert "<script>" not in html and "<img" not in html
        assert "&lt;script&gt;" in html


def test_line_chart_scales_labels_and_says_when_empty():
    t0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    svg = line_chart("files", [Series("a<b", [(t0, 3), (t0 + dt.timedelta(hours=2), 7)])], chart_id="x")
    assert svg.count("<circle") == 2 and "<polyline" in svg and "a&lt;b" in svg
    assert ">10<" in svg and "2030-01-01 00:00<" in svg and "2030-01-01 02:00<" in svg
    assert "no data yet" in line_chart("files", [Series("a", [])])
    assert [_nice_max(v) for v in (0, 0.3, 7, 12, 101, 2400)] == [1.0, 0.5, 10, 20, 200, 2500]


def test_table_page_shows_each_setting_and_where_it_came_from(fleet):
    rows = read_history(fleet.history)
    uri = fleet.tables["orders"]
    mine = rows.filter(pc.equal(rows.column("table_uri"), uri))
    html = table_page(mine, table_uri=uri, source=fleet.history, days=30, now=NOW)
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
    empty = table_page(
        mine.filter(pc.equal(mine.column("operation"), "compaction")), table_uri=uri, source="h", days=30, now=NOW
    )
    assert 'id="settings-empty"' in empty
