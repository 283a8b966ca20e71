"""The Spark compaction job submitted by someone else: the plan file it reads, the request it writes, the commit.

``compact(engine="spark")`` runs ``spark-submit`` itself (:mod:`.submit`). A scheduler
that submits Spark jobs its own way (Airflow's ``SparkSubmitHook``, a cluster's job API)
hands :func:`compact_with_spark_job` a ``submit`` callable instead: deltalog writes the
plan under the table's hidden ``_compaction/`` folder (readers and vacuum skip it), calls
``submit(handoff)`` with the job's application arguments, reads back the commit request
the job wrote next to the plan, commits it bin by bin (:func:`.commit.commit_spark_result`)
and removes its scratch files. :func:`write_compaction_plan` writes a plan where a job submitted
later, by hand or by another task, reads it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deltalog.compaction.plan import CompactionPlan
from deltalog.compaction.plan_owner import check_plan_owner
from deltalog.compaction.result import CompactionResult
from deltalog.compaction.spark.commit import commit_spark_result, read_spark_request
from deltalog.compaction.spark.job import check_spark_can_rewrite
from deltalog.compaction.spark.submit import is_secret_setting, spark_table_uri, storage_spark_conf
from deltalog.errors import DeltaLogError, OperationCancelledError
from deltalog.log.load import snapshot_at
from deltalog.protocol.features import Operation
from deltalog.protocol.parquet_layout import is_absolute
from deltalog.protocol.write_gate import check_can_write
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage

__all__ = ["WORK_DIR", "SparkHandoff", "compact_with_spark_job", "write_compaction_plan"]

log = logging.getLogger(__name__)

#: Hidden folder of the table for the plans and commit requests of Spark jobs.
WORK_DIR = "_compaction"


def write_compaction_plan(
    table: TableRef,
    plan: CompactionPlan,
    path: str,
    *,
    plan_storage_options: dict[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> str:
    """Write ``plan`` as JSON at ``path`` and return where it went (what the job's ``--plan`` names).

    A relative ``path`` is under the table root, written with the table's own storage; an
    absolute path or URI is written with ``plan_storage_options`` (the options of that location).
    The plan must be ``table``'s (``check_plan_owner``: its id and version, inputs that were the
    table's live files), or nothing is written.
    """
    table_store = table_storage(table, storage_options)
    check_plan_owner(table_store, plan, snapshot_at(table_store))
    return _write_plan(table_store, plan, path, plan_storage_options)


def _write_plan(
    table_store: Storage, plan: CompactionPlan, path: str, plan_storage_options: dict[str, Any] | None
) -> str:
    """:func:`write_compaction_plan` once the plan is known to be the table's."""
    text = plan.to_json().encode("utf-8")
    if is_absolute(path):
        folder, _, name = path.rstrip("/").rpartition("/")
        storage = Storage(folder or "/", plan_storage_options)
        storage.makedirs(storage.root)
        storage.write_atomic(storage.join(name), text)
        log.info("compaction plan written to %s", path)
        return path
    storage = table_store
    location = storage.join(*path.strip("/").split("/"))
    storage.makedirs(location.rsplit("/", 1)[0])
    storage.write_atomic(location, text)
    log.info("compaction plan written to %s", location)
    return storage.full_uri(path.strip("/"))


@dataclass(frozen=True)
class SparkHandoff:
    """One run of deltalog's Spark compaction job: what it is told to read and where it writes."""

    #: Names this run's scratch files (and a job name, for whoever submits it).
    run_id: str
    table_uri: str
    plan_uri: str
    request_uri: str
    #: Spark settings the job needs to reach the table (Azure, GCS: the Hadoop connector and the
    #: table's own endpoint and identity, ``storage_spark_conf``); whoever submits adds them.
    conf: dict[str, str] = field(default_factory=dict)

    def secrets(self) -> list[str]:
        """The values of ``conf`` that are credentials: a submitter hides them from its logs."""
        return [value for name, value in self.conf.items() if is_secret_setting(name)]

    def job_arguments(self) -> list[str]:
        """The application arguments of the job's entry script (``spark_job_script()``)."""
        return ["--table", self.table_uri, "--plan", self.plan_uri, "--output-request", self.request_uri]


def compact_with_spark_job(
    table: TableRef,
    plan: CompactionPlan,
    submit: Callable[[SparkHandoff], None],
    *,
    plan_path: str | None = None,
    plan_storage_options: dict[str, Any] | None = None,
    bins_per_commit: int | None = None,
    cancel: threading.Event | None = None,
    storage_options: dict[str, Any] | None = None,
) -> CompactionResult:
    """Write the plan, ``submit`` the job (it returns when the job has finished), commit what it wrote.

    ``plan_path`` keeps the plan where the caller says (see :func:`write_compaction_plan`); by default it
    is a scratch file under ``_compaction/``, removed afterwards like the commit request. A
    ``cancel`` set before the job starts stops with nothing written to the table; the commit
    stops between bins. ``submit`` raising (the job failed) commits nothing.
    """
    check_spark_can_rewrite(plan)
    storage = table_storage(table, storage_options)
    # The gate, before the plan is written or the job rewrites anything: the table's protocol,
    # a store that commits atomically, and one the job's Hadoop connectors reach.
    latest = snapshot_at(storage)
    config = latest.metadata.configuration
    check_can_write(storage, latest.protocol, "compact", Operation.COMPACTION_SPARK, config, commits=True)
    check_plan_owner(storage, plan, latest)  # another table's plan: refused before it is written or submitted
    conf = storage_spark_conf(storage)
    run_id = uuid.uuid4().hex[:12]
    plan_rel = f"{WORK_DIR}/plan-{run_id}.json"
    request_rel = f"{WORK_DIR}/request-{run_id}.json"
    plan_uri = _write_plan(storage, plan, plan_path or plan_rel, plan_storage_options)
    request_location = storage.join(*request_rel.split("/"))
    scratch = [request_location] + ([] if plan_path else [storage.join(*plan_rel.split("/"))])
    handoff = SparkHandoff(run_id, spark_table_uri(storage), plan_uri, storage.full_uri(request_rel), conf)
    try:
        if cancel is not None and cancel.is_set():  # the safe point: planned, nothing rewritten yet
            raise OperationCancelledError("the Spark compaction was cancelled before its job started; nothing changed")
        started = time.perf_counter()
        submit(handoff)
        request = read_spark_request(storage, request_location)
        return commit_spark_result(
            storage,
            plan,
            request,
            bins_per_commit=bins_per_commit,
            cancel=cancel,
            engine_seconds=time.perf_counter() - started,
        )
    finally:
        for location in scratch:
            try:
                storage.delete(location)
            except DeltaLogError as exc:  # leftovers sit in a hidden folder; never mask the real outcome
                log.warning("could not remove %s: %s", location, exc)
