"""``DeltaManifestOperator``: symlink-format manifests for Presto, Trino and Athena."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.operators.base import DeltaTableOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class DeltaManifestOperator(DeltaTableOperator):
    """Generate ``_symlink_format_manifest/`` for the latest version (incremental unless ``full``).

    :param table: table name, URI or path (templated).
    :param full: rewrite every partition's manifest instead of only the changed ones.
    """

    template_fields: Sequence[str] = DeltaTableOperator.template_fields
    operation_name = "GENERATE MANIFEST"

    def __init__(self, *, full: bool = False, **kwargs: Any) -> None:
        self.full = full
        super().__init__(**kwargs)

    def run_operation(self, hook: DeltaTableHook, table: DeltaTable, context: Context) -> Any:
        from deltalog.manifest import generate_manifest

        return self.call(generate_manifest, table, full=self.full)

    def summarize(self, metrics: dict[str, Any]) -> str:
        reason = f" ({metrics['full_reason']})" if metrics.get("full_reason") else ""
        return (
            f"GENERATE MANIFEST {self._table_uri}: {metrics.get('mode')}{reason} run wrote "
            f"{len(metrics.get('manifests_written') or [])} and deleted {len(metrics.get('manifests_deleted') or [])} "
            f"manifest(s) listing {metrics.get('num_files')} files, {metrics.get('num_partitions')} partition(s), "
            f"version {metrics.get('version')}"
        )

    def output_statistics(self, metrics: dict[str, Any]) -> dict[str, int | None]:
        return {"file_count": len(metrics.get("manifests_written") or [])}
