"""The fleet view in a real browser, served by a real ``airflow api-server``, at fleet scale.

One API server serves every test here (module scope): a temporary AIRFLOW_HOME (SQLite, the
simple auth manager with ``admin``, ``viewer`` and ``nobody``, who has no role and so no
permission), prices set, and one maintenance history holding both a fleet of 1,000 tables
with 100,000 rows (a quarter on one table; ``tests/synthetic_history.py``, generated once
per day and cached) and a few real tables maintained for real (``tests/history_helpers.py``),
whose figures are checked against the tables themselves. Debian's headless Chromium is
driven through its chromedriver (Selenium). What is asserted is what is rendered:

- the REST API lists the plugin with its view (``airflow plugins``, the app's routes and its
  permission check run on every release without a browser: ``test_fleet_view_plugin.py``);
- a viewer who opens the page is sent to Airflow's login, signs in, and sees a page of the
  1,009 tables under a megabyte; the real tables by their folder (the prefix filter) with
  their figures; a table's charts drawn, a point per day;
- service-level objectives (the issue's fleet, ``tests/objectives_helpers.py``, beside the synthetic
  fleet's): the compliance column, the objectives filter and its tile (the breached tables two
  clicks away, oldest breach first), a table's objectives with their value against the target over
  time;
- the failing and the most expensive tables two clicks from the fleet page; search, sort,
  pages; the busy table's rows a page at a time; a long failure message one click away;
- the page inside Airflow's own UI (the external view's iframe);
- four concurrent fleet requests leave the API server under 1.5 GB;
- ``nobody`` signs in and sees no data (403 page, no table name anywhere); anonymous API
  calls get 401, ``nobody``'s 403.

Screenshots are kept under ``$DELTALOG_TEST_ARTIFACTS/fleet-view`` (default: the pytest
temporary directory); the path is printed. The ones in docs/fleet-view.md come from here.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from api_server import api_server, bearer_token, free_port, server_pid, signed_in_env, tree_rss_mb

from airflow_homes import prepare_home
from deltalog.journal import OperationSpan, RunContext, append_rows, make_row
from history_helpers import DemoFleet, maintained_fleet
from objectives_helpers import BreachFleet, breach_fleet, measure_now
from synthetic_history import FleetShape, cached_history

#: A real browser: on the lock's Airflow only (the release matrix runs test_fleet_view_plugin.py instead).
#: One server for the module: parallel workers keep the module together (``--dist loadgroup``).
pytestmark = [pytest.mark.slow, pytest.mark.lock_only, pytest.mark.xdist_group("fleet-view-browser")]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
#: The closed network refuses Chromium's background connections: none are made.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1440,1000",
)
USERS = {"admin": "ADMIN", "viewer": "VIEWER", "nobody": ""}
#: The synthetic fleet's 1,000 tables, the real ones (five maintained, the incident's) and the objectives' three.
TABLES = 1009
MB = 1_000_000
#: A failure whose message is long (a stack of 300,000 characters): one click from the fleet page.
INCIDENT_TABLE = "s3://lake/ops/incidents/events"
INCIDENT = "vacuum failed: storage answered 503\n" + "  at frame <deep>\n" * 16_000


@dataclass
class Server:
    base: str
    port: int
    fleet: DemoFleet
    shape: FleetShape
    env: dict[str, str]
    home: Path
    artifacts: Path
    slo: BreachFleet

    def token(self, user: str) -> str:
        return bearer_token(self.base, user)

    def fetch(self, path: str, user: str | None = None) -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {self.token(user)}"} if user else {}
        req = urllib.request.Request(self.base + path, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=300) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read() or b"null"

    def get(self, path: str, user: str | None = None) -> tuple[int, Any]:
        status, body = self.fetch(path, user)
        return status, json.loads(body)


def _artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = os.environ.get("DELTALOG_TEST_ARTIFACTS")
    path = Path(base) / "fleet-view" if base else tmp_path_factory.mktemp("fleet-view-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    print(f"\nfleet view screenshots: {path}")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail(
            "Chromium and chromedriver are missing: run scripts/bootstrap.sh (Debian chromium, chromium-driver)"
        )
    root = tmp_path_factory.mktemp("fleet-view")
    shape = cached_history(100_000, tables=1000, busy_share=0.25, days=30)
    history = root / "history"
    shutil.copytree(shape.history, history)  # the real tables' rows join the fleet's
    fleet = maintained_fleet(str(root / "lake"), rounds=3, history=str(history))
    now = dt.datetime.now(dt.UTC)
    span = OperationSpan(RunContext(run_id="incident"), INCIDENT_TABLE, "vacuum", now, now)
    append_rows(str(history), [make_row(span, "failed", reason=INCIDENT)])
    slo = breach_fleet(str(root / "slo"), history=str(history))  # objectives: two tables breached, one met
    measure_now(slo)
    home = prepare_home(tmp_path_factory, root / "airflow")  # a copy of the run's migrated database
    port = free_port()
    env = signed_in_env(
        home,
        port,
        USERS,
        AIRFLOW__DELTALOG__HISTORY_URI=str(history),
        AIRFLOW__DELTALOG__ROLLUP_URI=str(root / "rollups"),
        AIRFLOW__DELTALOG__COST_PER_CPU_HOUR="0.06",
        AIRFLOW__DELTALOG__COST_PER_GB_MONTH="0.023",
        AIRFLOW__DELTALOG__COST_CURRENCY="USD",
    )
    with api_server(home, env, port) as base:
        yield Server(base, port, fleet, shape, env, home, _artifacts(tmp_path_factory), slo)


@pytest.fixture()
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="deltalog-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _wait(driver: Any, css: str, timeout: float = 60) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(ec.visibility_of_element_located((By.CSS_SELECTOR, css)))


def sign_in(driver: Any, server: Server, user: str, path: str = "/deltalog/") -> None:
    """Open ``path``: the page sends the browser to Airflow's login form; sign in there."""
    from selenium.webdriver.common.by import By

    driver.get(server.base + path)
    _wait(driver, "input[name=username]")
    assert "/auth/login" in driver.current_url
    driver.find_element(By.CSS_SELECTOR, "input[name=username]").send_keys(user)
    driver.find_element(By.CSS_SELECTOR, "input[name=password]").send_keys(f"{user}-password")
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def _shot(driver: Any, server: Server, name: str, height: int | None = None) -> Path:
    path = server.artifacts / f"{name}.png"
    full = driver.execute_script("return Math.max(document.body.scrollHeight, 1000)")
    driver.set_window_size(1440, height or min(int(full) + 40, 3000))
    assert driver.save_screenshot(str(path))
    driver.set_window_size(1440, 1000)
    return path


