"""``DeltaVacuumOperator``: delete files no version inside the retention window needs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import first_number, human_bytes, optional_float, optional_str

if TYPE_CHECKING:
    from airflow.sdk import Context


class DeltaVacuumOperator(DeltaTableOperator):
    """Vacuum a table: plan, check safety, delete, and record VACUUM START/END commits.

    Safety refusals of the core (retention below ``delta.deletedFileRetentionDuration``
    without ``allow_short_retention``, a protocol deltalog cannot write) fail the task
    at once, without retries, and nothing is deleted.

    :param table: table name, URI or path (templated).
    :param retention_hours: keep files removed less than this long ago (templated;
        default: the table's ``delta.deletedFileRetentionDuration``, else 7 days).
    :param mode: ``"full"`` (list the whole table folder) or ``"lite"`` (only files the
        log removed) (templated).
    :param dry_run: only report what would be deleted (no asset event is declared).
    :param allow_short_retention: explicitly allow a retention below the table's setting.
    :param inventory: an inventory of the table's files to use instead of listing storage
        (templated; passed through to the core).
    """

    template_fields: Sequence[str] = (*DeltaTableOperator.template_fields, "retention_hours", "mode", "inventory")
    operation_name = "VACUUM"

    def __init__(
        self,
        *,
        retention_hours: float | str | None = None,
        mode: str = "full",
        dry_run: bool = False,
        allow_short_retention: bool = False,
        inventory: Any = None,
        **kwargs: Any,
    ) -> None:
        self.retention_hours = retention_hours
        self.mode = mode
        self.dry_run = dry_run
        self.allow_short_retention = allow_short_retention
        self.inventory = inventory
        super().__init__(**kwargs)

    def changes_table(self) -> bool:
        return not self.dry_run

    def run_operation(self, hook: DeltaTableHook, table: DeltaTable, context: Context) -> Any:
        from deltalog.vacuum import vacuum

        return self.call(
            vacuum,
            table,
            retention_hours=optional_float(self.retention_hours, "retention_hours"),
            mode=optional_str(self.mode) or "full",
            dry_run=self.dry_run,
            allow_short_retention=self.allow_short_retention,
            inventory=self.inventory or None,
        )

    def summarize(self, metrics: dict[str, Any]) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        files = first_number(metrics, "num_files_deleted", "files_deleted", "num_deleted_files", "num_files")
        size = first_number(metrics, "bytes_deleted", "size_of_data_to_delete", "bytes", "size_in_bytes")
        return (
            f"VACUUM {self._table_uri}: {verb} {files if files is not None else '?'} files "
            f"({human_bytes(size)}) at version {self._version}"
        )

    def output_statistics(self, metrics: dict[str, Any]) -> dict[str, int | None]:
        return {}
