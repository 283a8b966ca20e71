"""Submitting deltalog's Spark compaction job through the apache-spark provider's ``SparkSubmitHook``.

The core does the rest of a Spark compaction (``deltalog.compact_with_spark_job``: plan
file, commit request, commit bin by bin); this is the ``submit`` it calls: one
``SparkSubmitHook`` per run on the task's Spark connection (its host names the master),
with deltalog's job script and arguments, and a way to kill the job when the task is killed.
"""

from __future__ import annotations

import sys
from typing import Any

from deltalog import SparkHandoff, spark_job_script
from deltalog.compaction.spark import DEFAULT_CONF
from deltalog.errors import InvalidArgumentError
from deltalog_provider.version_compat import mask_secret

__all__ = ["LOCAL_RUNNER_KEYS", "SparkJobSubmitter", "check_spark_options", "spark_master"]

#: Options of deltalog's own ``spark-submit`` runner that ``SparkSubmitHook`` takes another way.
LOCAL_RUNNER_KEYS = frozenset({"master", "spark_submit", "timeout"})


def check_spark_options(options: dict[str, Any] | None, spark_conn_id: str) -> dict[str, Any]:
    """``options`` as ``SparkSubmitHook`` arguments; the local runner's own keys are refused."""
    options = dict(options or {})
    local_only = sorted(set(options) & LOCAL_RUNNER_KEYS)
    if local_only:
        raise InvalidArgumentError(
            f"spark_options {local_only} are not SparkSubmitHook arguments: the Spark connection "
            f"({spark_conn_id!r}) names the master and execution_timeout bounds the task"
        )
    return options


def spark_master(spark_conn_id: str) -> str:
    """The master URL of a Spark connection, built as ``SparkSubmitHook`` builds it (host, port; ``yarn``
    without a host): for the core's own ``spark-submit`` runner (vacuum's Spark engine)."""
    from deltalog_provider.version_compat import BaseHook

    conn = BaseHook.get_connection(spark_conn_id)
    master = conn.host or "yarn"
    return f"{master}:{conn.port}" if conn.port else master


class SparkJobSubmitter:
    """``submit(handoff)``: run deltalog's Spark job through ``SparkSubmitHook`` until it finishes.

    :param spark_conn_id: the Spark connection (its host is the master).
    :param spark_options: ``SparkSubmitHook`` keyword arguments (``conf``, ``env_vars``, ``name``,
        ``executor_memory``, ...). The driver runs this worker's Python (``PYSPARK_DRIVER_PYTHON``)
        unless ``env_vars`` says otherwise.
    """

    def __init__(self, spark_conn_id: str, spark_options: dict[str, Any] | None = None) -> None:
        self.spark_conn_id = spark_conn_id
        self.spark_options = check_spark_options(spark_options, spark_conn_id)
        self._running: Any = None

    def __call__(self, handoff: SparkHandoff) -> None:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        options = dict(self.spark_options)
        for secret in handoff.secrets():  # SparkSubmitHook logs its command line with the conf in it
            mask_secret(secret)
        env_vars = {"PYSPARK_DRIVER_PYTHON": sys.executable, **(options.pop("env_vars", None) or {})}
        self._running = SparkSubmitHook(
            conn_id=self.spark_conn_id,
            # Azure and GCS tables: the connector and the Hadoop settings of the table's own storage options.
            conf={**DEFAULT_CONF, **handoff.conf, **(options.pop("conf", None) or {})},
            env_vars=env_vars,
            name=options.pop("name", f"deltalog-compact-{handoff.run_id}"),
            application_args=handoff.job_arguments(),
            **options,
        )
        try:
            self._running.submit(spark_job_script())
        finally:
            self._running = None

    def kill(self) -> None:
        """Kill the job when one is running (``on_kill``)."""
        running = self._running
        if running is not None:
            running.on_kill()