def _rows(driver: Any) -> dict[str, list[str]]:
    """The listed tables and their cells' text as rendered (one script call: a hundred rows of cells)."""
    rows = driver.execute_script(
        "return Array.from(document.querySelectorAll('#tables tbody tr')).map("
        "r => [r.getAttribute('data-table'), Array.from(r.querySelectorAll(':scope > td')).map(c => c.innerText.trim())])"
    )
    return {uri: cells for uri, cells in rows}


# --- registration ----------------------------------------------------------------------------


def test_the_api_server_lists_the_plugin_and_its_view(server):
    """(``airflow plugins`` itself is checked on every release: test_fleet_view_plugin.py.)"""
    status, body = server.get("/api/v2/plugins", user="admin")
    assert status == 200
    listed = {p["name"]: p for p in body["plugins"]}["deltalog"]
    assert listed["external_views"][0]["href"] == "/deltalog/"


# --- a viewer sees the fleet --------------------------------------------------------------------


def test_a_viewer_signs_in_and_sees_a_page_of_a_thousand_tables(server, browser):
    sign_in(browser, server, "viewer")
    _wait(browser, "#tables", timeout=180)
    assert browser.current_url == server.base + "/deltalog/"
    assert len(_rows(browser)) == 100
    assert browser.find_element("id", "tile-tables").text.startswith(f"{TABLES:,}")
    status, page = server.fetch("/deltalog/", user="viewer")
    assert status == 200 and len(page) < MB
    _shot(browser, server, "fleet", height=1400)


