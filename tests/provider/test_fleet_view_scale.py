"""The fleet view at fleet scale: 100,000 history rows over 1,000 tables, a quarter on one table.

The history is generated once per day and key (``tests/synthetic_history.py``: Arrow columns
through the history writer, kept under ``~/.cache/deltalog``). What is asserted is what a
page may cost whatever the machine: its bytes (fleet page and the busy table's page under
1 MB, JSON under 5 MB at the largest ``limit``), the rows and points it holds (a page of
tables, a page of rows, a chart point per day), that pages cover every table once, that the
failing and the most expensive tables are two clicks from the fleet page, and that an app
started on existing rollups reads no history file; the breached tables two clicks away too, their
compliance from the rollups. Times are the benchmark's
(``benchmarks/bench_fleet_view.py``), not asserted here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from fleet_view_client import Page, client

from synthetic_history import FleetShape, cached_history

#: The same code on every release (the plugin and pages tests run there): the scale's bounds on the lock only.
pytestmark = [pytest.mark.lock_only]

MB = 1_000_000
PRICES = {"cost_per_cpu_hour": "0.06", "cost_per_gb_month": "0.023", "cost_currency": "USD"}


@pytest.fixture(scope="module")
def shape() -> FleetShape:
    return cached_history(100_000, tables=1000, busy_share=0.25, days=30)


@pytest.fixture(scope="module")
def rollups(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("rollups"))


@pytest.fixture(scope="module")
def c(shape: FleetShape, rollups: str) -> Iterator[Any]:
    """One app for the module's reads (as one API server serves many viewers)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield client(monkeypatch, shape.history, rollups=rollups, prices=PRICES)


def _follow(c: Any, html: str, element_id: str) -> Any:
    href = re.search(rf'id="{element_id}" href="([^"]+)"|href="([^"]+)"[^>]*id="{element_id}"', html)
    assert href, element_id
    link = (href.group(1) or href.group(2)).replace("&amp;", "&")
    return c.get("/" + link.removeprefix("./").lstrip("/"))


def test_the_fleet_page_holds_a_page_of_tables_under_a_megabyte(shape, c):
    response = c.get("/")
    assert response.status_code == 200 and len(response.content) < MB
    page = Page(response.text)
    assert len(page.rows) == 100 and "tables 1&ndash;100 of 1,000" in response.text
    # objectives, finish_by, problems, files, bytes, time, cost
    assert response.text.count('class="chart"') == 7
    for svg in re.findall(r"<svg.*?</svg>", response.text, flags=re.S):
        assert svg.count("<circle") <= 3 * 30  # a point per day and series at most


def test_pages_cover_every_table_once(shape, c):
    seen = []
    for page in range(1, 11):
        seen += Page(c.get(f"/?page={page}&sort=table&order=asc").text).tables()
    assert sorted(seen) == sorted(shape.tables) and len(seen) == 1000
    paths = Page(c.get("/?q=history").text).cells(0)
    assert paths and all("history" in p for p in paths) and len(set(paths)) == len(paths)
    assert all(p.count("/") >= 2 for p in paths if p.split("/")[-1] == "history")  # told apart by their folders


