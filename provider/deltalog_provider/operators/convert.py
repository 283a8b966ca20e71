"""``DeltaConvertOperator``: turn a folder of Parquet files into a Delta table in place."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import json_value

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DeltaConvertOperator"]


class DeltaConvertOperator(DeltaTableOperator):
    """Write version 0 of a Delta log over existing Parquet files (no data is rewritten).

    Like ``CONVERT TO DELTA``: refuses an existing Delta table, a folder without Parquet
    files, and files whose schemas or partition directories disagree, naming the file, and
    then writes nothing.

    :param table: the Parquet folder: name, URI or path (templated).
    :param partition_by: the partition columns of a hive-style layout with their types:
        ``"year int, region string"``, ``{"year": "int"}`` or ``[["year", "int"]]`` (templated).
    """

    template_fields: Sequence[str] = (*DeltaTableOperator.template_fields, "partition_by")
    operation_name = "CONVERT"
    lineage_lifecycle = "CREATE"

    def __init__(self, *, partition_by: str | dict[str, str] | list[Any] | None = None, **kwargs: Any) -> None:
        self.partition_by = partition_by
        super().__init__(**kwargs)

    def run_operation(self, table: DeltaTable, context: Context) -> Any:
        from deltalog import convert_to_delta

        return self.call(
            convert_to_delta,
            table.uri,
            partition_by=json_value(self.partition_by, "partition_by"),
            storage_options=self.hook.storage_options_for(table.uri) or None,
        )

    def output_statistics(self, metrics: dict[str, Any]) -> dict[str, int | None]:
        return {
            "file_count": metrics.get("num_files"),
            "size": metrics.get("num_bytes"),
            "row_count": metrics.get("num_records"),
        }
