"""The Airflow names the provider uses, imported from one place.

Airflow 3 moved the authoring API to ``airflow.sdk``; ``BaseHook`` only joined it
in 3.1 and ``conf`` lives in ``airflow.sdk.configuration``. Keeping the imports
here means a move in a later Airflow release is a one-file change.
"""

from __future__ import annotations

from airflow.sdk import Asset, AssetAlias, BaseOperator, BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException
from airflow.triggers.base import BaseTrigger, TriggerEvent

try:
    from airflow.sdk.bases.operator import BaseOperatorMeta
except ImportError:  # pragma: no cover - older Airflow 3.x
    from airflow.models.baseoperator import BaseOperatorMeta  # type: ignore[no-redef,import-not-found]

try:  # Airflow >= 3.1
    from airflow.sdk import BaseHook
except ImportError:  # pragma: no cover - Airflow 3.0
    from airflow.hooks.base import BaseHook  # type: ignore[no-redef,attr-defined]

try:
    from airflow.sdk.configuration import conf
except ImportError:  # pragma: no cover - older Airflow 3.x
    from airflow.configuration import conf  # type: ignore[no-redef]

try:
    from airflow.sdk.bases.branch import BranchMixIn
except ImportError:  # pragma: no cover - older Airflow 3.x
    from airflow.providers.standard.operators.branch import BranchMixIn  # type: ignore[no-redef,assignment]


try:  # the Task SDK's metrics facade (newer releases; airflow.stats before, deprecated since)
    from airflow.sdk.observability.stats import Stats
except ImportError:  # pragma: no cover - Airflow 3.0/3.1
    from airflow.stats import Stats  # type: ignore[no-redef,attr-defined]


def metrics_enabled() -> bool:
    """Whether the deployment sends metrics anywhere (StatsD, DogStatsD or OpenTelemetry, ``[metrics]``)."""
    return any(
        conf.getboolean("metrics", name, fallback=False) for name in ("statsd_on", "statsd_datadog_enabled", "otel_on")
    )


def default_deferrable() -> bool:
    """``[operators] default_deferrable``: what sensors use when ``deferrable`` is not given."""
    return conf.getboolean("operators", "default_deferrable", fallback=False)


__all__ = [
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "Asset",
    "AssetAlias",
    "BaseHook",
    "BaseOperator",
    "BaseOperatorMeta",
    "BaseSensorOperator",
    "BaseTrigger",
    "BranchMixIn",
    "PokeReturnValue",
    "Stats",
    "TriggerEvent",
    "conf",
    "default_deferrable",
    "metrics_enabled",
]
