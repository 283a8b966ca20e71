"""The result of a compaction run (what the CLI prints and the Airflow operator pushes to XCom)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deltalog.compaction.commit import CompactionCommit
from deltalog.compaction.outcome import BinOutput, BinSkipped
from deltalog.compaction.plan import CompactionPlan


@dataclass
class CompactionResult:
    """What a compaction did: its plan, the commits that landed, and the bins it skipped and why."""

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

    def _total(self, key: str) -> int:
        return sum(int(c.operation_metrics.get(key, 0)) for c in self.commits)

    def summary_line(self) -> str:
        """One line for logs and the CLI: the plan, or what was rewritten into what."""
        plan = self.plan
        if self.plan_only or self.noop:
            head = "plan" if self.plan_only else "nothing to compact"
            return (
                f"{head} for {self.table} at version {plan.snapshot_version}: {len(plan.bins)} bins, "
                f"{plan.num_input_files} of {plan.num_files} files ({plan.input_bytes} bytes) in "
                f"{plan.num_partitions} partitions; target {plan.target_size} bytes"
            )
        skipped = f", {len(self.skipped)} bins skipped" if self.skipped else ""
        return (
            f"compacted {self.table} with the {self.engine} engine: {self._total('numRemovedFiles')} files "
            f"({self._total('numRemovedBytes')} bytes) -> {self._total('numAddedFiles')} files "
            f"({self._total('numAddedBytes')} bytes) in versions {[c.version for c in self.commits]}{skipped}"
        )

    def to_dict(self) -> dict[str, Any]:
        committed = set(self.committed_bins)
        out: dict[str, Any] = {
            "table": self.table,
            "engine": self.engine,
            "planOnly": self.plan_only,
            "noop": self.noop,
            "ok": self.ok,
            "error": self.error,
            "snapshotVersion": self.plan.snapshot_version,
            "versions": [c.version for c in self.commits],
            "numBins": len(self.plan.bins),
            "numBinsCommitted": len(committed),
            "numBinsSkipped": len(self.skipped),
            "numFilesAdded": self._total("numAddedFiles"),
            "numFilesRemoved": self._total("numRemovedFiles"),
            "bytesAdded": self._total("numAddedBytes"),
            "bytesRemoved": self._total("numRemovedBytes"),
            "numPartitionsOptimized": len(
                {tuple(sorted(b.partitionValues.items())) for b in self.plan.bins if b.id in committed}
            ),
            "numDeletionVectorsApplied": self._total("numDeletionVectorsRemoved"),
            "seconds": round(self.seconds, 3),
            "engineSeconds": round(self.engine_seconds, 3),
            "plan": self.plan.to_dict() if self.plan_only else self.plan.summary(),
            "commits": [c.to_dict() for c in self.commits],
            "skipped": [s.to_dict() for s in self.skipped],
        }
        return out
