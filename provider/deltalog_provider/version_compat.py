"""Everything that differs between the Airflow 3 releases we support, behind one module.

The provider and the example DAGs import Airflow names from here and nowhere else
(official providers keep the same seam in their ``version_compat.py``), so a name
that moves in a later release is a one-file change, and no product code reaches into
Airflow's private modules. The releases differ in:

* where the exceptions live: ``airflow.sdk.exceptions`` from 3.2 (the same classes that
  ``airflow.exceptions`` still re-exports, deprecated), ``airflow.exceptions`` before;
* ``BaseHook``: ``airflow.sdk`` from 3.1, ``airflow.hooks.base`` in 3.0;
* ``BranchMixIn``, ``conf``, ``AssetOrTimeSchedule`` and ``CronTriggerTimetable``:
  ``airflow.sdk`` from 3.2; the standard provider, ``airflow.configuration`` and
  ``airflow.timetables`` before;
* async connection lookup for triggers: ``BaseHook.aget_connection`` from 3.1; on 3.0
  the blocking lookup runs in a worker thread (``aget_connection`` below);
* Deadline Alerts (the SLA of Airflow 3): ``airflow.sdk`` from 3.2,
  ``airflow.sdk.definitions.deadline`` in 3.1 (where 3.1's documentation imports them),
  absent in 3.0. Where they are absent, ``deadline_kwargs`` gives the DAG no alert and
  ``dag_deadline_alerts`` says so, each with one logged line; the compaction's time
  budget then falls back to the task's ``execution_timeout``
  (``DeltaCompactOperator.work_deadline``);
* reading an inlet's asset events since a time: ``.after()`` from 3.2 (``inlet_events_after``);
* asset events added through an alias: 3.0 cannot store nested values in their extra
  (``alias_event_extra``);
* notifiers (``BaseNotifier``, what the SMTP, Slack and other providers' notifiers extend and
  what deltalog's objectives alert delivers through): ``airflow.sdk`` on every 3.x release
  (checked on 3.0.6 to 3.3.2), ``airflow.notifications.basenotifier`` (its older home, kept by
  3.x as a shim) as the fallback;
* the task state store (a sensor's memory across reschedules): 3.3 only
  (``task_state_store``, ``first_reschedule_date``);
* event-driven scheduling (``AssetWatcher`` with a ``BaseEventTrigger``, ``airflow.triggers.base`` on every
  3.x release): from 3.3 the triggerer runs the watchers whose ``shared_stream_key`` is equal in one
  polling loop (``HAS_SHARED_STREAMS``) and gives each watcher its asset's state store
  (``watcher_asset_state``); before, one loop per watcher and no store (the log watcher keeps its
  place in an Airflow Variable instead, one logged line);
* the DAGs folder on ``sys.path``: 3.0's CLI does not put it there
  (``dag_folder_on_sys_path``);
* registering a secret with the log masker: ``airflow.sdk.log.mask_secret`` from 3.1,
  ``airflow.sdk.execution_time.secrets_masker`` in 3.0 (``mask_secret``);
* the metrics facade ``Stats``: ``airflow.sdk.observability.stats`` in the newer releases,
  ``airflow.stats`` (deprecated since) before; ``metrics_enabled`` reads ``[metrics]``;
* what the fleet view (the plugin, run by the API server only) needs, imported on first use
  so that workers never load the API server: ``AirflowPlugin`` (``airflow.sdk.plugins_manager``
  in 3.3, ``airflow.plugins_manager`` before), and the two names Airflow's plugin
  documentation gives a FastAPI app for its authentication, the same on every 3.x release:
  ``get_user`` (``airflow.api_fastapi.core_api.security``, the signed-in user from the JWT
  header or the UI's cookie) and ``get_auth_manager`` (``airflow.api_fastapi.app``).

The releases this is tested on are the ones in ``airflow-releases.toml`` at the
repository root (the lock's release plus the newest patch of every other 3.x minor).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow import __version__ as AIRFLOW_VERSION_STRING
from airflow.sdk import Asset, AssetAlias, BaseOperator, BaseSensorOperator, PokeReturnValue
from airflow.sdk.bases.operator import BaseOperatorMeta
from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

log = logging.getLogger(__name__)


def _version_tuple(version: str) -> tuple[int, int, int]:
    """``(3, 1, 8)`` of ``"3.1.8"`` (pre-release and local suffixes ignored)."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not match:
        return (0, 0, 0)
    major, minor, micro = match.groups()
    return int(major), int(minor), int(micro or 0)


