"""Running one of deltalog's Spark jobs with ``spark-submit``: find it, run it, stop it, say why it failed.

Shared by the compaction and the vacuum engines (their ``submit`` modules add the job's
own arguments and read its result). The job's Python is this interpreter
(``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON``), so the driver and the Python workers
import the same deltalog. A job prints its one-line JSON report on stdout after a
prefix of its own.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltalog.errors import EngineError, OperationCancelledError

__all__ = [
    "DEFAULT_CONF",
    "DEFAULT_MASTER",
    "SparkRun",
    "find_spark_submit",
    "is_secret_setting",
    "last_error",
    "spark_submit",
]

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[2]"
#: Quiet, UI-less defaults for a batch job; callers' ``conf`` wins.
DEFAULT_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
#: Seconds between checks of a running job for a cancel or a time-out.
POLL_S = 0.5
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


def last_error(stderr_path: str, stdout: str = "") -> str:
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


def _wait(
    proc: subprocess.Popen[bytes], timeout: float | None, cancel: threading.Event | None, what: str, undone: str
) -> int:
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
                raise OperationCancelledError(f"the {what} was cancelled and stopped; {undone}")
            raise EngineError(f"the {what} did not finish within {timeout} s; {undone}")


@dataclass(frozen=True)
class SparkRun:
    """A finished job: its report (the JSON after ``report_prefix`` on stdout, if any) and its wall time."""

    report: dict[str, Any]
    seconds: float
    returncode: int
    error: str = ""


def spark_submit(
    script: str,
    args: list[str],
    *,
    what: str,
    undone: str,
    report_prefix: str,
    master: str = DEFAULT_MASTER,
    spark_submit: str | None = None,
    conf: dict[str, str] | None = None,
    timeout: float | None = None,
    cancel: threading.Event | None = None,
    check: bool = True,
) -> SparkRun:
    """``spark-submit --master M --conf ... SCRIPT ARGS``; raises EngineError (naming ``what``) when it fails.

    ``undone`` says what the caller has not done yet (for the messages of a failure, a
    time-out or a cancel). ``check=False`` returns a failed run instead of raising, for
    jobs whose report says why.
    """
    submit = find_spark_submit(spark_submit)
    workdir = tempfile.mkdtemp(prefix="deltalog-spark-submit-")
    try:
        stderr_path = os.path.join(workdir, "spark-submit.stderr")
        stdout_path = os.path.join(workdir, "spark-submit.stdout")
        cmd = [submit, "--master", master]
        for k, v in {**DEFAULT_CONF, **(conf or {})}.items():
            cmd += ["--conf", f"{k}={v}"]
        cmd += [script, *args]
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
            returncode = _wait(proc, timeout, cancel, what, undone)
        stdout = Path(stdout_path).read_text(errors="replace")
        report: dict[str, Any] = {}
        for line in stdout.splitlines():
            if line.startswith(report_prefix):
                report = json.loads(line[len(report_prefix) :])
        error = last_error(stderr_path, stdout) if returncode != 0 else ""
        if returncode != 0 and check:
            raise EngineError(f"the {what} failed (exit {returncode}): {error}; {undone}")
        return SparkRun(report, time.perf_counter() - started, returncode, error)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
