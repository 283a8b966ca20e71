"""The standard post-commit hooks, in the order they run after a commit.

1. ``checkpoint``: write a checkpoint when ``delta.checkpointInterval`` says so;
2. ``log_cleanup``: with ``delta.enableExpiredLogCleanup``, delete expired log files
   after a checkpoint;
3. ``symlink_manifest``: with ``delta.compatibility.symlinkFormatManifest.enabled``,
   update the manifests.

Each decides cheaply from the commit's table configuration whether it has work.
"""

from __future__ import annotations

from deltalog.checkpoint import CHECKPOINT_HOOK
from deltalog.hooks import PostCommitHook
from deltalog.log_cleanup import LOG_CLEANUP_HOOK
from deltalog.manifest import MANIFEST_HOOK


def standard_hooks() -> list[PostCommitHook]:
    """What a transaction runs after its commit unless given its own list."""
    return [CHECKPOINT_HOOK, LOG_CLEANUP_HOOK, MANIFEST_HOOK]
