"""Checkpoints: writing one (``writer``), ``_last_checkpoint`` (``last``), the post-commit hook.

Reading checkpoints is ``deltalog.log.checkpoint_reader`` (beside the snapshot reader); the
table properties that decide when to write one are ``deltalog.protocol.properties``.
"""

from deltalog.checkpoint.last import CheckpointDescription, describe_checkpoint, last_checkpoint_checksum
from deltalog.checkpoint.writer import CHECKPOINT_HOOK, CheckpointResult, create_checkpoint

__all__ = [
    "CHECKPOINT_HOOK",
    "CheckpointDescription",
    "CheckpointResult",
    "create_checkpoint",
    "describe_checkpoint",
    "last_checkpoint_checksum",
]
