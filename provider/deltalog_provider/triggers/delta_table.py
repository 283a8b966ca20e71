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
from deltalog_provider._compat import BaseTrigger, TriggerEvent
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.utils.checks import MaintenanceThresholds, evaluate_health, find_new_commit

_MODULE = "deltalog_provider.triggers.delta_table"


def error_event(exc: BaseException) -> TriggerEvent:
    """An error the sensor turns into a failure (retried only when deltalog says it may help)."""
    retryable = bool(getattr(exc, "retryable", True)) if isinstance(exc, DeltaLogError) else True
    return TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}", "retryable": retryable})


class _PollingTrigger(BaseTrigger):
    """Poll ``check(table)`` in a thread every ``poke_interval`` seconds until it returns a payload."""

    def __init__(self, *, table_uri: str, deltalog_conn_id: str, poke_interval: float) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.deltalog_conn_id = deltalog_conn_id
        self.poke_interval = float(poke_interval)

    def _check(self, table: DeltaTable) -> dict[str, Any] | None:
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            settings = await DeltaTableHook.aget_settings(self.deltalog_conn_id)
            table = await asyncio.to_thread(DeltaTable, self.table_uri, settings.storage_options)
            check: Callable[[DeltaTable], dict[str, Any] | None] = self._check
            while True:
                payload = await asyncio.to_thread(check, table)
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
    ) -> None:
        super().__init__(table_uri=table_uri, deltalog_conn_id=deltalog_conn_id, poke_interval=poke_interval)
        self.after_version = int(after_version)
        self.operations = list(operations) if operations else None
        self.wait_for_creation = bool(wait_for_creation)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{_MODULE}.DeltaTableVersionTrigger",
            {
                "table_uri": self.table_uri,
                "after_version": self.after_version,
                "operations": self.operations,
                "deltalog_conn_id": self.deltalog_conn_id,
                "poke_interval": self.poke_interval,
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
    """

    def __init__(
        self,
        *,
        table_uri: str,
        thresholds: dict[str, Any],
        target_file_size: int | None = None,
        deltalog_conn_id: str = DeltaTableHook.default_conn_name,
        poke_interval: float = 60.0,
    ) -> None:
        super().__init__(table_uri=table_uri, deltalog_conn_id=deltalog_conn_id, poke_interval=poke_interval)
        self.thresholds = dict(thresholds)
        self.target_file_size = target_file_size
        self._thresholds = MaintenanceThresholds.from_dict(self.thresholds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{_MODULE}.DeltaMaintenanceDueTrigger",
            {
                "table_uri": self.table_uri,
                "thresholds": self.thresholds,
                "target_file_size": self.target_file_size,
                "deltalog_conn_id": self.deltalog_conn_id,
                "poke_interval": self.poke_interval,
            },
        )

    def _check(self, table: DeltaTable) -> dict[str, Any] | None:
        report = evaluate_health(table, self._thresholds, self.target_file_size)
        return report.to_dict() if report.due else None
