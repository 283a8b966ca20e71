"""The fleet view in a real browser, served by a real ``airflow api-server``.

The test makes a maintenance history with real maintenance rounds on real tables
(``tests/history_helpers.py``), starts ``airflow api-server`` in a temporary AIRFLOW_HOME
(SQLite, the simple auth manager with three users: ``admin``, ``viewer`` and ``nobody``,
who has no role and so no permission), and drives Debian's headless Chromium through its
chromedriver (Selenium). It asserts what is rendered, not what is sent:

- the REST API lists the plugin with its view (``airflow plugins``, the app's routes and its
  permission check run on every release without a browser: ``test_fleet_view_plugin.py``);
- a viewer who opens the page is sent to Airflow's login, signs in, and sees the table list
  (every table, its figures, what is due) and, on a table's page, the charts drawn;
- the page inside Airflow's own UI (the external view's iframe);
- ``nobody`` signs in and sees no data (403 page, no table name anywhere); anonymous API
  calls get 401, ``nobody``'s 403.

Screenshots are kept under ``$DELTALOG_TEST_ARTIFACTS/fleet-view`` (default: the pytest
temporary directory); the path is printed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from api_server import airflow_env, api_server, free_port

from airflow_homes import prepare_home
from history_helpers import DemoFleet, maintained_fleet

#: A real browser: on the lock's Airflow only (the release matrix runs test_fleet_view_plugin.py instead).
pytestmark = [pytest.mark.slow, pytest.mark.lock_only]

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


@dataclass
class Server:
    base: str
    fleet: DemoFleet
    env: dict[str, str]
    home: Path
    artifacts: Path

    def token(self, user: str) -> str:
        body = json.dumps({"username": user, "password": f"{user}-password"}).encode()
        req = urllib.request.Request(
            self.base + "/auth/token", data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())["access_token"]

    def get(self, path: str, user: str | None = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token(user)}"} if user else {}
        req = urllib.request.Request(self.base + path, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")


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
    fleet = maintained_fleet(str(root / "lake"), rounds=3)
    home = prepare_home(tmp_path_factory, root / "airflow")
    (home / "passwords.json").write_text(json.dumps({u: f"{u}-password" for u in USERS}))
    port = free_port()
    env = airflow_env(
        home,
        port,
        AIRFLOW__CORE__AUTH_MANAGER="airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=",".join(f"{u}:{r}" for u, r in USERS.items()),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(home / "passwords.json"),
        AIRFLOW__API_AUTH__JWT_SECRET="deltalog-fleet-view-test-jwt-secret-0123456789",
        AIRFLOW__API__SECRET_KEY="deltalog-fleet-view-test-secret",
        AIRFLOW__DELTALOG__HISTORY_URI=fleet.history,
    )
    with api_server(home, env, port) as base:
        yield Server(base, fleet, env, home, _artifacts(tmp_path_factory))


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
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _wait(driver: Any, css: str, timeout: float = 30) -> Any:
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


def _shot(driver: Any, server: Server, name: str) -> Path:
    path = server.artifacts / f"{name}.png"
    height = driver.execute_script("return Math.max(document.body.scrollHeight, 1000)")
    driver.set_window_size(1440, min(int(height) + 40, 3000))
    assert driver.save_screenshot(str(path))
    return path


# --- registration ----------------------------------------------------------------------------


def test_the_api_server_lists_the_plugin_and_its_view(server):
    """(``airflow plugins`` itself is checked on every release: test_fleet_view_plugin.py.)"""
    status, body = server.get("/api/v2/plugins", user="admin")
    assert status == 200
    listed = {p["name"]: p for p in body["plugins"]}["deltalog"]
    assert listed["external_views"][0]["href"] == "/deltalog/"


# --- a viewer sees the fleet --------------------------------------------------------------------


def test_a_viewer_signs_in_and_sees_the_table_list_and_a_tables_charts(server, browser):
    from selenium.webdriver.common.by import By

    from deltalog import DeltaTable

    sign_in(browser, server, "viewer")
    table = _wait(browser, "#tables")
    assert browser.current_url == server.base + "/deltalog/"
    rows = {
        r.get_attribute("data-table"): [c.text for c in r.find_elements(By.TAG_NAME, "td")]
        for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")
    }
    expected = {*server.fleet.tables.values(), server.fleet.refused, server.fleet.deferred}
    assert set(rows) == expected
    orders = DeltaTable(server.fleet.tables["orders"]).snapshot()
    cells = rows[server.fleet.tables["orders"]]
    assert cells[0] == "orders" and cells[1] == str(orders.version) and cells[2] == str(orders.files.num_rows)
    assert rows[server.fleet.deferred][7] == "compaction" and rows[server.fleet.refused][7] == "refused"
    assert browser.find_element(By.ID, "tile-deferred").text.startswith("1")
    assert "late" in browser.find_element(By.ID, "deferred").text
    assert "catalog-managed" in browser.find_element(By.ID, "refusals").text
    _shot(browser, server, "fleet")

    browser.find_element(By.CSS_SELECTOR, f'a[data-table="{server.fleet.tables["orders"]}"]').click()
    charts = _wait(browser, "#charts")
    assert browser.find_element(By.ID, "table-uri").text == server.fleet.tables["orders"]
    drawn = {c.get_attribute("data-chart"): c for c in charts.find_elements(By.CSS_SELECTOR, "svg.chart")}
    assert sorted(drawn) == ["bytes", "files", "log", "reclaimed", "seconds"]
    for name, svg in drawn.items():
        assert svg.is_displayed() and svg.size["width"] > 300 and svg.size["height"] > 150, name
        assert len(svg.find_elements(By.TAG_NAME, "circle")) >= 3, name  # a point per round at least
    assert len(drawn["files"].find_elements(By.TAG_NAME, "polyline")) == 2  # live files, small files
    assert browser.find_element(By.ID, "tile-version").text.startswith(str(orders.version))
    settings = browser.find_element(By.ID, "settings")
    target = settings.find_element(By.CSS_SELECTOR, 'tr[data-setting="target_file_size"]')
    assert settings.is_displayed() and target.text.split() == [
        "target_file_size",
        str(64 << 20),
        "per-table",
        "override",
        "tables['orders']",
    ]
    _shot(browser, server, "table")


def test_the_page_shows_inside_airflows_ui(server, browser):
    from selenium.webdriver.common.by import By

    sign_in(browser, server, "viewer", path=f"/deltalog/table?uri={quote(server.fleet.tables['orders'], safe='')}")
    _wait(browser, "#charts")
    browser.get(server.base + "/plugin/deltalog")
    frame = _wait(browser, "iframe[title='Delta tables']", timeout=60)
    assert frame.get_attribute("src") == server.base + "/deltalog/"
    time.sleep(1.0)  # the UI's navigation finishes drawing
    browser.switch_to.frame(frame)
    _wait(browser, "#tables")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tables tbody tr")) == 5
    browser.switch_to.default_content()
    browser.set_window_size(1440, 1000)
    assert browser.save_screenshot(str(server.artifacts / "airflow-ui.png"))


# --- and a user without permission does not ------------------------------------------------------


def test_a_user_without_permission_sees_no_data(server, browser):
    from selenium.webdriver.common.by import By

    sign_in(browser, server, "nobody")
    denied = _wait(browser, "#denied")
    assert "Forbidden" in denied.text
    assert browser.find_elements(By.ID, "tables") == []
    source = browser.page_source
    assert not any(word in source for word in ("orders", "customers", "catalog-managed", "_deltalog"))
    _shot(browser, server, "denied")
    # The JSON routes too, and nobody at all gets 401.
    assert server.get("/deltalog/api/fleet")[0] == 401
    assert server.get("/deltalog/api/fleet", user="nobody")[0] == 403
    status, body = server.get("/deltalog/api/fleet", user="viewer")
    assert status == 200 and len(body["tables"]) == 5


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
