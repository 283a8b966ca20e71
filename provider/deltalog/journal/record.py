"""Turning what an operation did into history rows, and recording them as they happen.

:func:`row_from_result` maps an operation's result (compaction, purge, checkpoint,
vacuum, log cleanup, manifest) to a row; :func:`row_for_error` a refusal or failure;
:func:`row_for_measurement` a health measurement (what is due and why). The results are
read through their ``to_dict()`` (the one result contract of :mod:`deltalog.result_contract`),
so this module depends on no operation's module.

:class:`HistoryRecorder` wraps an operation::

    recorder = HistoryRecorder("s3://lake/_deltalog/history", storage_options=opts)
    with recorder.operation(table, "compaction", engine="local") as op:
        op.result = compact(table)

It measures the table before and after (the health figures of the row), times the
operation (wall clock and CPU), records a failure or refusal when the block raises
(and lets the exception go on), and appends the row with the app transaction of
:class:`deltalog.journal.row.RunContext`, so a retried append lands once.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from deltalog.compaction.purge import deletion_vector_health
from deltalog.compaction.quiet_batches import WRITERS_DEFERRAL
from deltalog.errors import DeltaLogError, HistoryWriteError, InvalidArgumentError, OperationRefusedError
from deltalog.journal.row import JournalRow, OperationSpan, RunContext, TableState, make_row, objective_columns
from deltalog.journal.write import AppendResult, append_rows, prepare_history
from deltalog.log import Snapshot, snapshot_at
from deltalog.maintenance import MaintenanceDue, TableHealth, compute_health
from deltalog.maintenance.objectives import ObjectiveState
from deltalog.storage import Storage
from deltalog.storage.table_ref import TableRef, table_storage

log = logging.getLogger(__name__)


def cpu_seconds() -> float:
    """CPU seconds of this process (all threads) and of the child processes it has waited for (spark-submit)."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def table_state(snapshot: Snapshot, target_size: int | str | None = None) -> TableState:
    """The health figures of a row, from one snapshot (no extra reads)."""
    health = compute_health(snapshot, target_size, vacuum_lookback=0)
    return state_of(health, deletion_vector_health(snapshot).hidden_share, snapshot.metadata.id)


def state_of(health: TableHealth, dv_share: float, table_id: str | None) -> TableState:
    """A row's health figures from a table's health numbers (what a fleet measurement already has)."""
    return TableState(
        version=health.version,
        live_files=health.num_files,
        small_files=health.num_small_files,
        table_bytes=health.size_in_bytes,
        versions_since_checkpoint=health.commits_since_checkpoint,
        dv_share=dv_share,
        log_files=health.num_commit_files,
        table_id=table_id,
    )


def _hook_values(hooks: list[dict[str, Any]]) -> dict[str, int]:
    """What the commits' post-commit log cleanups freed (Delta cleans the log after its automatic checkpoints)."""
    files = freed = 0
    for h in hooks:
        detail = h.get("detail")
        if h.get("name") == "log_cleanup" and h.get("ok") and isinstance(detail, dict):
            files += int(detail.get("num_deleted") or 0)
            freed += int(detail.get("bytes") or 0) if detail.get("num_deleted") else 0
    return {"log_files_removed": files, "bytes_reclaimed": freed} if files else {}


#: The deferred files' paths a compaction row keeps (the count is whole).
MAX_DEFERRED_PATHS = 1000


def writer_columns(writers: dict[str, Any] | None) -> dict[str, Any]:
    """A measure row's writer columns (schema version 3) from :meth:`WriterActivity.to_dict` (None: unknown)."""
    if not writers:
        return {}
    overlaps = writers.get("writer_overlaps") or {}
    return {
        "writer_dml_commits": int(writers.get("dml_commits") or 0),
        "writer_overlaps": int(sum(int(v or 0) for v in overlaps.values())),
        "writer_dml_overlaps": int(overlaps.get("dml") or 0),
    }


