"""Sensors on a Delta table: a new commit, or maintenance falling due.

Each works in ``poke`` and ``reschedule`` mode and, with ``deferrable=True``
(default: ``[operators] default_deferrable``), hands the waiting to a trigger in
the triggerer. Poke and trigger ask the same question through
``deltalog_provider.utils.checks``, so the modes cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.failures import deltalog_errors_as_task_failures
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.thresholds import THRESHOLD_FIELDS, HealthThresholdsMixin
from deltalog_provider.triggers.delta_table import DeltaMaintenanceDueTrigger, DeltaTableVersionTrigger
from deltalog_provider.utils.checks import (
    MaintenanceThresholds,
    current_version,
    evaluate_health,
    find_new_commit,
    version_at_time,
)
from deltalog_provider.utils.coerce import optional_int, optional_list, strict_bool
from deltalog_provider.version_compat import (
    AirflowException,
    AirflowFailException,
    BaseSensorOperator,
    PokeReturnValue,
    default_deferrable,
    first_reschedule_date,
    task_state_store,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

#: task_state_store key remembering the version seen at the first poke (survives reschedules).
BASELINE_KEY = "deltalog_baseline_version"


class _DeltaSensor(BaseSensorOperator):
    """Shared plumbing: the hook, error mapping and the deferral round trip."""

    template_fields: Sequence[str] = ("table", "deltalog_conn_id")
    ui_color = "#c7e9f1"

    def __init__(
        self,
        *,
        table: str,
        deltalog_conn_id: str = DeltaTableHook.default_conn_name,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.deltalog_conn_id = deltalog_conn_id
        self.deferrable = default_deferrable() if deferrable is None else strict_bool(deferrable, "deferrable")

    def _table(self) -> DeltaTable:
        return DeltaTableHook(deltalog_conn_id=self.deltalog_conn_id).get_table(self.table)

    def _defer_timeout(self) -> timedelta | None:
        return timedelta(seconds=self.timeout) if self.timeout else None

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger fired: return its payload, or fail with its message."""
        if not event or event.get("status") != "success":
            message = (event or {}).get("message", "the trigger ended without an event")
            if event and not event.get("retryable", True):
                raise AirflowFailException(message)
            raise AirflowException(message)
        payload = {k: v for k, v in event.items() if k != "status"}
        self.log.info("%s: condition met (%s)", self.table, payload.get("version"))
        return payload


class DeltaTableVersionSensor(_DeltaSensor):
    """Wait until the table has a commit newer than ``after_version``, optionally of given operations.

    :param table: table name, URI or path (templated).
    :param after_version: succeed on a version strictly greater than this (templated). Default:
        the version when the sensor first poked, remembered across reschedules and retries
        through ``task_state_store`` (Airflow 3.3+); before 3.3, reschedule mode reads it back
        from the commit timestamps at the first poke's time, and a retry starts afresh.
    :param operations: only commits whose commitInfo operation is one of these count, e.g.
        ``["WRITE", "MERGE"]`` (templated; a list or a comma-separated string).
    :param wait_for_creation: treat a table that does not exist yet as version -1 (so its
        creation fires the sensor) instead of failing.
    :param deferrable: wait in the triggerer instead of a worker slot.

    Returns (XCom) ``{"version", "previous_version", "operation", ...}`` of the commit found.
    """

    template_fields: Sequence[str] = (*_DeltaSensor.template_fields, "after_version", "operations")

    def __init__(
        self,
        *,
        after_version: int | str | None = None,
        operations: list[str] | str | None = None,
        wait_for_creation: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.after_version = after_version
        self.operations = operations
        self.wait_for_creation = strict_bool(wait_for_creation, "wait_for_creation")
        #: The baseline of this task's pokes where Airflow has no task_state_store (see ``_baseline``).
        self._poked_baseline: int | None = None

    def _baseline(self, context: Context, table: DeltaTable) -> int:
        explicit = optional_int(self.after_version, "after_version")
        if explicit is not None:
            return explicit
        store = task_state_store(context)
        if store is not None:
            remembered = store.get(BASELINE_KEY)
            if isinstance(remembered, int):
                return remembered
        elif self._poked_baseline is not None:  # poke mode: the same operator between pokes
            return self._poked_baseline
        elif self.mode == "reschedule" and (since := first_reschedule_date(context)) is not None:
            # A new operator per poke and nowhere to keep the baseline: the version the table had
            # when the sensor first poked, from the commit timestamps.
            version = version_at_time(table, since, missing_ok=self.wait_for_creation)
            self.log.info("waiting for a commit after version %d of %s (its version at %s)", version, table.uri, since)
            return version
        version = current_version(table, missing_ok=self.wait_for_creation)
        if store is not None:
            store.set(BASELINE_KEY, version)
        self._poked_baseline = version
        self.log.info("waiting for a commit after version %d of %s", version, table.uri)
        return version

    def _find(self, context: Context) -> tuple[DeltaTable, int, dict[str, Any] | None]:
        table = self._table()
        baseline = self._baseline(context, table)
        ops = optional_list(self.operations, "operations")
        return table, baseline, find_new_commit(table, baseline, ops, missing_ok=self.wait_for_creation)

    def poke(self, context: Context) -> PokeReturnValue | bool:
        with deltalog_errors_as_task_failures():
            _, _, found = self._find(context)
        return PokeReturnValue(is_done=True, xcom_value=found) if found else False

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        with deltalog_errors_as_task_failures():
            table, baseline, found = self._find(context)
        if found:
            return found
        self.defer(
            trigger=DeltaTableVersionTrigger(
                table_uri=table.uri,
                after_version=baseline,
                operations=optional_list(self.operations, "operations"),
                deltalog_conn_id=self.deltalog_conn_id,
                poke_interval=self.poke_interval,
                wait_for_creation=self.wait_for_creation,
            ),
            method_name="execute_complete",
            timeout=self._defer_timeout(),
        )


class DeltaMaintenanceDueSensor(HealthThresholdsMixin, _DeltaSensor):
    """Wait until the table crosses a health threshold (see ``DeltaHealthCheckOperator``).

    Thresholds (all templated, at least one required): ``max_small_file_share``,
    ``max_commits_since_checkpoint``, ``max_tombstone_bytes``, ``max_versions_since_vacuum``;
    plus ``target_file_size`` and ``min_small_files``. Returns the health report (XCom).
    """

    template_fields: Sequence[str] = (*_DeltaSensor.template_fields, *THRESHOLD_FIELDS, "target_file_size")

    def _evaluate(self) -> tuple[DeltaTable, MaintenanceThresholds, int | None, dict[str, Any] | None]:
        table = self._table()
        thresholds = self.thresholds()
        target = self.rendered_target_file_size()
        report = evaluate_health(table, thresholds, target)
        self.log.info("%s", report.summary())
        return table, thresholds, target, (report.to_dict() if report.due else None)

    def poke(self, context: Context) -> PokeReturnValue | bool:
        with deltalog_errors_as_task_failures():
            *_, due = self._evaluate()
        return PokeReturnValue(is_done=True, xcom_value=due) if due else False

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        with deltalog_errors_as_task_failures():
            table, thresholds, target, due = self._evaluate()
        if due:
            return due
        self.defer(
            trigger=DeltaMaintenanceDueTrigger(
                table_uri=table.uri,
                thresholds=thresholds.to_dict(),
                target_file_size=target,
                deltalog_conn_id=self.deltalog_conn_id,
                poke_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=self._defer_timeout(),
        )
