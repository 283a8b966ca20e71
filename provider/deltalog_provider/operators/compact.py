"""``DeltaCompactOperator``: bin-pack small files, locally or by handing the plan to Spark."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.hooks.delta_table import DeltaTableHook, is_absolute_location
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import first_number, human_bytes, optional_int, optional_str

if TYPE_CHECKING:
    from airflow.sdk import Context


class DeltaCompactOperator(DeltaTableOperator):
    """Compact small files into files of about ``target_size`` bytes.

    With ``plan_only=False`` (default) the local engine (pyarrow) rewrites the bins and
    commits them with ``dataChange=false``. With ``plan_only=True`` nothing is written to
    the table: the plan is returned to XCom (and written to ``plan_path`` when given)
    for a Spark job (``SparkSubmitOperator``) to execute and commit.

    :param table: table name, URI or path (templated).
    :param target_size: target file size in bytes (templated; default the table's
        ``delta.targetFileSize``, else 128 MiB).
    :param where: partition predicate restricting the compaction (templated).
    :param engine: ``"local"`` (templated); other engines are the core's to define.
    :param plan_only: plan without rewriting (no asset event is declared).
    :param plan_path: where to write the plan JSON when ``plan_only`` (templated; relative
        paths are relative to the table root; written with the connection's storage options).
    """

    template_fields: Sequence[str] = (
        *DeltaTableOperator.template_fields,
        "target_size",
        "where",
        "engine",
        "plan_path",
    )
    operation_name = "OPTIMIZE"

    def __init__(
        self,
        *,
        target_size: int | str | None = None,
        where: str | None = None,
        engine: str = "local",
        plan_only: bool = False,
        plan_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.target_size = target_size
        self.where = where
        self.engine = engine
        self.plan_only = plan_only
        self.plan_path = plan_path
        super().__init__(**kwargs)

    def changes_table(self) -> bool:
        return not self.plan_only

    def run_operation(self, hook: DeltaTableHook, table: DeltaTable, context: Context) -> Any:
        from deltalog.compaction import compact

        result = self.call(
            compact,
            table,
            target_size=optional_int(self.target_size, "target_size"),
            where=optional_str(self.where),
            engine=optional_str(self.engine) or "local",
            plan_only=self.plan_only,
        )
        plan_path = optional_str(self.plan_path)
        if self.plan_only and plan_path:
            self._write_plan(hook, table.uri, plan_path, result.to_dict())
        return result

    def _write_plan(self, hook: DeltaTableHook, table_uri: str, plan_path: str, plan: dict[str, Any]) -> None:
        """Write the plan where the Spark job reads it (local path or object store)."""
        import fsspec

        location = plan_path if is_absolute_location(plan_path) else table_uri.rstrip("/") + "/" + plan_path
        options = hook.storage_options if "://" in location and not location.startswith("file:") else {}
        with fsspec.open(location, "w", auto_mkdir=True, **options) as fh:
            json.dump(plan, fh, default=str)
        self.log.info("compaction plan written to %s", location)

    def summarize(self, metrics: dict[str, Any]) -> str:
        if self.plan_only:
            bins = first_number(metrics, "num_bins", "bins")
            files = first_number(metrics, "num_input_files", "num_files", "files")
            return (
                f"OPTIMIZE plan {self._table_uri}: {bins if bins is not None else '?'} bins over "
                f"{files if files is not None else '?'} small files at version {self._version}"
            )
        removed = first_number(metrics, "num_files_removed", "files_removed", "num_removed_files")
        added = first_number(metrics, "num_files_added", "files_added", "num_added_files")
        size = first_number(metrics, "bytes_added", "num_added_bytes", "bytes_written")
        return (
            f"OPTIMIZE {self._table_uri}: {removed if removed is not None else '?'} files rewritten into "
            f"{added if added is not None else '?'} ({human_bytes(size)}), version {self._version}"
        )

    def output_statistics(self, metrics: dict[str, Any]) -> dict[str, int | None]:
        if self.plan_only:
            return {}
        added = first_number(metrics, "num_files_added", "files_added", "num_added_files")
        size = first_number(metrics, "bytes_added", "num_added_bytes", "bytes_written")
        return {
            "file_count": int(added) if added is not None else None,
            "size": int(size) if size is not None else None,
        }
