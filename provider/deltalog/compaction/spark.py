"""Running the Spark compaction engine from deltalog: spark-submit the job, read back its commit request.

``compact(engine="spark")`` writes the plan to a temporary folder, runs
``spark-submit <master> engines/spark_compaction.py --plan ... --table ...
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
import time
from pathlib import Path
from typing import Any

from deltalog.compaction.layout import bin_id_from_name, from_log_path, to_log_path
from deltalog.compaction.outcome import BinOutput, BinSkipped
from deltalog.compaction.plan import CompactionPlan
from deltalog.compaction.spark_job import REPORT_PREFIX
from deltalog.errors import EngineError
from deltalog.storage import Storage

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[2]"
#: Quiet, UI-less defaults for a batch job; callers' ``conf`` wins.
DEFAULT_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}


def job_script() -> str:
    """Path of the spark-submit entry script shipped with deltalog."""
    import deltalog.engines

    return str(Path(deltalog.engines.__file__).parent / "spark_compaction.py")


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


def outputs_from_request(
    storage: Storage, plan: CompactionPlan, request: dict[str, Any], failures: list[dict[str, Any]]
) -> tuple[list[BinOutput], list[BinSkipped]]:
    """Map a Spark commit request back onto the plan's bins (the bin id is in each new file's name)."""
    bins = {b.id: b for b in plan.bins}
    outputs: dict[int, BinOutput] = {}
    removed = set(request.get("remove") or [])
    for add in request.get("add") or []:
        path = add["path"]
        bid = bin_id_from_name(path)
        if bid not in bins or bid in outputs:
            raise EngineError(f"the Spark job returned {path!r}, which belongs to no bin of the plan")
        stats = json.loads(add.get("stats") or "{}")
        outputs[bid] = BinOutput(
            bin_id=bid,
            add={
                "path": to_log_path(path),
                "partitionValues": dict(add.get("partitionValues") or {}),
                "size": int(add["size"]),
                "modificationTime": int(add["modificationTime"]),
                "dataChange": False,
                "stats": add.get("stats"),
            },
            rows_out=int(stats.get("numRecords", 0)),
            bytes_in=bins[bid].size,
            deletion_vectors=sum(1 for f in bins[bid].files if f.deletionVector),
            storage_path=storage.join(*path.split("/")),
        )
    failed = {int(f["bin"]): str(f.get("reason")) for f in failures}
    skipped = []
    for bid, b in bins.items():
        if bid in outputs:
            continue
        inputs = {from_log_path(f.path) for f in b.files}
        if bid in failed:
            skipped.append(BinSkipped(bid, f"the Spark job failed on this bin: {failed[bid]}", "error"))
        elif inputs <= removed:  # every row was deleted: remove the inputs, add nothing
            outputs[bid] = BinOutput(
                bin_id=bid, add=None, bytes_in=b.size, deletion_vectors=sum(1 for f in b.files if f.deletionVector)
            )
        else:
            skipped.append(BinSkipped(bid, "the Spark job did not report this bin", "error"))
    return [outputs[k] for k in sorted(outputs)], skipped


def run_spark(
    storage: Storage,
    plan: CompactionPlan,
    *,
    master: str = DEFAULT_MASTER,
    spark_submit: str | None = None,
    conf: dict[str, str] | None = None,
    timeout: float | None = None,
    max_parallel_bins: int | None = None,
) -> tuple[list[BinOutput], list[BinSkipped]]:
    """Rewrite the plan's bins with ``spark-submit``; raises EngineError when the job fails."""
    submit = find_spark_submit(spark_submit)
    workdir = tempfile.mkdtemp(prefix="deltalog-compaction-")
    try:
        plan_path = os.path.join(workdir, "plan.json")
        request_path = os.path.join(workdir, "request.json")
        stderr_path = os.path.join(workdir, "spark-submit.stderr")
        Path(plan_path).write_text(plan.to_json())
        cmd = [submit, "--master", master]
        for k, v in {**DEFAULT_CONF, **(conf or {})}.items():
            cmd += ["--conf", f"{k}={v}"]
        cmd += [job_script(), "--plan", plan_path, "--table", storage.uri, "--output-request", request_path]
        if max_parallel_bins:
            cmd += ["--max-parallel-bins", str(max_parallel_bins)]
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
        log.info("running %s", " ".join(cmd))
        started = time.perf_counter()
        with open(stderr_path, "wb") as err:
            try:
                proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, env=env, timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                raise EngineError(f"the Spark compaction job did not finish within {timeout} s") from None
            except OSError as exc:
                raise EngineError(f"cannot run {submit}: {exc}") from None
        if proc.returncode != 0:
            reason = _last_error(stderr_path, proc.stdout.decode(errors="replace"))
            raise EngineError(
                f"the Spark compaction job failed (exit {proc.returncode}): {reason}; nothing was committed"
            )
        report: dict[str, Any] = {"failures": []}
        for line in proc.stdout.decode(errors="replace").splitlines():
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
