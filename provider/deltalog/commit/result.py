"""What a commit reports: ``CommitResult`` and the outcome of each post-commit hook.

Its own module so the transaction, the hooks and the operations that run as hooks
(checkpoint, log cleanup, manifests) all depend on it rather than on each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CommitResult", "PostCommitHookResult"]


@dataclass(frozen=True)
class PostCommitHookResult:
    """Outcome of one post-commit hook; a failed hook never fails the commit."""

    name: str
    ok: bool
    detail: dict[str, Any] | str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CommitResult:
    """What a commit did (or, for an already-applied app transaction, did not do).

    ``table_configuration`` (the table properties as of this commit) is there for
    post-commit hooks, which must decide cheaply whether to run; it is left out of
    :meth:`to_dict`.
    """

    version: int
    read_version: int | None
    operation: str
    attempts: int = 1
    noop: bool = False
    reason: str | None = None
    num_actions: int = 0
    operation_metrics: dict[str, Any] = field(default_factory=dict)
    hooks: list[PostCommitHookResult] = field(default_factory=list)
    isolation_level: str | None = None
    in_commit_timestamp: int | None = None
    app_id: str | None = None
    app_version: int | None = None
    txn_id: str | None = None
    winning_commits: int = 0
    table_configuration: dict[str, str] = field(default_factory=dict, repr=False)

    def summary_line(self) -> str:
        """One line for logs and the CLI."""
        if self.noop:
            return f"no-op: {self.reason}"
        failed = [h.name for h in self.hooks if not h.ok]
        hooks = f"; post-commit hooks failed: {', '.join(failed)}" if failed else ""
        return f"committed version {self.version} ({self.operation}, {self.attempts} attempt(s)){hooks}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("table_configuration", None)
        d["hooks"] = [h.to_dict() for h in self.hooks]
        return d
