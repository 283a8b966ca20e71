"""The fleet view's app in-process, as the API server builds it, with a stand-in for Airflow's sign-in.

``get_user`` (Airflow's JWT check) is replaced by a user that is there or not, and the
auth manager by one that says whether that user may read assets: what the app asks of
Airflow, nothing more (the browser test signs real users in to a real API server).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

import pytest


@dataclass
class User:
    name: str
    may_read_assets: bool = True

    def get_name(self) -> str:
        return self.name


class AuthManager:
    """What the app asks the auth manager: may this user read assets; where to sign in."""

    def is_authorized_asset(self, *, method: str, user: User, details: Any = None) -> bool:
        assert method == "GET"
        return user.may_read_assets

    def get_url_login(self, **kwargs: Any) -> str:
        return "/auth/login"


def client(
    monkeypatch: pytest.MonkeyPatch,
    history: str,
    rollups: str | None = None,
    user: User | None = None,
    prices: dict[str, str] | None = None,
) -> Any:
    """A test client of a new app (a new API server process) reading ``history``."""
    from fastapi.testclient import TestClient

    from deltalog_provider.fleet_view import app as app_module
    from deltalog_provider.version_compat import get_user

    monkeypatch.setenv("AIRFLOW__DELTALOG__HISTORY_URI", history)
    monkeypatch.setenv("AIRFLOW__DELTALOG__ROLLUP_URI", rollups or "memory")
    for key in ("cost_per_cpu_hour", "cost_per_gb_month", "cost_currency"):
        value = (prices or {}).get(key)
        if value is None:
            monkeypatch.delenv(f"AIRFLOW__DELTALOG__{key.upper()}", raising=False)
        else:
            monkeypatch.setenv(f"AIRFLOW__DELTALOG__{key.upper()}", value)
    monkeypatch.setattr(app_module, "get_auth_manager", AuthManager)
    app = app_module.create_app()
    app.dependency_overrides[get_user] = lambda: user or User("viewer")
    return TestClient(app)


class Page(HTMLParser):
    """What a page holds: every element's id, the rows of ``<table id=tables>`` (text per cell, with the
    row's ``data-table``), tags and attributes (to check that nothing from the history became markup)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.rows: list[tuple[str | None, list[str]]] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self._table = 0
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if "id" in a and a["id"]:
            self.ids.add(a["id"])
        if tag == "table" and a.get("id") == "tables":
            self._table = 1
        elif self._table and tag == "table":
            self._table += 1
        elif self._table == 1 and tag == "tr" and "data-table" in a:
            self.rows.append((a["data-table"], []))
        elif self._table == 1 and tag == "td" and self.rows:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._table:
            self._table -= 1
        elif tag == "td" and self._cell is not None and self.rows:
            self.rows[-1][1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def cells(self, column: int) -> list[str]:
        return [cells[column] for _, cells in self.rows]

    def tables(self) -> list[str | None]:
        return [uri for uri, _ in self.rows]


#: The elements and attributes a page of ours has; anything else came from a value.
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "a", "b", "span", "div", "table", "thead",
    "tbody", "tr", "th", "td", "code", "br", "ul", "li", "details", "summary", "pre", "form", "label", "select",
    "option", "input", "button", "svg", "text", "line", "polyline", "polygon", "circle", "rect",
}  # fmt: skip


def assert_no_markup_from_values(text: str) -> None:
    """Only our own elements, no event handler, no script, no ``javascript:`` link."""
    page = Page(text)
    for tag, attrs in page.tags:
        assert tag in ALLOWED_TAGS, tag
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            if name in ("href", "src", "action", "formaction"):
                assert not (value or "").strip().lower().startswith(("javascript:", "data:")), (tag, name, value)
    assert not re.search(r"<script", text, re.I)


__all__ = ["ALLOWED_TAGS", "AuthManager", "Page", "User", "assert_no_markup_from_values", "client"]
