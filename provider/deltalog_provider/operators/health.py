"""Health-check operators: fail, or branch, when a table needs maintenance.

Four thresholds (all optional, each an upper bound): the share of small files, the
commits since the last checkpoint, the bytes held by tombstones (what vacuum could
reclaim) and the versions since the last ``VACUUM END``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog.errors import InvalidArgumentError
from deltalog_provider._compat import AirflowFailException, BaseOperatorMeta, BranchMixIn
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.checks import HealthReport, MaintenanceThresholds, evaluate_health
from deltalog_provider.utils.coerce import optional_int

if TYPE_CHECKING:
    from airflow.sdk import Context

THRESHOLD_FIELDS = (
    "max_small_file_share",
    "max_commits_since_checkpoint",
    "max_tombstone_bytes",
    "max_versions_since_vacuum",
)


class HealthThresholdsMixin:
    """The threshold parameters shared by the health-check operators and the maintenance-due sensor.

    :param max_small_file_share: fraction (0..1) of files below half the target size
        (templated); counted only when at least ``min_small_files`` small files exist.
    :param max_commits_since_checkpoint: commits since the last checkpoint (templated).
    :param max_tombstone_bytes: bytes of removed files still tracked as tombstones (templated).
    :param max_versions_since_vacuum: versions since the last ``VACUUM END`` (templated).
    :param target_file_size: the size small files are measured against (templated; default
        the table's ``delta.targetFileSize``, else 128 MiB).
    :param min_small_files: fewer small files than this never make the share count.
    """

    # As Airflow's own mixins do (ResumableJobMixin); typed for BaseOperator subclasses only.
    @BaseOperatorMeta._apply_defaults  # type: ignore[type-var]
    def __init__(
        self,
        *,
        max_small_file_share: float | str | None = None,
        max_commits_since_checkpoint: int | str | None = None,
        max_tombstone_bytes: int | str | None = None,
        max_versions_since_vacuum: int | str | None = None,
        target_file_size: int | str | None = None,
        min_small_files: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.max_small_file_share = max_small_file_share
        self.max_commits_since_checkpoint = max_commits_since_checkpoint
        self.max_tombstone_bytes = max_tombstone_bytes
        self.max_versions_since_vacuum = max_versions_since_vacuum
        self.target_file_size = target_file_size
        self.min_small_files = min_small_files

    def thresholds(self) -> MaintenanceThresholds:
        """The rendered thresholds; at least one must be set."""
        thresholds = MaintenanceThresholds.from_values(
            **{name: getattr(self, name) for name in THRESHOLD_FIELDS}, min_small_files=self.min_small_files
        )
        if thresholds.empty:
            raise InvalidArgumentError("no health threshold given: set at least one max_* parameter")
        return thresholds

    def rendered_target_file_size(self) -> int | None:
        return optional_int(self.target_file_size, "target_file_size")


class DeltaHealthCheckOperator(HealthThresholdsMixin, DeltaTableOperator):
    """Compute table health; fail (without retry) when any threshold is crossed.

    Returns the health report (``health``, ``versions_since_vacuum``, ``crossed``, ``due``)
    to XCom when the table is healthy. Thresholds: see ``HealthThresholdsMixin``.

    :param table: table name, URI or path (templated).
    """

    template_fields: Sequence[str] = (*DeltaTableOperator.template_fields, *THRESHOLD_FIELDS, "target_file_size")
    operation_name = "HEALTH CHECK"

    def changes_table(self) -> bool:
        return False

    def run_operation(self, hook: DeltaTableHook, table: DeltaTable, context: Context) -> HealthReport:
        report = evaluate_health(table, self.thresholds(), self.rendered_target_file_size())
        self.on_report(report)
        return report

    def on_report(self, report: HealthReport) -> None:
        """Fail when maintenance is due (the branch operator chooses a path instead)."""
        if report.due:
            raise AirflowFailException(f"table {self._table_uri} needs maintenance: {report.summary()}")

    def summarize(self, metrics: dict[str, Any]) -> str:
        crossed = metrics.get("crossed") or {}
        h = metrics.get("health") or {}
        state = "maintenance due: " + ", ".join(crossed) if crossed else "healthy"
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

    :param follow_task_ids_if_due: task ids (or task group ids) to run when a threshold is
        crossed. Either one id / a list, or a mapping from check name
        (``small_file_share``, ``commits_since_checkpoint``, ``tombstone_bytes``,
        ``versions_since_vacuum``) to ids, in which case only the paths of the crossed
        checks run (e.g. compaction for small files, vacuum for tombstones).
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
                for task_id in _as_list(due.get(check)):
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
