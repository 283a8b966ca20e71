"""deltalog errors as Airflow task failures, for operators and sensors alike.

deltalog marks every error ``retryable`` or not; Airflow has two failure kinds
to match: a refusal or bad input fails the task at once (``AirflowFailException``,
no retry), anything else (storage blips, conflicts) may be retried.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from deltalog.errors import DeltaLogError
from deltalog_provider.version_compat import AirflowException, AirflowFailException


@contextlib.contextmanager
def deltalog_errors_as_task_failures() -> Iterator[None]:
    """Re-raise deltalog errors as Airflow failures: refusals fail at once, the rest may retry."""
    try:
        yield
    except DeltaLogError as exc:
        message = f"{type(exc).__name__}: {exc}"
        if getattr(exc, "retryable", False):
            raise AirflowException(message) from exc
        raise AirflowFailException(message) from exc
