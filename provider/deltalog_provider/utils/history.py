"""What a task records: a row per operation in the maintenance history, and the same numbers as metrics.

The history is the operator's ``history_uri`` argument, else the connection's extra
``history_uri`` (docs/history.md); the metrics go to the deployment's ``[metrics]`` backend
(:mod:`.metrics`). A task that has neither measures nothing extra. Dry runs, plans and
operations the history has no name for (creating a table) record nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from deltalog import HistoryRecorder, RunContext
from deltalog_provider.utils.commit_events import triggered_by
from deltalog_provider.utils.metrics import emit_row_metrics
from deltalog_provider.version_compat import metrics_enabled

__all__ = ["HISTORY_OPERATIONS", "history_operation", "operation_record", "task_recorder"]

#: An operator's ``operation_name`` -> the history's operation.
HISTORY_OPERATIONS = {
    "OPTIMIZE": "compaction",
    "CHECKPOINT": "checkpoint",
    "VACUUM": "vacuum",
    "LOG CLEANUP": "log_cleanup",
    "GENERATE MANIFEST": "manifest",
    "COMMIT": "commit",
    "CONVERT": "convert",
}


def history_operation(operator: Any) -> str | None:
    """The history's name for what ``operator`` does (a compaction that purges is a ``purge``), or None."""
    operation = HISTORY_OPERATIONS.get(getattr(operator, "operation_name", ""))
    if operation == "compaction" and getattr(operator, "purge_deletion_vectors", False) is True:
        return "purge"
    return operation


def task_recorder(
    context: Any, history_uri: str | None, storage_options: dict[str, Any] | None = None
) -> HistoryRecorder | None:
    """A recorder for the running task instance: rows into ``history_uri`` (checked now, before any work)
    and metrics when the deployment sends any; None when neither is wanted."""
    metrics = metrics_enabled()
    if history_uri is None and not metrics:
        return None
    ti = context["ti"]
    run = replace(
        RunContext.airflow(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number),
        triggered_by=triggered_by(context),
    )
    recorder = HistoryRecorder(
        history_uri, storage_options=storage_options, context=run, on_row=emit_row_metrics if metrics else None
    )
    recorder.prepare()
    return recorder


class _NotRecorded:
    """What the block of :func:`operation_record` sets when nothing is recorded."""

    result: Any = None


@contextmanager
def operation_record(operator: Any, hook: Any, table: Any, context: Any) -> Iterator[Any]:
    """Record the operation the block runs (set ``.result``) for ``operator`` on ``table``."""
    operation = history_operation(operator)
    recorder = None
    if operation is not None and operator.changes_table():
        uri = getattr(operator, "history_uri", None) or hook.settings.history_uri
        recorder = task_recorder(context, uri, hook.storage_options_for(uri) if uri else None)
    if recorder is None or operation is None:
        yield _NotRecorded()
        return
    if uri:
        operator.log.info("recording the %s of %s in the maintenance history %s", operation, table.uri, uri)
    with recorder.operation(table, operation, measure_before=operation != "convert") as draft:
        yield draft
