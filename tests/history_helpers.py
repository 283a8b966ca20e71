"""A real maintenance history to show: small tables maintained over several rounds, recorded.

Every row comes from a real operation on a real table (measure, compaction, checkpoint,
vacuum, log cleanup through :class:`deltalog.journal.HistoryRecorder`), plus a table
deltalog refuses (catalog-managed) and a compaction that was deferred because its time
budget was already spent. Used by the fleet view's page tests and its browser test.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from deltalog import DeltaTable, cleanup_log, compact, create_checkpoint, settings_for, vacuum
from deltalog.journal import HistoryRecorder, OperationSpan, RunContext, table_state
from deltalog.journal.record import row_for_measurement, utc_now
from deltalog.maintenance.policy import due_under
from fleet_helpers import refused_protocol_table
from helpers import append, make_table, rows


@dataclass(frozen=True)
class DemoFleet:
    history: str
    tables: dict[str, str]  # name -> URI, as the history records it
    refused: str
    deferred: str


def fleet_settings(root: str) -> dict:
    """The demo fleet's settings file: fleet defaults, a path rule for ``sales/``, an override for ``orders``."""
    return {
        "defaults": {"vacuum_retention_hours": 240},
        "prefixes": {os.path.join(root, "sales"): {"checkpoint_interval": 20}},
        "tables": {"orders": {"target_file_size": "64m"}},
    }


def _measure(recorder: HistoryRecorder, table: DeltaTable) -> None:
    assert recorder.context is not None
    started = utc_now()
    snapshot = table.snapshot()
    root = os.path.dirname(os.path.dirname(table.storage.root))
    settings = settings_for(table.uri, fleet_settings(root), snapshot.metadata.configuration)
    due = due_under(settings, table, snapshot)
    state = table_state(snapshot, settings.target_file_size)
    span = OperationSpan(recorder.context, table.uri, "measure", started, utc_now(), state, state)
    recorder.record([row_for_measurement(span, due, policy=settings.policy_json())])


def maintained_fleet(root: str, rounds: int = 3, history: str | None = None) -> DemoFleet:
    """``rounds`` maintenance runs over three growing tables, each run's rows recorded (see the module doc)
    into ``history`` (default: ``<root>/_deltalog/history``; an existing one gets the rows added)."""
    history = history or os.path.join(root, "_deltalog", "history")
    sizes = {"orders": 14, "events": 11, "customers": 4}
    tables = {name: make_table(os.path.join(root, "sales", name)) for name in sizes}
    for r in range(rounds):
        recorder = HistoryRecorder(history, context=RunContext(run_id=f"round-{r}"), auto_flush=False)
        for name, table in tables.items():
            for i in range(sizes[name] + 3 * r):
                append(table, rows(20, start=(r * 1000 + i) * 20), run_hooks=False)
            _measure(recorder, table)
            with recorder.operation(table, "compaction", engine="local") as op:
                op.result = compact(table, run_hooks=False)
            with recorder.operation(table, "checkpoint") as op:
                op.result = create_checkpoint(table)
            with recorder.operation(table, "vacuum") as op:
                op.result = vacuum(table, retention_hours=0, allow_short_retention=True)
            with recorder.operation(table, "log_cleanup") as op:
                op.result = cleanup_log(table)
            recorder.flush()
        time.sleep(0.2)  # the rounds' points stand apart on the time axis
    # A catalog-managed table: measured, refused.
    refused = refused_protocol_table(os.path.join(root, "sales", "managed"))
    last = HistoryRecorder(history, context=RunContext(run_id="round-last"), auto_flush=False)
    _measure(last, refused)
    # A table whose compaction was due but whose budget was spent: deferred, still due.
    late = make_table(os.path.join(root, "sales", "late"))
    for i in range(6):
        append(late, rows(20, start=i * 20), run_hooks=False)
    _measure(last, late)
    with last.operation(late, "compaction", engine="local") as op:
        op.result = compact(late, run_hooks=False, deadline=time.monotonic() - 1)
    last.flush()
    return DemoFleet(
        history=history,
        tables={name: t.uri for name, t in tables.items()},
        refused=refused.uri,
        deferred=late.uri,
    )
