"""Reading checkpoints without replaying file actions: their small actions, and a version's protocol and metadata.

Beside the snapshot reader (``deltalog.log.snapshot``, which reads checkpoints whole): these
read only what log maintenance and post-commit hooks need, cheaply.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog._arrow_utils import conform
from deltalog.errors import CorruptCheckpointError, CorruptLogError, DeltaLogError
from deltalog.log.action_checks import check_action, check_file_action, check_file_table, check_table_metadata
from deltalog.log.actions import ADD_TYPE, REMOVE_TYPE, Metadata
from deltalog.log.commit_lines import check_commits, parse_action, parse_commit
from deltalog.log.listing import Checkpoint, LogListing, LogSegment, build_segment
from deltalog.log.load import snapshot_at
from deltalog.log.snapshot import read_commit_files, sidecar_path
from deltalog.protocol.table_protocol import Protocol
from deltalog.storage.filesystem import Storage

__all__ = [
    "check_checkpoint_deletion_vectors",
    "check_file_actions",
    "check_parquet_file_actions",
    "log_name",
    "read_checkpoint_small_actions",
    "read_protocol_and_metadata",
]

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
        # Newest first, as a snapshot replays: an action a newer one replaced is not checked.
        seen: dict[str, set[Any]] = {"txn": set(), "domainMetadata": set()}
        for f, data in zip(reversed(segment.commits), reversed(contents)):
            lines = data.split(b"\n")
            for idx in range(len(lines) - 1, -1, -1):
                head = lines[idx][:24]
                if not any(k in head for k in _NON_FILE_KEYS):
                    continue
                ((kind, body),) = parse_action(lines[idx], f.name, idx + 1).items()
                if _replaced(kind, body, protocol_action, metadata_action, seen):
                    continue
                if kind == "metaData":
                    check_table_metadata(body, "")
                    metadata_action = body
                else:
                    check_action(kind, body, "")
                if kind == "protocol":
                    protocol_action = body
        if segment.checkpoint is not None:
            small = read_checkpoint_small_actions(storage, segment.checkpoint)
            for kind, actions in small.items():
                for action in actions:
                    if not _replaced(kind, action, protocol_action, metadata_action, seen):
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


def _replaced(
    kind: str, action: Any, protocol: dict[str, Any] | None, metadata: dict[str, Any] | None, seen: dict[str, set[Any]]
) -> bool:
    """Whether a newer action replaced ``action`` (seen newest first); records txn appIds and domains."""
    if not isinstance(action, dict):
        return False
    if kind == "protocol":
        return protocol is not None
    if kind == "metaData":
        return metadata is not None
    key = {"txn": "appId", "domainMetadata": "domain"}.get(kind)
    if key is None or not isinstance(action.get(key), str):
        return False
    if action[key] in seen[kind]:
        return True
    seen[kind].add(action[key])
    return False


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


# --- the file actions' checks, without replaying them ---------------------------------------

#: What a file-action line must hold for the checks beyond its types to have anything to say.
_FILE_CHECK_NEEDED = re.compile(rb'"deletionVector"\s*:\s*(?!null)|"size"\s*:\s*-|"path"\s*:\s*"(?:"|[^"]*\\u0000)')


def check_file_actions(storage: Storage, segment: LogSegment) -> None:
    """The checks a snapshot load makes on the file actions of ``segment``, without replaying them.

    Log cleanup reads no file action, yet it must refuse the log every other command
    refuses (and never delete the commits an unreadable checkpoint would need): the few
    lines that carry a deletion vector, a negative size or an empty (or NUL-holding) path are parsed and
    checked, newest first like the snapshot, and the checkpoint's ``path``, ``deletionVector`` and ``size`` columns
    (its ``stats`` only in row groups that hold deletion vectors) are checked vectorised.
    """
    contents = read_commit_files(storage, segment.commits)
    for f, data in zip(reversed(segment.commits), reversed(contents)):
        lines = data.split(b"\n")
        for idx in range(len(lines) - 1, -1, -1):
            line = lines[idx]
            if not line.startswith((b'{"add"', b'{"remove"')) or not _FILE_CHECK_NEEDED.search(line):
                continue
            ((kind, body),) = parse_action(line, f.name, idx + 1).items()
            if kind in ("add", "remove") and isinstance(body, dict):
                check_file_action(kind, body, f"{f.name}: line {idx + 1}")
    if segment.checkpoint is None:
        return
    for f in segment.checkpoint.files:
        if f.name.endswith(".json"):
            for action in parse_commit(storage.read_bytes(f.path), f.name):
                ((kind, body),) = action.items()
                if kind in ("add", "remove") and isinstance(body, dict):
                    check_file_action(kind, body, f"checkpoint {f.name}", CorruptCheckpointError)
    check_parquet_file_actions(storage, _parquet_files(storage, segment.checkpoint))


def check_checkpoint_deletion_vectors(storage: Storage, segment: LogSegment) -> None:
    """The deletion-vector checks of a full load on the Parquet checkpoint of ``segment``, for a projected load.

    A load that projects ``stats`` away (vacuum reads paths and descriptors only) cannot
    check a descriptor's cardinality against the file's ``numRecords``; this reads, in the
    row groups whose footer shows deletion vectors only, the columns that check needs, so
    such a log is refused by vacuum as by every other command, at the cost of those groups.
    """
    if segment.checkpoint is not None:
        check_parquet_file_actions(storage, _parquet_files(storage, segment.checkpoint), dv_groups_only=True)


def _parquet_files(storage: Storage, checkpoint: Checkpoint) -> list[str]:
    """The Parquet files of a checkpoint that hold file actions: its parts and their sidecars."""
    parquet = [f.path for f in checkpoint.files if not f.name.endswith(".json")]
    sidecars = read_checkpoint_small_actions(storage, checkpoint, ("sidecar",)).get("sidecar", [])
    return parquet + [sidecar_path(storage, s["path"]) for s in sidecars if isinstance(s.get("path"), str)]


def check_parquet_file_actions(storage: Storage, parquet: list[str], *, dv_groups_only: bool = False) -> None:
    """The file-action checks of a snapshot load on Parquet checkpoint files (parts, sidecars), a row group at a time.

    For readers that leave those rows to someone else (the Spark vacuum's job): the log is
    refused here, before any work, as every other command refuses it. Reads only the
    ``path``, ``size`` and ``deletionVector`` columns (``stats`` where a row group holds
    deletion vectors), so memory stays that of one row group.
    """
    for path in parquet:
        name = path.rsplit("/", 1)[-1]
        try:
            with storage.open_input(path) as fh:
                pf = pq.ParquetFile(fh)
                for kind in ("add", "remove"):
                    _check_checkpoint_file_actions(pf, kind, name, dv_groups_only)
        except FileNotFoundError:
            raise CorruptCheckpointError(f"checkpoint file {name} is missing") from None
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise CorruptCheckpointError(f"checkpoint file {name} is not readable: {exc}") from None


def _check_checkpoint_file_actions(pf: pq.ParquetFile, kind: str, name: str, dv_groups_only: bool = False) -> None:
    paths = [pf.metadata.schema.column(i).path for i in range(pf.metadata.num_columns)]
    dv_leaves = [i for i, p in enumerate(paths) if p.startswith(f"{kind}.deletionVector.")]
    wanted = [
        c
        for c in (f"{kind}.path", f"{kind}.size", f"{kind}.deletionVector")
        if any(p == c or p.startswith(c + ".") for p in paths)
    ]
    if f"{kind}.path" not in wanted:
        return
    for g in range(pf.metadata.num_row_groups):
        group = pf.metadata.row_group(g)
        has_dv = any(
            (st := group.column(i).statistics) is None or not st.has_null_count or st.null_count < group.num_rows
            for i in dv_leaves
        )
        if dv_groups_only and not has_dv:
            continue
        columns = wanted + ([f"{kind}.stats"] if has_dv and f"{kind}.stats" in paths else [])
        table = pf.read_row_group(g, columns=columns)
        column = table.column(kind).combine_chunks()
        column = column.filter(column.is_valid())
        # As the snapshot reader types them (a writer may have typed an all-null column as null).
        typ = ADD_TYPE if kind == "add" else REMOVE_TYPE
        names = {column.type.field(i).name for i in range(column.type.num_fields)}
        column = conform(column, pa.struct([f for f in typ if f.name in names]))
        check_file_table(kind, column, f"checkpoint {name}", CorruptCheckpointError)
