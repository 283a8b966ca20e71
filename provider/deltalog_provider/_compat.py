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
    "TriggerEvent",
    "conf",
    "default_deferrable",
]
