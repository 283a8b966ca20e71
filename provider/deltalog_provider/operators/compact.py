"""``DeltaCompactOperator``: bin-pack small files, locally or by handing the plan to Spark."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from deltalog import CompactionOptions, CompactionPlan, DeltaTable
from deltalog.errors import InvalidArgumentError
from deltalog_provider.deadlines import check_margin, work_deadline
from deltalog_provider.hooks.spark_submit import SparkJobSubmitter
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import optional_int, optional_size, optional_str
from deltalog_provider.version_compat import AirflowException

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DeltaCompactOperator"]


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
    :param engine: ``"local"`` (pyarrow, in the task) or ``"spark"`` (templated): the whole
        Spark compaction in this one task (``deltalog.compact_with_spark_job``): plan, write the
        plan under the table's hidden ``_compaction/`` folder, submit deltalog's Spark job
        through the apache-spark provider's ``SparkSubmitHook`` (``spark_conn_id``; ``on_kill``
        kills the job), then commit its files bin by bin.
    :param plan_only: plan without rewriting (no asset event is declared).
    :param plan_path: where to write the plan JSON (templated): a path relative to the table
        root (written with the table's storage options) or an absolute path/URI.
    :param min_files: a bin needs at least this many files.
    :param max_bins: plan at most this many bins (the rest waits for the next run).
    :param bins_per_commit: commit every N bins (a long run then loses at most one batch).
    :param deadline_margin: local engine: when the DAG has a Deadline Alert counted from the
        run's queuing (``DeadlineReference.DAGRUN_QUEUED_AT``), start no bin later than this
        long before the deadline; finished bins are committed, the rest is reported as
        ``deferred`` and planned again by the next run (a ``timedelta``; refused with Spark).
        On Airflow 3.0 (no Deadline Alerts) the budget is ``execution_timeout`` minus the margin.
    :param purge_deletion_vectors: a real bool (not templated): rewrite instead the files whose
        deletion vector hides more than ``min_deleted_share`` of their rows (default 0: any DV),
        applying it, committed as Delta Spark's ``REORG ... APPLY (PURGE)``; either engine.
    :param min_deleted_share: the purge threshold, a number from 0 to below 1.
    :param zorder_by: column names (a list, not templated): rewrite every file of each partition
        along a Z curve of them, cut into target-size files (``OPTIMIZE ... ZORDER BY``); either engine.
    :param full: a real bool: on a table with liquid clustering (which the local engine clusters),
        re-cluster files clustered by other columns too (``OPTIMIZE ... FULL``).
    :param writer_aware: a real bool (not templated; default True): mind the table's DELETE/UPDATE/MERGE
        writers (files where one works commit at its quiet moment, what writers leave no quiet moment
        is deferred; the result says which files and why); False compacts as if none were there.
    :param writer_wait_seconds: the longest a commit waits for a quiet moment of the writers (default 60).
    :param spark_conn_id: the Spark connection ``engine="spark"`` submits through (its host is the master).
    :param spark_options: for ``engine="spark"``: keyword arguments of ``SparkSubmitHook`` (``conf``,
        ``env_vars``, ``name``, ``executor_memory``, ...; templated). The driver runs this
        worker's Python (``PYSPARK_DRIVER_PYTHON``) unless ``env_vars`` says otherwise.
    """

    template_fields: Sequence[str] = (
        *DeltaTableOperator.template_fields,
        "target_size",
        "where",
        "engine",
        "plan_path",
        "spark_options",
        "spark_conn_id",
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
        spark_conn_id: str = "spark_default",
        spark_options: dict[str, Any] | None = None,
        deadline_margin: timedelta | None = None,
        purge_deletion_vectors: bool = False,
        min_deleted_share: float | None = None,
        zorder_by: list[str] | None = None,
        full: bool = False,
        writer_aware: bool = True,
        writer_wait_seconds: float | None = None,
        **kwargs: Any,
    ) -> None:
        # The layout and writer options are not templated: checked now, by the core's one declaration of them.
        CompactionOptions(
            purge_deletion_vectors=purge_deletion_vectors,
            min_deleted_share=min_deleted_share,
            zorder_by=zorder_by,
            full=full,
            writer_aware=writer_aware,
            writer_wait_seconds=writer_wait_seconds,
        )
        self.writer_aware = writer_aware
        self.writer_wait_seconds = writer_wait_seconds
        self.purge_deletion_vectors = purge_deletion_vectors
        self.min_deleted_share = min_deleted_share
        self.zorder_by = list(zorder_by) if zorder_by is not None else None
        self.full = full
        self.target_size = target_size
        self.where = where
        self.engine = engine
        self.plan_only = plan_only
        self.plan_path = plan_path
        self.min_files = min_files
        self.max_bins = max_bins
        self.bins_per_commit = bins_per_commit
        self.spark_conn_id = spark_conn_id
        self.spark_options = spark_options
        self.deadline_margin = check_margin(deadline_margin)
        self._spark: SparkJobSubmitter | None = None
        super().__init__(**kwargs)

    def changes_table(self) -> bool:
        return self.flag("plan_only") is not True  # a templated plan_only may still rewrite

    def options(self) -> CompactionOptions:
        """The rendered parameters as the core's options (checked there)."""
        engine = optional_str(self.engine) or "local"
        if engine == "spark" and self.deadline_margin is not None:
            raise InvalidArgumentError("deadline_margin stops between bins of the local engine only, not Spark")
        return CompactionOptions(
            target_size=optional_size(self.target_size, "target_size"),
            where=optional_str(self.where),
            min_files=self.min_files,
            max_bins=optional_int(self.max_bins, "max_bins"),
            bins_per_commit=optional_int(self.bins_per_commit, "bins_per_commit"),
            plan_only=self.plan_only,
            engine=engine,
            purge_deletion_vectors=self.purge_deletion_vectors,
            min_deleted_share=self.min_deleted_share,
            zorder_by=self.zorder_by,
            full=self.full,
            writer_aware=self.writer_aware,
            writer_wait_seconds=self.writer_wait_seconds,
        )

    def run_operation(self, table: DeltaTable, context: Context) -> Any:
        from deltalog import compact, compact_with_spark_job, plan_compaction, write_compaction_plan

        options = self.options()
        if options.engine == "spark":  # bad Spark options fail before anything is planned
            self._spark = SparkJobSubmitter(self.spark_conn_id, self.spark_options)
        plan: CompactionPlan = self.read(plan_compaction, table, options=options)
        self.log.info("compaction plan: %d bins over %d candidate files", len(plan.bins), plan.num_candidate_files)
        plan_path = optional_str(self.plan_path)
        plan_options = self.hook.storage_options_for(plan_path) if plan_path else None
        if self._spark is not None and not options.plan_only and plan.bins:
            spark = {
                "plan_path": plan_path,
                "plan_storage_options": plan_options,
                "bins_per_commit": options.bins_per_commit,
            }
            return self._checked(self.call(compact_with_spark_job, table, plan, self._spark, **spark))
        if plan_path:
            write_compaction_plan(table, plan, plan_path, plan_storage_options=plan_options)
        self.raise_if_cancelled()  # the safe point: planned, nothing rewritten yet
        deadline = None if options.plan_only else self.work_deadline(context)
        return self._checked(self.call(compact, table, options=options, plan=plan, deadline=deadline))

    def work_deadline(self, context: Context) -> float | None:
        """The DAG's run deadline minus ``deadline_margin`` (``deltalog_provider.deadlines``), or None."""
        return work_deadline(self, self.deadline_margin, context, self.log)

    def _checked(self, result: Any) -> Any:
        """Bins lost to a concurrent writer are normal; a failed rewrite or commit, or a kill, fail the task.

        Whatever committed stays committed; a retry re-plans what is left.
        """
        if not result.ok:
            errors = "; ".join([s.reason for s in result.skipped if s.kind == "error"][:3])
            what = "was cancelled" if result.error == "cancelled" else f"did not complete: {result.error or errors}"
            committed = [c.version for c in result.commits]
            raise AirflowException(f"compaction of {self._table_uri} {what} (committed versions: {committed})")
        return result

    def on_kill(self) -> None:
        """Stop at the next safe point, and kill the Spark job when one is running."""
        super().on_kill()
        if self._spark is not None:
            self._spark.kill()

    def result_metrics(self, result: Any) -> dict[str, Any]:
        metrics = super().result_metrics(result)
        if self.plan_path:
            metrics["plan_path"] = optional_str(self.plan_path)
        return metrics

    def result_version(self, metrics: dict[str, Any]) -> int | None:
        versions = metrics.get("versions") or []
        snapshot_version = metrics.get("snapshot_version")
        return int(versions[-1]) if versions else snapshot_version if isinstance(snapshot_version, int) else None

    def is_noop(self, metrics: dict[str, Any]) -> bool:
        return bool(metrics.get("noop"))

    def output_statistics(self, metrics: dict[str, Any]) -> dict[str, int | None]:
        return {"file_count": metrics.get("num_files_added"), "size": metrics.get("bytes_added")}
