"""Triggers behind the deferrable sensors; they run in the triggerer's event loop.

Every deltalog call (listing the log, reading commits, replaying a snapshot) is
blocking I/O, so it runs in a worker thread and the loop only sleeps between polls.
The serialized kwargs hold the table URI and the connection id, never storage
options: credentials are fetched again in the triggerer, asynchronously, from the
connection. Each poll asks the question the sensor's poke asks
(``deltalog_provider.utils.checks``) under the hook's transient-error policy
(``DeltaTableHook.arun``), so poke and deferrable modes ride out the same blips and
fail on the same errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import cached_property
from typing import Any

from deltalog import DeltaTable
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.hooks.retry_policy import DEFAULT_RETRY_DELAY, DEFAULT_RETRY_LIMIT, is_refusal
from deltalog_provider.utils.checks import MaintenanceThresholds, evaluate_health, find_new_commit
from deltalog_provider.version_compat import BaseTrigger, TriggerEvent

__all__ = ["DEFAULT_RETRY_LIMIT", "DeltaMaintenanceDueTrigger", "DeltaTableVersionTrigger", "error_event"]

_MODULE = "deltalog_provider.triggers.delta_table"


def error_event(exc: BaseException) -> TriggerEvent:
    """An error the sensor turns into a failure (retried by Airflow unless deltalog refused)."""
    return TriggerEvent(
        {"status": "error", "message": f"{type(exc).__name__}: {exc}", "retryable": not is_refusal(exc)}
    )


class _PollingTrigger(BaseTrigger):
    """Poll ``check(table)`` every ``poke_interval`` seconds until it returns a payload.

    A transient failure of a poll is retried by the hook (``retry_limit`` times in a row,
    ``retry_delay`` seconds apart, doubling); past that, or on any other failure, the trigger
    reports the error and the sensor fails as its poke would have.
    """

    def __init__(
        self,
        *,
        table_uri: str,
        deltalog_conn_id: str,
        poke_interval: float,
        retry_limit: int = DEFAULT_RETRY_LIMIT,
        retry_delay: float = DEFAULT_RETRY_DELAY,
    ) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.deltalog_conn_id = deltalog_conn_id
        self.poke_interval = float(poke_interval)
        self.retry_limit = int(retry_limit)
        self.retry_delay = float(retry_delay)

    @cached_property
    def hook(self) -> DeltaTableHook:
        return DeltaTableHook(self.deltalog_conn_id, retry_limit=self.retry_limit, retry_delay=self.retry_delay)

    def poll(self, table: DeltaTable) -> dict[str, Any] | None:
        raise NotImplementedError

    def _common_kwargs(self) -> dict[str, Any]:
        return {
            "table_uri": self.table_uri,
            "deltalog_conn_id": self.deltalog_conn_id,
            "poke_interval": self.poke_interval,
            "retry_limit": self.retry_limit,
            "retry_delay": self.retry_delay,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            table = await self.hook.aget_table(self.table_uri)
            while True:
                payload = await self.hook.arun(self.poll, table)
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
    :param retry_limit: transient failures in a row a poll is retried through before the error is reported.
    :param retry_delay: seconds before the first of those retries (doubling after each).
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
        retry_delay: float = DEFAULT_RETRY_DELAY,
    ) -> None:
        super().__init__(
            table_uri=table_uri,
            deltalog_conn_id=deltalog_conn_id,
            poke_interval=poke_interval,
            retry_limit=retry_limit,
            retry_delay=retry_delay,
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

    def poll(self, table: DeltaTable) -> dict[str, Any] | None:
        return find_new_commit(table, self.after_version, self.operations, missing_ok=self.wait_for_creation)


class DeltaMaintenanceDueTrigger(_PollingTrigger):
    """Fires when the table crosses any of ``thresholds`` (a ``MaintenanceThresholds.to_dict()``).

    :param table_uri: the resolved table URI.
    :param thresholds: threshold values by name.
    :param target_file_size: size small files are measured against (None: table setting).
    :param deltalog_conn_id: connection whose storage options are used.
    :param poke_interval: seconds between polls.
    :param retry_limit: transient failures in a row a poll is retried through before the error is reported.
    :param retry_delay: seconds before the first of those retries (doubling after each).
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
        retry_delay: float = DEFAULT_RETRY_DELAY,
    ) -> None:
        super().__init__(
            table_uri=table_uri,
            deltalog_conn_id=deltalog_conn_id,
            poke_interval=poke_interval,
            retry_limit=retry_limit,
            retry_delay=retry_delay,
        )
        self.thresholds = dict(thresholds)
        self.target_file_size = target_file_size
        self._thresholds = MaintenanceThresholds.from_dict(self.thresholds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{_MODULE}.DeltaMaintenanceDueTrigger",
            {**self._common_kwargs(), "thresholds": self.thresholds, "target_file_size": self.target_file_size},
        )

    def poll(self, table: DeltaTable) -> dict[str, Any] | None:
        report = evaluate_health(table, self._thresholds, self.target_file_size)
        return report.to_dict() if report.due else None
