"""The fleet view on every Airflow release of the matrix, without a browser.

``airflow plugins`` lists the plugin with its FastAPI app, and its view in the UI where the
release has external views (3.1+). The app itself, built as the API server builds it,
serves the fleet page, a table's page (charts, settings) and the JSON routes to a user the
auth manager lets read assets, and nothing but a 403 to one it does not; Airflow's own
``get_user`` is replaced by a stand-in (no API server here: the browser test, on the lock,
signs real users in). Each request is served by the release's FastAPI and Starlette.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from airflow_helpers import airflow_cli_json
from fleet_view_client import User, client

from history_helpers import DemoFleet, maintained_fleet


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> DemoFleet:
    return maintained_fleet(str(tmp_path_factory.mktemp("fleet-view") / "lake"), rounds=2)


def test_airflow_lists_the_plugin_with_its_app_and_where_the_release_has_them_its_view(airflow_db):
    from deltalog_provider.version_compat import AIRFLOW_V_3_1_PLUS

    plugins = {p["name"]: p for p in airflow_cli_json("plugins")}
    ours = plugins["deltalog"]
    assert [a["url_prefix"] for a in ours["fastapi_apps"]] == ["/deltalog"]
    views = [(v["name"], v["url_route"]) for v in ours.get("external_views") or []]
    assert views == ([("Delta tables", "deltalog")] if AIRFLOW_V_3_1_PLUS else [])


def _client(fleet: DemoFleet, monkeypatch: pytest.MonkeyPatch, user: User) -> Any:
    return client(monkeypatch, fleet.history, user=user)


def test_a_reader_gets_the_pages_and_the_json(fleet: DemoFleet, monkeypatch: pytest.MonkeyPatch):
    client = _client(fleet, monkeypatch, User("viewer", True))
    page = client.get("/", headers={"accept": "text/html"})
    assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
    for uri in (*fleet.tables.values(), fleet.refused, fleet.deferred):
        assert f'data-table="{uri}"' in page.text
    table = client.get(f"/table?uri={quote(fleet.tables['orders'], safe='')}")
    assert table.status_code == 200 and table.text.count('class="chart"') == 7
    assert table.headers["cache-control"] == "no-store"
    assert 'data-setting="target_file_size"' in table.text and "per-table override" in table.text
    body = client.get("/api/fleet").json()
    assert client.get("/api/fleet").headers["cache-control"] == "no-store"
    assert body["history"] == fleet.history and {t["table_uri"] for t in body["tables"]} >= set(fleet.tables.values())
    rows = client.get(f"/api/table?uri={quote(fleet.deferred, safe='')}").json()["rows"]
    assert {(r["operation"], r["status"]) for r in rows} >= {("compaction", "deferred")}


def test_a_user_who_may_not_read_assets_gets_a_403_and_no_data(fleet: DemoFleet, monkeypatch: pytest.MonkeyPatch):
    client = _client(fleet, monkeypatch, User("nobody", False))
    for path in (
        "/",
        f"/table?uri={quote(fleet.tables['orders'], safe='')}",
        "/api/fleet",
        "/api/table?uri=x",
        "/row?day=2020-01-01&id=x",
        "/api/row?day=2020-01-01&id=x",
        "/?sort=nope",
    ):
        response = client.get(path, headers={"accept": "text/html"})
        assert response.status_code == 403, path
        assert not any(name in response.text for name in ("orders", "customers", "events")), path
