"""``DeltaVacuumOperator``: delete files no version inside the retention window needs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog.errors import InvalidArgumentError
from deltalog_provider.hooks.spark_submit import spark_master
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import human_bytes, optional_float, optional_str
from deltalog_provider.utils.results import jsonable

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DeltaVacuumOperator"]


class DeltaVacuumOperator(DeltaTableOperator):
    """Vacuum a table: plan with every safety check, then delete and record VACUUM START/END.

    Safety refusals of the core (retention below ``delta.deletedFileRetentionDuration``
    without ``allow_short_retention``, lite mode without the commits it needs, a protocol
    deltalog cannot write) fail the task at once, without retries, and nothing is deleted.
    A kill while planning (the long part: listing storage) stops before any deletion.

    :param table: table name, URI or path (templated).
    :param retention_hours: keep files removed less than this long ago (templated; default
        the table's ``delta.deletedFileRetentionDuration``, else 7 days).
    :param mode: ``"full"`` (list the whole table folder) or ``"lite"`` (only files the log
        removed since the last vacuum) (templated).
    :param dry_run: only report what would be deleted (no asset event is declared) (templated).
    :param allow_short_retention: explicitly allow a retention below the table's setting
        (templated). Yes/no parameters take ``True``/``False`` or the rendered strings
        ``"true"``/``"false"`` only; ``"no"``, ``"0"`` or ``"False "`` typos fail the task.
    :param inventory: path/URI of an inventory of the table's files (templated), used
        instead of listing storage.
    :param full_fallback: in lite mode, fall back to a full listing when the log no longer
        holds the commits lite mode needs (instead of refusing).
    :param include_files: keep the per-file plan in the XCom value (can be large).
    :param engine: ``"local"`` (the plan in this task) or ``"spark"`` (templated): the plan's
        anti-join of storage against every protected path runs as deltalog's Spark job (full
        mode; for tables of many millions of files), submitted by the core's ``spark-submit``
        runner to the master of ``spark_conn_id``; the deletion stays in this task, behind
        the same re-validation. A kill of the task kills the job.
    :param spark_conn_id: the Spark connection ``engine="spark"`` runs on (its host is the master).
    :param spark_options: for ``engine="spark"``: the runner's options (``conf``,
        ``spark_submit``, ``work_dir``); the master comes from the connection and
        ``execution_timeout`` bounds the task.
    """

    template_fields: Sequence[str] = (
        *DeltaTableOperator.template_fields,
        "retention_hours",
        "mode",
        "inventory",
        "dry_run",
        "allow_short_retention",
        "full_fallback",
        "engine",
        "spark_options",
        "spark_conn_id",
    )
    template_fields_renderers = {"spark_options": "json"}
    bool_fields: Sequence[str] = (
        *DeltaTableOperator.bool_fields,
        "dry_run",
        "allow_short_retention",
        "full_fallback",
        "include_files",
    )
    operation_name = "VACUUM"

    def __init__(
        self,
        *,
        retention_hours: float | str | None = None,
        mode: str = "full",
        dry_run: bool = False,
        allow_short_retention: bool = False,
        inventory: str | None = None,
        full_fallback: bool = False,
        include_files: bool = False,
        engine: str = "local",
        spark_conn_id: str = "spark_default",
        spark_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.retention_hours = retention_hours
        self.mode = mode
        self.dry_run = dry_run
        self.allow_short_retention = allow_short_retention
        self.inventory = inventory
        self.full_fallback = full_fallback
        self.include_files = include_files
        self.engine = engine
        self.spark_conn_id = spark_conn_id
        self.spark_options = spark_options
        super().__init__(**kwargs)

    def changes_table(self) -> bool:
        return self.flag("dry_run") is not True  # a templated dry_run may still delete

    def run_operation(self, table: DeltaTable, context: Context) -> Any:
        from deltalog.vacuuming import execute_vacuum, plan_vacuum, vacuum

        options = {
            "retention_hours": optional_float(self.retention_hours, "retention_hours"),
            "mode": optional_str(self.mode) or "full",
            "allow_short_retention": self.allow_short_retention,
            "inventory": optional_str(self.inventory),
            "full_fallback": self.full_fallback,
            **self._engine(),
        }
        if self.dry_run:  # deletes nothing: a read
            return self.read(vacuum, table, dry_run=True, **options)
        plan = self.read(plan_vacuum, table, **options)
        self.log.info("vacuum plan: %d files (%s) to delete", plan.num_files, human_bytes(plan.size_in_bytes))
        self.raise_if_cancelled()  # the safe point: planned, nothing deleted yet
        return self.call(execute_vacuum, table, plan)

    def _engine(self) -> dict[str, Any]:
        """``engine`` and, for Spark, the runner's options with the connection's master."""
        engine = optional_str(self.engine) or "local"
        if engine != "spark":  # the core names the engines it knows
            return {"engine": engine}
        options = dict(self.spark_options or {})
        fixed = sorted(set(options) & {"master", "timeout", "session"})
        if fixed:
            raise InvalidArgumentError(
                f"spark_options {fixed} are not taken here: the Spark connection ({self.spark_conn_id!r}) "
                "names the master and execution_timeout bounds the task"
            )
        return {"engine": "spark", "spark_options": {**options, "master": spark_master(self.spark_conn_id)}}

    def result_metrics(self, result: Any) -> dict[str, Any]:
        if hasattr(result, "to_dict"):
            try:
                return jsonable(result.to_dict(include_files=self.include_files))
            except TypeError:  # a result without the include_files switch
                pass
        return jsonable(result)

    def result_version(self, metrics: dict[str, Any]) -> int | None:
        end = metrics.get("end_commit_version")
        return end if isinstance(end, int) else super().result_version(metrics)
