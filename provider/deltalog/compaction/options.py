"""Every option of a compaction, declared once: its name, its default, what it means and its check.

``compact``, ``plan_compaction``, ``DeltaTable.compact``, the ``deltalog compact`` CLI and the
Airflow operator all take a :class:`CompactionOptions` (or, as a shorthand, its fields as
keyword arguments: ``compact(t, target_size="64m")`` is
``compact(t, options=CompactionOptions(target_size="64m"))``). A new option is added here,
with its default and its check, and read where it is used; no signature repeats the list.
:class:`LocalOptions` tunes the local engine's memory and parallelism.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from deltalog._flags import require_bools, require_workers
from deltalog.errors import InvalidArgumentError

__all__ = ["ENGINES", "CompactionOptions", "LocalOptions", "check_share", "check_zorder_shape"]

#: Who rewrites the bins: pyarrow in this process, or deltalog's Spark job.
ENGINES = ("local", "spark")

DEFAULT_BATCH_ROWS = 128 * 1024
DEFAULT_ROW_GROUP_ROWS = 1024 * 1024
DEFAULT_ROW_GROUP_BYTES = 64 * 1024 * 1024
#: Arrow data buffered for output row groups by all workers together (see LocalOptions.memory_budget).
DEFAULT_MEMORY_BUDGET = 48 * 1024 * 1024
#: The part of a worker's share of the budget its read-ahead may hold (the rest: its row group).
READ_AHEAD_SHARE = 0.25


@dataclass
class LocalOptions:
    """Tuning of the local engine (defaults suit files of tens to hundreds of MB).

    ``memory_budget`` bounds the decoded Arrow data the workers buffer for their output
    row groups, all together: each worker closes a row group at ``row_group_rows``,
    ``row_group_bytes`` or its share of the budget (``memory_budget / workers``),
    whichever comes first. So more workers mean smaller row groups, never more
    memory; ``None`` leaves only the per-worker limits. A process's peak is about
    the interpreter plus two to three times the budget (decoding and encoding
    buffers, the allocator's slack), whatever the bin or table size.
    """

    max_workers: int | None = None
    batch_rows: int = DEFAULT_BATCH_ROWS
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    memory_budget: int | None = DEFAULT_MEMORY_BUDGET
    #: Decode the next batches in a thread of their own while the worker encodes (both cores busy
    #: even with a single bin); they take ``READ_AHEAD_SHARE`` of the worker's share of the budget.
    read_ahead: bool = True

    def _worker_share(self, workers: int) -> int:
        if self.memory_budget is None:
            return self.row_group_bytes
        return max(2, self.memory_budget // max(1, workers))

    def worker_read_ahead_bytes(self, workers: int) -> int:
        """Decoded batches one worker may hold ahead of its writer (0: no read-ahead)."""
        return max(1, int(self._worker_share(workers) * READ_AHEAD_SHARE)) if self.read_ahead else 0

    def worker_row_group_bytes(self, workers: int) -> int:
        """The byte limit of one worker's row-group buffer when ``workers`` run at once."""
        if self.memory_budget is None:
            return self.row_group_bytes
        share = self._worker_share(workers) - self.worker_read_ahead_bytes(workers)
        return max(1, min(self.row_group_bytes, share))


def check_share(share: Any) -> float:
    """A deletion-vector purge threshold: a real number in [0, 1) (a bool or a string is refused, never coerced)."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share):
        raise InvalidArgumentError(f"min_deleted_share must be a number from 0 to 1, got {share!r}")
    if not 0 <= share < 1:
        raise InvalidArgumentError(f"min_deleted_share must be at least 0 and below 1, got {share!r}")
    return float(share)


def check_zorder_shape(columns: Any) -> list[str]:
    """Z-order columns as a list of distinct, non-empty names (what the table says of them is the planner's check)."""
    if isinstance(columns, str) or not isinstance(columns, (list, tuple)) or not columns:
        raise InvalidArgumentError(f"zorder_by must be a non-empty list of column names, got {columns!r}")
    if not all(isinstance(c, str) and c.strip() for c in columns):
        raise InvalidArgumentError(f"zorder_by must name columns as strings, got {columns!r}")
    cols = [c.strip() for c in columns]
    if len(set(cols)) != len(cols):
        raise InvalidArgumentError(f"zorder_by names a column twice: {cols}")
    return cols


@dataclass(frozen=True, kw_only=True)
class CompactionOptions:
    """What to compact and how: every option of ``compact`` / ``plan_compaction``, checked when built.

    Planning (what goes into the bins):

    - ``target_size``: size of the files to write (bytes or ``"128m"``; default the table's
      ``delta.targetFileSize``, else 128 MiB);
    - ``where``: a partition filter (``col = 'v'``, ``col IN ('a','b')``, joined by ``AND``);
    - ``min_files``: the fewest files worth a bin (2);
    - ``max_bins``: rewrite at most this many bins (the fullest) this run;
    - ``small_file_threshold``: files below it are candidates (default half the target size);
    - ``purge_deletion_vectors``: rewrite instead the files whose deletion vector hides more
      than ``min_deleted_share`` of their rows (default 0: any DV), applying it, in a
      ``REORG`` commit as Delta Spark's ``REORG TABLE ... APPLY (PURGE)``;
    - ``zorder_by``: column names; rewrite every file of each partition along a Z curve of
      them, cut into target-size files (``OPTIMIZE ... ZORDER BY``);
    - ``full``: on a table with liquid clustering (which compaction clusters instead of
      bin-packing), re-cluster files clustered by other columns too (``OPTIMIZE ... FULL``);
    - ``writer_aware`` (default True): mind the DELETE/UPDATE/MERGE writers of the table's recent
      log (:mod:`deltalog.compaction.writer_aware`): files where none works are compacted first,
      files where one works commit at a quiet moment of it, the files it is working on (and
      those of writers that leave no quiet moment) are deferred, the plan says which and why;
      False compacts as if no writer were there;
    - ``overriding_objective``: the breached objective this compaction runs for (the fleet sets
      it): nothing is deferred for the writers, and a commit whose wait runs out lands anyway.

    Running:

    - ``engine``: ``"local"`` (pyarrow, in this process) or ``"spark"``; None is local for
      ``compact``, and a plan made without one is checked against neither engine;
    - ``plan_only``: the dry run: plan, write nothing;
    - ``bins_per_commit``: commit every N bins (a crash loses at most one batch of work);
    - ``max_workers``: local engine: bins rewritten at once (``local_options`` tunes more);
    - ``spark_options``: for the Spark engine, :func:`deltalog.compaction.spark.submit.run_spark`'s
      ``master``, ``spark_submit``, ``conf``, ``timeout``;
    - ``run_hooks``: False leaves the post-commit hooks (checkpoint, log cleanup) to a separate task;
    - ``deadline``: local engine: a ``time.monotonic()`` value after which no bin starts; every
      finished batch is committed, the bins not started are reported as ``"deferred"``;
    - ``writer_wait_seconds``: the longest a commit waits for a quiet moment of the writers
      (default 60; 0: never wait, so what would wait is deferred).
    """

    target_size: int | str | None = None
    where: str | None = None
    min_files: int = 2
    max_bins: int | None = None
    small_file_threshold: int | str | None = None
    purge_deletion_vectors: bool = False
    min_deleted_share: float | None = None
    zorder_by: list[str] | None = None
    full: bool = False
    engine: str | None = None
    plan_only: bool = False
    bins_per_commit: int | None = None
    max_workers: int | None = None
    local_options: LocalOptions | None = None
    spark_options: dict[str, Any] | None = None
    run_hooks: bool = True
    deadline: float | None = None
    writer_aware: bool = True
    writer_wait_seconds: float | None = None
    overriding_objective: str | None = None

    def __post_init__(self) -> None:
        require_bools(
            plan_only=self.plan_only,
            run_hooks=self.run_hooks,
            purge_deletion_vectors=self.purge_deletion_vectors,
            full=self.full,
            writer_aware=self.writer_aware,
        )
        wait = self.writer_wait_seconds
        if wait is not None and (
            isinstance(wait, bool) or not isinstance(wait, int | float) or not math.isfinite(wait) or wait < 0
        ):
            raise InvalidArgumentError(f"writer_wait_seconds must be a non-negative number of seconds, got {wait!r}")
        reason = self.overriding_objective
        if reason is not None and (not isinstance(reason, str) or not reason.strip()):
            raise InvalidArgumentError(
                f"overriding_objective names the breached objective a compaction runs for, got {reason!r}"
            )
        if not self.purge_deletion_vectors and self.min_deleted_share is not None:
            raise InvalidArgumentError("min_deleted_share applies to a deletion-vector purge only")
        if self.purge_deletion_vectors and self.min_deleted_share is not None:
            check_share(self.min_deleted_share)
        if self.zorder_by is not None:
            check_zorder_shape(self.zorder_by)
            if self.purge_deletion_vectors:
                raise InvalidArgumentError("a deletion-vector purge and a Z-order are separate runs: choose one")
        if not isinstance(self.min_files, int) or isinstance(self.min_files, bool) or self.min_files < 2:
            raise InvalidArgumentError(f"min_files must be an integer of at least 2, got {self.min_files!r}")
        if self.max_bins is not None and (
            not isinstance(self.max_bins, int) or isinstance(self.max_bins, bool) or self.max_bins < 1
        ):
            raise InvalidArgumentError(f"max_bins must be a positive integer, got {self.max_bins!r}")
        if self.max_workers is not None:
            require_workers(self.max_workers)
        if self.engine is not None and self.engine not in ENGINES:
            raise InvalidArgumentError(f"unknown compaction engine {self.engine!r}: use one of {', '.join(ENGINES)}")
        if self.bins_per_commit is not None and (not isinstance(self.bins_per_commit, int) or self.bins_per_commit < 1):
            raise InvalidArgumentError(f"bins_per_commit must be a positive integer, got {self.bins_per_commit!r}")
        if self.deadline is not None and self.engine == "spark":
            raise InvalidArgumentError("a time budget (deadline) stops between bins of the local engine only")

    @property
    def purge_min_deleted_share(self) -> float | None:
        """The purge threshold a plan records (None: not a purge)."""
        if not self.purge_deletion_vectors:
            return None
        return 0.0 if self.min_deleted_share is None else float(self.min_deleted_share)

    @classmethod
    def of(cls, options: CompactionOptions | None, values: dict[str, Any], caller: str) -> CompactionOptions:
        """``options`` (default: all defaults) with the fields ``values`` names replaced, checked again.

        ``values`` are the keyword arguments a caller passed as a shorthand for the fields;
        a name that is no field is a TypeError, as for any unexpected keyword argument.
        """
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(
                f"{caller}() got an unexpected keyword argument {unknown[0]!r} "
                f"(its options are the fields of CompactionOptions: {', '.join(f.name for f in dataclasses.fields(cls))})"
            )
        if options is not None and not isinstance(options, cls):
            raise InvalidArgumentError(f"options must be a CompactionOptions, got {type(options).__name__}")
        base = options or cls()
        return dataclasses.replace(base, **values) if values else base
