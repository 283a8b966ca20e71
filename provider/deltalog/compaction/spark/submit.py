"""Running the Spark compaction engine from deltalog: spark-submit the job, read back its commit request.

``compact(engine="spark")`` writes the plan to a temporary folder, runs
``spark-submit <master> compaction/spark/main.py --plan ... --table ...
--output-request ...`` (the ``spark-submit`` of the pyspark package next to
this Python by default), and turns the request into per-bin outputs so the
usual committer can drop only the bins that lost a race. The job's Python is
this interpreter (``PYSPARK_PYTHON``), so the driver imports the same deltalog.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from deltalog.compaction.engine_output import BinOutput, BinSkipped
from deltalog.compaction.plan import CompactionPlan
from deltalog.compaction.spark.commit import outputs_from_request
from deltalog.compaction.spark.job import REPORT_PREFIX
from deltalog.engines.spark.submit import DEFAULT_CONF, DEFAULT_MASTER, is_secret_setting
from deltalog.engines.spark.submit import spark_submit as submit_job
from deltalog.errors import EngineError, InvalidArgumentError
from deltalog.storage.filesystem import Storage

__all__ = [
    "DEFAULT_CONF",
    "is_secret_setting",
    "run_spark",
    "spark_job_script",
    "spark_table_uri",
    "storage_spark_conf",
]

log = logging.getLogger(__name__)


def _azure_host(storage: Storage) -> str:
    """The DFS host ABFS names the table's account by (``<account>.dfs.core.windows.net``)."""
    netloc = urlparse(storage.uri).netloc
    if "@" in netloc:
        host = netloc.split("@", 1)[1]
        if host.endswith(".core.windows.net"):
            return host.replace(".blob.core.windows.net", ".dfs.core.windows.net")
        if host.endswith(".fabric.microsoft.com"):  # OneLake: its own ABFS endpoint, Entra ID only
            return host
    elif not getattr(storage.fs, "account_host", None):
        from deltalog.storage.azure_gcs_reads import parse_connection_string

        account = storage.fs.account_name or parse_connection_string(storage.fs.connection_string or "").get(
            "AccountName"
        )
        if account:
            return f"{account}.dfs.core.windows.net"
    raise InvalidArgumentError(
        f"the Spark engine reaches Azure accounts of the public cloud (or an emulator) only, not {storage.uri}"
    )


def storage_spark_conf(storage: Storage) -> dict[str, str]:
    """What the job needs to reach the table: on GCS and Azure the connector (the GCS connector,
    hadoop-azure's ABFS) and the Hadoop settings of the table's own storage options (same endpoint,
    same identity); local and S3 tables need none (S3: ``conf``)."""
    if storage.protocol in ("gs", "gcs"):
        from deltalog.engines.spark_packages import gcs_spark_conf

        return gcs_spark_conf(storage.storage_options)
    if storage.protocol in ("abfs", "abfss", "az"):
        from deltalog.engines.spark_packages import azure_spark_conf

        return azure_spark_conf(_azure_host(storage), storage.storage_options)[0]
    return {}


def spark_table_uri(storage: Storage) -> str:
    """The table's URI as the job's Hadoop filesystem names it (Azure: ``abfs[s]://container@host/path``)."""
    if storage.protocol in ("abfs", "abfss", "az"):
        from deltalog.engines.spark_packages import azure_spark_conf

        host = _azure_host(storage)
        _, scheme = azure_spark_conf(host, storage.storage_options)
        container, _, path = storage.root.partition("/")
        return f"{scheme}://{container}@{host}/{path}".rstrip("/")
    return storage.uri


def spark_job_script() -> str:
    """Path of the spark-submit entry script shipped with deltalog."""
    return str(Path(__file__).with_name("main.py"))


def run_spark(
    storage: Storage,
    plan: CompactionPlan,
    *,
    master: str = DEFAULT_MASTER,
    spark_submit: str | None = None,
    conf: dict[str, str] | None = None,
    timeout: float | None = None,
    max_parallel_bins: int | None = None,
    cancel: threading.Event | None = None,
) -> tuple[list[BinOutput], list[BinSkipped]]:
    """Rewrite the plan's bins with ``spark-submit``; raises EngineError when the job fails.

    A set ``cancel`` event stops the job (the process is terminated) and raises
    ``OperationCancelledError``; nothing is committed either way until the caller commits.
    """
    workdir = tempfile.mkdtemp(prefix="deltalog-compaction-")
    try:
        plan_path = os.path.join(workdir, "plan.json")
        request_path = os.path.join(workdir, "request.json")
        Path(plan_path).write_text(plan.to_json())
        args = ["--plan", plan_path, "--table", spark_table_uri(storage), "--output-request", request_path]
        if max_parallel_bins:
            args += ["--max-parallel-bins", str(max_parallel_bins)]
        run = submit_job(
            spark_job_script(),
            args,
            what="Spark compaction job",
            undone="nothing was committed",
            report_prefix=REPORT_PREFIX,
            master=master,
            spark_submit=spark_submit,
            conf={**storage_spark_conf(storage), **(conf or {})},
            timeout=timeout,
            cancel=cancel,
        )
        report: dict[str, Any] = {"failures": [], **run.report}
        try:
            request = json.loads(Path(request_path).read_text())
        except (OSError, ValueError) as exc:
            raise EngineError(f"the Spark compaction job wrote no readable commit request: {exc}") from None
        log.info("spark-submit finished in %.1fs (bins rewritten in %.1fs)", run.seconds, report.get("seconds", 0))
        return outputs_from_request(storage, plan, request, report.get("failures") or [])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
