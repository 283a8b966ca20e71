"""The standard post-commit hooks, in the order they run after a commit.

1. ``checkpoint``: write a checkpoint when ``delta.checkpointInterval`` says so;
2. ``iceberg_metadata``: on a UniForm table (``delta.universalFormat.enabledFormats``
   naming iceberg), write the Iceberg metadata of the new version
   (:func:`deltalog.uniform.sync_iceberg_metadata`), before log cleanup can remove the
   commits an incremental conversion reads; a failure is reported in the result and the
   logs (the commit stands) and the next commit or ``deltalog uniform-sync`` catches up;
3. ``log_cleanup``: with ``delta.enableExpiredLogCleanup``, delete expired log files
   after a checkpoint (and expire Iceberg snapshots past the retention);
4. ``symlink_manifest``: with ``delta.compatibility.symlinkFormatManifest.enabled``,
   update the manifests.

Each decides cheaply from the commit's table configuration whether it has work, then
calls the storage-level primitive of :mod:`deltalog.log_maintenance` on the committer's
``Storage`` (as delta-rs's post-commit calls ``create_checkpoint_for(version, log_store)``).
What a transaction runs is its caller's choice (``Transaction(post_commit_hooks=...)``,
``run_hooks``); this list is the default. The transaction imports this module only when
a commit first needs it, so importing the transaction does not load the checkpoint writer.
"""

from __future__ import annotations

from typing import Any

from deltalog.commit.post_commit import PostCommitHook, hook_configuration
from deltalog.commit.result import CommitResult
from deltalog.log.listing import list_log
from deltalog.log_maintenance.checkpoint import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.log_maintenance.manifest import ENABLED_PROPERTY, generate_manifest
from deltalog.protocol.properties import checkpoint_due, config_bool
from deltalog.protocol.uniform import uniform_iceberg_enabled
from deltalog.storage.filesystem import Storage

__all__ = [
    "POST_COMMIT_CHECKPOINT",
    "POST_COMMIT_ICEBERG",
    "POST_COMMIT_LOG_CLEANUP",
    "POST_COMMIT_MANIFEST",
    "standard_hooks",
]


def _checkpoint(storage: Storage, result: CommitResult) -> dict[str, Any] | None:
    """Checkpoint the committed version when ``delta.checkpointInterval`` says so."""
    if result.noop or not checkpoint_due(hook_configuration(result), result.version):
        return None
    return create_checkpoint(storage, version=result.version).to_dict()


def _iceberg(storage: Storage, result: CommitResult) -> dict[str, Any] | None:
    """On a UniForm table, bring the Iceberg metadata to the latest version (this commit's or a later one)."""
    if result.noop or not uniform_iceberg_enabled(hook_configuration(result)):
        return None
    from deltalog.uniform.convert import sync_iceberg_metadata  # pyiceberg: loaded for UniForm tables only

    return sync_iceberg_metadata(storage).to_dict()


def _log_cleanup(storage: Storage, result: CommitResult) -> dict[str, Any] | None:
    """After an automatic checkpoint, delete what has expired (when enabled)."""
    conf = hook_configuration(result)
    if result.noop or not checkpoint_due(conf, result.version):
        return None
    if not config_bool(conf, "delta.enableExpiredLogCleanup", True):
        return None
    if result.version not in list_log(storage, read_hint=False).checkpoints:
        return None  # the checkpoint hook did not write one (it reports why)
    return cleanup_log(storage).summary()


def _manifest(storage: Storage, result: CommitResult) -> dict[str, Any] | None:
    """Refresh the manifests incrementally when the table property asks for it."""
    if result.noop or not config_bool(hook_configuration(result), ENABLED_PROPERTY, False):
        return None
    return generate_manifest(storage).summary()


POST_COMMIT_CHECKPOINT = PostCommitHook("checkpoint", _checkpoint)
POST_COMMIT_ICEBERG = PostCommitHook("iceberg_metadata", _iceberg)
POST_COMMIT_LOG_CLEANUP = PostCommitHook("log_cleanup", _log_cleanup)
POST_COMMIT_MANIFEST = PostCommitHook("symlink_manifest", _manifest)


def standard_hooks() -> list[PostCommitHook]:
    """What a transaction runs after its commit unless given its own list."""
    return [POST_COMMIT_CHECKPOINT, POST_COMMIT_ICEBERG, POST_COMMIT_LOG_CLEANUP, POST_COMMIT_MANIFEST]