def test_the_real_tables_by_their_folder_with_their_figures_and_charts(server, browser):
    from selenium.webdriver.common.by import By

    from deltalog import DeltaTable

    folder = os.path.dirname(server.fleet.tables["orders"]) + "/"
    sign_in(browser, server, "viewer", path=f"/deltalog/?prefix={quote(folder, safe='')}")
    _wait(browser, "#tables", timeout=180)
    rows = _rows(browser)
    assert set(rows) == {*server.fleet.tables.values(), server.fleet.refused, server.fleet.deferred}
    orders = DeltaTable(server.fleet.tables["orders"]).snapshot()
    cells = rows[server.fleet.tables["orders"]]
    # "orders" alone would not tell it from the fleet's s3://lake/*/*/orders: its folder is shown too.
    # (the objectives column is third: the fleet sets objectives; these tables set none: "-")
    assert cells[0] == "sales/orders" and cells[2] == "-"
    assert cells[5] == str(orders.version) and cells[6] == str(orders.files.num_rows)
    assert rows[server.fleet.deferred][3] == "compaction" and rows[server.fleet.refused][3] == "refused"
    assert "late" in browser.find_element(By.ID, "deferred").text
    browser.find_element(By.CSS_SELECTOR, f'#tables a[data-table="{server.fleet.tables["orders"]}"]').click()
    charts = _wait(browser, "#charts")
    assert browser.find_element(By.ID, "table-uri").text == server.fleet.tables["orders"]
    drawn = {c.get_attribute("data-chart"): c for c in charts.find_elements(By.CSS_SELECTOR, "svg.chart")}
    assert sorted(drawn) == ["bytes", "cost", "files", "live", "log", "problems", "seconds", "size"]
    for name, svg in drawn.items():
        assert svg.is_displayed() and svg.size["width"] > 300 and svg.size["height"] > 150, name
    assert (
        len(drawn["live"].find_elements(By.TAG_NAME, "polyline"))
        + len(drawn["live"].find_elements(By.TAG_NAME, "circle"))
        >= 2
    )  # live files, small files
    assert browser.find_element(By.ID, "tile-version").text.startswith(str(orders.version))
    target = browser.find_element(By.CSS_SELECTOR, '#settings tr[data-setting="target_file_size"]')
    assert target.text.split() == ["target_file_size", str(64 << 20), "per-table", "override", "tables['orders']"]
    _shot(browser, server, "table", height=1600)


