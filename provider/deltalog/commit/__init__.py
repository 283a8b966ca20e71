"""Committing: optimistic transactions, Delta's conflict rules, row tracking, post-commit hooks.

| module | job |
|---|---|
| ``transaction`` | ``Transaction(storage, snapshot, operation=...)``: stage actions, commit with put-if-absent, retry |
| ``conflicts`` | Delta's conflict rules against the winning commits, one exception class per rule |
| ``row_tracking`` | fresh row IDs and row commit versions, the ``delta.rowTracking`` high-water mark |
| ``result`` | ``CommitResult`` and ``PostCommitHookResult``: what a commit reports |
| ``post_commit`` | ``PostCommitHook`` and how hooks run: after a landed commit, failures reported, never raised |
| ``standard_post_commit`` | the default hooks (checkpoint, log cleanup, manifests) over ``deltalog.log_maintenance`` |

The standard hooks are imported by a transaction only when a commit first runs them.
"""

from deltalog.commit.post_commit import PostCommitHook
from deltalog.commit.result import CommitResult, PostCommitHookResult
from deltalog.commit.transaction import Transaction

__all__ = ["CommitResult", "PostCommitHook", "PostCommitHookResult", "Transaction"]
