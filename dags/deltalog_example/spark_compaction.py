"""The commit end of a Spark compaction run by SparkSubmitOperator.

``compact(engine="spark")`` does plan -> spark-submit -> commit in one call; in a DAG the
middle step belongs to ``SparkSubmitOperator`` (the Spark connection, cluster tracking,
``on_kill``), so the deltalog steps run as tasks around it: ``DeltaCompactOperator``
with ``plan_only`` and ``plan_path`` writes the plan the Spark job (``spark_jobs/compact.py``)
reads, and ``commit_result`` reads the job's commit request back and commits it bin by
bin with the compaction committer, so a bin whose input a concurrent writer removed is
dropped (its new file deleted) while the other bins still commit.
"""

from __future__ import annotations

import json
from typing import Any

from deltalog import DeltaTable


def _location(table: DeltaTable, relative: str) -> str:
    """``relative`` (a path under the table root) as the table's storage names it."""
    return table.storage.join(*relative.split("/"))


def commit_result(table: DeltaTable, plan_path: str, request_path: str) -> dict[str, Any]:
    """Commit the Spark job's request against the plan it executed; report committed and dropped bins."""
    from deltalog.compaction import CompactionPlan
    from deltalog.compaction.commit import commit_bins
    from deltalog.compaction.spark import outputs_from_request

    storage = table.storage
    plan = CompactionPlan.from_json(storage.read_bytes(_location(table, plan_path)))
    if not plan.bins:
        return {"noop": True, "reason": "the plan had no bins", "version": None, "bins_committed": 0}
    request = json.loads(storage.read_bytes(_location(table, request_path)))
    outputs, not_rewritten = outputs_from_request(storage, plan, request, [])
    record, lost = commit_bins(table, plan, outputs, engine="spark")
    skipped = [s.to_dict() for s in [*not_rewritten, *lost]]
    return {
        "noop": record is None,
        "version": record.version if record else None,
        "bins_planned": len(plan.bins),
        "bins_committed": len(record.bins) if record else 0,
        "operation_metrics": record.operation_metrics if record else {},
        "skipped_bins": skipped,
    }
