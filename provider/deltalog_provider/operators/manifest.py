"""``DeltaManifestOperator``: symlink-format manifests for Presto, Trino and Athena."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import first_number

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
        written = first_number(metrics, "manifests_written", "num_manifests_written", "num_manifests")
        files = first_number(metrics, "num_files", "files_listed", "num_data_files")
        kind = "full" if self.full else "incremental"
        return (
            f"GENERATE MANIFEST {self._table_uri}: {kind} run wrote {written if written is not None else '?'} "
            f"manifest(s) listing {files if files is not None else '?'} files for version {self._version}"
        )
