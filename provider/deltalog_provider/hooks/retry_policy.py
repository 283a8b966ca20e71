"""The one transient-error policy of the provider: which errors are retried, how often, how long apart.

Sensors in poke or reschedule mode, the triggers of deferrable sensors and the operators
all ask ``DeltaTableHook`` to run a table read under this policy (``DeltaTableHook.run`` /
``arun``), so a storage blip is ridden out the same way whichever mode a task runs in:

* **transient** (:func:`is_transient`): a deltalog error marked ``retryable`` (``StorageError``,
  ``EngineError``, ...) or a network-level ``ConnectionError`` / ``TimeoutError``. Retried in
  place up to ``retry_limit`` times, ``retry_delay`` seconds after the first failure and twice
  as long after each next one (capped at a minute). Past that, it fails the task as an
  ordinary failure, so the task's own ``retries`` apply.
* **a refusal** (:func:`is_refusal`): a deltalog error marked not ``retryable`` (bad input,
  an unsafe parameter, an unsupported table feature, not a table). Never retried: it fails
  the task at once, without the task's retries (``AirflowFailException``).
* anything else is not retried in place and fails the task as an ordinary failure.

Writes are tried once in place (see ``DeltaTableOperator``): their transient failures go to
the task's retries, which re-plan from the table's state. The retries run on tenacity (as
the official Databricks provider's hook does), synchronously or in the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from deltalog.errors import DeltaLogError, InvalidArgumentError
from deltalog_provider.version_compat import AirflowException, AirflowFailException

__all__ = [
    "DEFAULT_RETRY_DELAY",
    "DEFAULT_RETRY_LIMIT",
    "MAX_RETRY_DELAY",
    "RetryPolicy",
    "deltalog_errors_as_task_failures",
    "is_refusal",
    "is_transient",
]

T = TypeVar("T")

#: Transient failures in a row retried in place before the task fails (then its ``retries`` apply).
DEFAULT_RETRY_LIMIT = 3
#: Seconds before the first retry; each next one waits twice as long.
DEFAULT_RETRY_DELAY = 1.0
#: No wait between two tries is longer than this (unless ``retry_delay`` itself is).
MAX_RETRY_DELAY = 60.0


def is_transient(exc: BaseException) -> bool:
    """A failure worth trying again in place: a retryable deltalog error, or a network-level one."""
    if isinstance(exc, DeltaLogError):
        return bool(getattr(exc, "retryable", False))
    return isinstance(exc, ConnectionError | TimeoutError)


def is_refusal(exc: BaseException) -> bool:
    """deltalog said no (bad input, unsafe, unsupported): failing again on a retry is certain."""
    return isinstance(exc, DeltaLogError) and not getattr(exc, "retryable", False)


@contextlib.contextmanager
def deltalog_errors_as_task_failures() -> Iterator[None]:
    """Re-raise deltalog errors as Airflow failures: refusals fail at once, the rest may retry."""
    try:
        yield
    except DeltaLogError as exc:
        message = f"{type(exc).__name__}: {exc}"
        if is_refusal(exc):
            raise AirflowFailException(message) from exc
        raise AirflowException(message) from exc


@dataclass(frozen=True)
class RetryPolicy:
    """How many transient failures in a row are retried in place, and how long apart.

    :param retry_limit: retries after the first try (0: try once).
    :param retry_delay: seconds before the first retry; each next one waits twice as long,
        at most ``MAX_RETRY_DELAY`` (or ``retry_delay`` when that is longer).
    """

    retry_limit: int = DEFAULT_RETRY_LIMIT
    retry_delay: float = DEFAULT_RETRY_DELAY

    def __post_init__(self) -> None:
        if isinstance(self.retry_limit, bool) or not isinstance(self.retry_limit, int) or self.retry_limit < 0:
            raise InvalidArgumentError(f"retry_limit must be a whole number of at least 0, got {self.retry_limit!r}")
        delay = self.retry_delay
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not math.isfinite(delay) or delay < 0:
            raise InvalidArgumentError(f"retry_delay must be a number of seconds of at least 0, got {delay!r}")

    def delays(self) -> list[float]:
        """The waits before each retry, in order (what the policy promises; tenacity computes the same)."""
        cap = max(MAX_RETRY_DELAY, float(self.retry_delay))
        return [min(float(self.retry_delay) * 2**i, cap) for i in range(self.retry_limit)]

    def _arguments(self, log: Any, what: str) -> dict[str, Any]:
        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            wait = state.next_action.sleep if state.next_action is not None else 0.0
            log.warning(
                "%s failed (%s: %s); retry %d of %d in %ss",
                what,
                type(exc).__name__,
                exc,
                state.attempt_number,
                self.retry_limit,
                round(wait, 3),
            )

        return {
            "stop": stop_after_attempt(self.retry_limit + 1),
            "wait": wait_exponential(multiplier=self.retry_delay, max=max(MAX_RETRY_DELAY, float(self.retry_delay))),
            "retry": retry_if_exception(is_transient),
            "before_sleep": before_sleep,
            "reraise": True,
        }

    def call(
        self,
        fn: Callable[..., T],
        *args: Any,
        log: Any,
        what: str,
        **kwargs: Any,
    ) -> T:
        """``fn(*args, **kwargs)``, tried again on a transient failure; the last failure is raised as is."""
        return Retrying(**self._arguments(log, what))(fn, *args, **kwargs)

    async def acall(
        self,
        fn: Callable[..., T],
        *args: Any,
        log: Any,
        what: str,
        **kwargs: Any,
    ) -> T:
        """The same from an event loop: each try runs ``fn`` in a worker thread, the waits sleep the coroutine."""
        return await AsyncRetrying(**self._arguments(log, what))(asyncio.to_thread, fn, *args, **kwargs)