def _compaction_values(d: dict[str, Any]) -> dict[str, Any]:
    if d.get("plan_only"):
        raise InvalidArgumentError("a compaction plan changes nothing: it is not recorded in the history")
    skipped = d.get("skipped", [])
    for_writers = int(d.get("num_bins_deferred_for_writers") or 0)
    deferred = sum(1 for s in skipped if s.get("kind") == "deferred")
    committed = int(d.get("num_bins_committed", 0))
    if not d.get("ok", True):
        status = "failed"
    elif d.get("noop"):
        status = "nothing_due"
    elif committed == 0 and deferred:
        status = "deferred"
    else:
        status = "done"
    reasons = []
    if d.get("error"):
        reasons.append(str(d["error"]))
    if deferred - for_writers:
        reasons.append(f"{deferred - for_writers} of {d.get('num_bins', 0)} bins deferred: the time budget was spent")
    if for_writers:
        first = next(s["reason"] for s in skipped if str(s.get("reason", "")).startswith(WRITERS_DEFERRAL))
        reasons.append(f"{for_writers} of {d.get('num_bins', 0)} bins {first}")
    lost = [s["reason"] for s in skipped if s.get("kind") not in ("deferred", "replanned")]
    reasons.extend(lost[:3])
    files = d.get("deferred_files") or []
    writers = (d.get("plan") or {}).get("writers") or {}
    reasons.extend(f"left to the writers: {why}" for why in (writers.get("deferred_reasons") or [])[:3])
    versions = d.get("versions") or []
    return {
        "status": status,
        "engine": d.get("engine"),
        "reason": "; ".join(reasons) or None,
        "files_read": int(d.get("num_files_removed", 0)),
        "bytes_read": int(d.get("bytes_removed", 0)),
        "files_written": int(d.get("num_files_added", 0)),
        "bytes_written": int(d.get("bytes_added", 0)),
        "files_removed": int(d.get("num_files_removed", 0)),
        "bytes_removed": int(d.get("bytes_removed", 0)),
        **({"version_after": max(versions)} if versions else {}),
        **_hook_values([h for c in d.get("commits") or [] for h in c.get("hooks") or []]),
        "files_deferred_for_writers": len(files),
        "deferred_files": [str(f.get("path")) for f in files[:MAX_DEFERRED_PATHS]],
        "bins_deferred_for_writers": for_writers,
        "bins_lost_to_writers": int(d.get("num_bins_lost_to_writers") or 0),
        "writer_wait_s": float(d.get("seconds_waiting_for_writers") or 0.0),
    }


def _vacuum_values(d: dict[str, Any]) -> dict[str, Any]:
    if d.get("dry_run"):
        raise InvalidArgumentError("a vacuum dry run deletes nothing: it is not recorded in the history")
    deleted = int(d.get("num_deleted_files", 0))
    size = int(d.get("size_of_data_to_delete", 0)) if deleted else 0
    return {
        "status": "done" if deleted else "nothing_due",
        "reason": None if deleted else "no file past the retention that no retained version needs",
        "files_removed": deleted,
        "bytes_removed": size,
        "bytes_reclaimed": size,
        **({"version_after": d["end_commit_version"]} if d.get("end_commit_version") is not None else {}),
    }


def _checkpoint_values(d: dict[str, Any]) -> dict[str, Any]:
    existed = bool(d.get("already_existed"))
    return {
        "status": "nothing_due" if existed else "done",
        "reason": f"a checkpoint of version {d.get('version')} already existed" if existed else None,
        "files_written": 0 if existed else len(d.get("files") or []) + len(d.get("sidecars") or []),
        "bytes_written": 0 if existed else int(d.get("size_in_bytes", 0)),
    }


def _log_cleanup_values(d: dict[str, Any]) -> dict[str, Any]:
    if d.get("dry_run"):
        raise InvalidArgumentError("a log cleanup dry run deletes nothing: it is not recorded in the history")
    deleted = int(d.get("num_deleted", 0))
    return {
        "status": "done" if deleted else "nothing_due",
        "reason": d.get("skipped_reason") or (None if deleted else "no log file past the log retention"),
        "log_files_removed": deleted,
        "bytes_reclaimed": int(d.get("bytes", 0)) if deleted else 0,
    }


def _manifest_values(d: dict[str, Any]) -> dict[str, Any]:
    if d.get("dry_run"):
        raise InvalidArgumentError("a manifest dry run writes nothing: it is not recorded in the history")
    written, deleted = len(d.get("manifests_written") or []), len(d.get("manifests_deleted") or [])
    return {
        "status": "done" if written or deleted else "nothing_due",
        "reason": d.get("full_reason"),
        "files_written": written,
        "files_removed": deleted,
    }


