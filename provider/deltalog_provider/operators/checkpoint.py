"""``DeltaCheckpointOperator``: write (and verify) a checkpoint so readers replay fewer commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import optional_int

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DeltaCheckpointOperator"]


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

    def run_operation(self, table: DeltaTable, context: Context) -> Any:
        from deltalog import create_checkpoint

        return self.call(create_checkpoint, table, version=optional_int(self.version, "version"))

    def is_noop(self, metrics: dict[str, Any]) -> bool:
        return bool(metrics.get("already_existed"))

    def output_statistics(self, metrics: dict[str, Any]) -> dict[str, int | None]:
        files = metrics.get("files") or []
        return {"file_count": len(files) + len(metrics.get("sidecars") or []), "size": metrics.get("size_in_bytes")}
