"""Health-check operators: report (or fail, or branch) when a table needs maintenance.

Without thresholds, "due" is the core's verdict (``deltalog.maintenance.due``): an operation is
due when it would have work (compaction finds a bin, the checkpoint interval has
passed, vacuum has reclaimable files past retention, log cleanup has expired files).
Four optional thresholds narrow it (each an upper bound): the share of small files, the
commits since the last checkpoint, the bytes held by tombstones and the versions since
the last ``VACUUM END``; a crossed threshold only counts when its operation has work.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.thresholds import THRESHOLD_FIELDS, HealthThresholdsMixin
from deltalog_provider.utils.checks import CHECK_OPERATION, HealthReport, evaluate_health
from deltalog_provider.utils.coerce import strict_bool
from deltalog_provider.utils.results import is_templated
from deltalog_provider.version_compat import AirflowFailException, BranchMixIn

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DeltaHealthBranchOperator", "DeltaHealthCheckOperator"]


class DeltaHealthCheckOperator(HealthThresholdsMixin, DeltaTableOperator):
    """Compute table health and what is due; return the report, or fail when asked to.

    Returns the health report (``health``, ``versions_since_vacuum``, ``crossed``, ``due``,
    ``operations``, ``reasons``, ``not_actionable``) to XCom. Thresholds: see
    ``HealthThresholdsMixin``.

    :param table: table name, URI or path (templated).
    :param fail_when_due: fail the task (without retry) when maintenance is due, instead
        of returning the report (default False; templated; a real bool or "true"/"false").
    """

    template_fields: Sequence[str] = (
        *DeltaTableOperator.template_fields,
        *THRESHOLD_FIELDS,
        "target_file_size",
        "fail_when_due",
    )
    operation_name = "HEALTH CHECK"

    def __init__(self, *, fail_when_due: bool | str = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not is_templated(fail_when_due):
            strict_bool(fail_when_due, "fail_when_due")
        self.fail_when_due = fail_when_due

    def changes_table(self) -> bool:
        return False

    def run_operation(self, table: DeltaTable, context: Context) -> HealthReport:
        report = self.read(evaluate_health, table, self.thresholds(), self.rendered_target_file_size())
        self.on_report(report)
        return report

    def on_report(self, report: HealthReport) -> None:
        """Fail when maintenance is due and ``fail_when_due`` (the branch operator chooses a path instead)."""
        if report.due and strict_bool(self.fail_when_due, "fail_when_due"):
            raise AirflowFailException(f"table {self._table_uri} needs maintenance: {report.summary()}")

    def summarize(self, result: Any, metrics: dict[str, Any]) -> str:
        crossed = metrics.get("crossed") or {}
        h = metrics.get("health") or {}
        state = "maintenance due: " + ", ".join(crossed) if crossed else "nothing due"
        return (
            f"HEALTH {self._table_uri} v{metrics.get('version')}: {state} "
            f"(small files {h.get('num_small_files')}/{h.get('num_files')}, commits since checkpoint "
            f"{h.get('commits_since_checkpoint')}, tombstone bytes {h.get('tombstone_bytes')}, versions since "
            f"vacuum {metrics.get('versions_since_vacuum')})"
        )


def _as_list(task_ids: str | Iterable[str] | None) -> list[str]:
    if task_ids is None:
        return []
    if isinstance(task_ids, str):
        return [task_ids]
    return list(task_ids)


class DeltaHealthBranchOperator(DeltaHealthCheckOperator, BranchMixIn):
    """Branch on table health instead of failing: follow the maintenance path only when due.

    :param follow_task_ids_if_due: task ids (or task group ids) to run when maintenance is
        due. Either one id / a list, or a mapping from check name (``small_file_share``,
        ``commits_since_checkpoint``, ``tombstone_bytes``, ``versions_since_vacuum``) or
        operation name (``compaction``, ``checkpoint``, ``vacuum``, ``log_cleanup``) to ids,
        in which case only the paths of what is due run.
    :param follow_task_ids_if_healthy: ids to run when nothing is crossed (default none:
        every downstream task is skipped).

    The health report is still returned to XCom.
    """

    inherits_from_skipmixin = True

    def __init__(
        self,
        *,
        follow_task_ids_if_due: str | Iterable[str] | dict[str, str | Iterable[str]],
        follow_task_ids_if_healthy: str | Iterable[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.follow_task_ids_if_due = follow_task_ids_if_due
        self.follow_task_ids_if_healthy = follow_task_ids_if_healthy
        super().__init__(**kwargs)

    def on_report(self, report: HealthReport) -> None:
        """Branching happens after the summary is logged, in ``execute``."""

    def choose_branch(self, report: dict[str, Any]) -> list[str]:
        crossed = report.get("crossed") or {}
        if not crossed:
            return _as_list(self.follow_task_ids_if_healthy)
        due = self.follow_task_ids_if_due
        if isinstance(due, dict):
            chosen: list[str] = []
            for check in crossed:
                # A mapping may name checks (small_file_share) or operations (compaction).
                ids = due.get(check) if check in due else due.get(CHECK_OPERATION.get(check, ""))
                for task_id in _as_list(ids):
                    if task_id not in chosen:
                        chosen.append(task_id)
            return chosen
        return _as_list(due)

    def execute(self, context: Context) -> dict[str, Any]:
        report = super().execute(context)
        if self.do_xcom_push:
            # Skipping downstream tasks ends the task through an exception, which bypasses
            # the usual push of the return value: push the report first.
            context["ti"].xcom_push(key="return_value", value=report)
        self.do_branch(context, self.choose_branch(report) or None)
        return report
