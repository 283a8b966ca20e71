"""The Spark compaction job run in the tests' Delta Spark session instead of a spark-submit of its own.

``compact(engine="spark")`` plans, checks and commits in deltalog and hands the rewrite to ``run_spark``,
which starts ``spark-submit`` (a new JVM: 15-25 CPU s before the first row) to run ``run_job``. Tests
whose subject is what the job writes (row ids, variants, Iceberg compatibility, layouts), not how it is
launched, run ``run_job`` itself in the session they already hold, with the job's settings
(``SPARK_CONF``, Spark and Hadoop ones) applied for the job and put back after it: everything else of
``compact`` is unchanged. The launch (``spark-submit``, its arguments, its report, a failing or
cancelled job) keeps its own tests with a real ``spark-submit`` (test_compaction_spark.py,
test_compaction_layout_spark.py's CLI run, the S3 and cloud connector runs).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["compaction_jobs_in_session", "job_settings", "run_job_in_session"]


@contextlib.contextmanager
def job_settings(spark: Any) -> Iterator[None]:
    """The job's ``SPARK_CONF`` on the session (``spark.hadoop.*`` on its Hadoop configuration), then back.

    The session is shared by the whole run: what the job's settings replace is put back, or later tests see
    them (seen: writeShredding off made Delta Spark write no shredded variant file elsewhere).
    """
    from deltalog.compaction.spark.job import SPARK_CONF

    jconf = spark._jsc.hadoopConfiguration()
    hadoop = {k.removeprefix("spark.hadoop."): v for k, v in SPARK_CONF.items() if k.startswith("spark.hadoop.")}
    session = {k: v for k, v in SPARK_CONF.items() if not k.startswith("spark.hadoop.")}
    saved = {k: spark.conf.get(k, None) for k in session}
    saved_hadoop = {k: jconf.get(k) for k in hadoop}
    try:
        for k, v in session.items():
            spark.conf.set(k, v)
        for k, v in hadoop.items():
            jconf.set(k, v)
        yield
    finally:
        for k, v in saved.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
        for k, v in saved_hadoop.items():
            jconf.unset(k) if v is None else jconf.set(k, v)


def run_job_in_session(spark: Any, table_uri: str, plan: Any, work_dir: Path) -> tuple[dict[str, Any], list[Any]]:
    """``run_job`` (what spark-submit runs) in ``spark``: the commit request it wrote and the bins that failed."""
    from deltalog.compaction.spark.job import run_job

    plan_file = work_dir / "plan.json"
    plan_file.write_text(plan.to_json())
    request_file = work_dir / "request.json"
    with job_settings(spark):
        rewrite = run_job(spark, str(plan_file), table_uri, str(request_file))
    return json.loads(request_file.read_text()), list(rewrite.failures)


@contextlib.contextmanager
def compaction_jobs_in_session(spark: Any) -> Iterator[list[str]]:
    """Inside, ``compact(engine="spark")`` runs its job in ``spark``; yields the tables it ran for.

    ``spark_options`` meant for spark-submit (master, timeout) have nothing to set here and are ignored.
    """
    from deltalog.compaction.spark import submit

    ran: list[str] = []

    def run_in_session(storage: Any, plan: Any, *, cancel: Any = None, **_spark_options: Any) -> Any:
        table_uri = submit.spark_table_uri(storage)
        with tempfile.TemporaryDirectory(prefix="deltalog-compaction-") as work_dir:
            request, failures = run_job_in_session(spark, table_uri, plan, Path(work_dir))
        ran.append(table_uri)
        return submit.outputs_from_request(storage, plan, request, failures)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(submit, "run_spark", run_in_session)
        yield ran
