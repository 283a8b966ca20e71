"""Post-commit hooks: work that follows a landed commit (checkpoint, log cleanup, manifests).

A hook runs after the commit file exists. Its failure is logged and reported in
the CommitResult, never raised: the commit already happened, and turning it into
an error would make callers retry (and, without an app transaction, commit twice).

Hooks are explicit: a transaction runs the list it is given
(``Transaction(..., post_commit_hooks=[...])``), or by default
``deltalog.commit.standard_post_commit.standard_hooks()``; nothing is registered by importing a module.
(These are Delta's post-commit hooks; the Airflow hooks of ``deltalog_provider`` are another thing.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from deltalog.commit.result import CommitResult, PostCommitHookResult
from deltalog.storage.filesystem import Storage

__all__ = ["PostCommitHook", "hook_configuration", "run_post_commit_hooks"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PostCommitHook:
    """A named step after a commit: ``run(storage, commit_result)`` returns a JSON-able detail
    (None when it had nothing to do) and raises on failure."""

    name: str
    run: Callable[[Storage, CommitResult], Any]


def run_post_commit_hooks(
    storage: Storage, result: CommitResult, hooks: Sequence[PostCommitHook]
) -> list[PostCommitHookResult]:
    """Run ``hooks`` in order after ``result``'s commit; failures are reported, never raised."""
    out: list[PostCommitHookResult] = []
    for hook in hooks:
        try:
            detail = hook.run(storage, result)
        except Exception as exc:  # noqa: BLE001 - a hook never fails a landed commit
            log.warning("post-commit hook %s failed after version %d: %s", hook.name, result.version, exc)
            out.append(PostCommitHookResult(hook.name, False, f"{type(exc).__name__}: {exc}"))
            continue
        if detail is not None:
            out.append(PostCommitHookResult(hook.name, True, detail))
    return out


def hook_configuration(result: CommitResult) -> dict[str, str]:
    """The table properties as of the commit: carried by the CommitResult, so deciding costs no I/O."""
    conf = getattr(result, "table_configuration", None)
    return dict(conf) if isinstance(conf, dict) else {}
