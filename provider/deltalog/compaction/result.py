"""The result of a compaction run (what the CLI prints and the Airflow operator pushes to XCom)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from deltalog.compaction.commit import CompactionCommit
from deltalog.compaction.engine_output import BinOutput, BinSkipped
from deltalog.compaction.plan import Bin, CompactionPlan

__all__ = ["CompactionProgress", "CompactionResult"]


@dataclass(frozen=True)
class CompactionResult:
    """What a compaction did: its plan, the commits that landed, and the bins it skipped and why.

    Built once the run is over (:class:`CompactionProgress` collects it while it runs).
    """

    table: str
    engine: str
    plan: CompactionPlan
    plan_only: bool = False
    commits: list[CompactionCommit] = field(default_factory=list)
    outputs: list[BinOutput] = field(default_factory=list)
    skipped: list[BinSkipped] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    engine_seconds: float = 0.0

    @property
    def committed_bins(self) -> list[int]:
        return sorted(b for c in self.commits for b in c.bins)

    @property
    def noop(self) -> bool:
        """Nothing to do: the plan had no bins."""
        return not self.plan.bins

    @property
    def ok(self) -> bool:
        """No bin failed for a reason other than losing a race, and no commit failed."""
        return self.error is None and not any(s.kind == "error" for s in self.skipped)

    @property
    def bins_deferred_for_writers(self) -> int:
        """Bins rewritten but not committed: their writers left no quiet moment in time (the next run plans them)."""
        return sum(1 for s in self.skipped if s.kind == "deferred" and s.reason.startswith("deferred for the writers"))

    @property
    def seconds_waiting_for_writers(self) -> float:
        return sum(float((c.writer_wait or {}).get("waited_s") or 0.0) for c in self.commits)

    def _writers_text(self) -> str:
        parts = []
        files = self.plan.num_files_deferred_for_writers
        if files:
            parts.append(f"{files} files deferred for the writers")
        if self.bins_deferred_for_writers:
            parts.append(f"{self.bins_deferred_for_writers} bins deferred: no quiet moment of the writers in time")
        waited = self.seconds_waiting_for_writers
        if waited >= 0.05:
            parts.append(f"waited {waited:.1f} s for the writers' quiet moments")
        return "".join(f"; {p}" for p in parts)

    def _total(self, key: str) -> int:
        """A sum over the commits' operationMetrics (Delta's metric names)."""
        return sum(int(c.operation_metrics.get(key, 0)) for c in self.commits)

    def summary_line(self) -> str:
        """One line for logs and the CLI: the plan, or what was rewritten into what."""
        if self.plan_only or self.noop:
            return self.plan.summary_line("plan" if self.plan_only else "nothing to compact")
        skipped = f", {len(self.skipped)} bins skipped" if self.skipped else ""
        return (
            f"compacted {self.table} with the {self.engine} engine: {self._total('numRemovedFiles')} files "
            f"({self._total('numRemovedBytes')} bytes) -> {self._total('numAddedFiles')} files "
            f"({self._total('numAddedBytes')} bytes) in versions {[c.version for c in self.commits]}{skipped}"
            f"{self._writers_text()}"
        )

    def to_dict(self) -> dict[str, Any]:
        committed = set(self.committed_bins)
        return {
            "table": self.table,
            "engine": self.engine,
            "plan_only": self.plan_only,
            "noop": self.noop,
            "ok": self.ok,
            "error": self.error,
            "snapshot_version": self.plan.snapshot_version,
            "versions": [c.version for c in self.commits],
            "num_bins": len(self.plan.bins),
            "num_bins_committed": len(committed),
            "num_bins_skipped": len(self.skipped),
            "num_files_added": self._total("numAddedFiles"),
            "num_files_removed": self._total("numRemovedFiles"),
            "bytes_added": self._total("numAddedBytes"),
            "bytes_removed": self._total("numRemovedBytes"),
            "num_partitions_optimized": len(
                {tuple(sorted(b.partition_values.items())) for b in self.plan.bins if b.id in committed}
            ),
            "num_deletion_vectors_applied": self._total("numDeletionVectorsRemoved"),
            "num_files_deferred_for_writers": self.plan.num_files_deferred_for_writers,
            "num_bins_deferred_for_writers": self.bins_deferred_for_writers,
            "num_bins_lost_to_writers": sum(1 for s in self.skipped if s.kind == "conflict"),
            "seconds_waiting_for_writers": round(self.seconds_waiting_for_writers, 3),
            "deferred_files": [f.to_dict() for f in self.plan.writers.deferred] if self.plan.writers else [],
            "seconds": round(self.seconds, 3),
            "engine_seconds": round(self.engine_seconds, 3),
            "plan": self.plan.to_dict() if self.plan_only else self.plan.summary(),
            "commits": [c.to_dict() for c in self.commits],
            "skipped": [s.to_dict() for s in self.skipped],
        }


@dataclass
class CompactionProgress:
    """What a compaction run has done so far (mutable while it runs; :meth:`result` freezes it)."""

    engine: str
    commits: list[CompactionCommit] = field(default_factory=list)
    outputs: list[BinOutput] = field(default_factory=list)
    skipped: list[BinSkipped] = field(default_factory=list)
    error: str | None = None
    engine_seconds: float = 0.0
    #: Bins planned during the run (a gated batch planned again at its writers' quiet moment).
    extra_bins: list[Bin] = field(default_factory=list)
    #: Input bytes the local engine rewrote in ``engine_seconds`` (what a quiet moment's budget is sized by).
    rewritten_bytes: int = 0

    def rewrite_rate(self) -> float | None:
        """Input bytes rewritten per second so far (None: nothing measured yet)."""
        return self.rewritten_bytes / self.engine_seconds if self.rewritten_bytes and self.engine_seconds > 0 else None

    def result(self, table: str, plan: CompactionPlan, seconds: float, *, plan_only: bool = False) -> CompactionResult:
        if self.extra_bins:
            plan = dataclasses.replace(plan, bins=[*plan.bins, *self.extra_bins])
        return CompactionResult(
            table=table,
            engine=self.engine,
            plan=plan,
            plan_only=plan_only,
            commits=list(self.commits),
            outputs=list(self.outputs),
            skipped=list(self.skipped),
            error=self.error,
            seconds=seconds,
            engine_seconds=self.engine_seconds,
        )
