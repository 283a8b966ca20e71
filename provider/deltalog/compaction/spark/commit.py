"""Committing what the Spark compaction job wrote: its commit request, mapped back onto the plan's bins.

The job reports the new files of each bin (one per bin, or several for a Z-order or a
clustering; the bin id is in each file's name) in a commit
request. :func:`outputs_from_request` turns that into the per-bin outputs the
compaction committer takes, and :func:`commit_spark_result` commits them bin by bin
(a bin whose input a concurrent writer removed is dropped and its new file deleted,
the other bins still commit): the step a DAG runs after ``spark-submit``, whether the
job was submitted by ``compact(engine="spark")``, an Airflow ``SparkSubmitHook`` or by
hand.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from deltalog.compaction.batches import commit_outputs
from deltalog.compaction.engine_output import BinOutput, BinSkipped
from deltalog.compaction.file_names import bin_id_from_name
from deltalog.compaction.plan import CompactionPlan
from deltalog.compaction.plan_owner import check_plan_owner
from deltalog.compaction.result import CompactionResult
from deltalog.errors import EngineError, ForeignHandoffError, InvalidArgumentError
from deltalog.log.load import snapshot_at
from deltalog.protocol.parquet_layout import from_log_path, to_log_path
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage
from deltalog.write_checks.handoffs import check_table_id

__all__ = ["check_request_owner", "commit_spark_result", "outputs_from_request", "read_spark_request"]


#: How a missing input file surfaces from the Spark job (our reader, Hadoop, Spark's error classes).
_MISSING_INPUT = re.compile(r"the table is missing a file|FileNotFoundException|FILE_NOT_EXIST|PATH_NOT_FOUND")


def outputs_from_request(
    storage: Storage, plan: CompactionPlan, request: dict[str, Any], failures: list[dict[str, Any]]
) -> tuple[list[BinOutput], list[BinSkipped]]:
    """Map a Spark commit request back onto the plan's bins (the bin id is in each new file's name)."""
    bins = {b.id: b for b in plan.bins}
    outputs: dict[int, BinOutput] = {}
    written: dict[int, list[tuple[dict[str, Any], str, int]]] = {}  # per bin: (add, storage path, rows)
    removed = set(request.get("remove") or [])
    several = bool(plan.zorder_by) or plan.clustering is not None  # a curve bin is cut into several files
    for add in request.get("add") or []:
        path = add["path"]
        bid = bin_id_from_name(path)
        if bid not in bins or (bid in written and not several):
            raise EngineError(f"the Spark job returned {path!r}, which belongs to no bin of the plan")
        stats = json.loads(add.get("stats") or "{}")
        action: dict[str, Any] = {
            "path": to_log_path(path),
            "partitionValues": dict(add.get("partitionValues") or {}),
            "size": int(add["size"]),
            "modificationTime": int(add["modificationTime"]),
            "dataChange": False,
            "stats": add.get("stats"),
        }
        if add.get("tags"):
            action["tags"] = {str(k): str(v) for k, v in add["tags"].items()}
        if add.get("clusteringProvider"):
            action["clusteringProvider"] = str(add["clusteringProvider"])
        written.setdefault(bid, []).append((action, storage.join(*path.split("/")), int(stats.get("numRecords", 0))))
    for bid, files in written.items():
        outputs[bid] = BinOutput(
            bin_id=bid,
            add=files[0][0],
            rows_out=sum(rows for _, _, rows in files),
            bytes_in=bins[bid].size,
            deletion_vectors=sum(1 for f in bins[bid].files if f.deletion_vector),
            storage_path=files[0][1],
            more_adds=[a for a, _, _ in files[1:]],
            more_paths=[w for _, w, _ in files[1:]],
        )
    failed = {int(f["bin"]): str(f.get("reason")) for f in failures}
    skipped = []
    for bid, b in bins.items():
        if bid in outputs:
            continue
        inputs = {from_log_path(f.path) for f in b.files}
        if bid in failed:
            kind = "missing" if _MISSING_INPUT.search(failed[bid]) else "error"
            skipped.append(BinSkipped(bid, f"the Spark job failed on this bin: {failed[bid]}", kind))
        elif inputs <= removed:  # every row was deleted: remove the inputs, add nothing
            outputs[bid] = BinOutput(
                bin_id=bid, add=None, bytes_in=b.size, deletion_vectors=sum(1 for f in b.files if f.deletion_vector)
            )
        else:
            skipped.append(BinSkipped(bid, "the Spark job did not report this bin", "error"))
    return [outputs[k] for k in sorted(outputs)], skipped


def commit_spark_result(
    table: TableRef,
    plan: CompactionPlan,
    request: dict[str, Any],
    *,
    failures: list[dict[str, Any]] | None = None,
    bins_per_commit: int | None = None,
    run_hooks: bool = True,
    cancel: threading.Event | None = None,
    engine_seconds: float = 0.0,
    storage_options: dict[str, Any] | None = None,
) -> CompactionResult:
    """Commit the Spark job's ``request`` for ``plan`` (``failures``: the bins the job reported failed).

    Refused before anything is committed unless the plan is this table's (``check_plan_owner``) and the
    request the job wrote names the plan's table and version (``tableId``, ``readVersion``). Bins whose
    inputs commits since the plan removed are dropped by the commit's conflict rules (their new files
    deleted), as for any compaction.
    """
    storage = table_storage(table, storage_options)
    check_request_owner(plan, request)
    check_plan_owner(storage, plan, snapshot_at(storage))
    outputs, skipped = outputs_from_request(storage, plan, request, failures or [])
    return commit_outputs(
        storage,
        plan,
        outputs,
        skipped,
        engine="spark",
        bins_per_commit=bins_per_commit,
        run_hooks=run_hooks,
        cancel=cancel,
        engine_seconds=engine_seconds,
    )


def check_request_owner(plan: CompactionPlan, request: dict[str, Any]) -> None:
    """The job's commit request is for ``plan``: the same table id and plan version (a request left by
    another run, or another table's job, is refused before anything is committed)."""
    what = "the Spark compaction job's commit request"
    check_table_id(what, "tableId", request.get("tableId"), plan.table_id, plan.table_uri)
    made_at = request.get("readVersion")
    if isinstance(made_at, bool) or not isinstance(made_at, int):
        raise InvalidArgumentError(f"{what}: 'readVersion' must be the plan's version (an integer), got {made_at!r}")
    if made_at != plan.snapshot_version:
        raise ForeignHandoffError(
            f"{what} was made for the plan at version {made_at}, not this plan (version {plan.snapshot_version}); "
            "nothing was committed"
        )


def read_spark_request(storage: Storage, location: str) -> dict[str, Any]:
    """The commit request the job wrote at ``location`` (a path under the table's storage)."""
    try:
        request = json.loads(storage.read_bytes(location))
    except (OSError, ValueError) as exc:
        raise EngineError(f"the Spark compaction job wrote no readable commit request at {location}: {exc}") from None
    if not isinstance(request, dict):
        raise EngineError(f"the Spark compaction job's commit request at {location} is not a JSON object")
    return request
