"""Post-commit hooks: work that follows a landed commit (checkpoint, log cleanup, manifests).

A hook runs after the commit file exists. Its failure is logged and reported in
the CommitResult, never raised: the commit already happened, and turning it into
an error would make callers retry (and, without an app transaction, commit twice).

Each maintenance module registers its hook here at import time. So that a
commit triggers them without its caller importing every maintenance module, the
modules in ``_DEFAULT_HOOK_MODULES`` are imported lazily before the first hook
run; a module that does not exist (yet) is skipped, and one that fails to import
is reported like a failed hook.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable
from typing import Any

from deltalog.storage import Storage
from deltalog.transaction import CommitResult, HookResult

log = logging.getLogger(__name__)

#: A hook gets the storage and the commit result; it returns a JSON-able detail
#: (or None when it had nothing to do) and raises on failure.
Hook = Callable[[Storage, CommitResult], Any]

#: Modules that register the built-in hooks when imported (in this order).
_DEFAULT_HOOK_MODULES = ["deltalog.checkpoint", "deltalog.log_cleanup", "deltalog.manifest"]

_HOOKS: list[tuple[str, Hook]] = []
_import_errors: list[HookResult] = []
_defaults_loaded = False


def register_hook(name: str, hook: Hook) -> None:
    """Add a hook (idempotent by name: re-registering replaces it in place); hooks run in registration order."""
    for i, (n, _) in enumerate(_HOOKS):
        if n == name:
            _HOOKS[i] = (name, hook)
            return
    _HOOKS.append((name, hook))


def unregister_hook(name: str) -> bool:
    """Remove a hook by name; False when none was registered under it."""
    for i, (n, _) in enumerate(_HOOKS):
        if n == name:
            del _HOOKS[i]
            return True
    return False


def _load_default_hooks() -> None:
    global _defaults_loaded
    if _defaults_loaded:
        return
    _defaults_loaded = True
    for module in _DEFAULT_HOOK_MODULES:
        try:
            if importlib.util.find_spec(module) is None:
                continue
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - a broken hook module never fails a commit
            log.warning("post-commit hook module %s failed to import: %s", module, exc)
            _import_errors.append(HookResult(module, False, f"import failed: {type(exc).__name__}: {exc}"))


def registered_hooks() -> list[str]:
    _load_default_hooks()
    return [n for n, _ in _HOOKS]


def run_post_commit_hooks(storage: Storage, result: CommitResult) -> list[HookResult]:
    """Run every hook after ``result``'s commit; failures are reported, never raised."""
    _load_default_hooks()
    out: list[HookResult] = list(_import_errors)
    for name, hook in list(_HOOKS):
        try:
            detail = hook(storage, result)
        except Exception as exc:  # noqa: BLE001 - a hook never fails a landed commit
            log.warning("post-commit hook %s failed after version %d: %s", name, result.version, exc)
            out.append(HookResult(name, False, f"{type(exc).__name__}: {exc}"))
            continue
        if detail is not None:
            out.append(HookResult(name, True, detail))
    return out
