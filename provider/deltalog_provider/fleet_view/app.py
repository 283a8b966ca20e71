"""The FastAPI app behind the fleet pages, mounted by the plugin at ``/deltalog``.

Airflow does not authenticate plugin apps (a mounted app inherits none of the core API's
dependencies), so every route here depends on :func:`reader`: the caller must be
authenticated by Airflow (its JWT, from the ``Authorization`` header or the UI's cookie,
through ``airflow.api_fastapi.core_api.security.get_user``, the dependency Airflow's
plugin documentation names, reached through the version-compat seam) and allowed to read assets by the configured auth manager
(``is_authorized_asset(method="GET")``): the tables are assets, and whoever may not see
assets in Airflow sees no table here. An unauthenticated browser is sent to the auth
manager's login page and back; an API client gets 401, a user without the permission 403.

Routes: ``/`` (the fleet), ``/table?uri=...`` (one table), ``/api/fleet`` and
``/api/table?uri=...`` (the same data as JSON).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from deltalog.journal import fleet_overview, rows_for_table
from deltalog_provider.fleet_view import pages
from deltalog_provider.fleet_view.source import (
    HistoryCache,
    HistoryUnavailable,
    configured_location,
    storage_options,
)
from deltalog_provider.version_compat import get_auth_manager, get_user

log = logging.getLogger(__name__)

#: The pages draw from this many days of history unless ``?days=`` says otherwise.
DEFAULT_DAYS = 30
MAX_DAYS = 366
#: No script, no external asset: the pages need nothing else, so nothing else may load.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'self'; base-uri 'none'"


async def reader(user: Annotated[Any, Depends(get_user)]) -> Any:
    """The authenticated caller, allowed to read assets (else 401/403; see the module docstring)."""
    if not get_auth_manager().is_authorized_asset(method="GET", user=user):
        log.info("deltalog fleet page: %s may not read assets: forbidden", user.get_name())
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, "Forbidden: reading the maintenance history needs asset read access"
        )
    return user


ReaderDep = Annotated[Any, Depends(reader)]


def _days(days: int | None) -> int:
    return DEFAULT_DAYS if days is None else days


def _html(body: str, code: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=code, headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store"})


def create_app() -> FastAPI:
    """The app (built on the first request by the plugin's lazy wrapper)."""
    app = FastAPI(title="deltalog fleet", docs_url=None, redoc_url=None, openapi_url=None)
    cache = HistoryCache()

    @app.exception_handler(HTTPException)
    async def to_login(request: Request, exc: HTTPException) -> Response:
        wants_html = "text/html" in request.headers.get("accept", "") and not request.url.path.startswith(
            str(request.scope.get("root_path", "")) + "/api/"
        )
        if exc.status_code == status.HTTP_401_UNAUTHORIZED and wants_html:
            login = get_auth_manager().get_url_login(next_url=str(request.url))
            if urlsplit(request.headers.get("referer", "")).path != urlsplit(login).path:
                return RedirectResponse(login, status_code=303)
            # Straight back from the login page and still no credential: the UI keeps its token where a
            # page cannot see it (releases before the httpOnly ``_token`` cookie). Say so instead of looping.
            return _html(
                pages.page(
                    "Not signed in",
                    "<h1>Not signed in</h1><p id=unauthenticated>This request reached the page without Airflow's "
                    "sign-in cookie. Airflow releases whose UI keeps the sign-in in the browser's storage (before "
                    "apache/airflow#56633 made it an httpOnly cookie) do not send it with page requests; there, "
                    "use the JSON routes (<code>api/fleet</code>, <code>api/table</code>) with a token.</p>"
                    f'<p><a href="{pages.esc(login)}">Sign in again</a></p>',
                ),
                status.HTTP_401_UNAUTHORIZED,
            )
        if wants_html:
            return _html(
                pages.page("Forbidden", f"<h1>{exc.status_code}</h1><p id=denied>{pages.esc(str(exc.detail))}</p>"),
                exc.status_code,
            )
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)

    def rows(days: int) -> tuple[Any, str]:
        location = configured_location()
        return cache.rows(location, storage_options(location), days, dt.datetime.now(dt.UTC).date()), location.uri

    @app.get("/", response_class=HTMLResponse)
    def fleet(_: ReaderDep, days: Annotated[int | None, Query(ge=1, le=MAX_DAYS)] = None) -> Response:
        try:
            data, uri = rows(_days(days))
        except HistoryUnavailable as exc:
            return _html(pages.not_configured_page(str(exc)))
        return _html(pages.fleet_page(data, source=uri, days=_days(days), now=dt.datetime.now(dt.UTC)))

    @app.get("/table", response_class=HTMLResponse)
    def table(_: ReaderDep, uri: str, days: Annotated[int | None, Query(ge=1, le=MAX_DAYS)] = None) -> Response:
        try:
            data, source = rows(_days(days))
        except HistoryUnavailable as exc:
            return _html(pages.not_configured_page(str(exc)))
        mine = rows_for_table(data, uri)
        return _html(
            pages.table_page(mine, table_uri=uri, source=source, days=_days(days), now=dt.datetime.now(dt.UTC))
        )

    @app.get("/api/fleet")
    def fleet_json(_: ReaderDep, days: Annotated[int | None, Query(ge=1, le=MAX_DAYS)] = None) -> Response:
        try:
            data, source = rows(_days(days))
        except HistoryUnavailable as exc:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc)) from None
        body = {"history": source, "days": _days(days), "tables": [o.to_dict() for o in fleet_overview(data)]}
        return JSONResponse(jsonable_encoder(body))

    @app.get("/api/table")
    def table_json(_: ReaderDep, uri: str, days: Annotated[int | None, Query(ge=1, le=MAX_DAYS)] = None) -> Response:
        try:
            data, source = rows(_days(days))
        except HistoryUnavailable as exc:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc)) from None
        mine = rows_for_table(data, uri)
        return JSONResponse(jsonable_encoder({"history": source, "table_uri": uri, "rows": mine.to_pylist()}))

    return app


__all__ = ["create_app", "reader"]
