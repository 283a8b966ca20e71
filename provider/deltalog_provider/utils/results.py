"""Turning core results into what Airflow stores: XCom values, asset URIs and event extras.

No Airflow import here: these are plain functions so the triggers, sensors and
operators agree on one asset URI per table and one shape of event extra.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import urlparse

#: Keys of an asset-event extra; downstream DAGs read these from ``inlet_events``.
EXTRA_KEYS = ("table", "version", "operation", "metrics")


def jsonable(result: Any) -> dict[str, Any]:
    """``result.to_dict()`` (or the dict itself) made strictly JSON-serialisable for XCom."""
    data = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    return json.loads(json.dumps(data, default=str))


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """The top-level scalars of a result: small enough for an asset-event extra (no file lists)."""
    return {k: v for k, v in metrics.items() if isinstance(v, str | int | float | bool) or v is None}


def is_templated(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def table_asset_uri(uri: str) -> str:
    """The Airflow Asset URI of a table: ``file:///abs/path`` locally, the URI itself elsewhere.

    Computed from the location string alone (no filesystem, no credentials) so the URI a
    DAG declares at parse time equals the one the task reports at run time.
    """
    parsed = urlparse(uri)
    scheme = parsed.scheme if len(parsed.scheme) > 1 else ""
    if scheme in ("", "file", "local"):
        path = parsed.path if scheme else uri
        return "file://" + (os.path.abspath(os.path.expanduser(path)).rstrip("/") or "/")
    return uri.rstrip("/")


def event_extra(table_uri: str, operation: str, version: int | None, metrics: dict[str, Any]) -> dict[str, Any]:
    """The extra of the asset event an operator emits: table, new version, operation and scalar metrics."""
    return {
        "table": table_asset_uri(table_uri),
        "version": version,
        "operation": operation,
        "metrics": scalar_metrics(metrics),
    }
