"""``DeltaLogCleanupOperator``: delete log files older than the log retention, as the protocol allows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import human_bytes

if TYPE_CHECKING:
    from airflow.sdk import Context


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

    def run_operation(self, hook: DeltaTableHook, table: DeltaTable, context: Context) -> Any:
        from deltalog.log_cleanup import cleanup_log

        return self.call(cleanup_log, table, dry_run=self.dry_run)

    def is_noop(self, metrics: dict[str, Any]) -> bool:
        return not metrics.get("num_deleted")

    def summarize(self, metrics: dict[str, Any]) -> str:
        if metrics.get("skipped_reason"):
            return f"LOG CLEANUP {self._table_uri}: nothing deleted ({metrics['skipped_reason']})"
        count = metrics.get("num_files") if self.dry_run else metrics.get("num_deleted")
        verb = "would delete" if self.dry_run else "deleted"
        return (
            f"LOG CLEANUP {self._table_uri}: {verb} {count} log files ({human_bytes(metrics.get('bytes'))}) "
            f"older than {metrics.get('cutoff_time')}; oldest version kept {metrics.get('oldest_version_kept')}, "
            f"table at version {metrics.get('latest_version')}"
        )

    def result_version(self, metrics: dict[str, Any]) -> int | None:
        latest = metrics.get("latest_version")
        return latest if isinstance(latest, int) else None
