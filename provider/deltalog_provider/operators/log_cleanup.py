"""``DeltaLogCleanupOperator``: delete log files older than the log retention, as the protocol allows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.operators.base import DeltaTableOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DeltaLogCleanupOperator"]


class DeltaLogCleanupOperator(DeltaTableOperator):
    """Remove expired commits and checkpoints (``delta.logRetentionDuration``) from ``_delta_log``.

    :param table: table name, URI or path (templated).
    :param dry_run: only report what would be deleted (no asset event is declared) (templated;
        ``True``/``False`` or ``"true"``/``"false"`` only).
    """

    template_fields: Sequence[str] = (*DeltaTableOperator.template_fields, "dry_run")
    bool_fields: Sequence[str] = (*DeltaTableOperator.bool_fields, "dry_run")
    operation_name = "LOG CLEANUP"

    def __init__(self, *, dry_run: bool = False, **kwargs: Any) -> None:
        self.dry_run = dry_run
        super().__init__(**kwargs)

    def changes_table(self) -> bool:
        return self.flag("dry_run") is not True  # a templated dry_run may still delete

    def run_operation(self, table: DeltaTable, context: Context) -> Any:
        from deltalog import cleanup_log

        return (self.read if self.dry_run else self.call)(cleanup_log, table, dry_run=self.dry_run)

    def is_noop(self, metrics: dict[str, Any]) -> bool:
        return not metrics.get("num_deleted")

    def result_version(self, metrics: dict[str, Any]) -> int | None:
        latest = metrics.get("latest_version")
        return latest if isinstance(latest, int) else None
