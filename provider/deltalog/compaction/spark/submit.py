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
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from deltalog.compaction.engine_output import BinOutput, BinSkipped
from deltalog.compaction.plan import CompactionPlan
from deltalog.compaction.spark.commit import outputs_from_request
from deltalog.compaction.spark.job import REPORT_PREFIX
from deltalog.errors import EngineError, InvalidArgumentError, OperationCancelledError
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

DEFAULT_MASTER = "local[2]"
#: Quiet, UI-less defaults for a batch job; callers' ``conf`` wins.
DEFAULT_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}


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


#: Parts of a Hadoop setting's name that mark its value as a credential (never logged).
_SECRET_NAMES = ("key", "secret", "sas", "token", "password")


def is_secret_setting(name: str) -> bool:
    """Whether a Spark/Hadoop setting's value is a credential (an account key, a SAS token, a client secret)."""
    return any(part in name.lower() for part in _SECRET_NAMES) and "provider.type" not in name


def _redacted(cmd: list[str]) -> list[str]:
    """The command line as logged: the values of credential settings hidden."""
    shown = []
    for arg in cmd:
        name, sep, _ = arg.partition("=")
        shown.append(f"{name}=***" if sep and is_secret_setting(name) else arg)
    return shown


def spark_job_script() -> str:
    """Path of the spark-submit entry script shipped with deltalog."""
    return str(Path(__file__).with_name("main.py"))


def find_spark_submit(explicit: str | None = None) -> str:
    """``explicit``, else the pyspark package's ``spark-submit`` next to this Python, else $SPARK_HOME, else PATH."""
    candidates = [explicit] if explicit else []
    candidates.append(str(Path(sys.executable).parent / "spark-submit"))
    if os.environ.get("SPARK_HOME"):
        candidates.append(str(Path(os.environ["SPARK_HOME"]) / "bin" / "spark-submit"))
    found = shutil.which("spark-submit")
    if found:
        candidates.append(found)
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise EngineError(
        "spark-submit was not found (looked next to this Python, in $SPARK_HOME/bin and on PATH); "
        "install pyspark or pass spark_submit=..."
    )


def _last_error(stderr_path: str, stdout: str = "") -> str:
    """The most telling line of a failed job's output (a Python error line, else stderr's last line).

    spark-submit's PythonRunner merges the Python driver's stderr into its stdout, so
    a Python traceback or ``error:`` line is looked for there first, then in stderr.
    """
    try:
        lines = Path(stderr_path).read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in reversed(lines + stdout.splitlines()):
        s = line.strip()
        if s.startswith("error:") or s.split(":", 1)[0].endswith(("Error", "Exception")):
            return s[:500]
    return lines[-1][:500] if lines else "no output"


#: Seconds between checks of a running job for a cancel or a time-out.
POLL_S = 0.5


def _wait(proc: subprocess.Popen[bytes], timeout: float | None, cancel: threading.Event | None) -> int:
    """Wait for ``proc``; terminate it (then kill) on a time-out or a cancel, and say which."""
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        try:
            return proc.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
        cancelled = cancel is not None and cancel.is_set()
        if cancelled or (deadline is not None and time.monotonic() >= deadline):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if cancelled:
                raise OperationCancelledError(
                    "the Spark compaction job was cancelled and stopped; nothing was committed"
                )
            raise EngineError(f"the Spark compaction job did not finish within {timeout} s")


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
    submit = find_spark_submit(spark_submit)
    workdir = tempfile.mkdtemp(prefix="deltalog-compaction-")
    try:
        plan_path = os.path.join(workdir, "plan.json")
        request_path = os.path.join(workdir, "request.json")
        stderr_path = os.path.join(workdir, "spark-submit.stderr")
        stdout_path = os.path.join(workdir, "spark-submit.stdout")
        Path(plan_path).write_text(plan.to_json())
        cmd = [submit, "--master", master]
        for k, v in {**DEFAULT_CONF, **storage_spark_conf(storage), **(conf or {})}.items():
            cmd += ["--conf", f"{k}={v}"]
        cmd += [spark_job_script(), "--plan", plan_path, "--table", spark_table_uri(storage)]
        cmd += ["--output-request", request_path]
        if max_parallel_bins:
            cmd += ["--max-parallel-bins", str(max_parallel_bins)]
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
        log.info("running %s", " ".join(_redacted(cmd)))
        started = time.perf_counter()
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            try:
                proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
            except OSError as exc:
                raise EngineError(f"cannot run {submit}: {exc}") from None
            returncode = _wait(proc, timeout, cancel)
        stdout = Path(stdout_path).read_text(errors="replace")
        if returncode != 0:
            reason = _last_error(stderr_path, stdout)
            raise EngineError(f"the Spark compaction job failed (exit {returncode}): {reason}; nothing was committed")
        report: dict[str, Any] = {"failures": []}
        for line in stdout.splitlines():
            if line.startswith(REPORT_PREFIX):
                report = json.loads(line[len(REPORT_PREFIX) :])
        try:
            request = json.loads(Path(request_path).read_text())
        except (OSError, ValueError) as exc:
            raise EngineError(f"the Spark compaction job wrote no readable commit request: {exc}") from None
        log.info(
            "spark-submit finished in %.1fs (bins rewritten in %.1fs)",
            time.perf_counter() - started,
            report.get("seconds", 0),
        )
        return outputs_from_request(storage, plan, request, report.get("failures") or [])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
