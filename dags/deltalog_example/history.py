"""The example DAGs' maintenance history: where it is (the ``deltalog_history_uri`` Variable) and who writes.

Every row a task appends names the task instance (DAG, run, task, map index, try), and the
rows of one DAG run share its ``run_id``, so the fleet view groups a run's rows and a retried
task records its own rows without repeating those of an earlier try (docs/history.md). The
same rows reach the deployment's metrics (``[metrics]``; docs/provider.md).
"""

from __future__ import annotations

from typing import Any

from deltalog_example import optional_setting

__all__ = ["history_recorder", "history_uri"]


def history_uri() -> str | None:
    """The ``deltalog_history_uri`` Variable (default beside the demo tables); None when emptied."""
    return optional_setting("deltalog_history_uri")


def history_recorder(context: dict[str, Any], storage_options: dict[str, Any] | None = None) -> Any:
    """A recorder for the running task instance, its history created or checked; None when there is neither a
    history nor a metrics backend."""
    from deltalog_provider.utils.history import task_recorder

    return task_recorder(context, history_uri(), storage_options)
