"""Reading checkpoints without replaying file actions: their small actions, and a version's protocol and metadata.

Beside the snapshot reader (``deltalog.log.snapshot``, which reads checkpoints whole): these
read only what log maintenance and post-commit hooks need, cheaply.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.errors import CorruptCheckpointError, CorruptLogError, DeltaLogError
from deltalog.log.action_checks import check_action, check_table_metadata
from deltalog.log.actions import Metadata
from deltalog.log.commit_lines import check_commits, parse_action, parse_commit
from deltalog.log.listing import Checkpoint, LogListing, build_segment
from deltalog.log.load import snapshot_at
from deltalog.log.snapshot import read_commit_files
from deltalog.protocol.table_protocol import Protocol
from deltalog.storage.filesystem import Storage

__all__ = ["log_name", "read_checkpoint_small_actions", "read_protocol_and_metadata"]

log = logging.getLogger(__name__)


def log_name(storage: Storage, path: str) -> str:
    """A ``_delta_log`` file's name as reported in results (``_sidecars/x.parquet`` for sidecars)."""
    rel = storage.relative(path)
    return rel[len("_delta_log/") :] if rel.startswith("_delta_log/") else rel


# --- reading protocol and metadata without replaying file actions --------------------------


def read_protocol_and_metadata(
    storage: Storage, listing: LogListing, version: int | None = None
) -> tuple[Protocol, Metadata]:
    """The protocol and metaData at ``version`` without reconstructing the file list.

    Post-commit hooks run after every commit and only need table properties: scanning
    the few commits since the checkpoint for their non-file actions and reading the
    checkpoint's small columns costs a fraction of a full snapshot. Every line and every
    non-file action read is checked as a snapshot load checks it; anything unusual (a
    corrupt line, an invalid action, an unreadable checkpoint) falls back to the full
    snapshot, which skips a bad checkpoint or refuses the log naming where it is.
    """
    try:
        segment = build_segment(listing, version)
        protocol_action: dict[str, Any] | None = None
        metadata_action: dict[str, Any] | None = None
        contents = read_commit_files(storage, segment.commits)
        check_commits((f.name, data) for f, data in zip(segment.commits, contents))
        for f, data in zip(reversed(segment.commits), reversed(contents)):
            lines = data.split(b"\n")
            for idx in range(len(lines) - 1, -1, -1):
                head = lines[idx][:24]
                if not any(k in head for k in _NON_FILE_KEYS):
                    continue
                ((kind, body),) = parse_action(lines[idx], f.name, idx + 1).items()
                if kind == "metaData" and metadata_action is None:
                    check_table_metadata(body, "")
                    metadata_action = body
                else:
                    check_action(kind, body, "")
                if kind == "protocol" and protocol_action is None:
                    protocol_action = body
        if segment.checkpoint is not None:
            small = read_checkpoint_small_actions(storage, segment.checkpoint)
            for kind, actions in small.items():
                for action in actions:
                    check_action(kind, action, "")
            protocol_action = protocol_action or next(iter(small.get("protocol") or []), None)
            if metadata_action is None and small.get("metaData"):
                metadata_action = small["metaData"][0]
                check_table_metadata(metadata_action, "")
        if protocol_action is not None and metadata_action is not None:
            return Protocol.from_action(protocol_action), Metadata.from_action(metadata_action)
    except (DeltaLogError, OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        log.debug("falling back to a full snapshot for the table properties: %s", exc)
    snap = snapshot_at(storage, version, listing=listing)
    return snap.protocol, snap.metadata


SMALL_ACTIONS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar")
_NON_FILE_KEYS = (b'"protocol"', b'"metaData"', b'"txn"', b'"domainMetadata"')


def read_checkpoint_small_actions(
    storage: Storage, checkpoint: Checkpoint, kinds: tuple[str, ...] = SMALL_ACTIONS
) -> dict[str, list[dict[str, Any]]]:
    """The non-file actions of one checkpoint (``kinds`` of them: all by default).

    Reads only those columns (never the file actions), so it is cheap enough for log
    cleanup to call on every checkpoint it keeps. Raises CorruptCheckpointError when a
    file cannot be read.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for f in checkpoint.files:
        try:
            if f.name.endswith(".json"):
                for action in parse_commit(storage.read_bytes(f.path), f.name):
                    ((kind, body),) = action.items()
                    if kind in kinds:
                        out.setdefault(kind, []).append(body)
                continue
            with storage.open_input(f.path) as fh:
                pf = pq.ParquetFile(fh)
                present = [k for k in kinds if k in pf.schema_arrow.names]
                groups = _groups_holding(pf.metadata, present)
                if not groups:  # no wanted column, or the footer rules every row group out
                    continue
                cols = pf.read_row_groups(groups, columns=present)
                for k in present:
                    column = cols.column(k)
                    out.setdefault(k, []).extend(column.filter(pc.is_valid(column)).to_pylist())
        except FileNotFoundError:
            raise CorruptCheckpointError(f"checkpoint file {f.name} disappeared while reading it") from None
        except (OSError, ValueError, pa.ArrowException, CorruptLogError) as exc:
            raise CorruptCheckpointError(f"checkpoint file {f.name} is not readable: {exc}") from None
    return out


def _groups_holding(metadata: pq.FileMetaData, kinds: list[str]) -> list[int]:
    """The row groups that may hold an action of ``kinds``: all but those the footer proves hold none.

    A checkpoint of ten million files keeps its few small actions in one row group;
    reading those columns everywhere decoded ten million nulls (about 2 s a read at that
    size). A row group is skipped only when the footer's null counts say every leaf of
    every wanted action is null in every row; a row group without statistics is read.
    A non-null action with only null leaves would be invalid anyway, and skipping it
    can only hide an action, which callers treat as a checkpoint to distrust.
    """
    if not kinds:
        return []
    paths = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    leaves = [i for i, p in enumerate(paths) if p.startswith(tuple(f"{k}." for k in kinds))]
    if any(not any(p.startswith(f"{k}.") for p in paths) for k in kinds):
        return list(range(metadata.num_row_groups))  # not a struct of leaves: nothing to judge by
    keep = []
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        if group.num_rows == 0:
            continue
        for i in leaves:
            stats = group.column(i).statistics
            if stats is None or not stats.has_null_count or stats.null_count < group.num_rows:
                keep.append(g)
                break
    return keep
