"""Sensors on a Delta table: a new commit, or maintenance falling due.

Each works in ``poke`` and ``reschedule`` mode and, with ``deferrable=True``
(default: ``[operators] default_deferrable``), hands the waiting to a trigger in
the triggerer. Poke and trigger ask the same question through
``deltalog_provider.utils.checks``, under the same transient-error policy (the
hook's ``run`` / ``arun``), so the modes cannot disagree: a storage blip is retried
alike, a refusal fails alike. The hook (and the table) are kept for the task, so a
poke-mode sensor fetches and logs its connection once, not on every poke.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.hooks.retry_policy import (
    DEFAULT_RETRY_DELAY,
    DEFAULT_RETRY_LIMIT,
    deltalog_errors_as_task_failures,
)
from deltalog_provider.thresholds import THRESHOLD_FIELDS, HealthThresholdsMixin
from deltalog_provider.triggers.delta_table import DeltaMaintenanceDueTrigger, DeltaTableVersionTrigger
from deltalog_provider.utils.checks import (
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
    BaseTrigger,
    PokeReturnValue,
    default_deferrable,
    first_reschedule_date,
    task_state_store,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["BASELINE_KEY", "DeltaMaintenanceDueSensor", "DeltaTableVersionSensor"]

#: task_state_store key remembering the version seen at the first poke (survives reschedules).
BASELINE_KEY = "deltalog_baseline_version"


class _DeltaSensor(BaseSensorOperator):
    """Shared plumbing: the hook and table kept for the task, the retry policy, error mapping, deferral.

    A subclass says what one poll asks (``poll``: a payload when the wait is over, else None)
    and which trigger asks it in the triggerer (``trigger``).

    :param deltalog_retry_limit: transient failures in a row a poll is retried through in place
        (the hook's policy, the same in the triggerer); then the task fails (its ``retries`` apply).
    :param deltalog_retry_delay: seconds before the first of those retries; each next one waits twice as long.
    """

    template_fields: Sequence[str] = ("table", "deltalog_conn_id")
    ui_color = "#c7e9f1"

    def __init__(
        self,
        *,
        table: str,
        deltalog_conn_id: str = DeltaTableHook.default_conn_name,
        deferrable: bool | None = None,
        deltalog_retry_limit: int = DEFAULT_RETRY_LIMIT,
        deltalog_retry_delay: float = DEFAULT_RETRY_DELAY,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.deltalog_conn_id = deltalog_conn_id
        self.deferrable = default_deferrable() if deferrable is None else strict_bool(deferrable, "deferrable")
        self.deltalog_retry_limit = deltalog_retry_limit
        self.deltalog_retry_delay = deltalog_retry_delay

    @cached_property
    def hook(self) -> DeltaTableHook:
        """The task's hook, made on first use (after templates are rendered) and kept between pokes."""
        return DeltaTableHook(
            self.deltalog_conn_id, retry_limit=self.deltalog_retry_limit, retry_delay=self.deltalog_retry_delay
        )

    @cached_property
    def delta_table(self) -> DeltaTable:
        """The table, opened once per task."""
        return self.hook.get_table(self.table)

    def poll(self, context: Context) -> dict[str, Any] | None:
        raise NotImplementedError

    def trigger(self) -> BaseTrigger:
        raise NotImplementedError

    def _retry_kwargs(self) -> dict[str, Any]:
        return {"retry_limit": self.deltalog_retry_limit, "retry_delay": self.deltalog_retry_delay}

    def _poll(self, context: Context) -> dict[str, Any] | None:
        with deltalog_errors_as_task_failures():
            return self.hook.run(self.poll, context)

    def poke(self, context: Context) -> PokeReturnValue | bool:
        found = self._poll(context)
        return PokeReturnValue(is_done=True, xcom_value=found) if found else False

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        found = self._poll(context)
        if found:
            return found
        timeout = timedelta(seconds=self.timeout) if self.timeout else None
        self.defer(trigger=self.trigger(), method_name="execute_complete", timeout=timeout)

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
        #: The baseline the last poll compared against (the trigger's ``after_version``).
        self._last_baseline = -1

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

    def poll(self, context: Context) -> dict[str, Any] | None:
        self._last_baseline = self._baseline(context, self.delta_table)
        ops = optional_list(self.operations, "operations")
        return find_new_commit(self.delta_table, self._last_baseline, ops, missing_ok=self.wait_for_creation)

    def trigger(self) -> BaseTrigger:
        return DeltaTableVersionTrigger(
            table_uri=self.delta_table.uri,
            after_version=self._last_baseline,
            operations=optional_list(self.operations, "operations"),
            deltalog_conn_id=self.deltalog_conn_id,
            poke_interval=self.poke_interval,
            wait_for_creation=self.wait_for_creation,
            **self._retry_kwargs(),
        )


class DeltaMaintenanceDueSensor(HealthThresholdsMixin, _DeltaSensor):
    """Wait until the table crosses a health threshold (see ``DeltaHealthCheckOperator``).

    Thresholds (all templated, at least one required): ``max_small_file_share``,
    ``max_commits_since_checkpoint``, ``max_tombstone_bytes``, ``max_versions_since_vacuum``;
    plus ``target_file_size`` and ``min_small_files``. Returns the health report (XCom).
    """

    template_fields: Sequence[str] = (*_DeltaSensor.template_fields, *THRESHOLD_FIELDS, "target_file_size")

    def poll(self, context: Context) -> dict[str, Any] | None:
        report = evaluate_health(self.delta_table, self.thresholds(), self.rendered_target_file_size())
        self.log.info("%s", report.summary())
        return report.to_dict() if report.due else None

    def trigger(self) -> BaseTrigger:
        return DeltaMaintenanceDueTrigger(
            table_uri=self.delta_table.uri,
            thresholds=self.thresholds().to_dict(),
            target_file_size=self.rendered_target_file_size(),
            deltalog_conn_id=self.deltalog_conn_id,
            poke_interval=self.poke_interval,
            **self._retry_kwargs(),
        )