def _commit_values(d: dict[str, Any]) -> dict[str, Any]:
    if d.get("noop"):
        return {"status": "nothing_due", "reason": d.get("reason") or "already committed"}
    m = d.get("operation_metrics") or {}
    return {
        "status": "done",
        "files_written": int(m.get("numAddedFiles", m.get("numFiles", 0)) or 0),
        "bytes_written": int(m.get("numOutputBytes", 0) or 0),
        "files_removed": int(m.get("numRemovedFiles", 0) or 0),
        "bytes_removed": int(m.get("numRemovedBytes", 0) or 0),
        "version_after": d.get("version"),
        **_hook_values(d.get("hooks") or []),
    }


def _convert_values(d: dict[str, Any]) -> dict[str, Any]:
    # Converting writes no data file: it lists the existing ones in commit 0 (the after-state counts them).
    return {"status": "done", "version_after": d.get("version")}


#: Result class name -> (the operations it may record, its mapping to row values).
_MAPPINGS: dict[str, tuple[tuple[str, ...], Any]] = {
    "CompactionResult": (("compaction", "purge"), _compaction_values),
    "VacuumResult": (("vacuum",), _vacuum_values),
    "CheckpointResult": (("checkpoint",), _checkpoint_values),
    "LogCleanupResult": (("log_cleanup",), _log_cleanup_values),
    "ManifestResult": (("manifest",), _manifest_values),
    "CommitResult": (("commit",), _commit_values),
    "ConvertResult": (("convert",), _convert_values),
}


def row_from_result(result: Any, span: OperationSpan, reason: str | None = None, **extra: Any) -> JournalRow:
    """The history row of one operation's result (``span.operation`` must be one the result records as).

    ``reason`` (why the operation ran: what made it due) follows the result's own reason;
    ``extra`` are further columns (``policy``).
    """
    kind = type(result).__name__
    if kind not in _MAPPINGS or not callable(getattr(result, "to_dict", None)):
        raise InvalidArgumentError(
            f"cannot record a {kind} in the maintenance history: record one of {', '.join(sorted(_MAPPINGS))}"
        )
    allowed, mapping = _MAPPINGS[kind]
    if span.operation not in allowed:
        raise InvalidArgumentError(f"a {kind} records as {' or '.join(allowed)}, not {span.operation!r}")
    values = mapping(result.to_dict())
    values["reason"] = "; ".join(r for r in (values.get("reason"), reason) if r) or None
    summary = result.summary_line() if callable(getattr(result, "summary_line", None)) else None
    return make_row(span, summary=summary, **values, **extra)


def error_status(exc: BaseException) -> str:
    """``refused`` for a safety refusal or an unsupported feature, else ``failed``."""
    if isinstance(exc, OperationRefusedError):
        return "refused"
    if isinstance(exc, DeltaLogError) and exc.exit_code == 1 and not exc.retryable:
        return "refused"
    return "failed"


def row_for_error(exc: BaseException, span: OperationSpan, engine: str | None = None, **extra: Any) -> JournalRow:
    """The row of an operation that raised: refused or failed, the error as the reason."""
    return make_row(span, error_status(exc), reason=f"{type(exc).__name__}: {exc}", engine=engine, **extra)


