"""``DeltaManifestOperator``: symlink-format manifests for Presto, Trino and Athena."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.operators.base import DeltaTableOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DeltaManifestOperator"]


class DeltaManifestOperator(DeltaTableOperator):
    """Generate ``_symlink_format_manifest/`` for the latest version (incremental unless ``full``).

    :param table: table name, URI or path (templated).
    :param full: rewrite every partition's manifest (and delete stale ones) instead of only the
        changed ones (templated).
    :param dry_run: only report which manifests would be written and deleted (templated).
        Yes/no parameters take ``True``/``False`` or ``"true"``/``"false"`` only.
    """

    template_fields: Sequence[str] = (*DeltaTableOperator.template_fields, "full", "dry_run")
    bool_fields: Sequence[str] = (*DeltaTableOperator.bool_fields, "full", "dry_run")
    operation_name = "GENERATE MANIFEST"

    def __init__(self, *, full: bool = False, dry_run: bool = False, **kwargs: Any) -> None:
        self.full = full
        self.dry_run = dry_run
        super().__init__(**kwargs)

    def changes_table(self) -> bool:
        return self.flag("dry_run") is not True  # a templated dry_run may still delete

    def run_operation(self, table: DeltaTable, context: Context) -> Any:
        from deltalog import generate_manifest

        return (self.read if self.dry_run else self.call)(
            generate_manifest, table, full=self.full, dry_run=self.dry_run
        )

    def is_noop(self, metrics: dict[str, Any]) -> bool:
        return not metrics.get("manifests_written") and not metrics.get("manifests_deleted")

    def output_statistics(self, metrics: dict[str, Any]) -> dict[str, int | None]:
        return {"file_count": len(metrics.get("manifests_written") or [])}
