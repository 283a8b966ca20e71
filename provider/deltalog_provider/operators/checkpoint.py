"""``DeltaCheckpointOperator``: write (and verify) a checkpoint so readers replay fewer commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import first_number, human_bytes, optional_int

if TYPE_CHECKING:
    from airflow.sdk import Context


class DeltaCheckpointOperator(DeltaTableOperator):
    """Create a checkpoint at ``version`` (default: the latest) and move ``_last_checkpoint``.

    :param table: table name, URI or path (templated).
    :param version: the version to checkpoint (templated; default the latest).
    """

    template_fields: Sequence[str] = (*DeltaTableOperator.template_fields, "version")
    operation_name = "CHECKPOINT"

    def __init__(self, *, version: int | str | None = None, **kwargs: Any) -> None:
        self.version = version
        super().__init__(**kwargs)

    def run_operation(self, hook: DeltaTableHook, table: DeltaTable, context: Context) -> Any:
        from deltalog.checkpoint import create_checkpoint

        return self.call(create_checkpoint, table, version=optional_int(self.version, "version"))

    def summarize(self, metrics: dict[str, Any]) -> str:
        size = first_number(metrics, "size_in_bytes", "bytes", "size")
        files = first_number(metrics, "num_files", "num_actions", "num_add_files")
        return (
            f"CHECKPOINT {self._table_uri}: checkpoint at version {self._version} written "
            f"({human_bytes(size)}, {files if files is not None else '?'} live files)"
        )