def row_for_measurement(
    span: OperationSpan,
    due: MaintenanceDue | None = None,
    error: str | None = None,
    *,
    extra_due: dict[str, str] | None = None,
    policy: str | None = None,
    objectives: Sequence[ObjectiveState] | None = None,
    first_because: str | None = None,
) -> JournalRow:
    """A ``measure`` row: the table's state (``span.after``), what is due and why (``done``), or why it
    could not be judged (``failed``, ``refused``).

    ``extra_due``: operations a policy or an objective made due beyond the verdict's, with their
    reason (a deletion-vector ``purge``, a vacuum for ``max_days_since_vacuum``); ``policy``: the
    settings the table was measured with (JSON); ``objectives``: the table's objectives judged on
    this measurement (the schema's ``objective*`` columns); ``first_because``: the objective that
    ranks the table ahead of the gain order (a last ``objectives: `` line of the reason).
    """
    if span.operation != "measure":
        raise InvalidArgumentError(f"a measurement records as 'measure', not {span.operation!r}")
    if error is not None:
        return make_row(span, "failed", reason=error, policy=policy)
    judged = objective_columns(objectives)
    if due is None:
        return make_row(span, "done", policy=policy, **judged)
    if due.refused:
        return make_row(
            span, "refused", reason=due.refused, due_operations=[], summary=due.summary_line(), policy=policy
        )
    judged.update(writer_columns(due.writers))
    flagged = [op for op, flag in due.flags().items() if flag]
    extra = {op: why for op, why in (extra_due or {}).items() if op not in flagged}
    # One reason a line ("compaction: ...", "checkpoint: ..."): readers pick the lines of what is still due.
    lines = [*due.reasons, *(f"{op}: {why}" for op, why in extra.items())]
    if first_because:
        lines.append(f"objectives: {first_because}")
    ops = flagged + list(extra)
    summary = "due: " + (", ".join(ops) if ops else "nothing")
    return make_row(
        span, "done", reason="\n".join(lines) or None, due_operations=ops, summary=summary, policy=policy, **judged
    )


def row_for_deferred(span: OperationSpan, reason: str, **extra: Any) -> JournalRow:
    """An operation that was due but not started (the budget was spent, the table busy): still due next time."""
    return make_row(span, "deferred", reason=reason, **extra)


class OperationDraft:
    """What the body of :meth:`HistoryRecorder.operation` fills in: the result (and optionally the engine).

    After the block, ``row`` is the recorded row and ``after`` the table's state after the
    operation (what the next operation on the table starts from).
    """

    def __init__(self, engine: str | None) -> None:
        self.result: Any = None
        self.engine = engine
        self.row: JournalRow | None = None
        self.after: TableState | None = None


