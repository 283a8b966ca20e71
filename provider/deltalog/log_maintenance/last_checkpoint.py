"""``_last_checkpoint``: its document and checksum, and reading a checkpoint back to build it.

The hint readers use to find the newest checkpoint. It is replaced only after the
checkpoint it names is complete, and never moved back to an older one; a checkpoint
already on disk is read back whole (every part, every sidecar) before it is trusted.
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog.errors import CorruptCheckpointError
from deltalog.log.action_checks import check_action, check_table_metadata
from deltalog.log.checkpoint_reader import read_checkpoint_small_actions
from deltalog.log.listing import LAST_CHECKPOINT, SIDECARS_DIR, Checkpoint, list_log
from deltalog.protocol.schema import arrow_field_to_delta
from deltalog.storage.filesystem import Storage

__all__ = [
    "CheckpointDescription",
    "describe_checkpoint",
    "last_checkpoint_checksum",
    "last_checkpoint_document",
    "update_last_checkpoint",
]

#: Like Delta Spark, ``checkpointSchema`` is left out of ``_last_checkpoint`` when its JSON is longer.
CHECKPOINT_SCHEMA_MAX_CHARS = 20_000


def _canonical_string(value: str) -> str:
    """PROTOCOL.md "How to URL encode": UTF-8, unreserved a-zA-Z0-9-._~ kept, all else %XX (uppercase)."""
    return '"' + urllib.parse.quote(value, safe="-._~") + '"'


def _canonical_pairs(node: Any, prefix: list[str], out: list[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            _canonical_pairs(value, [*prefix, _canonical_string(str(key))], out)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _canonical_pairs(value, [*prefix, str(i)], out)
    else:
        if isinstance(node, bool):
            text = "true" if node else "false"
        elif node is None:
            text = "null"
        elif isinstance(node, str):
            text = _canonical_string(node)
        else:
            text = json.dumps(node)
        out.append("+".join(prefix) + "=" + text)


def last_checkpoint_checksum(doc: dict[str, Any]) -> str:
    """The MD5 ``checksum`` of a ``_last_checkpoint`` document (PROTOCOL.md, JSON checksum).

    Leaves become ``path=value`` pairs with URL-encoded, quoted names and strings, sorted
    in byte order; the top-level ``checksum`` key is ignored.
    """
    pairs: list[str] = []
    _canonical_pairs({k: v for k, v in doc.items() if k != "checksum"}, [], pairs)
    pairs.sort(key=lambda s: s.encode("utf-8"))
    return hashlib.md5(",".join(pairs).encode("utf-8")).hexdigest()


def last_checkpoint_document(
    version: int,
    size: int,
    parts: int | None,
    size_in_bytes: int,
    num_add_files: int,
    schema: pa.Schema | None,
) -> dict[str, Any]:
    """The ``_last_checkpoint`` JSON: version, size and parts first (for old readers), then the rest."""
    doc: dict[str, Any] = {"version": version, "size": size}
    if parts is not None:
        doc["parts"] = parts
    doc["sizeInBytes"] = size_in_bytes
    doc["numOfAddFiles"] = num_add_files
    if schema is not None:
        struct = {"type": "struct", "fields": [arrow_field_to_delta(f) for f in schema]}
        if len(json.dumps(struct, separators=(",", ":"))) <= CHECKPOINT_SCHEMA_MAX_CHARS:
            doc["checkpointSchema"] = struct
    doc["checksum"] = last_checkpoint_checksum(doc)
    return doc


def update_last_checkpoint(storage: Storage, doc: dict[str, Any]) -> bool:
    """Replace ``_last_checkpoint`` unless it already names a newer checkpoint that still exists."""
    path = storage.join("_delta_log", LAST_CHECKPOINT)
    try:
        current = json.loads(storage.read_bytes(path))
        current_version = current.get("version") if isinstance(current, dict) else None
    except (OSError, ValueError):
        current_version = None
    if isinstance(current_version, int) and current_version > doc["version"]:
        listing = list_log(storage, read_hint=False)
        if current_version in listing.checkpoints:
            return False
    storage.write_atomic(path, json.dumps(doc, separators=(",", ":")).encode())
    return True


@dataclass
class CheckpointDescription:
    """What an existing checkpoint holds, read back from its files (for ``_last_checkpoint``)."""

    num_actions: int
    num_add_files: int
    size_in_bytes: int
    sidecars: list[str]
    last_checkpoint: dict[str, Any]


def describe_checkpoint(storage: Storage, checkpoint: Checkpoint) -> CheckpointDescription:
    """Read back a complete checkpoint (every part, every sidecar) and build its ``_last_checkpoint``.

    Raises CorruptCheckpointError when any file is missing or unreadable, which is
    how log cleanup and the checkpoint rerun decide a checkpoint can be relied on.
    """
    small = read_checkpoint_small_actions(storage, checkpoint)
    if len(small.get("protocol", [])) != 1 or len(small.get("metaData", [])) != 1:
        raise CorruptCheckpointError(
            f"checkpoint {checkpoint.files[0].name} does not hold exactly one protocol and one metaData action"
        )
    # Its non-file actions as a snapshot load checks them: a checkpoint holding an invalid
    # one is neither reused by a checkpoint rerun nor kept as log cleanup's oldest state.
    where = f"checkpoint {checkpoint.files[0].name}"
    for kind, actions in small.items():
        for action in actions:
            check_action(kind, action, where, CorruptCheckpointError)
    check_table_metadata(small["metaData"][0], where, CorruptCheckpointError)
    num_actions = num_adds = size = 0
    schema = None
    parquet_files = [(f.path, f.name) for f in checkpoint.files if not f.name.endswith(".json")]
    sidecar_names = []
    for sc in small.get("sidecar", []):
        name = str(sc.get("path", "")).rsplit("/", 1)[-1]
        sidecar_names.append(f"{SIDECARS_DIR}/{name}")
        parquet_files.append((storage.join("_delta_log", SIDECARS_DIR, name), f"{SIDECARS_DIR}/{name}"))
    for f in checkpoint.files:
        size += f.size
        if f.name.endswith(".json"):
            num_actions += sum(1 for line in storage.read_bytes(f.path).split(b"\n") if line.strip())
    for path, name in parquet_files:
        try:
            with storage.open_input(path) as fh:
                pf = pq.ParquetFile(fh)
                num_actions += pf.metadata.num_rows
                if "add" in pf.schema_arrow.names:
                    adds = pf.read(columns=["add.path"]).column("add")
                    num_adds += len(adds) - adds.null_count
                if schema is None and path == checkpoint.files[0].path:
                    schema = pf.schema_arrow
            if name.startswith(SIDECARS_DIR):
                size += storage.info(path).size
        except FileNotFoundError:
            raise CorruptCheckpointError(
                f"checkpoint {checkpoint.files[0].name} needs {name}, which is missing"
            ) from None
        except (OSError, pa.ArrowException) as exc:
            raise CorruptCheckpointError(f"checkpoint file {name} is not readable: {exc}") from None
    parts = len(checkpoint.files) if checkpoint.kind == "multipart" else None
    doc = last_checkpoint_document(
        checkpoint.version, num_actions, parts, size, num_adds, schema if checkpoint.kind == "classic" else None
    )
    return CheckpointDescription(num_actions, num_adds, size, sidecar_names, doc)
