"""``DeltaCompactOperator``: bin-pack small files, locally or by handing the plan to Spark."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider._compat import AirflowException
from deltalog_provider.hooks.delta_table import DeltaTableHook, is_absolute_location
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import human_bytes, optional_int, optional_size, optional_str
from deltalog_provider.utils.results import jsonable

if TYPE_CHECKING:
    from airflow.sdk import Context


class DeltaCompactOperator(DeltaTableOperator):
    """Compact small files into files of about ``target_size`` bytes (OPTIMIZE).

    The plan is made first; a kill while planning stops before any file is rewritten.
    With ``plan_only=False`` (default) the engine rewrites the bins and the core commits
    them with ``dataChange=false`` (bin by bin conflict handling: a bin whose input a
    concurrent writer removed is dropped, the others commit). With ``plan_only=True``
    nothing is written to the table: the plan goes to XCom and, with ``plan_path``, to a
    JSON file (``CompactionPlan.from_json`` reads it) for a Spark job to execute.

    :param table: table name, URI or path (templated).
    :param target_size: target file size, bytes or a size string like ``"128MB"``
        (templated; default the table's ``delta.targetFileSize``, else 128 MiB).
    :param where: partition predicate restricting the compaction, e.g. ``"day >= '2024-05-01'"``
        (templated).
    :param engine: ``"local"`` (pyarrow, in the task) or ``"spark"`` (the core runs
        ``spark-submit`` with ``spark_options``) (templated).
    :param plan_only: plan without rewriting (no asset event is declared).
    :param plan_path: where to write the plan JSON (templated): a path relative to the table
        root (written with the table's storage options) or an absolute path/URI.
    :param min_files: a bin needs at least this many files.
    :param max_bins: plan at most this many bins (the rest waits for the next run).
    :param bins_per_commit: commit every N bins (a long run then loses at most one batch).
    :param spark_options: for ``engine="spark"``: ``master``, ``spark_submit``, ``conf``, ``timeout``.
    """

    template_fields: Sequence[str] = (
        *DeltaTableOperator.template_fields,
        "target_size",
        "where",
        "engine",
        "plan_path",
        "spark_options",
        "plan_only",
    )
    bool_fields: Sequence[str] = (*DeltaTableOperator.bool_fields, "plan_only")
    template_fields_renderers = {"spark_options": "json"}
    operation_name = "OPTIMIZE"

    def __init__(
        self,
        *,
        target_size: int | str | None = None,
        where: str | None = None,
        engine: str = "local",
        plan_only: bool = False,
        plan_path: str | None = None,
        min_files: int = 2,
        max_bins: int | None = None,
        bins_per_commit: int | None = None,
        spark_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.target_size = target_size
        self.where = where
        self.engine = engine
        self.plan_only = plan_only
        self.plan_path = plan_path
        self.min_files = min_files
        self.max_bins = max_bins
        self.bins_per_commit = bins_per_commit
        self.spark_options = spark_options
        super().__init__(**kwargs)

    def changes_table(self) -> bool:
        return self.flag("plan_only") is not True  # a templated plan_only may still rewrite

    def run_operation(self, hook: DeltaTableHook, table: DeltaTable, context: Context) -> Any:
        from deltalog.compaction import compact, plan_compaction

        plan = self.call(
            plan_compaction,
            table,
            target_size=optional_size(self.target_size, "target_size"),
            where=optional_str(self.where),
            min_files=self.min_files,
            max_bins=optional_int(self.max_bins, "max_bins"),
        )
        self.log.info(
            "compaction plan: %d bins over %d candidate files", len(plan.bins), plan.summary()["numCandidateFiles"]
        )
        plan_path = optional_str(self.plan_path)
        if plan_path:
            self._write_plan(hook, table, plan_path, plan.to_json())
        self.raise_if_cancelled()  # the safe point: planned, nothing rewritten yet
        result = self.call(
            compact,
            table,
            engine=optional_str(self.engine) or "local",
            plan_only=self.plan_only,
            plan=plan,
            bins_per_commit=optional_int(self.bins_per_commit, "bins_per_commit"),
            spark_options=self.spark_options or None,
        )
        if not result.ok:
            # Bins lost to a concurrent writer are normal; a failed rewrite or commit is not.
            # Whatever committed stays committed; a retry re-plans what is left.
            errors = [s.reason for s in result.skipped if s.kind == "error"]
            raise AirflowException(
                f"compaction of {table.uri} did not complete: {result.error or '; '.join(errors[:3])} "
                f"(committed versions: {[c.version for c in result.commits]})"
            )
        return result

    def _write_plan(self, hook: DeltaTableHook, table: DeltaTable, plan_path: str, text: str) -> None:
        """Write the plan where the Spark job reads it."""
        if is_absolute_location(plan_path):
            import fsspec

            options = hook.storage_options_for(plan_path)
            with fsspec.open(plan_path, "w", auto_mkdir=True, **options) as fh:
                fh.write(text)
            location = plan_path
        else:
            location = table.storage.join(*plan_path.strip("/").split("/"))
            table.storage.makedirs(location.rsplit("/", 1)[0])
            table.storage.write_atomic(location, text.encode("utf-8"))
        self.log.info("compaction plan written to %s", location)

    def result_metrics(self, result: Any) -> dict[str, Any]:
        metrics = jsonable(result)
        if self.plan_path:
            metrics["planPath"] = optional_str(self.plan_path)
        return metrics

    def result_version(self, metrics: dict[str, Any]) -> int | None:
        versions = metrics.get("versions") or []
        if versions:
            return int(versions[-1])
        snapshot_version = metrics.get("snapshotVersion")
        return snapshot_version if isinstance(snapshot_version, int) else None

    def is_noop(self, metrics: dict[str, Any]) -> bool:
        return bool(metrics.get("noop"))

    def summarize(self, metrics: dict[str, Any]) -> str:
        if self.plan_only:
            plan = metrics.get("plan") or {}
            return (
                f"OPTIMIZE plan {self._table_uri}: {metrics.get('numBins')} bins over "
                f"{plan.get('numCandidateFiles')} small files at version {metrics.get('snapshotVersion')}"
                + (f", written to {metrics['planPath']}" if metrics.get("planPath") else "")
            )
        if metrics.get("noop"):
            return f"OPTIMIZE {self._table_uri}: nothing to compact at version {self._version}"
        skipped = f", {metrics.get('numBinsSkipped')} bins skipped" if metrics.get("numBinsSkipped") else ""
        return (
            f"OPTIMIZE {self._table_uri}: {metrics.get('numFilesRemoved')} files "
            f"({human_bytes(metrics.get('bytesRemoved'))}) rewritten into {metrics.get('numFilesAdded')} "
            f"({human_bytes(metrics.get('bytesAdded'))}) in {len(metrics.get('versions') or [])} commit(s){skipped}; "
            f"table at version {self._version}"
        )

    def output_statistics(self, metrics: dict[str, Any]) -> dict[str, int | None]:
        return {"file_count": metrics.get("numFilesAdded"), "size": metrics.get("bytesAdded")}
