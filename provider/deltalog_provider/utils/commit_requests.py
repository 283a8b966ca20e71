"""What a commit task commits: its request (a dict, JSON text or a file) and the app transaction of its run.

The app transaction (``txn``) names the task and the run (its logical date, else its run
id), so an Airflow retry after a lost response (the commit landed, the task did not hear
back) or a cleared run commits nothing the second time, while every other run, older
dates (backfills) included, commits its own data once. Reads the run from the task's
context (a mapping); imports nothing of Airflow.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

import fsspec

from deltalog.errors import InvalidArgumentError
from deltalog_provider.hooks.connection import is_absolute_location
from deltalog_provider.utils.coerce import optional_int, optional_str, request_document

__all__ = ["app_transaction", "derive_app_id", "derive_txn_version", "load_request", "run_key"]


def run_key(context: Mapping[str, Any]) -> str:
    """What identifies the run's data: its logical date (ISO 8601) when it has one, else its run id.

    Keyed by the logical date, a cleared, re-triggered or backfilled run of the same date
    is recognised as the same run; a run without a logical date (the Airflow 3 default for
    manual and REST triggers) is identified by its run id, the same for every try.
    """
    moment = context.get("logical_date")
    if moment is not None:
        return moment.isoformat()
    dag_run = context.get("dag_run")
    run_id = context.get("run_id") or getattr(dag_run, "run_id", None)
    if not run_id:
        raise InvalidArgumentError("the run has neither a logical date nor a run id: pass app_id explicitly")
    return str(run_id)


def derive_app_id(context: Mapping[str, Any]) -> str:
    """``airflow:<dag_id>:<task_id>[:<map_index>]:<run key>``: one app transaction per run.

    Stable across retries of a run, and distinct between runs, so each run commits its own
    data exactly once in whatever order runs happen (a backfill of an older date after
    newer runs included). One app id for all runs would make an older run look superseded.
    """
    ti = context["ti"]
    app_id = f"airflow:{ti.dag_id}:{ti.task_id}"
    map_index = getattr(ti, "map_index", -1)
    if map_index is not None and map_index >= 0:
        app_id += f":{map_index}"
    return f"{app_id}:{run_key(context)}"


def derive_txn_version(context: Mapping[str, Any]) -> int:
    """Milliseconds since the epoch of the run's logical date (its ``run_after`` when it has none).

    The same for every try of a run (so a retry is recognised).
    """
    moment = context.get("logical_date")
    if moment is None:
        dag_run = context.get("dag_run")
        moment = getattr(dag_run, "run_after", None) or getattr(dag_run, "start_date", None)
    if moment is None:
        raise InvalidArgumentError("the run has neither a logical date nor run_after: pass txn_version explicitly")
    return int(moment.timestamp() * 1000)


def app_transaction(
    app_id: Any, txn_version: Any, request: dict[str, Any], context: Mapping[str, Any]
) -> tuple[str, int]:
    """The task's ``app_id``/``txn_version``, else the request's own ``appId``/``txnVersion``, else the run's."""
    app_id = optional_str(app_id)
    txn_version = optional_int(txn_version, "txn_version")
    if app_id is None and txn_version is None and request.get("appId") is not None:
        return str(request["appId"]), optional_int(request.get("txnVersion"), "txnVersion") or 0
    return app_id or derive_app_id(context), txn_version if txn_version is not None else derive_txn_version(context)


class _StorageOptionsSource(Protocol):
    """What ``load_request`` needs of the hook: the storage options of a location."""

    def storage_options_for(self, location: str) -> dict[str, Any]: ...


def load_request(request: Any, hook: _StorageOptionsSource, table_uri: str) -> dict[str, Any]:
    """The commit request as a dict, from a dict, a JSON string, or a file path/URI.

    A relative path is read relative to the table root (where Spark jobs write their
    requests); URIs are read with the connection's storage options.
    """
    if isinstance(request, dict):
        return request
    if not isinstance(request, str) or not request.strip():
        raise InvalidArgumentError(f"request must be a dict, a JSON object or a file path, got {request!r}")
    text = request.strip()
    if text.startswith("{"):
        return request_document(text, "request")
    location = text if is_absolute_location(text) else table_uri.rstrip("/") + "/" + text
    try:
        with fsspec.open(location, "rb", **hook.storage_options_for(location)) as fh:
            value = json.loads(fh.read())
    except FileNotFoundError:
        raise InvalidArgumentError(f"commit request file not found: {location}") from None
    except (ValueError, RecursionError):
        raise InvalidArgumentError(f"commit request file is not valid JSON: {location}") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"commit request file must hold a JSON object: {location}")
    return value
