"""One row of the maintenance history, and the pieces it is made of.

``JournalRow`` mirrors :data:`deltalog.journal.schema.COLUMNS` field by field (a test holds
them equal), so a row is built in Python with names and checked once, then turned into
Arrow in one go by :func:`rows_to_arrow`.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import pyarrow as pa

from deltalog._version import __version__
from deltalog.errors import InvalidArgumentError
from deltalog.journal.schema import HISTORY_SCHEMA, OPERATIONS, STATUSES
from deltalog.log.commit_watch import CommitRange
from deltalog.maintenance.objectives import OBJECTIVE_NAMES, ObjectiveState
from deltalog.storage.filesystem import canonical_uri


@dataclass(frozen=True)
class TableState:
    """The health figures a row keeps from before and after an operation."""

    version: int
    live_files: int
    small_files: int
    table_bytes: int
    versions_since_checkpoint: int
    dv_share: float
    log_files: int
    table_id: str | None = None

    def summary_line(self) -> str:
        """One line for logs: version, files, small files, bytes, log length."""
        return (
            f"version {self.version}: {self.live_files} files ({self.small_files} small, {self.table_bytes} bytes), "
            f"{self.versions_since_checkpoint} versions since checkpoint, {self.log_files} commit files"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TriggeredBy:
    """The commits of one table whose announcements (the log watcher's asset events) started a run.

    ``from_version``..``to_version`` spans every announced range (one event's, or several an Airflow run
    consumed at once); ``commits`` and ``events`` count them.
    """

    from_version: int
    to_version: int
    commits: int
    events: int
    operations: tuple[str, ...]
    writers: tuple[str, ...]
    #: None: unknown (versions a lost event carried are folded in without their commits' summaries).
    blind_append_only: bool | None

    @classmethod
    def of_ranges(cls, ranges: Sequence[CommitRange]) -> TriggeredBy:
        """The ranges of one table's events, folded; InvalidArgumentError for none."""
        if not ranges:
            raise InvalidArgumentError("a run's trigger needs at least one announced range")
        return cls(
            from_version=min(r.from_version for r in ranges),
            to_version=max(r.to_version for r in ranges),
            commits=sum(r.commits for r in ranges),
            events=len(ranges),
            operations=tuple(sorted({op for r in ranges for op in r.operations})),
            writers=tuple(sorted({w for r in ranges for w in r.writers})),
            blind_append_only=all(r.blind_append_only for r in ranges),
        )

    def summary_line(self) -> str:
        return (
            f"versions {self.from_version}..{self.to_version} ({self.commits} commits in {self.events} events: "
            f"{', '.join(self.operations)})"
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["operations"], out["writers"] = list(self.operations), list(self.writers)
        return out

    def row_values(self) -> dict[str, Any]:
        """The row's ``triggered_by_*`` columns."""
        return {
            "triggered_by_from_version": self.from_version,
            "triggered_by_to_version": self.to_version,
            "triggered_by_commits": self.commits,
            "triggered_by_events": self.events,
            "triggered_by_operations": list(self.operations),
            "triggered_by_writers": list(self.writers),
            "triggered_by_blind_append_only": self.blind_append_only,
        }


@dataclass(frozen=True)
class RunContext:
    """Who writes: the run's id and, under Airflow, the task instance's ids.

    Appends are idempotent per task try: the app transaction id names the task instance
    (DAG, run, task, map index) and the append's place in the try; its version is the
    try number. A try that records the same append twice (a commit whose response was
    lost, retried) writes it once, and an older try that wakes up after a newer one has
    recorded writes nothing; every new try records its own rows.
    """

    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    dag_id: str | None = None
    airflow_run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    try_number: int | None = None
    #: Names this writer in the app transaction id where the Airflow ids cannot: a ``deltalog`` command
    #: run by a task (its environment has no map index, so the mapped instances of one task would share
    #: an id and all but one append would be taken for a repeat). None: the map index does.
    writer: str | None = None
    #: The commits whose announcements started the run, by table (``canonical_uri``): a row of one of these
    #: tables records them (schema version 3's ``triggered_by_*``).
    triggered_by: dict[str, TriggeredBy] = field(default_factory=dict)

    @classmethod
    def airflow(
        cls, dag_id: str, run_id: str, task_id: str, map_index: int | None, try_number: int | None
    ) -> RunContext:
        """A task instance's context: every row of one DAG run shares its ``run_id`` (``airflow/<dag>/<run>``)."""
        return cls(f"airflow/{dag_id}/{run_id}", dag_id, run_id, task_id, map_index, try_number)

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> RunContext:
        """The context of a process Airflow started (``AIRFLOW_CTX_*``, as a BashOperator passes them), else a
        fresh run: a CLI command run by a task records the task's DAG, run, task and try."""
        env = dict(os.environ if environ is None else environ)
        dag, run, task = (env.get(f"AIRFLOW_CTX_{k}") or None for k in ("DAG_ID", "DAG_RUN_ID", "TASK_ID"))
        if not (dag and run and task):
            return cls()
        try:
            attempt: int | None = int(env.get("AIRFLOW_CTX_TRY_NUMBER", ""))
        except ValueError:
            attempt = None
        writer = f"process-{uuid.uuid4().hex[:12]}"
        return cls(f"airflow/{dag}/{run}", dag, run, task, None, attempt, writer=writer)

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.run_id:
            raise InvalidArgumentError("a history run id must be a non-empty string")
        airflow = (self.dag_id, self.airflow_run_id, self.task_id)
        if any(v is not None for v in airflow) and not all(isinstance(v, str) and v for v in airflow):
            raise InvalidArgumentError(
                "Airflow ids in the history need the DAG id, the run id and the task id together"
            )
        for name in ("map_index", "try_number"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidArgumentError(f"{name} must be an integer, got {value!r}")

    @property
    def is_airflow(self) -> bool:
        return self.task_id is not None

    def app_id(self, sequence: int) -> str:
        """The app transaction id of this writer's ``sequence``-th append."""
        if self.is_airflow:
            map_index = self.writer or (-1 if self.map_index is None else self.map_index)
            who = f"airflow/{self.dag_id}/{self.task_id}/{map_index}/{self.airflow_run_id}"
        else:
            who = f"run/{self.run_id}"
        return f"deltalog-history/{who}/{sequence}"

    @property
    def app_version(self) -> int:
        """The app transaction version: the try number under Airflow, else 0."""
        return (self.try_number or 0) if self.is_airflow else 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class JournalRow:
    """One operation on one table (the columns of docs/history.md, same names, same order)."""

    run_id: str
    row_id: str
    run_date: dt.date
    table_uri: str
    table_id: str | None
    operation: str
    engine: str | None
    status: str
    reason: str | None
    summary: str | None
    due_operations: list[str] | None
    policy: str | None
    started_at: dt.datetime
    ended_at: dt.datetime
    duration_s: float
    cpu_s: float | None
    version_before: int | None = None
    version_after: int | None = None
    files_read: int = 0
    bytes_read: int = 0
    files_written: int = 0
    bytes_written: int = 0
    files_removed: int = 0
    bytes_removed: int = 0
    bytes_reclaimed: int = 0
    log_files_removed: int = 0
    live_files_before: int | None = None
    live_files_after: int | None = None
    small_files_before: int | None = None
    small_files_after: int | None = None
    table_bytes_before: int | None = None
    table_bytes_after: int | None = None
    versions_since_checkpoint_before: int | None = None
    versions_since_checkpoint_after: int | None = None
    dv_share_before: float | None = None
    dv_share_after: float | None = None
    log_files_before: int | None = None
    log_files_after: int | None = None
    airflow_dag_id: str | None = None
    airflow_run_id: str | None = None
    airflow_task_id: str | None = None
    airflow_map_index: int | None = None
    airflow_try_number: int | None = None
    deltalog_version: str = __version__
    # Schema version 2: service-level objectives (measure rows) and the run's finishing time (fleet_run rows).
    objectives_met: bool | None = None
    objectives_breached: list[str] | None = None
    objectives_at_risk: list[str] | None = None
    objective_max_small_files_target: int | None = None
    objective_max_small_files_value: int | None = None
    objective_max_small_files_met: bool | None = None
    objective_max_small_files_source: str | None = None
    objective_max_versions_since_checkpoint_target: int | None = None
    objective_max_versions_since_checkpoint_value: int | None = None
    objective_max_versions_since_checkpoint_met: bool | None = None
    objective_max_versions_since_checkpoint_source: str | None = None
    objective_max_days_since_vacuum_target: float | None = None
    objective_max_days_since_vacuum_value: float | None = None
    objective_max_days_since_vacuum_met: bool | None = None
    objective_max_days_since_vacuum_source: str | None = None
    objective_max_dv_share_target: float | None = None
    objective_max_dv_share_value: float | None = None
    objective_max_dv_share_met: bool | None = None
    objective_max_dv_share_source: str | None = None
    finish_by: str | None = None
    finish_by_deadline: dt.datetime | None = None
    finish_by_met: bool | None = None
    # Schema version 3: the commits whose announcement started the run (rows of that table).
    triggered_by_from_version: int | None = None
    triggered_by_to_version: int | None = None
    triggered_by_commits: int | None = None
    triggered_by_events: int | None = None
    triggered_by_operations: list[str] | None = None
    triggered_by_writers: list[str] | None = None
    triggered_by_blind_append_only: bool | None = None
    # Schema version 3: the DELETE/UPDATE/MERGE writers beside maintenance (compaction and measure rows).
    files_deferred_for_writers: int | None = None
    deferred_files: list[str] | None = None
    bins_deferred_for_writers: int | None = None
    bins_lost_to_writers: int | None = None
    writer_wait_s: float | None = None
    writer_dml_commits: int | None = None
    writer_overlaps: int | None = None
    writer_dml_overlaps: int | None = None

    def __post_init__(self) -> None:
        if self.operation not in OPERATIONS:
            raise InvalidArgumentError(
                f"unknown history operation {self.operation!r}: use one of {', '.join(OPERATIONS)}"
            )
        if self.status not in STATUSES:
            raise InvalidArgumentError(f"unknown history status {self.status!r}: use one of {', '.join(STATUSES)}")
        for name in ("started_at", "ended_at"):
            value = getattr(self, name)
            if not isinstance(value, dt.datetime) or value.tzinfo is None:
                raise InvalidArgumentError(f"{name} must be a timezone-aware datetime, got {value!r}")
        if not self.table_uri:
            raise InvalidArgumentError("a history row needs the table's URI")

    def summary_line(self) -> str:
        """One line for logs: the table, the operation and how it ended."""
        why = f": {self.reason}" if self.reason else ""
        return f"{self.table_uri} {self.operation}: {self.status}{why}"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["run_date"] = self.run_date.isoformat()
        out["started_at"] = self.started_at.isoformat()
        out["ended_at"] = self.ended_at.isoformat()
        if self.finish_by_deadline is not None:
            out["finish_by_deadline"] = self.finish_by_deadline.isoformat()
        return out


@dataclass(frozen=True)
class OperationSpan:
    """What a row shares with its operation: who ran which operation on which table, when, and
    the table's state around it (``cpu_s``: CPU seconds spent, see :func:`deltalog.journal.record.cpu_seconds`)."""

    context: RunContext
    table_uri: str
    operation: str
    started_at: dt.datetime
    ended_at: dt.datetime
    before: TableState | None = None
    after: TableState | None = None
    cpu_s: float | None = None


def make_row(span: OperationSpan, status: str, **values: Any) -> JournalRow:
    """The row of ``span`` with ``status`` and the operation's own column ``values``."""
    state: dict[str, Any] = {}
    for when, st in (("before", span.before), ("after", span.after)):
        if st is None:
            continue
        state.update(
            {
                f"live_files_{when}": st.live_files,
                f"small_files_{when}": st.small_files,
                f"table_bytes_{when}": st.table_bytes,
                f"versions_since_checkpoint_{when}": st.versions_since_checkpoint,
                f"dv_share_{when}": st.dv_share,
                f"log_files_{when}": st.log_files,
            }
        )
    values.setdefault("version_before", span.before.version if span.before else None)
    values.setdefault("version_after", span.after.version if span.after else values["version_before"])
    known = span.after or span.before
    values.setdefault("table_id", known.table_id if known is not None else None)
    context = span.context
    trigger = context.triggered_by.get(canonical_uri(span.table_uri)) if context.triggered_by else None
    if trigger is not None:
        for name, value in trigger.row_values().items():
            values.setdefault(name, value)
    started = span.started_at.astimezone(dt.UTC)
    return JournalRow(
        run_id=context.run_id,
        row_id=uuid.uuid4().hex,
        run_date=started.date(),
        table_uri=span.table_uri,
        operation=span.operation,
        status=status,
        started_at=started,
        ended_at=span.ended_at.astimezone(dt.UTC),
        duration_s=round(max(0.0, (span.ended_at - span.started_at).total_seconds()), 6),
        cpu_s=None if span.cpu_s is None else round(span.cpu_s, 6),
        engine=values.pop("engine", None),
        reason=values.pop("reason", None),
        summary=values.pop("summary", None),
        due_operations=values.pop("due_operations", None),
        policy=values.pop("policy", None),
        airflow_dag_id=context.dag_id,
        airflow_run_id=context.airflow_run_id,
        airflow_task_id=context.task_id,
        airflow_map_index=_map_index(context),
        airflow_try_number=context.try_number if context.is_airflow else None,
        **state,
        **values,
    )


def objective_columns(states: Sequence[ObjectiveState] | None) -> dict[str, Any]:
    """A measure row's objective columns (schema version 2) from the table's objective states.

    No objective set: every column null. Otherwise ``objectives_breached`` lists the breached
    ones (empty when none), ``objectives_met`` is true when none is breached, and each set
    objective has its target, value, met and source.
    """
    if not states:
        return {}
    out: dict[str, Any] = {
        "objectives_met": not any(s.breached for s in states),
        "objectives_breached": [s.name for s in states if s.breached],
        "objectives_at_risk": [s.name for s in states if s.at_risk],
    }
    for s in states:
        if s.name not in OBJECTIVE_NAMES:
            continue
        kind_int = s.spec.kind == "count"
        target = int(s.target) if kind_int else float(s.target)
        value = None if s.value is None else (int(s.value) if kind_int else float(s.value))
        out.update(
            {
                f"objective_{s.name}_target": target,
                f"objective_{s.name}_value": value,
                f"objective_{s.name}_met": s.met,
                f"objective_{s.name}_source": s.source,
            }
        )
    return out


def _map_index(context: RunContext) -> int | None:
    """The row's map index: -1 for an unmapped task, null outside Airflow or when the process cannot know it."""
    if not context.is_airflow or (context.map_index is None and context.writer is not None):
        return None
    return -1 if context.map_index is None else context.map_index


def rows_to_arrow(rows: list[JournalRow]) -> pa.Table:
    """The rows as an Arrow table with the history schema (partition column included)."""
    names = [f.name for f in fields(JournalRow)]
    columns = {name: [getattr(r, name) for r in rows] for name in names}
    return pa.Table.from_pydict(columns, schema=HISTORY_SCHEMA)


__all__ = [
    "JournalRow",
    "OperationSpan",
    "RunContext",
    "TableState",
    "TriggeredBy",
    "make_row",
    "objective_columns",
    "rows_to_arrow",
]
