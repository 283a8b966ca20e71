"""The pages' request parameters, checked: one clear 400 for anything else.

Every route names the parameters it takes; an unknown or repeated one, a value of the
wrong kind or out of range, a sort key that is no column, a filter value that is no
status: each is refused with one sentence saying which and what is allowed (the app
turns :class:`BadParameter` into a 400). Values are only ever compared with the
history's values in memory (a URI equals, a prefix starts, a search text is contained):
no parameter becomes a path, a URI or a piece of SQL.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

#: The window: the pages draw from this many days of history unless ``?days=`` says otherwise.
DEFAULT_DAYS = 30
MAX_DAYS = 366
#: Tables per page of the fleet (HTML), and the JSON's default and largest ``limit``.
FLEET_PAGE_TABLES = 100
FLEET_JSON_LIMIT = 100
FLEET_JSON_MAX = 500
#: History rows per page of a table (HTML), and the JSON's default and largest ``limit``.
TABLE_PAGE_ROWS = 50
TABLE_JSON_LIMIT = 50
TABLE_JSON_MAX = 200
#: The longest text parameter (a URI, a prefix, a search): the rollups' longest key.
MAX_TEXT = 4096
MAX_PAGE = 100_000

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class BadParameter(ValueError):
    """A request parameter the route does not take, or a value it does not accept (a 400)."""


def _int(name: str, raw: str, lo: int, hi: int) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", raw):
        raise BadParameter(f"{name} must be a whole number from {lo} to {hi}")
    value = int(raw)
    if not lo <= value <= hi:
        raise BadParameter(f"{name} must be from {lo} to {hi}, got {value}")
    return value


def _text(name: str, raw: str, *, allow_empty: bool = True, typed: bool = True) -> str:
    """A text parameter: bounded; one a user types (a filter) holds no control character, one that names a
    value of the history (a URI, a row id: only ever compared with it) may hold what the history holds."""
    if len(raw) > MAX_TEXT:
        raise BadParameter(f"{name} is longer than {MAX_TEXT} characters")
    if typed and any(ord(c) < 32 or ord(c) == 127 for c in raw):
        raise BadParameter(f"{name} holds a control character")
    if not raw and not allow_empty:
        raise BadParameter(f"{name} must not be empty")
    return raw


def _choice(name: str, raw: str, allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    if raw not in allowed:
        raise BadParameter(f"{name} must be one of {', '.join(allowed)}")
    return raw


def _params(items: Iterable[tuple[str, str]], allowed: Iterable[str]) -> dict[str, str]:
    allowed = set(allowed)
    out: dict[str, str] = {}
    for key, value in items:
        if key not in allowed:
            raise BadParameter(f"unknown parameter {key[:40]!r}: this page takes {', '.join(sorted(allowed))}")
        if key in out:
            raise BadParameter(f"parameter {key[:40]!r} is given twice")
        out[key] = value
    return out


@dataclass(frozen=True)
class Filter:
    """A filter of the fleet listing: its parameter, the check of its value, and what it keeps.

    ``check`` returns the value as used (or raises :class:`BadParameter`); ``keep`` is given the
    listing (an Arrow table, one row per table) and the value, and returns a boolean mask.
    """

    param: str
    label: str
    check: Callable[[str], str]
    keep: Callable[[Any, str], Any]
    #: The values offered in the page's form ((value, label); empty: a text field).
    options: tuple[tuple[str, str], ...] = ()

    def summary_line(self) -> str:
        """One line: the parameter and its label."""
        return f"{self.param}: {self.label}"

    def to_dict(self) -> dict[str, Any]:
        return {"param": self.param, "label": self.label, "options": [list(o) for o in self.options]}


@dataclass(frozen=True)
class FleetQuery:
    days: int = DEFAULT_DAYS
    page: int = 1
    limit: int = FLEET_PAGE_TABLES
    sort: str = "status"
    order: str = "asc"
    filters: dict[str, str] = field(default_factory=dict)

    def params(self, **changes: Any) -> dict[str, str]:
        """The query as URL parameters (defaults left out), with ``changes`` (``filters``: all of them)."""
        filters = changes.pop("filters", self.filters)
        base: dict[str, Any] = {
            "days": self.days,
            "sort": self.sort,
            "order": self.order,
            "page": self.page,
            **filters,
        }
        base.update(changes)
        defaults = {"days": DEFAULT_DAYS, "page": 1, "sort": "status", "order": "asc"}
        return {k: str(v) for k, v in base.items() if v not in (None, "") and defaults.get(k) != v}

    def summary_line(self) -> str:
        """One line: the window, the sort and the filters."""
        return f"{self.days} days, sort {self.sort} {self.order}, page {self.page}, filters {self.filters}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "days": self.days,
            "page": self.page,
            "limit": self.limit,
            "sort": self.sort,
            "order": self.order,
            "filters": dict(self.filters),
        }


def parse_fleet(
    items: Iterable[tuple[str, str]],
    *,
    sort_keys: Iterable[str],
    filters: Iterable[Filter],
    json: bool,
) -> FleetQuery:
    filters = list(filters)
    names = ["days", "page", "sort", "order", *(f.param for f in filters)] + (["limit"] if json else [])
    given = _params(items, names)
    days = _int("days", given["days"], 1, MAX_DAYS) if "days" in given else DEFAULT_DAYS
    page = _int("page", given["page"], 1, MAX_PAGE) if "page" in given else 1
    limit = FLEET_PAGE_TABLES
    if json:
        limit = _int("limit", given["limit"], 1, FLEET_JSON_MAX) if "limit" in given else FLEET_JSON_LIMIT
    sort = _choice("sort", given["sort"], sort_keys) if "sort" in given else "status"
    order = _choice("order", given["order"], ("asc", "desc")) if "order" in given else "asc"
    chosen = {}
    for f in filters:
        raw = given.get(f.param, "")
        if raw != "":
            chosen[f.param] = f.check(raw)
    return FleetQuery(days, page, limit, sort, order, chosen)


@dataclass(frozen=True)
class TableQuery:
    uri: str
    days: int = DEFAULT_DAYS
    page: int = 1
    limit: int = TABLE_PAGE_ROWS

    def summary_line(self) -> str:
        """One line: the table and the page."""
        return f"{self.uri}: {self.days} days, page {self.page}"

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "days": self.days, "page": self.page, "limit": self.limit}


def parse_table(items: Iterable[tuple[str, str]], *, json: bool) -> TableQuery:
    given = _params(items, ["uri", "days", "page", *(["limit"] if json else [])])
    if "uri" not in given:
        raise BadParameter("uri is missing: the table's URI as the history records it")
    uri = _text("uri", given["uri"], allow_empty=False, typed=False)
    days = _int("days", given["days"], 1, MAX_DAYS) if "days" in given else DEFAULT_DAYS
    page = _int("page", given["page"], 1, MAX_PAGE) if "page" in given else 1
    limit = TABLE_PAGE_ROWS
    if json:
        limit = _int("limit", given["limit"], 1, TABLE_JSON_MAX) if "limit" in given else TABLE_JSON_LIMIT
    return TableQuery(uri, days, page, limit)


@dataclass(frozen=True)
class RowQuery:
    day: dt.date
    row_id: str

    def summary_line(self) -> str:
        """One line: the row and its day."""
        return f"row {self.row_id} of {self.day}"

    def to_dict(self) -> dict[str, Any]:
        return {"day": self.day.isoformat(), "id": self.row_id}


def parse_row(items: Iterable[tuple[str, str]]) -> RowQuery:
    given = _params(items, ["day", "id"])
    if "day" not in given or "id" not in given:
        raise BadParameter("day and id are both needed: the row's run_date and row_id")
    try:
        day = dt.date.fromisoformat(given["day"]) if re.fullmatch(r"\d{4}-\d{2}-\d{2}", given["day"]) else None
    except ValueError:
        day = None
    if day is None:
        raise BadParameter("day must be a date, YYYY-MM-DD")
    return RowQuery(day, _text("id", given["id"], allow_empty=False, typed=False))


def check_name(name: str) -> Callable[[str], str]:
    """A check of a value that names an operation or status: lower-case letters, digits and '_'."""

    def check(raw: str) -> str:
        if not _NAME.match(raw):
            raise BadParameter(f"{name} must be a name of lower-case letters, digits and '_'")
        return raw

    return check


def check_text(name: str) -> Callable[[str], str]:
    def check(raw: str) -> str:
        return _text(name, raw)

    return check


def check_choice(name: str, allowed: Iterable[str]) -> Callable[[str], str]:
    allowed = tuple(allowed)

    def check(raw: str) -> str:
        return _choice(name, raw, allowed)

    return check


__all__ = [
    "DEFAULT_DAYS",
    "FLEET_JSON_LIMIT",
    "FLEET_JSON_MAX",
    "FLEET_PAGE_TABLES",
    "MAX_DAYS",
    "TABLE_JSON_LIMIT",
    "TABLE_JSON_MAX",
    "TABLE_PAGE_ROWS",
    "BadParameter",
    "Filter",
    "FleetQuery",
    "RowQuery",
    "TableQuery",
    "check_choice",
    "check_name",
    "check_text",
    "parse_fleet",
    "parse_row",
    "parse_table",
]
