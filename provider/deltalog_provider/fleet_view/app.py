"""The FastAPI app behind the fleet pages, mounted by the plugin at ``/deltalog``.

Airflow does not authenticate plugin apps (a mounted app inherits none of the core API's
dependencies), so every route here depends on :func:`reader`: the caller must be
authenticated by Airflow (its JWT, from the ``Authorization`` header or the UI's cookie,
through ``airflow.api_fastapi.core_api.security.get_user``, the dependency Airflow's
plugin documentation names, reached through the version-compat seam) and allowed to read assets by the configured auth manager
(``is_authorized_asset(method="GET")``): the tables are assets, and whoever may not see
assets in Airflow sees no table here. An unauthenticated browser is sent to the auth
manager's login page and back; an API client gets 401, a user without the permission 403.

Routes: ``/`` (the fleet), ``/table?uri=...`` (one table), ``/row?day=...&id=...`` (one
history row), and the same as JSON under ``/api/`` (``fleet``, ``table``, ``row``). Their
parameters are checked (:mod:`.query`): anything else is one 400. Every response is
``Cache-Control: no-store``; pages carry a ``Content-Security-Policy`` that allows no script.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import urlsplit

import pyarrow as pa
from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from deltalog.journal import COMPLIANCE_STATES, history_table_uri
from deltalog_provider.fleet_view import html
from deltalog_provider.fleet_view.cost import BadPrice, Prices, configured_prices
from deltalog_provider.fleet_view.listing import FILTERS, SORT_KEYS, fleet_listing, select, table_json
from deltalog_provider.fleet_view.pages import fleet_page, missed_finish_by
from deltalog_provider.fleet_view.query import BadParameter, parse_fleet, parse_row, parse_table
from deltalog_provider.fleet_view.source import (
    FleetData,
    HistoryLocation,
    HistoryUnavailable,
    HistoryView,
    configured_location,
    storage_options,
)
from deltalog_provider.fleet_view.table_page import (
    LIST_TEXT_CHARS,
    POLICY_CHARS,
    ROW_TEXT_CHARS,
    jsonable,
    row_page,
    settings_section,
    table_page,
)
from deltalog_provider.fleet_view.timeseries import FLEET_CHARTS, series_json, table_charts
from deltalog_provider.version_compat import get_auth_manager, get_user

log = logging.getLogger(__name__)

#: No script, no external asset: the pages need nothing else, so nothing else may load.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'self'; base-uri 'none'; form-action 'self'"
NO_STORE = {"Cache-Control": "no-store"}


async def reader(user: Annotated[Any, Depends(get_user)]) -> Any:
    """The authenticated caller, allowed to read assets (else 401/403; see the module docstring)."""
    if not get_auth_manager().is_authorized_asset(method="GET", user=user):
        log.info("deltalog fleet page: %s may not read assets: forbidden", user.get_name())
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, "Forbidden: reading the maintenance history needs asset read access"
        )
    return user


ReaderDep = Annotated[Any, Depends(reader)]


def _html(body: str, code: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=code, headers={"Content-Security-Policy": CSP, **NO_STORE})


def _json(body: Any, code: int = 200) -> JSONResponse:
    return JSONResponse(jsonable(body), status_code=code, headers=dict(NO_STORE))


def _is_api(request: Request) -> bool:
    return request.url.path.startswith(str(request.scope.get("root_path", "")) + "/api/")


class _Opened:
    """The history as one request reads it: where, how, and its snapshot."""

    def __init__(self, view: HistoryView) -> None:
        self.location: HistoryLocation = configured_location()
        self.options = storage_options(self.location)
        self.snapshot = view.snapshot(self.location, self.options)


def _prices() -> tuple[Prices, list[str]]:
    try:
        return configured_prices(), []
    except BadPrice as exc:
        return Prices(), [f"{exc}: no money is shown until it is fixed."]


def _notices(data: FleetData) -> list[str]:
    bad = data.window.unreadable
    if not bad:
        return []
    return [f"{len(bad)} history file(s) of this window could not be read and are left out: {bad[0]}"]


def create_app() -> FastAPI:
    """The app (built on the first request by the plugin's lazy wrapper)."""
    app = FastAPI(title="deltalog fleet", docs_url=None, redoc_url=None, openapi_url=None)
    view = HistoryView()

    @app.exception_handler(HTTPException)
    async def to_login(request: Request, exc: HTTPException) -> Response:
        wants_html = "text/html" in request.headers.get("accept", "") and not _is_api(request)
        if exc.status_code == status.HTTP_401_UNAUTHORIZED and wants_html:
            login = get_auth_manager().get_url_login(next_url=str(request.url))
            if urlsplit(request.headers.get("referer", "")).path != urlsplit(login).path:
                return RedirectResponse(login, status_code=303, headers=NO_STORE)
            # Straight back from the login page and still no credential: the UI keeps its token where a
            # page cannot see it (releases before the httpOnly ``_token`` cookie). Say so instead of looping.
            return _html(
                html.page(
                    "Not signed in",
                    "<h1>Not signed in</h1><p id=unauthenticated>This request reached the page without Airflow's "
                    "sign-in cookie. Airflow releases whose UI keeps the sign-in in the browser's storage (before "
                    "apache/airflow#56633 made it an httpOnly cookie) do not send it with page requests; there, "
                    "use the JSON routes (<code>api/fleet</code>, <code>api/table</code>) with a token.</p>"
                    f'<p><a href="{html.esc(login)}">Sign in again</a></p>',
                ),
                status.HTTP_401_UNAUTHORIZED,
            )
        if wants_html:
            return _html(
                html.page("Forbidden", f"<h1>{exc.status_code}</h1><p id=denied>{html.esc(str(exc.detail))}</p>"),
                exc.status_code,
            )
        return _json({"detail": exc.detail}, exc.status_code)

    def bad_request(request: Request, message: str) -> Response:
        if _is_api(request):
            return _json({"detail": message}, status.HTTP_400_BAD_REQUEST)
        return _html(html.error_page(400, "Bad request", message, "bad-request"), status.HTTP_400_BAD_REQUEST)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        return bad_request(request, "the request's parameters are not valid")

    def guarded(request: Request, work: Callable[[], Response]) -> Response:
        """``work``, with a bad parameter as one 400 and an unreadable history as the page that says so."""
        try:
            return work()
        except BadParameter as exc:
            return bad_request(request, str(exc))
        except HistoryUnavailable as exc:
            if _is_api(request):
                return _json({"detail": str(exc)}, status.HTTP_503_SERVICE_UNAVAILABLE)
            return _html(html.not_configured_page(str(exc)))

    def today() -> dt.date:
        return dt.datetime.now(dt.UTC).date()

    def listing(data: FleetData, prices: Prices, days: int) -> pa.Table:
        key = ("listing", data.window.key, prices, days)
        return view.derived(key, lambda: fleet_listing(data.tables, prices, days))

    # --- the fleet ------------------------------------------------------------------------------

    def fleet_data(request: Request, json: bool) -> tuple[Any, ...]:
        query = parse_fleet(request.query_params.multi_items(), sort_keys=SORT_KEYS, filters=FILTERS, json=json)
        opened = _Opened(view)
        window = view.window(opened.location, opened.options, opened.snapshot, query.days, today())
        lookback = view.lookback(opened.location, opened.options, opened.snapshot, window)
        data = view.fleet(opened.location, opened.options, opened.snapshot, window, lookback)
        prices, notices = _prices()
        full = listing(data, prices, query.days)
        chosen = select(full, query)
        shown = chosen.slice((query.page - 1) * query.limit, query.limit)
        return query, opened, data, prices, notices + _notices(data), full, chosen, shown

    @app.get("/", response_class=HTMLResponse)
    def fleet(request: Request, _: ReaderDep) -> Response:
        def work() -> Response:
            query, opened, data, prices, notices, full, chosen, shown = fleet_data(request, json=False)
            body = fleet_page(
                full,
                chosen,
                shown,
                data.days,
                query=query,
                source=opened.location.uri,
                since=data.window.since,
                until=data.window.until,
                now=dt.datetime.now(dt.UTC),
                prices=prices,
                notices=notices,
            )
            return _html(body)

        return guarded(request, work)

    @app.get("/api/fleet")
    def fleet_json(request: Request, _: ReaderDep) -> Response:
        def work() -> Response:
            query, opened, data, prices, notices, full, chosen, shown = fleet_data(request, json=True)
            totals = {
                k: sum(v for v in full.column(k).to_pylist() if isinstance(v, int | float))
                for k in ("rows", "failures", "refusals", "deferrals", "cpu_s", "bytes_reclaimed", "bytes_written")
            }
            states = full.column("compliance").to_pylist()
            totals.update({f"tables_{state}": states.count(state) for state in COMPLIANCE_STATES})
            if prices.any:
                totals.update(
                    {
                        k: sum(v for v in full.column(k).to_pylist() if isinstance(v, int | float))
                        for k in ("cost", "compute_cost", "storage_cost_month", "saved_month")
                    }
                )
            body = {
                "history": opened.location.uri,
                "version": opened.snapshot.version,
                "days": query.days,
                "since": data.window.since,
                "until": data.window.until,
                "query": query.to_dict(),
                "total_tables": full.num_rows,
                "matching_tables": chosen.num_rows,
                "page": query.page,
                "limit": query.limit,
                "pages": max(1, -(-chosen.num_rows // query.limit)),
                "prices": prices.to_dict() if prices.any else None,
                "totals": totals,
                "notices": notices,
                "tables": [table_json(row, prices) for row in shown.to_pylist()],
                "series": series_json(FLEET_CHARTS, data.days, prices),
                "missed_finish_by": [
                    {
                        "fleet": m.get("fleet"),
                        "finish_by": m.get("finish_by"),
                        "deadline": m.get("deadline"),
                        "ended_at": m.get("ended_at"),
                        "missed_that_day": m.get("count"),
                        "row": html.row_href(m.get("day"), m.get("id")),
                    }
                    for m in missed_finish_by(data.days)
                ],
            }
            return _json(body)

        return guarded(request, work)

    # --- a table --------------------------------------------------------------------------------

    def table_data(request: Request, json: bool) -> tuple[Any, ...]:
        query = parse_table(request.query_params.multi_items(), json=json)
        opened = _Opened(view)
        window = view.window(opened.location, opened.options, opened.snapshot, query.days, today())
        lookback = view.lookback(opened.location, opened.options, opened.snapshot, window)
        data = view.table(opened.location, opened.options, opened.snapshot, window, query.uri, lookback)
        uri = query.uri
        if not data.tables.num_rows:
            spelled = history_table_uri(uri)
            if spelled != uri:
                data = view.table(opened.location, opened.options, opened.snapshot, window, spelled, lookback)
                uri = spelled
        prices, notices = _prices()
        rows_listing = fleet_listing(data.tables, prices, query.days)
        summary = rows_listing.to_pylist()[0] if rows_listing.num_rows else None
        total = sum(v or 0 for v in data.days.column("rows").to_pylist()) if data.days.num_rows else 0
        rows: list[dict[str, Any]] = []
        if summary is not None:
            offset = (query.page - 1) * query.limit
            rows = view.rows(
                opened.snapshot, uri, data.days, offset=offset, limit=query.limit, text_chars=LIST_TEXT_CHARS
            ).to_pylist()
        return query, opened, data, prices, notices + _notices(data), summary, rows, total, uri

    def policy_row(opened: _Opened, summary: dict[str, Any] | None) -> tuple[dict[str, Any] | None, int | None]:
        policy = (summary or {}).get("policy") or {}
        day, row_id, chars = policy.get("day"), policy.get("id"), policy.get("chars")
        if not isinstance(day, dt.date) or not isinstance(row_id, str):
            return None, None
        if isinstance(chars, int) and chars > POLICY_CHARS:
            return None, chars
        found = view.row(opened.snapshot, day, row_id, text_chars=POLICY_CHARS).to_pylist()
        return (found[0] if found else None), None

    @app.get("/table", response_class=HTMLResponse)
    def table(request: Request, _: ReaderDep) -> Response:
        def work() -> Response:
            query, opened, data, prices, notices, summary, rows, total, _uri = table_data(request, json=False)
            now = dt.datetime.now(dt.UTC)
            found, too_long = policy_row(opened, summary)
            body = table_page(
                summary,
                data.days,
                rows,
                total,
                query=query,
                source=opened.location.uri,
                since=data.window.since,
                until=data.window.until,
                now=now,
                prices=prices,
                settings=settings_section(found, too_long, now),
                notices=notices,
            )
            return _html(body)

        return guarded(request, work)

    @app.get("/api/table")
    def table_json_route(request: Request, _: ReaderDep) -> Response:
        def work() -> Response:
            query, opened, data, prices, notices, summary, rows, total, uri = table_data(request, json=True)
            body = {
                "history": opened.location.uri,
                "version": opened.snapshot.version,
                "table_uri": uri,
                "days": query.days,
                "since": data.window.since,
                "until": data.window.until,
                "table": table_json(summary, prices) if summary else None,
                "series": series_json(table_charts(data.days), data.days, prices),
                "total_rows": total,
                "page": query.page,
                "limit": query.limit,
                "pages": max(1, -(-total // query.limit)),
                "notices": notices,
                "rows": rows,
            }
            return _json(body)

        return guarded(request, work)

    # --- a row ----------------------------------------------------------------------------------

    def row_data(request: Request) -> tuple[Any, ...]:
        query = parse_row(request.query_params.multi_items())
        opened = _Opened(view)
        rows = view.row(opened.snapshot, query.day, query.row_id, text_chars=ROW_TEXT_CHARS).to_pylist()
        return query, opened, rows

    @app.get("/row", response_class=HTMLResponse)
    def row(request: Request, _: ReaderDep) -> Response:
        def work() -> Response:
            query, opened, rows = row_data(request)
            return _html(row_page(rows, day=query.day, row_id=query.row_id, source=opened.location.uri))

        return guarded(request, work)

    @app.get("/api/row")
    def row_json(request: Request, _: ReaderDep) -> Response:
        def work() -> Response:
            query, opened, rows = row_data(request)
            return _json({"history": opened.location.uri, "day": query.day, "id": query.row_id, "rows": rows})

        return guarded(request, work)

    return app


__all__ = ["create_app", "reader"]