AIRFLOW_VERSION: tuple[int, int, int] = _version_tuple(AIRFLOW_VERSION_STRING)
AIRFLOW_V_3_1_PLUS: bool = AIRFLOW_VERSION >= (3, 1, 0)
AIRFLOW_V_3_2_PLUS: bool = AIRFLOW_VERSION >= (3, 2, 0)
AIRFLOW_V_3_3_PLUS: bool = AIRFLOW_VERSION >= (3, 3, 0)

if TYPE_CHECKING:  # the names as the lock's release (the newest) spells them
    # get_auth_manager, get_user, AirflowPlugin: the API server's, imported on first use (``_LAZY``).
    from airflow.api_fastapi.app import get_auth_manager  # noqa: F401
    from airflow.api_fastapi.core_api.security import get_user  # noqa: F401
    from airflow.sdk import AssetOrTimeSchedule, BaseHook, BaseNotifier, BranchMixIn, CronTriggerTimetable, conf
    from airflow.sdk.definitions.callback import AsyncCallback
    from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSkipException,
        TaskDeferred,
    )
    from airflow.sdk.observability.stats import Stats
    from airflow.sdk.plugins_manager import AirflowPlugin  # noqa: F401
else:
    try:  # Airflow >= 3.2
        from airflow.sdk.exceptions import (
            AirflowException,
            AirflowFailException,
            AirflowNotFoundException,
            AirflowSkipException,
            TaskDeferred,
        )
    except ImportError:  # Airflow 3.0, 3.1
        from airflow.exceptions import (
            AirflowException,
            AirflowFailException,
            AirflowNotFoundException,
            AirflowSkipException,
            TaskDeferred,
        )

    try:  # Airflow >= 3.1
        from airflow.sdk import BaseHook
    except ImportError:  # Airflow 3.0
        from airflow.hooks.base import BaseHook

    try:  # the Task SDK: every 3.x release
        from airflow.sdk import BaseNotifier
    except ImportError:  # its home before the Task SDK, kept as a shim
        from airflow.notifications.basenotifier import BaseNotifier

    try:  # Airflow >= 3.2
        from airflow.sdk import BranchMixIn
    except ImportError:  # Airflow 3.0, 3.1: the standard provider's (a dependency of apache-airflow)
        from airflow.providers.standard.operators.branch import BranchMixIn

    try:  # Airflow >= 3.2
        from airflow.sdk import conf
    except ImportError:  # Airflow 3.0, 3.1
        from airflow.configuration import conf

    try:  # Airflow >= 3.2
        from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable
    except ImportError:  # Airflow 3.0, 3.1
        from airflow.timetables.assets import AssetOrTimeSchedule
        from airflow.timetables.trigger import CronTriggerTimetable

    try:  # the Task SDK's metrics facade (newer releases)
        from airflow.sdk.observability.stats import Stats
    except ImportError:  # older releases
        from airflow.stats import Stats

    try:  # Airflow >= 3.2
        from airflow.sdk import AsyncCallback, DeadlineAlert, DeadlineReference
    except ImportError:
        try:  # Airflow 3.1
            from airflow.sdk.definitions.deadline import AsyncCallback, DeadlineAlert, DeadlineReference
        except ImportError:  # Airflow 3.0: no Deadline Alerts
            AsyncCallback = DeadlineAlert = DeadlineReference = None

#: Whether this Airflow has Deadline Alerts (3.1+).
HAS_DEADLINE_ALERTS: bool = DeadlineAlert is not None
#: Whether the triggerer runs watchers with an equal ``shared_stream_key`` in one loop (3.3+).
HAS_SHARED_STREAMS: bool = callable(getattr(BaseEventTrigger, "shared_stream_key", None))

_said: set[str] = set()


def degraded(feature: str, message: str) -> None:
    """Log once per process that ``feature`` is missing on this Airflow and what is done instead."""
    if feature in _said:
        return
    _said.add(feature)
    log.warning("Airflow %s: %s", AIRFLOW_VERSION_STRING, message)


def _airflow_plugin() -> Any:
    try:  # Airflow 3.3: the Task SDK's plugin base
        from airflow.sdk.plugins_manager import AirflowPlugin
    except ImportError:  # Airflow 3.0-3.2
        from airflow.plugins_manager import AirflowPlugin  # type: ignore[assignment]
    return AirflowPlugin


def _get_user() -> Any:
    from airflow.api_fastapi.core_api.security import get_user

    return get_user


