"""Triggers behind the deferrable sensors; they run in the triggerer's event loop.

Every deltalog call (listing the log, reading commits, replaying a snapshot) is
blocking I/O, so it runs in a worker thread (``asyncio.to_thread``) and the loop
only sleeps between polls. The serialized kwargs hold the table URI and the
connection id, never storage options: credentials are fetched again in the
triggerer, asynchronously, from the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from deltalog import DeltaTable
from deltalog.errors import DeltaLogError
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.utils.checks import MaintenanceThresholds, evaluate_health, find_new_commit
from deltalog_provider.version_compat import BaseTrigger, TriggerEvent

_MODULE = "deltalog_provider.triggers.delta_table"


def error_event(exc: BaseException) -> TriggerEvent:
    """An error the sensor turns into a failure (retried only when deltalog says it may help)."""
    retryable = bool(getattr(exc, "retryable", True)) if isinstance(exc, DeltaLogError) else True
    return TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}", "retryable": retryable})


#: Consecutive transient failures (storage blips) a trigger polls through before it reports one.
DEFAULT_RETRY_LIMIT = 3


def is_transient(exc: BaseException) -> bool:
    """A failure worth polling through: a retryable deltalog error, or a network-level one."""
    if isinstance(exc, DeltaLogError):
        return bool(getattr(exc, "retryable", False))
    return isinstance(exc, ConnectionError | TimeoutError)


class _PollingTrigger(BaseTrigger):
    """Poll ``check(table)`` in a thread every ``poke_interval`` seconds until it returns a payload.

    A transient failure (``is_transient``) does not end the wait: the trigger logs it and
    polls again after ``poke_interval``, up to ``retry_limit`` failures in a row (as the
    Databricks provider's triggers do); then, or on any other failure, it reports the error.
    """

    def __init__(
        self, *, table_uri: str, deltalog_conn_id: str, poke_interval: float, retry_limit: int = DEFAULT_RETRY_LIMIT
    ) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.deltalog_conn_id = deltalog_conn_id
        self.poke_interval = float(poke_interval)
        self.retry_limit = int(retry_limit)

    def _check(self, table: DeltaTable) -> dict[str, Any] | None:
        raise NotImplementedError

    def _common_kwargs(self) -> dict[str, Any]:
        return {
            "table_uri": self.table_uri,
            "deltalog_conn_id": self.deltalog_conn_id,
            "poke_interval": self.poke_interval,
            "retry_limit": self.retry_limit,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            settings = await DeltaTableHook.aget_settings(self.deltalog_conn_id)
            table = await asyncio.to_thread(DeltaTable, self.table_uri, settings.options_for(self.table_uri))
            check: Callable[[DeltaTable], dict[str, Any] | None] = self._check
            failures = 0
            while True:
                try:
                    payload = await asyncio.to_thread(check, table)
                except Exception as exc:  # noqa: BLE001 - judged below: polled through or reported
                    if not is_transient(exc) or failures >= self.retry_limit:
                        raise
                    failures += 1
                    self.log.warning(
                        "%s: poll failed (%s: %s); retry %d of %d in %.1fs",
                        self.table_uri,
                        type(exc).__name__,
                        exc,
                        failures,
                        self.retry_limit,
                        self.poke_interval,
                    )
                    await asyncio.sleep(self.poke_interval)
                    continue
                failures = 0
                if payload is not None:
                    yield TriggerEvent({"status": "success", **payload})
                    return
                self.log.debug("%s: condition not met; next poll in %.1fs", self.table_uri, self.poke_interval)
                await asyncio.sleep(self.poke_interval)
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the task, not the triggerer
            yield error_event(exc)


class DeltaTableVersionTrigger(_PollingTrigger):
    """Fires when the table has a commit newer than ``after_version`` (of ``operations``, if given).

    :param table_uri: the resolved table URI.
    :param after_version: fire for a version strictly greater than this (-1: the table's creation).
    :param operations: commitInfo operations to wait for (``["WRITE", "MERGE"]``); None for any.
    :param deltalog_conn_id: connection whose storage options are used.
    :param poke_interval: seconds between polls.
    :param wait_for_creation: a missing table means "not yet" instead of an error.
    :param retry_limit: transient failures in a row polled through before the error is reported.
    """

    def __init__(
        self,
        *,
        table_uri: str,
        after_version: int,
        operations: list[str] | None = None,
        deltalog_conn_id: str = DeltaTableHook.default_conn_name,
        poke_interval: float = 60.0,
        wait_for_creation: bool = False,
        retry_limit: int = DEFAULT_RETRY_LIMIT,
    ) -> None:
        super().__init__(
            table_uri=table_uri, deltalog_conn_id=deltalog_conn_id, poke_interval=poke_interval, retry_limit=retry_limit
        )
        self.after_version = int(after_version)
        self.operations = list(operations) if operations else None
        self.wait_for_creation = bool(wait_for_creation)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{_MODULE}.DeltaTableVersionTrigger",
            {
                **self._common_kwargs(),
                "after_version": self.after_version,
                "operations": self.operations,
                "wait_for_creation": self.wait_for_creation,
            },
        )

    def _check(self, table: DeltaTable) -> dict[str, Any] | None:
        return find_new_commit(table, self.after_version, self.operations, missing_ok=self.wait_for_creation)


class DeltaMaintenanceDueTrigger(_PollingTrigger):
    """Fires when the table crosses any of ``thresholds`` (a ``MaintenanceThresholds.to_dict()``).

    :param table_uri: the resolved table URI.
    :param thresholds: threshold values by name.
    :param target_file_size: size small files are measured against (None: table setting).
    :param deltalog_conn_id: connection whose storage options are used.
    :param poke_interval: seconds between polls.
    :param retry_limit: transient failures in a row polled through before the error is reported.
    """

    def __init__(
        self,
        *,
        table_uri: str,
        thresholds: dict[str, Any],
        target_file_size: int | None = None,
        deltalog_conn_id: str = DeltaTableHook.default_conn_name,
        poke_interval: float = 60.0,
        retry_limit: int = DEFAULT_RETRY_LIMIT,
    ) -> None:
        super().__init__(
            table_uri=table_uri, deltalog_conn_id=deltalog_conn_id, poke_interval=poke_interval, retry_limit=retry_limit
        )
        self.thresholds = dict(thresholds)
        self.target_file_size = target_file_size
        self._thresholds = MaintenanceThresholds.from_dict(self.thresholds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{_MODULE}.DeltaMaintenanceDueTrigger",
            {**self._common_kwargs(), "thresholds": self.thresholds, "target_file_size": self.target_file_size},
        )

    def _check(self, table: DeltaTable) -> dict[str, Any] | None:
        report = evaluate_health(table, self._thresholds, self.target_file_size)
        return report.to_dict() if report.due else None