@dataclass
class HistoryRecorder:
    """Records operations into the maintenance history at ``uri`` (see the module docstring).

    ``auto_flush=False`` keeps the rows until :meth:`flush`, which appends them in one
    commit (a fleet run records a table's rows together; :meth:`batch` does that for a
    block). ``measure=False`` skips the before/after measurement (the health columns stay
    null). ``storage_options`` are the history's own (each operation's table takes its own,
    in :meth:`operation`). ``on_row`` sees every row as it is recorded (an Airflow task's
    metrics); with ``uri=None`` rows go only there, nothing is appended anywhere.
    """

    uri: str | None
    storage_options: dict[str, Any] | None = None
    context: RunContext | None = None
    auto_flush: bool = True
    measure: bool = True
    target_size: int | str | None = None
    #: Called with every row as it is recorded (metrics; an error there is logged, never raised).
    on_row: Callable[[JournalRow], None] | None = None

    def __post_init__(self) -> None:
        if self.uri is not None and (not isinstance(self.uri, str) or not self.uri):
            raise InvalidArgumentError("the maintenance history needs a URI or path (None: rows for on_row only)")
        self.context = self.context or RunContext()
        self.pending: list[JournalRow] = []
        #: Appends not made yet, in order: (sequence number, rows). A failed append keeps its number.
        self._unsent: list[tuple[int, list[JournalRow]]] = []
        #: Every row recorded so far (appended or pending) and every append made.
        self.recorded: list[JournalRow] = []
        self.appends: list[AppendResult] = []
        self._sequence = 0

    def prepare(self) -> None:
        """Create the history if it does not exist and check it is one (before any work is done)."""
        if self.uri is not None:
            prepare_history(self.uri, self.storage_options)

    def _state(self, storage: Storage, target_size: int | str | None) -> TableState | None:
        if not self.measure:
            return None
        try:
            return table_state(snapshot_at(storage), target_size)
        except (DeltaLogError, OSError) as exc:
            log.warning("history: cannot measure %s: %s", storage.uri, exc)
            return None

    def record(self, rows: Sequence[JournalRow]) -> AppendResult | None:
        """Queue ``rows``; with ``auto_flush`` append them now (the append's result), else None."""
        self.recorded.extend(rows)
        for row in rows:
            if self.on_row is not None:
                try:
                    self.on_row(row)
                except Exception as exc:  # noqa: BLE001 - a metrics backend never fails the operation
                    log.warning("history: the row listener failed on %s: %s", row.summary_line(), exc)
        if self.uri is None:
            return None
        self.pending.extend(rows)
        return self.flush() if self.auto_flush else None

    def flush(self) -> AppendResult | None:
        """Append the queued rows in one idempotent commit (None when nothing is queued).

        A failure raises :class:`HistoryWriteError` and keeps the rows: the next flush sends
        them again under the same app transaction (a commit that landed unseen is not repeated).
        """
        if self.uri is None:
            return None
        if self.pending:
            self._sequence += 1
            self._unsent.append((self._sequence, self.pending))
            self.pending = []
        assert self.context is not None
        result = None
        while self._unsent:
            sequence, rows = self._unsent[0]
            try:
                result = append_rows(
                    self.uri,
                    rows,
                    storage_options=self.storage_options,
                    app_id=self.context.app_id(sequence),
                    app_version=self.context.app_version,
                )
            except (DeltaLogError, OSError) as exc:
                raise HistoryWriteError(
                    f"{len(rows)} row(s) could not be appended to the maintenance history at {self.uri} "
                    f"({type(exc).__name__}: {exc}); they are kept for the next attempt"
                ) from exc
            self._unsent.pop(0)
            self.appends.append(result)
        return result

    @property
    def unsent(self) -> int:
        """Rows recorded but not appended yet."""
        return len(self.pending) + sum(len(rows) for _, rows in self._unsent)

    @contextmanager
    def batch(self) -> Iterator[HistoryRecorder]:
        """Rows recorded in the block are appended together at its end (one commit), even when it raises."""
        auto, self.auto_flush = self.auto_flush, False
        try:
            yield self
        except BaseException:
            self.auto_flush = auto
            try:
                self.flush()
            except HistoryWriteError as exc:  # the block's own error is the one to raise
                log.error("history: %s", exc)
            raise
        self.auto_flush = auto
        self.flush()

    @contextmanager
    def operation(
        self,
        table: TableRef,
        operation: str,
        *,
        engine: str | None = None,
        storage_options: dict[str, Any] | None = None,
        before: TableState | None = None,
        measure_before: bool = True,
        target_size: int | str | None = None,
        reason: str | None = None,
        policy: str | None = None,
    ) -> Iterator[OperationDraft]:
        """Time, measure and record the operation run in the ``with`` block (set ``.result``).

        ``before``: the table's state when the caller knows it (a fleet's previous step), else it
        is measured (``measure_before=False``: not, e.g. before a convert: no table yet).
        ``reason``: why the operation ran; ``policy``: the settings it ran with (JSON).
        """
        assert self.context is not None
        storage = table_storage(table, storage_options)
        target = self.target_size if target_size is None else target_size
        if before is None and measure_before:
            before = self._state(storage, target)
        draft = OperationDraft(engine)
        started, cpu0 = utc_now(), cpu_seconds()
        context = self.context

        def finished() -> OperationSpan:
            """The span up to now; the table measured after the clock stopped (measuring is not the operation)."""
            ended, cpu = utc_now(), cpu_seconds() - cpu0
            draft.after = self._state(storage, target)
            return OperationSpan(context, storage.uri, operation, started, ended, before, draft.after, cpu)

        try:
            yield draft
        except Exception as exc:
            draft.row = row_for_error(exc, finished(), engine=draft.engine, policy=policy)
            try:
                self.record([draft.row])
            except Exception as history_exc:  # noqa: BLE001 - the operation's own error is the one to raise
                log.error("history: cannot record the %s of %s: %s", operation, storage.uri, history_exc)
            raise
        if draft.result is None:
            raise InvalidArgumentError(f"the {operation} of {storage.uri} set no result to record")
        row = row_from_result(draft.result, finished(), reason, policy=policy)
        if draft.engine is not None and row.engine is None:
            row = _with_engine(row, draft.engine)
        draft.row = row
        self.record([row])


def _with_engine(row: JournalRow, engine: str) -> JournalRow:
    return replace(row, engine=engine)


__all__ = [
    "HistoryRecorder",
    "OperationDraft",
    "cpu_seconds",
    "error_status",
    "row_for_deferred",
    "row_for_error",
    "row_for_measurement",
    "row_from_result",
    "state_of",
    "table_state",
    "utc_now",
    "writer_columns",
]
