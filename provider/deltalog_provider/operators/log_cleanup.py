"""``DeltaLogCleanupOperator``: delete log files older than the log retention, as the protocol allows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import first_number, human_bytes

if TYPE_CHECKING:
    from airflow.sdk import Context


class DeltaLogCleanupOperator(DeltaTableOperator):
    """Remove expired commits and checkpoints (``delta.logRetentionDuration``) from ``_delta_log``.

    :param table: table name, URI or path (templated).
    :param dry_run: only report what would be deleted (no asset event is declared).
    """

    template_fields: Sequence[str] = DeltaTableOperator.template_fields
    operation_name = "LOG CLEANUP"

    def __init__(self, *, dry_run: bool = False, **kwargs: Any) -> None:
        self.dry_run = dry_run
        super().__init__(**kwargs)

    def changes_table(self) -> bool:
        return not self.dry_run

    def run_operation(self, hook: DeltaTableHook, table: DeltaTable, context: Context) -> Any:
        from deltalog.log_cleanup import cleanup_log

        return self.call(cleanup_log, table, dry_run=self.dry_run)

    def summarize(self, metrics: dict[str, Any]) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        files = first_number(metrics, "num_files_deleted", "files_deleted", "num_deleted", "num_files")
        size = first_number(metrics, "bytes_deleted", "bytes_reclaimed", "size_in_bytes")
        return (
            f"LOG CLEANUP {self._table_uri}: {verb} {files if files is not None else '?'} log files "
            f"({human_bytes(size)}); table at version {self._version}"
        )