def test_the_breached_tables_two_clicks_away_and_a_tables_objectives_over_time(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from deltalog.storage.filesystem import canonical_uri

    slo = server.slo
    orders, events, customers = (canonical_uri(u) for u in (slo.orders, slo.events, slo.customers))
    sign_in(browser, server, "viewer")
    _wait(browser, "#tables", timeout=180)
    assert browser.find_element(By.CSS_SELECTOR, 'th[data-column="compliance"]').text == "objectives"
    browser.find_element(By.ID, "tile-breached").click()  # click 1: the breached tables, oldest breach first
    _wait(browser, "#tables")
    rows = _rows(browser)
    assert "objectives=breached" in browser.current_url and len(rows) == 100
    assert all(cells[2].startswith("breached since ") for cells in rows.values())
    status, body = server.get(
        "/deltalog/api/fleet?objectives=breached&sort=compliance&order=asc&limit=100", user="viewer"
    )
    assert status == 200 and list(rows) == [t["table_uri"] for t in body["tables"]]
    browser.find_element(By.CSS_SELECTOR, "#tables tbody tr a").click()  # click 2: the table
    _wait(browser, "#objectives")
    assert browser.find_element(By.ID, "table-uri").text == body["tables"][0]["table_uri"]
    # The tables by their folder, through the form: the objectives filter beside the others.
    folder = os.path.dirname(orders) + "/"
    browser.get(server.base + "/deltalog/?prefix=" + quote(folder, safe=""))
    _wait(browser, "#filters")
    Select(browser.find_element(By.CSS_SELECTOR, "#filters select[name=objectives]")).select_by_value("breached")
    browser.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()
    _wait(browser, "#tables")
    rows = _rows(browser)
    assert set(rows) == {orders, events}
    assert rows[orders][2] == f"breached since {slo.orders_since:%Y-%m-%d %H:%M} UTC max_small_files 12 > 5"
    browser.get(server.base + "/deltalog/?sort=compliance&prefix=" + quote(folder, safe=""))
    _wait(browser, "#tables")
    rows = _rows(browser)
    assert list(rows) == [orders, events, customers] and rows[customers][2] == "met"  # breached 3 days, 2, met
    _shot(browser, server, "compliance", height=900)
    browser.find_element(By.CSS_SELECTOR, f'#tables a[data-table="{orders}"]').click()
    objectives = _wait(browser, "#objectives")
    assert objectives.find_element(By.CSS_SELECTOR, 'tr[data-objective="max_small_files"]').text.split() == [
        "max_small_files", "5", "12", "breached", *f"{slo.orders_since:%Y-%m-%d %H:%M} UTC".split(), "fleet", "defaults",
    ]  # fmt: skip
    chart = browser.find_element(By.CSS_SELECTOR, 'svg[data-chart="objective_max_small_files"]')
    assert chart.is_displayed() and chart.size["width"] > 300
    lines = chart.find_elements(By.TAG_NAME, "polyline")
    assert len(lines) == 2 and lines[1].get_attribute("stroke-dasharray") == "6 4"  # the value; the target, dashed
    assert len(chart.find_elements(By.TAG_NAME, "circle")) == 12  # six days of value and target
    _shot(browser, server, "objectives", height=1500)
    browser.get(server.base + "/deltalog/table?uri=" + quote(customers, safe=""))
    row = _wait(browser, 'tr[data-objective="max_small_files"]')
    assert "per-table override tables['customers']" in row.text and "met" in row.text.split()


def test_the_failing_and_the_most_expensive_tables_are_two_clicks_away(server, browser):
    from selenium.webdriver.common.by import By

    sign_in(browser, server, "viewer")
    _wait(browser, "#tables", timeout=180)
    browser.find_element(By.ID, "tile-failed").click()  # click 1
    _wait(browser, "#tables")
    rows = _rows(browser)
    assert rows and all(cells[1].startswith("failed") for cells in rows.values())
    assert "status=failed" in browser.current_url
    _shot(browser, server, "failing", height=1200)
    first = next(iter(rows))
    browser.find_element(By.CSS_SELECTOR, "#tables tbody tr a").click()  # click 2
    _wait(browser, "#lasts")
    assert browser.find_element(By.ID, "table-uri").text == first
    assert browser.find_elements(By.CSS_SELECTOR, "#lasts .st-failed")
    browser.get(server.base + "/deltalog/")
    _wait(browser, "#tables")
    browser.find_element(By.ID, "tile-cost").click()  # click 1
    _wait(browser, "#tables")
    status, body = server.get("/deltalog/api/fleet?sort=cost&order=desc&limit=1", user="viewer")
    assert status == 200 and next(iter(_rows(browser))) == body["tables"][0]["table_uri"]
    browser.find_element(By.CSS_SELECTOR, "#tables tbody tr a").click()  # click 2
    _wait(browser, "#charts")
    assert browser.find_element(By.ID, "table-uri").text == body["tables"][0]["table_uri"]


def test_search_sort_and_pages(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sign_in(browser, server, "viewer")
    _wait(browser, "#filters", timeout=180)
    browser.find_element(By.CSS_SELECTOR, "#filters input[name=q]").send_keys("history")
    Select(browser.find_element(By.CSS_SELECTOR, "#filters select[name=status]")).select_by_value("problem")
    browser.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()
    _wait(browser, "#tables")
    rows = _rows(browser)
    assert rows and all("history" in uri for uri in rows)
    assert all(c[1].split()[0] in ("failed", "refused", "deferred") for c in rows.values())
    assert len({c[0] for c in rows.values()}) == len(rows)  # same-named tables told apart by their folders
    browser.find_element(By.CSS_SELECTOR, 'th a[data-sort="size"]').click()
    _wait(browser, "#tables")
    status, body = server.get(
        "/deltalog/api/fleet?q=history&status=problem&sort=size&order=desc&limit=500", user="viewer"
    )
    assert list(_rows(browser)) == [t["table_uri"] for t in body["tables"]][:100]
    browser.get(server.base + "/deltalog/?sort=table&order=asc")
    _wait(browser, "#tables")
    first_page = list(_rows(browser))
    browser.find_element(By.ID, "next").click()
    _wait(browser, "#tables")
    second_page = list(_rows(browser))
    assert len(second_page) == 100 and not set(first_page) & set(second_page)


def test_the_busy_tables_rows_a_page_at_a_time_and_a_long_message_one_click_away(server, browser):
    from selenium.webdriver.common.by import By

    busy = server.shape.busy
    sign_in(browser, server, "viewer", path=f"/deltalog/table?uri={quote(busy, safe='')}")
    charts = _wait(browser, "#charts", timeout=180)
    for svg in charts.find_elements(By.CSS_SELECTOR, "svg.chart"):
        assert len(svg.find_elements(By.TAG_NAME, "circle")) <= 3 * 30  # a point per day and series
    assert len(browser.find_elements(By.CSS_SELECTOR, "#rows tbody tr")) == 50
    status, page = server.fetch(f"/deltalog/table?uri={quote(busy, safe='')}", user="viewer")
    assert status == 200 and len(page) < MB
    _shot(browser, server, "busy-table", height=1500)
    newest = browser.find_element(By.CSS_SELECTOR, "#rows tbody tr td a").text
    browser.find_element(By.ID, "next").click()
    _wait(browser, "#rows")
    assert browser.find_element(By.CSS_SELECTOR, "#rows tbody tr td a").text <= newest
    # A failure with a long message: found by name, an excerpt; "more" opens it, a link has all of it.
    browser.get(server.base + "/deltalog/?q=incidents")
    _wait(browser, "#refusals")
    details = browser.find_element(By.CSS_SELECTOR, "#refusals details")
    details.find_element(By.TAG_NAME, "summary").click()
    assert details.find_element(By.TAG_NAME, "pre").is_displayed()
    full = details.find_element(By.CSS_SELECTOR, "a.full")
    assert full.text == f"all {len(INCIDENT):,} characters"
    status, page = server.fetch("/deltalog/?q=incidents", user="viewer")
    assert status == 200 and len(page) < 100_000  # the message is there once, as an excerpt
    full.click()
    reason = _wait(browser, 'tr[data-column="reason"] pre')
    assert reason.text.startswith("vacuum failed: storage answered 503")
    assert browser.execute_script(
        "return document.querySelector('tr[data-column=\"reason\"] pre').textContent.length"
    ) == len(INCIDENT)
    _shot(browser, server, "row", height=1000)


def test_the_page_shows_inside_airflows_ui(server, browser):
    from selenium.webdriver.common.by import By

    sign_in(browser, server, "viewer", path=f"/deltalog/table?uri={quote(server.fleet.tables['orders'], safe='')}")
    _wait(browser, "#charts", timeout=180)
    browser.get(server.base + "/plugin/deltalog")
    frame = _wait(browser, "iframe[title='Delta tables']", timeout=60)
    assert frame.get_attribute("src") == server.base + "/deltalog/"
    time.sleep(1.0)  # the UI's navigation finishes drawing
    browser.switch_to.frame(frame)
    _wait(browser, "#tables")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tables tbody tr")) == 100
    browser.switch_to.default_content()
    browser.set_window_size(1440, 1000)
    assert browser.save_screenshot(str(server.artifacts / "airflow-ui.png"))


def test_four_concurrent_fleet_requests_leave_the_server_under_one_and_a_half_gigabytes(server):
    pid = server_pid(server.port)
    token = server.token("viewer")
    results: list[int] = []

    def fetch(days: int) -> None:  # four windows: four aggregations, none served from another's result
        req = urllib.request.Request(
            f"{server.base}/deltalog/?days={days}", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(req, timeout=600) as resp:
            results.append(resp.status)

    peak = tree_rss_mb(pid)
    threads = [threading.Thread(target=fetch, args=(d,)) for d in (7, 14, 90, 366)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak = max(peak, tree_rss_mb(pid))
        time.sleep(0.05)
    after = tree_rss_mb(pid)
    print(f"\nAPI server RSS with four concurrent fleet requests: peak {peak:.0f} MiB, after {after:.0f} MiB")
    assert results == [200] * 4
    assert peak < 1536 and after < 1536


# --- and a user without permission does not ------------------------------------------------------


def test_a_user_without_permission_sees_no_data(server, browser):
    from selenium.webdriver.common.by import By

    sign_in(browser, server, "nobody")
    denied = _wait(browser, "#denied")
    assert "Forbidden" in denied.text
    assert browser.find_elements(By.ID, "tables") == []
    source = browser.page_source
    assert not any(word in source for word in ("orders", "customers", "catalog-managed", "s3://lake"))
    _shot(browser, server, "denied")
    # The JSON routes too, and nobody at all gets 401.
    assert server.get("/deltalog/api/fleet")[0] == 401
    assert server.get("/deltalog/api/fleet", user="nobody")[0] == 403
    assert server.get("/deltalog/api/row?day=2030-01-01&id=x", user="nobody")[0] == 403
    status, body = server.get("/deltalog/api/fleet", user="viewer")
    assert status == 200 and len(body["tables"]) == 100 and body["total_tables"] == TABLES


def test_an_anonymous_browser_is_sent_to_sign_in_and_never_loops(server):
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)

    def page(headers: dict[str, str]) -> tuple[int, dict[str, str], str]:
        req = urllib.request.Request(server.base + "/deltalog/", headers={"Accept": "text/html", **headers})
        try:
            with opener.open(req, timeout=30) as resp:
                return resp.status, dict(resp.headers), resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read().decode()

    code, headers, _ = page({})
    assert code == 303 and headers["location"].startswith("/auth/login?next=")
    # Straight back from the login page without a credential: a page that says so, not another redirect.
    code, _, body = page({"Referer": server.base + "/auth/login?next=x"})
    assert code == 401 and "id=unauthenticated" in body and "/auth/login" in body and "orders" not in body