def _get_auth_manager() -> Any:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager


#: Names imported on first use (PEP 562): the API server's, which workers never need. They are
#: imported by name (``from deltalog_provider.version_compat import get_user``) and left out of
#: ``__all__``, so that a star import (the ``_compat`` shim's) does not load the API server.
_LAZY: dict[str, Callable[[], Any]] = {
    "AirflowPlugin": _airflow_plugin,
    "get_user": _get_user,
    "get_auth_manager": _get_auth_manager,
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = _LAZY[name]()
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def metrics_enabled() -> bool:
    """Whether the deployment sends metrics anywhere (StatsD, DogStatsD or OpenTelemetry, ``[metrics]``)."""
    return any(
        conf.getboolean("metrics", name, fallback=False) for name in ("statsd_on", "statsd_datadog_enabled", "otel_on")
    )


def mask_secret(value: str) -> None:
    """Hide ``value`` in every log line of this task from now on (Airflow's secrets masker)."""
    try:  # Airflow >= 3.1
        from airflow.sdk.log import mask_secret as _mask
    except ImportError:  # Airflow 3.0
        from airflow.sdk.execution_time.secrets_masker import mask_secret as _mask  # type: ignore[no-redef]
    _mask(value)


def default_deferrable() -> bool:
    """``[operators] default_deferrable``: what sensors use when ``deferrable`` is not given."""
    return bool(conf.getboolean("operators", "default_deferrable", fallback=False))


async def aget_connection(hook_class: type[Any], conn_id: str) -> Any:
    """A connection fetched from a trigger without blocking the triggerer's event loop.

    ``BaseHook.aget_connection`` from Airflow 3.1; on 3.0 the blocking lookup runs in
    a worker thread, as the providers of that release did.
    """
    native = getattr(hook_class, "aget_connection", None)
    if native is not None:
        return await native(conn_id)
    from asgiref.sync import sync_to_async

    return await sync_to_async(hook_class.get_connection)(conn_id)


def dag_folder_on_sys_path(dag_file: str) -> None:
    """Make the modules beside ``dag_file`` importable, as Airflow does for a DAG bundle's root.

    Airflow 3's DAG processor and task runner put the bundle root (the DAGs folder) on
    ``sys.path``; so do the CLI commands of 3.1+ that parse DAGs (``dags test``, ``dags
    list``, ``dags reserialize``), but 3.0's do not. A DAG file that imports a helper
    package kept in the DAGs folder calls this first, so it parses under every command of
    every release without a ``PYTHONPATH``.
    """
    folder = os.path.dirname(os.path.abspath(dag_file))
    if folder not in sys.path:
        sys.path.append(folder)


def alias_event_extra(extra: dict[str, Any]) -> dict[str, Any]:
    """The extra of an asset event added through an ``AssetAlias``, as this Airflow can store it.

    Airflow 3.0 groups such events by ``frozenset(extra.items())``, so a list or dict value
    fails the task's final state update (3.1 keys them by JSON instead); on 3.0 nested values
    are stored as JSON text (one logged line). Events on a directly declared Asset keep theirs.
    """
    nested = [key for key, value in extra.items() if isinstance(value, dict | list)]
    if AIRFLOW_V_3_1_PLUS or not nested:
        return extra
    degraded(
        "alias-event-extra",
        "asset events added through an alias cannot hold nested values before Airflow 3.1: "
        f"{', '.join(sorted(nested))} stored as JSON text",
    )
    return {key: json.dumps(value, sort_keys=True) if key in nested else value for key, value in extra.items()}


def inlet_events_after(events: Any, when: Any) -> list[Any]:
    """The events of one inlet (``context["inlet_events"][asset]``) newer than ``when``.

    From Airflow 3.2 the accessor filters on the server (``.after``); before, it is the list of
    the asset's events, filtered here on their timestamps (one logged line).
    """
    after = getattr(events, "after", None)
    if after is not None:
        return list(after(when.isoformat()))
    degraded(
        "inlet-events-after",
        "inlet events cannot be filtered by time before Airflow 3.2: the asset's events are read and filtered here",
    )
    return [event for event in events if event.timestamp > when]


def task_state_store(context: Any) -> Any | None:
    """The task's state store (``context["task_state_store"]``, Airflow 3.3+), or None where there is none.

    It keeps values across a sensor's reschedules and retries; where it is missing the
    callers fall back (one logged line) to what the release has.
    """
    store = context.get("task_state_store") if hasattr(context, "get") else None
    if store is None and not AIRFLOW_V_3_3_PLUS:
        degraded(
            "task-state-store",
            "no task_state_store before Airflow 3.3: a version sensor without after_version takes its "
            "baseline from the table's history at its first poke (reschedule mode) or keeps it in the "
            "running task (poke mode); a retry starts from the version current at its first poke",
        )
    return store


def watcher_asset_state(trigger: Any) -> Any | None:
    """The state store of the asset a watcher trigger watches (``trigger.asset_state_store``, 3.3+), or None.

    The triggerer sets it before it runs the trigger, for a trigger watching assets; where it is missing
    (before 3.3, or a trigger run outside a triggerer) the caller keeps its state elsewhere (one logged line).
    """
    store = getattr(trigger, "asset_state_store", None)
    if store is None and not AIRFLOW_V_3_3_PLUS:
        degraded(
            "asset-state-store",
            "no asset state store for watchers before Airflow 3.3: deltalog's log watchers keep the last version "
            "they announced in an Airflow Variable per table (deltalog_log_watch__...)",
        )
    return store


def first_reschedule_date(context: Any) -> Any | None:
    """When a reschedule-mode sensor first poked (``ti.get_first_reschedule_date``), None on the first poke."""
    ti = context.get("ti") if hasattr(context, "get") else None
    getter = getattr(ti, "get_first_reschedule_date", None)
    return getter(context) if getter is not None else None


def deadline_kwargs(
    minutes: int | None, callback: Callable[..., Any], callback_kwargs: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``DAG(**deadline_kwargs(...))``: a Deadline Alert counted from the run's queuing.

    A run still going ``minutes`` after it was queued makes the triggerer call the async
    ``callback`` with ``callback_kwargs``. ``{}`` when ``minutes`` is 0 or None (no
    deadline), and on Airflow 3.0, which has no Deadline Alerts (one logged line).
    """
    if not minutes or minutes <= 0:
        return {}
    if not HAS_DEADLINE_ALERTS:
        degraded(
            "deadline-alerts",
            "no Deadline Alerts before Airflow 3.1: the DAG runs without its deadline alert "
            "(task execution_timeouts still bound every task)",
        )
        return {}
    alert = DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(minutes=minutes),
        callback=AsyncCallback(callback, kwargs=dict(callback_kwargs or {})),
    )
    return {"deadline": alert}


def dag_deadline_alerts(dag: Any) -> list[Any] | None:
    """The Deadline Alerts of ``dag`` (``[]`` when it has none), or None where Airflow has none (3.0)."""
    if not HAS_DEADLINE_ALERTS:
        return None
    alerts = getattr(dag, "deadline", None) or []
    return list(alerts) if isinstance(alerts, list | tuple) else [alerts]


def queued_at_interval(alert: Any) -> timedelta | None:
    """The interval of a Deadline Alert counted from the run's queuing (``DAGRUN_QUEUED_AT``), else None."""
    if type(getattr(alert, "reference", None)).__name__ != "DagRunQueuedAtDeadline":
        return None
    interval = getattr(alert, "interval", None)
    return interval if isinstance(interval, timedelta) else None


__all__ = [
    "AIRFLOW_VERSION",
    "AIRFLOW_VERSION_STRING",
    "AIRFLOW_V_3_1_PLUS",
    "AIRFLOW_V_3_2_PLUS",
    "AIRFLOW_V_3_3_PLUS",
    "HAS_DEADLINE_ALERTS",
    "HAS_SHARED_STREAMS",
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSkipException",
    "Asset",
    "AssetAlias",
    "AssetOrTimeSchedule",
    "AsyncCallback",
    "BaseEventTrigger",
    "BaseHook",
    "BaseNotifier",
    "BaseOperator",
    "BaseOperatorMeta",
    "BaseSensorOperator",
    "BaseTrigger",
    "BranchMixIn",
    "CronTriggerTimetable",
    "DeadlineAlert",
    "DeadlineReference",
    "PokeReturnValue",
    "Stats",
    "TaskDeferred",
    "TriggerEvent",
    "aget_connection",
    "alias_event_extra",
    "conf",
    "dag_deadline_alerts",
    "dag_folder_on_sys_path",
    "first_reschedule_date",
    "inlet_events_after",
    "mask_secret",
    "metrics_enabled",
    "deadline_kwargs",
    "default_deferrable",
    "degraded",
    "queued_at_interval",
    "task_state_store",
    "watcher_asset_state",
]
