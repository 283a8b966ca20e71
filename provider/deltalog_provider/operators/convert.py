"""``DeltaConvertOperator``: turn a folder of Parquet files into a Delta table in place."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog.errors import InvalidArgumentError
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import first_number, human_bytes

if TYPE_CHECKING:
    from airflow.sdk import Context


def _partition_spec(value: Any) -> Any:
    """``partition_by`` as given, or parsed from its rendered JSON / comma-separated form."""
    if value is None or isinstance(value, list | tuple | dict):
        return list(value) if isinstance(value, tuple) else value
    if isinstance(value, str):
        text = value.strip()
        if not text or text in ("None", "null"):
            return None
        if text[0] in "[{":
            try:
                return json.loads(text)
            except ValueError:
                raise InvalidArgumentError(f"partition_by is not valid JSON: {value!r}") from None
        return [part.strip() for part in text.split(",") if part.strip()]
    raise InvalidArgumentError(f"partition_by must be a list or a mapping, got {value!r}")


class DeltaConvertOperator(DeltaTableOperator):
    """Write version 0 of a Delta log over existing Parquet files (no data is rewritten).

    :param table: the Parquet folder: name, URI or path (templated).
    :param partition_by: the partition columns of a hive-style layout, in the form the
        core's ``convert_to_delta`` takes (templated; JSON or comma-separated when rendered).
    """

    template_fields: Sequence[str] = (*DeltaTableOperator.template_fields, "partition_by")
    operation_name = "CONVERT"
    lineage_lifecycle = "CREATE"

    def __init__(self, *, partition_by: Any = None, **kwargs: Any) -> None:
        self.partition_by = partition_by
        super().__init__(**kwargs)

    def run_operation(self, hook: DeltaTableHook, table: DeltaTable, context: Context) -> Any:
        from deltalog.convert import convert_to_delta

        return self.call(
            convert_to_delta,
            table.uri,
            partition_by=_partition_spec(self.partition_by),
            storage_options=hook.storage_options or None,
        )

    def summarize(self, metrics: dict[str, Any]) -> str:
        files = first_number(metrics, "num_files", "files_added", "num_files_added")
        size = first_number(metrics, "size_in_bytes", "bytes", "num_bytes")
        return (
            f"CONVERT {self._table_uri}: {files if files is not None else '?'} Parquet files "
            f"({human_bytes(size)}) registered as Delta version {self._version}"
        )

    def output_statistics(self, metrics: dict[str, Any]) -> dict[str, int | None]:
        files = first_number(metrics, "num_files", "files_added", "num_files_added")
        size = first_number(metrics, "size_in_bytes", "bytes", "num_bytes")
        rows = first_number(metrics, "num_rows", "num_records")
        return {
            "file_count": int(files) if files is not None else None,
            "size": int(size) if size is not None else None,
            "row_count": int(rows) if rows is not None else None,
        }