def test_the_busy_tables_page_is_a_page_of_rows_and_a_point_per_day(shape, c):
    response = c.get(f"/table?uri={quote(shape.busy, safe='')}")
    assert response.status_code == 200 and len(response.content) < MB
    assert response.text.count('<tr><td><a href="row?') == 50
    assert f"rows, newest first: 1&ndash;50 of {shape.busy_rows:,}" in response.text
    # Its objectives over time: a chart each, a point per day (value and target), the day's range as a band.
    assert 'data-chart="objective_max_small_files"' in response.text and 'id="objectives"' in response.text
    for svg in re.findall(r"<svg.*?</svg>", response.text, flags=re.S):
        assert svg.count("<circle") <= 3 * 30
    last = -(-shape.busy_rows // 50)
    older = c.get(f"/table?uri={quote(shape.busy, safe='')}&page={last}")
    assert older.status_code == 200 and older.text.count('<tr><td><a href="row?') == shape.busy_rows - 50 * (last - 1)


def test_json_is_paginated_under_five_megabytes(shape, c):
    fleet = c.get("/api/fleet?limit=500")
    assert fleet.status_code == 200 and len(fleet.content) < 5 * MB
    body = fleet.json()
    assert len(body["tables"]) == 500 and body["total_tables"] == 1000 and body["pages"] == 2
    assert fleet.headers["cache-control"] == "no-store"
    second = c.get("/api/fleet?limit=500&page=2").json()["tables"]
    assert {t["table_uri"] for t in body["tables"]} | {t["table_uri"] for t in second} == set(shape.tables)
    table = c.get(f"/api/table?uri={quote(shape.busy, safe='')}&limit=200")
    assert table.status_code == 200 and len(table.content) < 5 * MB
    assert len(table.json()["rows"]) == 200 and table.json()["total_rows"] == shape.busy_rows


def test_failing_and_most_expensive_tables_are_two_clicks_away(shape, c):
    fleet = c.get("/").text
    failing = _follow(c, fleet, "tile-failed")  # click 1: the tile
    listed = Page(failing.text)
    assert "status=failed" in str(failing.url) and listed.rows
    assert all(cells[1].startswith("failed") for _, cells in listed.rows)
    assert f"of {len(shape.failing):,}" in failing.text
    first = listed.rows[0][0]
    table = c.get(f"/table?uri={quote(first, safe='')}")  # click 2: the table
    assert table.status_code == 200 and 'class="st st-failed"' in table.text
    costly = _follow(c, fleet, "tile-cost")
    body = c.get("/api/fleet?sort=cost&order=desc&limit=500").json()["tables"]
    costs = [t["cost"]["cost"] for t in body]
    assert costs == sorted(costs, reverse=True)
    assert Page(costly.text).tables()[0] == body[0]["table_uri"]


def test_the_breached_tables_are_two_clicks_away(shape, c):
    fleet = c.get("/").text
    assert 'id="tile-breached" href=' in fleet
    breached = _follow(c, fleet, "tile-breached")  # click 1: the tile
    assert "objectives=breached" in str(breached.url) and f"of {len(shape.breached):,}" in breached.text
    listed = Page(breached.text)
    assert len(listed.rows) == min(100, len(shape.breached))
    assert all(cells[2].startswith("breached since ") for _, cells in listed.rows)
    body = c.get("/api/fleet?objectives=breached&sort=compliance&order=asc&limit=500").json()
    assert sorted(t["table_uri"] for t in body["tables"]) == sorted(shape.breached)
    since = [t["compliance"]["breached_since"] for t in body["tables"]]
    assert since == sorted(since) and listed.tables()[0] == body["tables"][0]["table_uri"]  # the oldest breach first
    table = c.get(f"/table?uri={quote(listed.tables()[0], safe='')}")  # click 2: the table
    assert table.status_code == 200 and 'class="st st-breached"' in table.text
    met = c.get("/api/fleet?objectives=met&limit=500").json()
    assert met["matching_tables"] + c.get("/api/fleet?objectives=at_risk").json()["matching_tables"] == len(shape.met)
    assert "s3://lake/" not in {t["table_uri"] for t in c.get("/api/fleet?q=lake&limit=500").json()["tables"]}
    missed = c.get("/api/fleet").json()["missed_finish_by"]
    assert len(missed) == shape.missed_nights and all(m["finish_by"] == "06:00 Europe/Berlin" for m in missed)


def test_an_app_started_on_existing_rollups_reads_no_history_file(shape, rollups, monkeypatch):
    from deltalog.journal import rollup_store

    warm = client(monkeypatch, shape.history, rollups=rollups)
    assert warm.get("/").status_code == 200  # rollups made (or found)

    def no_reads(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a history file was read to draw the fleet page")

    monkeypatch.setattr(rollup_store, "read_file_batches", no_reads)
    fresh = client(monkeypatch, shape.history, rollups=rollups)  # a restarted API server
    assert fresh.get("/").status_code == 200
    assert fresh.get(f"/table?uri={quote(shape.busy, safe='')}").status_code == 200
