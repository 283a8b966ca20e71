"""What an engine hands to the committer for each bin: a rewritten file, or why not."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["BinOutput", "BinSkipped"]


@dataclass(frozen=True)
class BinOutput:
    """One rewritten bin: the ``add`` action of its new file (None when every row was deleted)."""

    bin_id: int
    add: dict[str, Any] | None
    rows_in: int = 0
    rows_out: int = 0
    bytes_in: int = 0
    deletion_vectors: int = 0
    deleted_rows: int = 0
    seconds: float = 0.0
    #: Where the new file is on storage (for clean-up when the bin does not commit).
    storage_path: str | None = None
    #: Further new files of the bin (a Z-order bin is cut into several files), and where they are.
    more_adds: list[dict[str, Any]] = field(default_factory=list)
    more_paths: list[str] = field(default_factory=list)

    @property
    def adds(self) -> list[dict[str, Any]]:
        """Every new file's add action (none when every row was deleted)."""
        return ([self.add] if self.add else []) + list(self.more_adds)

    @property
    def storage_paths(self) -> list[str]:
        return ([self.storage_path] if self.storage_path else []) + list(self.more_paths)

    @property
    def bytes_out(self) -> int:
        return sum(int(a["size"]) for a in self.adds)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("add")
        d.pop("more_adds")
        d["path"] = self.add["path"] if self.add else None
        if self.more_adds:
            d["more_paths_in_log"] = [a["path"] for a in self.more_adds]
        d["bytes_out"] = self.bytes_out
        return d


@dataclass(frozen=True)
class BinSkipped:
    """A bin that was not committed, and why (a lost race, or an engine error)."""

    bin_id: int
    reason: str
    #: "conflict" (a concurrent commit took an input), "error" (the rewrite failed), "missing" (an
    #: input file is not on storage: the run stops), "aborted", "deferred" (not started: the time
    #: budget was spent, or its writers left no quiet moment in time), "replanned" (a gated bin planned
    #: again at its writers' quiet moment: the bins committed instead are in the result's plan)
    kind: str
    paths: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
