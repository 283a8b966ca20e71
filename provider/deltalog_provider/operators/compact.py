"""``DeltaCompactOperator``: bin-pack small files, locally or by handing the plan to Spark."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from deltalog import CompactionOptions, DeltaTable
from deltalog.errors import DeltaLogError, InvalidArgumentError
from deltalog_provider.hooks.delta_table import DeltaTableHook, is_absolute_location
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import optional_int, optional_size, optional_str
from deltalog_provider.utils.results import jsonable
from deltalog_provider.version_compat import AirflowException, dag_deadline_alerts, degraded, queued_at_interval

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Hidden folder of the table (readers and vacuum ignore it) for the Spark job's plan and request.
WORK_DIR = "_compaction"


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
        Spark compaction in this one task: plan, write the plan under the table's hidden
        ``_compaction/`` folder, submit deltalog's Spark job through the apache-spark
        provider's ``SparkSubmitHook`` (``spark_conn_id``; ``on_kill`` kills the job), then
        commit its files bin by bin (``deltalog.compaction.spark.commit_spark_result``).
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
        **kwargs: Any,
    ) -> None:
        # The layout options are not templated: checked now, by the core's one declaration of them.
        CompactionOptions(
            purge_deletion_vectors=purge_deletion_vectors,
            min_deleted_share=min_deleted_share,
            zorder_by=zorder_by,
            full=full,
        )
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
        if deadline_margin is not None and not isinstance(deadline_margin, timedelta):
            raise InvalidArgumentError(f"deadline_margin must be a timedelta, got {deadline_margin!r}")
        self.deadline_margin = deadline_margin
        self._spark_hook: Any = None
        super().__init__(**kwargs)

    def changes_table(self) -> bool:
        return self.flag("plan_only") is not True  # a templated plan_only may still rewrite

    def run_operation(self, hook: DeltaTableHook, table: DeltaTable, context: Context) -> Any:
        from deltalog.compaction import compact, plan_compaction

        engine = optional_str(self.engine) or "local"
        if engine == "spark" and self.deadline_margin is not None:
            raise InvalidArgumentError("deadline_margin stops between bins of the local engine only, not Spark")
        if engine == "spark":
            self._spark_options()  # bad options fail before anything is planned
        options = CompactionOptions(
            target_size=optional_size(self.target_size, "target_size"),
            where=optional_str(self.where),
            min_files=self.min_files,
            max_bins=optional_int(self.max_bins, "max_bins"),
            purge_deletion_vectors=self.purge_deletion_vectors,
            min_deleted_share=self.min_deleted_share,
            zorder_by=self.zorder_by,
            full=self.full,
            engine=engine,
        )
        plan = self.call(plan_compaction, table, options=options)
        self.log.info("compaction plan: %d bins over %d candidate files", len(plan.bins), plan.num_candidate_files)
        plan_path = optional_str(self.plan_path)
        if engine == "spark" and not self.plan_only and plan.bins:
            return self._compact_with_spark(hook, table, plan, plan_path)
        if plan_path:
            self._write_plan(hook, table, plan_path, plan.to_json())
        self.raise_if_cancelled()  # the safe point: planned, nothing rewritten yet
        result = self.call(
            compact,
            table,
            options=options,
            plan=plan,
            plan_only=self.plan_only,
            bins_per_commit=optional_int(self.bins_per_commit, "bins_per_commit"),
            deadline=None if self.plan_only else self.work_deadline(context),
        )
        return self._checked(table, result)

    def work_deadline(self, context: Context) -> float | None:
        """The DAG's run deadline minus ``deadline_margin``, as a ``time.monotonic()`` value (or None).

        Counted from the run's queue time when the context has it, else its start. On an
        Airflow without Deadline Alerts (3.0) the budget is the task's ``execution_timeout``
        minus the margin instead, counted from the task's start (one logged line says so),
        so the compaction still stops between bins before the task is killed.
        """
        if self.deadline_margin is None or not self.has_dag():
            return None
        alerts = dag_deadline_alerts(self.dag)
        if alerts is None:
            return self._execution_timeout_budget(context)
        intervals = [i for i in (queued_at_interval(a) for a in alerts) if i is not None]
        dag_run = context.get("dag_run") if hasattr(context, "get") else None
        start = getattr(dag_run, "queued_at", None) or getattr(dag_run, "start_date", None)
        if not intervals or start is None:
            return None
        end = start + min(intervals) - self.deadline_margin
        left = (end - datetime.now(UTC)).total_seconds()
        self.log.info("time budget: %.0f s left before the run's deadline minus %s", left, self.deadline_margin)
        return time.monotonic() + left

    def _execution_timeout_budget(self, context: Context) -> float | None:
        """Where Airflow has no Deadline Alerts: ``execution_timeout`` minus the margin, from the task's start."""
        timeout, margin = self.execution_timeout, self.deadline_margin
        degraded(
            "deadline-budget",
            "no Deadline Alerts before Airflow 3.1: the compaction's time budget is the task's "
            f"execution_timeout ({timeout}) minus deadline_margin",
        )
        if timeout is None or margin is None:
            return None
        ti = context.get("ti") if hasattr(context, "get") else None
        start = getattr(ti, "start_date", None) or datetime.now(UTC)
        left = (start + timeout - margin - datetime.now(UTC)).total_seconds()
        self.log.info("time budget: %.0f s left before execution_timeout minus %s", left, margin)
        return time.monotonic() + left

    def _checked(self, table: DeltaTable, result: Any) -> Any:
        if not result.ok and result.error != "cancelled":
            # Bins lost to a concurrent writer are normal; a failed rewrite or commit is not.
            # Whatever committed stays committed; a retry re-plans what is left.
            errors = [s.reason for s in result.skipped if s.kind == "error"]
            raise AirflowException(
                f"compaction of {table.uri} did not complete: {result.error or '; '.join(errors[:3])} "
                f"(committed versions: {[c.version for c in result.commits]})"
            )
        if result.error == "cancelled":
            raise AirflowException(
                f"compaction of {table.uri} was cancelled (committed versions: {[c.version for c in result.commits]})"
            )
        return result

    def _spark_options(self) -> dict[str, Any]:
        """``spark_options`` as ``SparkSubmitHook`` arguments; the local runner's own keys are refused."""
        options = dict(self.spark_options or {})
        local_only = sorted(set(options) & {"master", "spark_submit", "timeout"})
        if local_only:
            raise InvalidArgumentError(
                f"spark_options {local_only} are not SparkSubmitHook arguments: the Spark connection "
                f"({self.spark_conn_id!r}) names the master and execution_timeout bounds the task"
            )
        return options

    def _compact_with_spark(self, hook: DeltaTableHook, table: DeltaTable, plan: Any, plan_path: str | None) -> Any:
        """Plan file -> deltalog's Spark job through ``SparkSubmitHook`` -> commit its request bin by bin."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        from deltalog.compaction.spark import DEFAULT_CONF, commit_spark_result, read_spark_request, spark_job_script

        options = self._spark_options()
        run = uuid.uuid4().hex[:12]
        plan_rel = plan_path or f"{WORK_DIR}/plan-{run}.json"
        request_rel = f"{WORK_DIR}/request-{run}.json"
        plan_location = self._write_plan(hook, table, plan_rel, plan.to_json())
        request_location = table.storage.join(*request_rel.split("/"))
        env_vars = {"PYSPARK_DRIVER_PYTHON": sys.executable, **(options.pop("env_vars", None) or {})}
        self._spark_hook = SparkSubmitHook(
            conn_id=self.spark_conn_id,
            conf={**DEFAULT_CONF, **(options.pop("conf", None) or {})},
            env_vars=env_vars,
            name=options.pop("name", f"deltalog-compact-{run}"),
            application_args=[
                "--table",
                table.uri,
                "--plan",
                plan_location if is_absolute_location(plan_location) else table.storage.full_uri(plan_rel),
                "--output-request",
                table.storage.full_uri(request_rel),
            ],
            **options,
        )
        self.raise_if_cancelled()  # the safe point: planned, nothing rewritten yet
        started = time.perf_counter()
        try:
            self._spark_hook.submit(spark_job_script())
            self.raise_if_cancelled()
            request = read_spark_request(table.storage, request_location)
            result = self.call(
                commit_spark_result,
                table,
                plan,
                request,
                bins_per_commit=optional_int(self.bins_per_commit, "bins_per_commit"),
                engine_seconds=time.perf_counter() - started,
            )
        finally:
            self._spark_hook = None
            # Our scratch files; the plan is kept when the caller named its path.
            self._remove_quietly(table, [request_location] + ([] if plan_path else [plan_location]))
        return self._checked(table, result)

    def _remove_quietly(self, table: DeltaTable, locations: list[str]) -> None:
        for location in locations:
            try:
                table.storage.delete(location)
            except DeltaLogError as exc:  # leftovers sit in a hidden folder; never mask the real outcome
                self.log.warning("could not remove %s: %s", location, exc)

    def on_kill(self) -> None:
        """Stop at the next safe point, and kill the Spark job when one is running."""
        super().on_kill()
        spark = self._spark_hook
        if spark is not None:
            spark.on_kill()

    def _write_plan(self, hook: DeltaTableHook, table: DeltaTable, plan_path: str, text: str) -> str:
        """Write the plan where the Spark job reads it; return where that is."""
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
        return location

    def result_metrics(self, result: Any) -> dict[str, Any]:
        metrics = jsonable(result)
        if self.plan_path:
            metrics["plan_path"] = optional_str(self.plan_path)
        return metrics

    def result_version(self, metrics: dict[str, Any]) -> int | None:
        versions = metrics.get("versions") or []
        if versions:
            return int(versions[-1])
        snapshot_version = metrics.get("snapshot_version")
        return snapshot_version if isinstance(snapshot_version, int) else None

    def is_noop(self, metrics: dict[str, Any]) -> bool:
        return bool(metrics.get("noop"))

    def output_statistics(self, metrics: dict[str, Any]) -> dict[str, int | None]:
        return {"file_count": metrics.get("num_files_added"), "size": metrics.get("bytes_added")}
