"""The work that follows commits, on a table's storage: checkpoints, expired-log cleanup, manifests.

| module | job |
|---|---|
| ``checkpoint`` | ``create_checkpoint``: one version's state as a classic or V2 checkpoint, verified before it is named |
| ``last_checkpoint`` | ``_last_checkpoint``: the document, its checksum, ``describe_checkpoint`` reads a checkpoint back |
| ``log_cleanup`` | ``cleanup_log``: delete the log files the protocol's metadata cleanup rules let go |
| ``manifest`` | ``generate_manifest``: symlink-format manifests for engines that read Parquet |

Each takes a table (a ``DeltaTable``, a path or a ``Storage``) and needs nothing above the
log readers: no transaction, no table facade. That is what lets the post-commit hooks
(``deltalog.commit.standard_post_commit``) call them on the committer's storage, and the
operations and the facade call them too, all from above.
"""

from deltalog.log_maintenance.checkpoint import CheckpointResult, create_checkpoint
from deltalog.log_maintenance.last_checkpoint import (
    CheckpointDescription,
    describe_checkpoint,
    last_checkpoint_checksum,
)
from deltalog.log_maintenance.log_cleanup import LogCleanupResult, cleanup_log
from deltalog.log_maintenance.manifest import ManifestResult, generate_manifest

__all__ = [
    "CheckpointDescription",
    "CheckpointResult",
    "LogCleanupResult",
    "ManifestResult",
    "cleanup_log",
    "create_checkpoint",
    "describe_checkpoint",
    "generate_manifest",
    "last_checkpoint_checksum",
]
