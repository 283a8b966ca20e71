"""The Airflow plugin: the fleet pages as a FastAPI app and a view in the Airflow UI.

Registered through the ``airflow.plugins`` entry point, so installing the package is all
it takes (``airflow plugins`` lists it). Airflow imports plugins in every component, so
this module stays cheap: the FastAPI app is built on its first request, in the API
server, by :class:`LazyApp`.

* ``fastapi_apps``: the pages at ``/deltalog/`` (behind Airflow's authentication, see
  :mod:`deltalog_provider.fleet_view.app`), on every Airflow 3 release.
* ``external_views`` (Airflow 3.1+): "Delta tables" in the UI's Browse menu, showing the
  pages inside the UI (``/plugin/deltalog``). Airflow 3.0 has no external views: there the
  pages are reached at ``/deltalog/`` directly.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlsplit

from deltalog_provider.version_compat import AirflowPlugin, conf

URL_PREFIX = "/deltalog"


class LazyApp:
    """An ASGI app that builds the real one (:func:`create_app`) on its first request."""

    def __init__(self) -> None:
        self._app: Any = None
        self._lock = threading.Lock()

    def _get(self) -> Any:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    from deltalog_provider.fleet_view.app import create_app

                    self._app = create_app()
        return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._get()(scope, receive, send)

    def __repr__(self) -> str:
        return "deltalog_provider.fleet_view.app:create_app"


def _href() -> str:
    """The pages' URL as the UI's iframe loads it: under ``[api] base_url``'s path, if any."""
    base = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    return f"{base}{URL_PREFIX}/"


class DeltalogFleetPlugin(AirflowPlugin):
    """Delta tables' maintenance, in Airflow: the fleet at a glance and a page per table."""

    name = "deltalog"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "deltalog fleet"}]
    external_views = [
        {
            "name": "Delta tables",
            "href": _href(),
            "url_route": "deltalog",
            "destination": "nav",
            "category": "browse",
        }
    ]


__all__ = ["URL_PREFIX", "DeltalogFleetPlugin", "LazyApp"]
