"""Post-commit hooks: work that follows a landed commit (checkpoint, log cleanup, manifests).

A hook runs after the commit file exists. Its failure is logged and reported in
the CommitResult, never raised: the commit already happened, and turning it into
an error would make callers retry (and, without an app transaction, commit twice).
Each maintenance module registers its hook here at import time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from deltalog.storage import Storage
from deltalog.transaction import CommitResult, HookResult

log = logging.getLogger(__name__)

#: A hook gets the storage and the commit result; it returns a JSON-able detail
#: (or None when it had nothing to do) and raises on failure.
Hook = Callable[[Storage, CommitResult], Any]

_HOOKS: list[tuple[str, Hook]] = []


def register_hook(name: str, hook: Hook) -> None:
    """Add a hook (idempotent by name); hooks run in registration order."""
    if not any(n == name for n, _ in _HOOKS):
        _HOOKS.append((name, hook))


def registered_hooks() -> list[str]:
    return [n for n, _ in _HOOKS]


def run_post_commit_hooks(storage: Storage, result: CommitResult) -> list[HookResult]:
    out: list[HookResult] = []
    for name, hook in _HOOKS:
        try:
            detail = hook(storage, result)
        except Exception as exc:  # noqa: BLE001 - a hook never fails a landed commit
            log.warning("post-commit hook %s failed after version %d: %s", name, result.version, exc)
            out.append(HookResult(name, False, f"{type(exc).__name__}: {exc}"))
            continue
        if detail is not None:
            out.append(HookResult(name, True, detail))
    return out
