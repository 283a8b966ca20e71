"""Maintaining a fleet within a time budget: what to do first, and doing it table by table.

Work is ordered by service level first: tables breaching an objective, then tables
predicted to breach one before the next run (:mod:`deltalog.fleet.objectives`), then the
rest; within each class by expected gain per second: the gain score of
:mod:`deltalog.fleet.ranking` over an estimate of the seconds the table's due work
takes (a fixed cost per operation plus the bytes to rewrite at the compaction
throughput measured on earlier runs, which the caller keeps in the previous run's
results, never in ``_delta_log``). Each table runs the sequence of the
single-table DAG (compaction, checkpoint, vacuum, log cleanup, manifest when the
table asks for one) under its maintenance lease, and only the operations that are
due. Past the deadline nothing new starts; a compaction already running stops
between bins with every finished bin committed. What was not done is reported as
deferred, with the reason, and is what the next run picks up first.

Compaction runs on the engine the single-table DAG would choose: the local pyarrow
engine, or Spark (``spark-submit``, ``spark_options`` of
:func:`deltalog.compaction.spark.submit.run_spark`) when the table holds at least
``spark_min_bytes``. A Spark job is one unit: it starts only while budget is left and
is not stopped between bins. Vacuum likewise runs its plan as a Spark job
(:mod:`deltalog.vacuuming.spark`) when the table holds at least ``vacuum_spark_min_files``
live files: its cost grows with the number of files, not with their bytes.

Per-table settings come from the maintenance policy (:mod:`deltalog.maintenance.policy`):
fleet defaults, then path-prefix rules, then the table's own properties
(``delta.targetFileSize``, ``delta.checkpointInterval``,
``delta.deletedFileRetentionDuration``), then per-table overrides. Layout settings exist
only in the settings file: ``zorder_by`` (columns) makes a due compaction a Z-order of the
table's partitions, ``max_dv_hidden_share`` makes a deletion-vector purge due (and run, on
the files whose DV hides more than that share) once deletion vectors hide more than that
share of the table's rows. A table with liquid clustering is always clustered by its own
clustering columns; a ``zorder_by`` for it is refused (the table's failure).

Compaction minds the table's DELETE/UPDATE/MERGE writers (``writer_aware``, on unless the
settings say otherwise: :mod:`deltalog.compaction.writer_aware`): what they are working on
waits for their quiet moment or the next run. A breached objective whose operation is
compaction wins over that: nothing is deferred for the writers (its commits still wait for a
quiet moment, and land when the wait runs out); the plan (``writer_override``) says so.

With a :class:`deltalog.journal.HistoryRecorder`, every step is recorded in the maintenance
history when it ends (its result, or its refusal or failure, with why it was due), every
step left for later as ``deferred``; a table's rows are appended together once it is done.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from types import SimpleNamespace
from typing import Any

from deltalog._flags import require_bools
from deltalog.compaction.run import compact
from deltalog.errors import (
    DeltaLogError,
    HistoryWriteError,
    InvalidArgumentError,
    MaintenanceLeaseHeldError,
    OperationRefusedError,
    UnsupportedProtocolError,
)
from deltalog.fleet.lease import acquire_lease
from deltalog.fleet.ranking import TableReport
from deltalog.journal import HistoryRecorder, OperationSpan, TableState, table_state
from deltalog.journal.record import row_for_deferred, utc_now
from deltalog.log.load import snapshot_at
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.log_maintenance.manifest import ENABLED_PROPERTY, generate_manifest
from deltalog.maintenance.due import MaintenanceDue
from deltalog.maintenance.health import compute_health
from deltalog.maintenance.objectives import objective_spec
from deltalog.maintenance.policy import FleetPolicy, TableSettings, due_under, purge_due
from deltalog.protocol.properties import config_bool
from deltalog.protocol.uniform import uniform_iceberg_enabled
from deltalog.protocol.write_gate import spark_reaches
from deltalog.storage.filesystem import Storage
from deltalog.vacuuming import vacuum

__all__ = [
    "DEFAULT_THROUGHPUT",
    "PlannedTable",
    "TableOutcome",
    "maintain_table",
    "measured_throughput",
    "order_work",
    "purge_reason",
    "step_reason",
    "table_name",
    "with_service",
    "writer_override",
]

log = logging.getLogger(__name__)

#: Compaction throughput assumed before any run has measured one (bytes rewritten per second).
DEFAULT_THROUGHPUT = 20 * 1024 * 1024
#: Fixed seconds per due operation (listing, snapshot, commit) in the time estimate.
OPERATION_OVERHEAD_SECONDS = 0.5


def purge_reason(due: MaintenanceDue, settings: TableSettings) -> str:
    """Why a purge is due (the history's reason line, after ``purge: ``)."""
    limit = settings.max_dv_hidden_share or 0.0
    return (
        f"deletion vectors hide {due.dv_hidden_share:.2%} of the rows ({due.rows_hidden_by_dvs} rows in "
        f"{due.files_with_dvs} files), above max_dv_hidden_share {limit:.2%}"
    )


def step_reason(
    due: MaintenanceDue | None,
    settings: TableSettings,
    operation: str,
    objective_work: dict[str, str] | None = None,
) -> str | None:
    """Why ``operation`` runs: ``due: `` and the due verdict's line for it (a purge: :func:`purge_reason`),
    and the objective that asked for it (``objective max_days_since_vacuum: ... breached since ...``)."""
    reasons = []
    if due is not None:
        if operation == "purge":
            if purge_due(due, settings):
                reasons.append("due: " + purge_reason(due, settings))
        else:
            for line in due.reasons:
                if line.startswith(operation + ": ") and getattr(due, operation, False):
                    reasons.append("due: " + line.split(": ", 1)[1])
                    break
    if objective_work and operation in objective_work:
        reasons.append(objective_work[operation])
    return "; ".join(reasons) or None


# --- ordering ------------------------------------------------------------------------


def estimated_seconds(report: TableReport, throughput: float) -> float:
    """Seconds the table's due work should take: a fixed cost per operation plus the rewrite."""
    due = report.due
    if due is None or not due.any:
        return 0.0
    ops = sum(due.flags().values())
    return ops * OPERATION_OVERHEAD_SECONDS + due.compaction_input_bytes / max(throughput, 1.0)


#: The names of :attr:`PlannedTable.service`, by service class.
SERVICE = {0: "breached", 1: "at_risk", 2: "gain"}


@dataclass(frozen=True)
class PlannedTable:
    uri: str
    gain: float
    estimated_seconds: float
    gain_per_second: float
    due: dict[str, bool]
    #: Why the table is where it is in the order: ``breached``, ``at_risk`` (an objective predicted to
    #: breach before the next run) or ``gain`` (by gain per second alone).
    service: str = "gain"
    #: The objective(s) that put it ahead of the gain order (None: none did).
    first_because: str | None = None
    #: Objectives breached when measured (their names), and operations they asked for beyond the verdict.
    breached: list[str] = field(default_factory=list)
    objective_work: dict[str, str] = field(default_factory=dict)
    #: The breached objective whose compaction defers nothing for the table's writers (None: the writers are minded).
    writer_override: str | None = None
    #: What the measurement saw of the writers: files its compaction plan leaves them, and why (None: nothing).
    writers: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def order_work(
    reports: list[TableReport],
    throughput: float = DEFAULT_THROUGHPUT,
    settings: FleetPolicy | dict[str, Any] | None = None,
) -> list[PlannedTable]:
    """The tables with work, breached ones first, then those predicted to breach before the next run,
    each class by highest expected gain per second. Whether a purge is due follows ``settings``
    (the settings file) when given, else the settings a report was measured with; a breached or
    at-risk objective adds the operation that fixes it (:func:`deltalog.fleet.objectives.objective_work`)."""
    policy = FleetPolicy.parse(settings)
    planned = []
    for r in reports:
        if r.error is not None or (r.due is not None and r.due.refused):
            continue
        own = policy.resolve(r.uri) if settings is not None else r.settings
        purge = purge_due(r.due, own or TableSettings())
        extra = r.objective_work()
        if not r.any_due and not purge and not extra:
            continue
        assert r.due is not None
        flags = {**r.due.flags(), "purge": purge}
        added = [op for op in extra if not flags.get(op)]
        for op in added:
            flags[op] = True
        seconds = estimated_seconds(r, throughput) + OPERATION_OVERHEAD_SECONDS * (int(purge) + len(added))
        cls = r.service_class
        override = writer_override(r)
        planned.append(
            PlannedTable(
                r.uri,
                r.gain,
                round(seconds, 3),
                r.gain / max(seconds, 1e-3),
                flags,
                service=SERVICE[cls],
                first_because=r.first_because,
                breached=[o.name for o in r.objectives if o.breached],
                objective_work=extra,
                writer_override=override,
                writers=_writers_note(r, override),
            )
        )
    order = {name: cls for cls, name in SERVICE.items()}
    return sorted(planned, key=lambda p: (order[p.service], -p.gain_per_second, p.uri))


def writer_override(report: TableReport) -> str | None:
    """The breached objective(s) whose operation is compaction (they win over the writers), or None."""
    breached = [o for o in report.objectives if o.breached and objective_spec(o.name).operation == "compaction"]
    if not breached:
        return None
    return "breached objective " + "; ".join(o.describe() for o in breached)


def _writers_note(report: TableReport, override: str | None) -> str | None:
    due = report.due
    deferred = due.compaction_deferred_files if due is not None else 0
    if override is not None:
        return f"compaction defers nothing for the writers: {override}" + (
            f" (it would defer {deferred} files)" if deferred else ""
        )
    if deferred and due is not None:
        return f"compaction leaves {deferred} files to the writers for now: {due.compaction_deferred_reason}"
    return None


# --- one table ------------------------------------------------------------------------


@dataclass(frozen=True)
class TableOutcome:
    """What maintenance did to one table (a row of the fleet summary)."""

    uri: str
    status: str = "done"  # done | partial | deferred | refused | failed | healthy | busy
    version_before: int | None = None
    version_after: int | None = None
    small_files_before: int | None = None
    small_files_after: int | None = None
    files_before: int | None = None
    files_after: int | None = None
    bytes_reclaimed: int = 0
    log_files_deleted: int = 0
    ran: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    compaction_bytes: int = 0
    compaction_seconds: float = 0.0
    settings: dict[str, Any] = field(default_factory=dict)
    #: Set when the table's history rows could not be appended (they are retried with the next append).
    history_error: str | None = None
    #: The objective(s) that ranked the table ahead of the gain order, those breached when it was
    #: measured, and those of them whose fixing operation did not run (deferred, busy, failed).
    first_because: str | None = None
    breached: list[str] = field(default_factory=list)
    stays_breached: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return (
            self.version_after is not None
            and self.version_after != self.version_before
            or bool(self.bytes_reclaimed or self.log_files_deleted)
        )

    def summary_line(self) -> str:
        """One line for logs: the table, how it ended, what ran and what was put off."""
        ran = ", ".join(self.ran) or "nothing"
        deferred = f"; deferred {', '.join(self.deferred)}" if self.deferred else ""
        error = f"; {self.error}" if self.error else ""
        return f"{self.uri}: {self.status} (ran {ran}{deferred}){error}"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["changed"] = self.changed
        return out


#: The single-table DAG's order of steps (a purge after the compaction, which applies the DVs it rewrites).
STEP_ORDER = ("compaction", "purge", "checkpoint", "vacuum", "log_cleanup")


def _left(deadline: float | None) -> float:
    return float("inf") if deadline is None else deadline - time.monotonic()


@dataclass
class _Steps:
    """One table's steps as the history sees them: each timed, measured and recorded (nothing without a recorder)."""

    history: HistoryRecorder | None
    storage: Storage
    settings: TableSettings
    due: MaintenanceDue | None = None
    #: The table's state after the last step (the next step's "before").
    state: TableState | None = None
    #: Operations an objective asked for, and why (each step's reason names it).
    objective_work: dict[str, str] = field(default_factory=dict)

    @contextmanager
    def step(self, operation: str, engine: str | None = None) -> Iterator[Any]:
        if self.history is None:
            yield SimpleNamespace(result=None, engine=engine)
            return
        with self.history.operation(
            self.storage,
            operation,
            engine=engine,
            before=self.state,
            target_size=self.settings.target_file_size,
            reason=step_reason(self.due, self.settings, operation, self.objective_work),
            policy=self.settings.policy_json(),
        ) as op:
            yield op
        self.state = op.after

    def deferred(self, operations: Sequence[str], reason: str) -> None:
        if self.history is None or not operations:
            return
        context, now, policy = self.history.context, utc_now(), self.settings.policy_json()
        assert context is not None
        spans = [OperationSpan(context, self.storage.uri, op, now, now, self.state, self.state) for op in operations]
        self.history.record([row_for_deferred(span, reason, policy=policy) for span in spans])


def maintain_table(
    uri: str,
    *,
    storage_options: dict[str, Any] | None = None,
    settings: TableSettings | FleetPolicy | dict[str, Any] | None = None,
    deadline: float | None = None,
    owner: str = "deltalog",
    lease_ttl_seconds: float = 3600.0,
    allow_short_retention: bool = False,
    spark_min_bytes: int | None = None,
    spark_options: dict[str, Any] | None = None,
    history: HistoryRecorder | None = None,
    due_operations: Sequence[str] | None = None,
    vacuum_spark_min_files: int | None = None,
    objective_work: dict[str, str] | None = None,
    writer_override: str | None = None,
) -> TableOutcome:
    """Run the table's due operations in order, under its lease, until ``deadline`` (monotonic).

    ``settings``: the table's resolved settings, or the settings file (a :class:`FleetPolicy`
    or its mapping), resolved here against the table's properties. ``spark_min_bytes``:
    tables at least this large compact with Spark (None: always local);
    ``vacuum_spark_min_files``: tables with at least this many live files vacuum with Spark
    (None: always local); both Spark jobs take ``spark_options``. ``history``: each
    step is recorded there (see the module docstring); ``due_operations`` (what the
    measurement found due) are recorded as deferred when the table is not started (the
    budget was spent, another maintainer holds its lease). ``objective_work``: operations a
    breached or at-risk objective asks for (operation -> why, :attr:`PlannedTable.objective_work`),
    run even when the due verdict would not run them. ``writer_override``: the breached objective
    whose compaction defers nothing for the table's writers (:attr:`PlannedTable.writer_override`).

    Never raises for the table's own problems: a refusal, a held lease or a failed
    operation becomes the outcome's status and error line (a fleet run goes on).
    """
    require_bools(allow_short_retention=allow_short_retention)  # the caller's mistake, not the table's: raise
    for name, value in (("spark_min_bytes", spark_min_bytes), ("vacuum_spark_min_files", vacuum_spark_min_files)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InvalidArgumentError(f"{name} must be a non-negative integer, got {value!r}")
    if not isinstance(settings, TableSettings):
        settings = FleetPolicy.parse(settings)
    run = SimpleNamespace(
        storage_options=storage_options,
        deadline=deadline,
        owner=owner,
        lease_ttl_seconds=lease_ttl_seconds,
        allow_short=allow_short_retention,
        engine=_Engine(spark_min_bytes, dict(spark_options or {}), vacuum_spark_min_files),
        due_operations=list(due_operations or []),
        objective_work=dict(objective_work or {}),
        writer_override=writer_override,
    )
    if history is None:
        return _maintain(uri, settings, run, None)
    outcome = TableOutcome(uri=uri, status="failed", error="not started")
    try:
        with history.batch():
            outcome = _maintain(uri, settings, run, history)
    except HistoryWriteError as exc:
        log.error("fleet maintenance of %s: %s", uri, exc)
        outcome = replace(outcome, history_error=str(exc))
    return outcome


def _maintain(
    uri: str, settings: TableSettings | FleetPolicy, run: SimpleNamespace, history: HistoryRecorder | None
) -> TableOutcome:
    t0 = time.perf_counter()
    shown = settings.to_dict() if isinstance(settings, TableSettings) else {}
    # The outcome's fields, filled in as the steps run; frozen into a TableOutcome at the end.
    out = SimpleNamespace(**asdict(TableOutcome(uri=uri, settings=shown)))
    try:
        storage = Storage(uri, run.storage_options)
    except DeltaLogError as exc:
        out.status, out.error = "failed", f"{type(exc).__name__}: {exc}"
        return TableOutcome(**vars(out))
    early = _Steps(history, storage, settings if isinstance(settings, TableSettings) else TableSettings())
    if _left(run.deadline) <= 0:
        out.status, out.reasons = "deferred", ["the time budget was spent before this table started"]
        early.deferred(run.due_operations, "the time budget was spent before this table started")
        return TableOutcome(**vars(out))
    try:
        lease = acquire_lease(storage, run.owner, run.lease_ttl_seconds)
    except MaintenanceLeaseHeldError as exc:
        out.status, out.error = "busy", str(exc)
        early.deferred(run.due_operations, f"another maintainer holds the table's lease: {exc}")
        return TableOutcome(**vars(out))
    except DeltaLogError as exc:  # a store that cannot take the lease (no atomic create) is refused
        out.status, out.error = _failure_status(exc), f"{type(exc).__name__}: {exc}"
        return TableOutcome(**vars(out))
    try:
        _run_steps(storage, settings, run, out, history)
    except DeltaLogError as exc:
        out.status = _failure_status(exc)
        out.error = f"{type(exc).__name__}: {exc}"
    except OSError as exc:
        out.status, out.error = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        lease.release()
        out.seconds = round(time.perf_counter() - t0, 3)
    log.info("fleet maintenance of %s: %s (ran %s, deferred %s)", uri, out.status, out.ran, out.deferred)
    return TableOutcome(**vars(out))


def _failure_status(exc: DeltaLogError) -> str:
    """``refused``: a safety check said no before anything changed (a refusal, not worth retrying:
    an unsupported feature, a store without an atomic create); anything else ``failed`` (bad
    settings, an unreadable table, a storage failure, a lost commit, an engine failure)."""
    refusal = isinstance(exc, OperationRefusedError | UnsupportedProtocolError)
    return "refused" if refusal and not exc.retryable else "failed"


@dataclass(frozen=True)
class _Engine:
    """Where compaction runs (Spark from ``spark_min_bytes`` of table size on) and where vacuum plans
    (Spark from ``vacuum_min_files`` live files on); else locally."""

    spark_min_bytes: int | None
    spark_options: dict[str, Any]
    vacuum_min_files: int | None = None

    def for_size(self, size: int) -> str:
        return "spark" if self.spark_min_bytes is not None and size >= self.spark_min_bytes else "local"

    def vacuum_for_files(self, files: int) -> str:
        return "spark" if self.vacuum_min_files is not None and files >= self.vacuum_min_files else "local"


def _run_steps(
    storage: Storage,
    given: TableSettings | FleetPolicy,
    run: SimpleNamespace,
    out: SimpleNamespace,
    history: HistoryRecorder | None = None,
) -> None:
    """Run the due steps, recording into ``out`` (the draft of a :class:`TableOutcome`) as they go."""
    snapshot = snapshot_at(storage)
    conf = snapshot.metadata.configuration
    settings = given if isinstance(given, TableSettings) else given.resolve(storage.uri, conf)
    out.settings = settings.to_dict()
    before = compute_health(snapshot, settings.target_file_size)
    out.version_before = out.version_after = snapshot.version
    out.small_files_before, out.files_before = before.num_small_files, before.num_files
    due = due_under(settings, storage, snapshot)
    steps_log = _Steps(history, storage, settings, due, objective_work=run.objective_work)
    if history is not None:
        steps_log.state = table_state(snapshot, settings.target_file_size)
    out.reasons = list(due.reasons)
    if due.refused:
        out.status = "refused"
        out.error = due.refused
        out.small_files_after, out.files_after = out.small_files_before, out.files_before
        return
    manifest = config_bool(conf, ENABLED_PROPERTY, False)
    wanted = {op for op, flag in due.flags().items() if flag}
    if purge_due(due, settings):  # after compaction (which applies the DVs of the files it rewrites)
        wanted.add("purge")
    # An objective's operation runs even when the verdict would not run it (not a compaction
    # without a bin, not a purge without deletion vectors: they would change nothing).
    useful = {"compaction": due.compaction, "purge": due.rows_hidden_by_dvs > 0}
    wanted |= {op for op in run.objective_work if useful.get(op, True)}
    steps = [op for op in STEP_ORDER if op in wanted]
    if not steps:
        out.status = "healthy"
        out.small_files_after, out.files_after = out.small_files_before, out.files_before
        return
    deadline, engine = run.deadline, run.engine
    # The writers: minded unless the settings say not; a breached compaction objective defers nothing for them.
    minding: dict[str, Any] = {"writer_aware": settings.writer_aware is not False}
    if run.writer_override is not None and "compaction" in run.objective_work:
        minding["overriding_objective"] = run.writer_override
    for step in steps:
        if _left(deadline) <= 0:
            out.deferred.append(step)
            steps_log.deferred([step], "the time budget was spent before this step started")
            continue
        if step == "compaction":
            started = time.perf_counter()
            # A Z-order runs on the local engine only, as do tables the Spark engine does not reach
            # (no Hadoop connector); otherwise the engine follows the table's size.
            local_only = settings.zorder_by or not spark_reaches(storage)
            where = "local" if local_only else engine.for_size(before.size_in_bytes)
            with steps_log.step("compaction", engine=where) as op:
                if where == "spark":  # one job: it cannot stop between bins, so no deadline is passed down
                    result = compact(
                        storage,
                        target_size=settings.target_file_size,
                        engine="spark",
                        spark_options=engine.spark_options,
                        run_hooks=False,
                        **minding,
                    )
                else:
                    result = compact(
                        storage,
                        target_size=settings.target_file_size,
                        deadline=deadline,
                        run_hooks=False,
                        zorder_by=settings.zorder_by,
                        **minding,
                    )
                op.result = result
            out.compaction_seconds = round(time.perf_counter() - started, 3)
            out.compaction_bytes = int(result.to_dict()["bytes_removed"])
            if not result.ok:
                raise DeltaLogError(result.error or "compaction failed: " + "; ".join(s.reason for s in result.skipped))
            if any(s.kind == "deferred" for s in result.skipped):
                out.deferred.append(
                    f"compaction: {sum(s.kind == 'deferred' for s in result.skipped)} of {len(result.plan.bins)} bins"
                )
            if result.commits:
                label = "compaction" if where == "local" else "compaction (spark)"
                out.ran.append(f"{label}: {len(result.committed_bins)} bins")
        elif step == "purge":
            with steps_log.step("purge", engine="local") as op:
                pr = op.result = compact(
                    storage,
                    purge_deletion_vectors=True,
                    min_deleted_share=settings.max_dv_hidden_share,
                    target_size=settings.target_file_size,
                    deadline=deadline,
                    run_hooks=False,
                    **minding,
                )
            if not pr.ok:
                raise DeltaLogError(pr.error or "purge failed: " + "; ".join(s.reason for s in pr.skipped))
            out.ran.append(f"purge: {len(pr.committed_bins)} bins")
        elif step == "checkpoint":
            with steps_log.step("checkpoint") as op:
                op.result = create_checkpoint(storage)
            out.ran.append("checkpoint")
        elif step == "vacuum":
            where = engine.vacuum_for_files(before.num_files)
            with steps_log.step("vacuum", engine=where) as op:
                vr = op.result = vacuum(
                    storage,
                    retention_hours=settings.vacuum_retention_hours,
                    allow_short_retention=run.allow_short,
                    engine=where,
                    spark_options=engine.spark_options if where == "spark" else None,
                )
            out.bytes_reclaimed += vr.size_of_data_to_delete if vr.num_deleted_files else 0
            label = "vacuum" if where == "local" else "vacuum (spark)"
            out.ran.append(f"{label}: {vr.num_deleted_files} files")
        elif step == "log_cleanup":
            with steps_log.step("log_cleanup") as op:
                lr = op.result = cleanup_log(storage)
            out.log_files_deleted = lr.num_deleted
            out.ran.append(f"log_cleanup: {lr.num_deleted} files")
    if manifest and _left(deadline) > 0 and out.ran:
        with steps_log.step("manifest") as op:
            op.result = generate_manifest(storage)
        out.ran.append("manifest")
    if uniform_iceberg_enabled(conf) and out.ran:
        _sync_iceberg(storage, out)
    after = compute_health(snapshot_at(storage), settings.target_file_size)
    out.version_after = after.version
    out.small_files_after, out.files_after = after.num_small_files, after.num_files
    out.status = "partial" if out.deferred and out.ran else ("deferred" if out.deferred else "done")
    if out.deferred:
        out.reasons.append("deferred: the time budget was spent")


def with_service(outcome: TableOutcome, planned: PlannedTable) -> TableOutcome:
    """The outcome with why its table came first and which of its breached objectives stay breached:
    those whose operation was deferred (the time budget), or that did not run (busy, refused, failed)."""
    stays = []
    for name in planned.breached:
        op = objective_spec(name).operation
        missed = outcome.status in ("deferred", "busy", "refused", "failed") or any(
            d == op or d.startswith(op + ":") for d in outcome.deferred
        )
        if missed or not planned.due.get(op):
            stays.append(name)
    return replace(outcome, first_because=planned.first_because, breached=list(planned.breached), stays_breached=stays)


def _sync_iceberg(storage: Storage, out: SimpleNamespace) -> None:
    """UniForm: the steps committed with their post-commit hooks off, so the Iceberg metadata follows here. Not
    bound by the time budget (Iceberg readers must not be left behind); a failure is a reason, not a failed run."""
    from deltalog.uniform.convert import sync_iceberg_metadata

    try:
        synced = sync_iceberg_metadata(storage)
    except (DeltaLogError, OSError) as exc:
        log.warning("maintenance of %s: the Iceberg metadata was not written: %s", storage.uri, exc)
        out.reasons.append(f"Iceberg metadata not written (deltalog uniform-sync retries): {exc}")
        return
    if synced.mode not in ("up_to_date", "not_uniform"):
        out.ran.append(f"iceberg_metadata: {len(synced.snapshots)} snapshot(s)")


def measured_throughput(outcomes: Sequence[TableOutcome], previous: float | None = None) -> float:
    """Bytes rewritten per second by this run's compactions (else the previous run's, else the default)."""
    total_bytes = sum(o.compaction_bytes for o in outcomes)
    total_seconds = sum(o.compaction_seconds for o in outcomes)
    if total_bytes > 0 and total_seconds > 0:
        return total_bytes / total_seconds
    return previous or DEFAULT_THROUGHPUT


def table_name(uri: str) -> str:
    return os.path.basename(uri.rstrip("/")) or uri
