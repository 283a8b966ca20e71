"""Snapshot reconstruction: one consistent table state from a log segment.

Replay walks the JSON commits newest first, so the first action seen for a file
key wins and everything older with that key is skipped; the checkpoint (already
reconciled by its writer) is then filtered with one vectorised ``is_in`` against
the keys the commits touched. File actions stay in Arrow end to end.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.actions import (
    ADD_SCHEMA,
    ADD_TYPE,
    REMOVE_SCHEMA,
    REMOVE_TYPE,
    Metadata,
    file_key,
)
from deltalog.arrow_utils import table_from_struct
from deltalog.errors import CorruptCheckpointError, CorruptLogError, NoMetadataError, NoProtocolError
from deltalog.log import SIDECARS_DIR, Checkpoint, LogSegment
from deltalog.protocol import Protocol, check_readable
from deltalog.storage import FileInfo, Storage


@dataclass
class Snapshot:
    """The state of a table at one version."""

    version: int
    protocol: Protocol
    metadata: Metadata
    files: pa.Table
    tombstones: pa.Table
    app_transactions: dict[str, dict[str, Any]]
    domain_metadata: dict[str, dict[str, Any]]
    segment: LogSegment = field(repr=False)
    storage: Storage = field(repr=False)

    @property
    def partition_columns(self) -> list[str]:
        return self.metadata.partition_columns

    @property
    def schema(self) -> pa.Schema:
        return self.metadata.schema

    @property
    def num_files(self) -> int:
        return self.files.num_rows

    @property
    def size_in_bytes(self) -> int:
        return int(pc.sum(self.files.column("size")).as_py() or 0) if self.files.num_rows else 0

    def app_transaction_version(self, app_id: str) -> int | None:
        txn = self.app_transactions.get(app_id)
        return None if txn is None else int(txn["version"])

    def file_paths(self) -> list[str]:
        return self.files.column("path").to_pylist()

    def to_dict(self, *, include_files: bool = True) -> dict[str, Any]:
        """The ``deltalog snapshot --json`` contract of DESIGN.md."""
        out: dict[str, Any] = {
            "version": self.version,
            "protocol": {
                "minReaderVersion": self.protocol.min_reader_version,
                "minWriterVersion": self.protocol.min_writer_version,
                "readerFeatures": list(self.protocol.reader_features or []),
                "writerFeatures": list(self.protocol.writer_features or []),
            },
            "metadata": {
                "id": self.metadata.id,
                "name": self.metadata.name,
                "description": self.metadata.description,
                "partitionColumns": self.metadata.partition_columns,
                "configuration": self.metadata.configuration,
                "schemaString": self.metadata.schema_string,
                "createdTime": self.metadata.created_time,
            },
            "numFiles": self.num_files,
            "sizeInBytes": self.size_in_bytes,
            "appTransactions": {k: v.get("version") for k, v in self.app_transactions.items()},
        }
        if include_files:
            paths = self.files.column("path").to_pylist()
            sizes = self.files.column("size").to_pylist()
            pvs = self.files.column("partitionValues").to_pylist()
            out["files"] = [
                {"path": p, "size": s, "partitionValues": dict(pv or [])} for p, s, pv in zip(paths, sizes, pvs)
            ]
        return out


# --- JSON commits ---------------------------------------------------------------------


def read_commit_files(storage: Storage, files: list[FileInfo]) -> list[bytes]:
    """Contents of the commit files, in order; concurrent for remote stores."""
    if storage.is_local:
        out = []
        for f in files:
            with open(f.path, "rb") as fh:
                out.append(fh.read())
        return out
    if not files:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(files))) as pool:
        return list(pool.map(lambda f: storage.read_bytes(f.path), files))


def parse_commit(data: bytes, name: str) -> list[dict[str, Any]]:
    """All actions of one commit file; CorruptLogError names the file and line."""
    actions = []
    for lineno, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError as exc:
            raise CorruptLogError(f"{name}: line {lineno} is not valid JSON ({exc})") from None
        if not isinstance(action, dict) or len(action) != 1:
            raise CorruptLogError(f"{name}: line {lineno} is not a single Delta action")
        actions.append(action)
    return actions


@dataclass
class _Replay:
    """Accumulates reconciled state while commits are replayed newest first."""

    seen: set[str] = field(default_factory=set)
    seen_paths: set[str] = field(default_factory=set)
    adds: list[dict[str, Any]] = field(default_factory=list)
    removes: list[dict[str, Any]] = field(default_factory=list)
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    txns: dict[str, dict[str, Any]] = field(default_factory=dict)
    domains: dict[str, dict[str, Any]] = field(default_factory=dict)

    def file_action(self, kind: str, action: Any, where: str) -> None:
        if not isinstance(action, dict) or not isinstance(action.get("path"), str):
            raise CorruptLogError(f"{where}: {kind} action without a string 'path'")
        path = action["path"]
        dv = action.get("deletionVector")
        key = path if not dv else file_key(path, dv)
        if key in self.seen:
            return
        self.seen.add(key)
        self.seen_paths.add(path)
        if kind == "add":
            if not isinstance(action.get("size"), int):
                raise CorruptLogError(f"{where}: add action for {path!r} has no integer 'size'")
            self.adds.append(action)
        else:
            self.removes.append(action)

    def other_action(self, kind: str, action: Any, where: str) -> None:
        if kind == "commitInfo":
            return
        if not isinstance(action, dict):
            raise CorruptLogError(f"{where}: {kind} action is not an object")
        if kind == "metaData":
            if self.metadata is None:
                self.metadata = action
        elif kind == "protocol":
            if self.protocol is None:
                self.protocol = action
        elif kind == "txn":
            app = action.get("appId")
            if app is not None and app not in self.txns:
                self.txns[app] = action
        elif kind == "domainMetadata":
            domain = action.get("domain")
            if domain is not None and domain not in self.domains:
                self.domains[domain] = action


def _replay_commits(storage: Storage, segment: LogSegment, replay: _Replay) -> None:
    contents = read_commit_files(storage, segment.commits)
    for f, data in zip(reversed(segment.commits), reversed(contents)):
        name = f.name
        lines = data.split(b"\n")
        for idx in range(len(lines) - 1, -1, -1):
            line = lines[idx]
            if not line or line.startswith(b'{"commitInfo"'):
                continue
            try:
                action = json.loads(line)
            except ValueError as exc:
                if not line.strip():
                    continue
                raise CorruptLogError(f"{name}: line {idx + 1} is not valid JSON ({exc})") from None
            if not isinstance(action, dict) or len(action) != 1:
                raise CorruptLogError(f"{name}: line {idx + 1} is not a single Delta action")
            ((kind, body),) = action.items()
            where = f"{name}: line {idx + 1}"
            if kind == "add" or kind == "remove":
                replay.file_action(kind, body, where)
            else:
                replay.other_action(kind, body, where)


# --- checkpoints ----------------------------------------------------------------------

_CHECKPOINT_ACTIONS = ("metaData", "protocol", "txn", "domainMetadata", "sidecar", "checkpointMetadata")


def _read_parquet_actions(storage: Storage, path: str, name: str) -> dict[str, Any]:
    """Read the action columns deltalog needs from one checkpoint/sidecar Parquet file."""
    try:
        with storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            top = {f.name: f for f in pf.schema_arrow}
            out: dict[str, Any] = {}
            for kind, typ in (("add", ADD_TYPE), ("remove", REMOVE_TYPE)):
                if kind not in top:
                    continue
                present = {top[kind].type.field(i).name for i in range(top[kind].type.num_fields)}
                wanted = [n for n in (f.name for f in typ) if n in present]
                out[kind] = pf.read(columns=[f"{kind}.{n}" for n in wanted])
            small = [k for k in _CHECKPOINT_ACTIONS if k in top]
            if small:
                table = pf.read(columns=small)
                out["small"] = {k: [v for v in table.column(k).to_pylist() if v is not None] for k in small}
            return out
    except FileNotFoundError:
        raise CorruptLogError(f"checkpoint file {name} disappeared while reading it") from None
    except (OSError, pa.ArrowException, ValueError, KeyError, IndexError, TypeError) as exc:
        # A damaged footer surfaces as any of these (even UnicodeDecodeError from column paths).
        raise CorruptCheckpointError(f"checkpoint file {name} is not a readable Parquet file: {exc}") from None


def _struct_to_table(table: pa.Table, kind: str, schema: pa.Schema) -> pa.Table:
    """The non-null rows of one action column (``add`` or ``remove``) as a table of ``schema``."""
    column = table.column(kind)
    column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if column.null_count:
        column = column.filter(column.is_valid())
    if len(column) and column.type.get_field_index("path") >= 0 and column.field("path").null_count:
        column = column.filter(pc.is_valid(column.field("path")))
    return table_from_struct(column, schema)


@dataclass
class _CheckpointState:
    adds: list[pa.Table] = field(default_factory=list)
    removes: list[pa.Table] = field(default_factory=list)
    small: dict[str, list[Any]] = field(default_factory=dict)

    def take(self, parsed: dict[str, Any]) -> None:
        if "add" in parsed:
            self.adds.append(_struct_to_table(parsed["add"], "add", ADD_SCHEMA))
        if "remove" in parsed:
            self.removes.append(_struct_to_table(parsed["remove"], "remove", REMOVE_SCHEMA))
        for k, values in parsed.get("small", {}).items():
            self.small.setdefault(k, []).extend(values)


def _read_json_checkpoint(storage: Storage, f: FileInfo) -> dict[str, Any]:
    actions = parse_commit(storage.read_bytes(f.path), f.name)
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    out: dict[str, Any] = {"small": {}}
    for a in actions:
        ((kind, body),) = a.items()
        if kind in _CHECKPOINT_ACTIONS:
            out["small"].setdefault(kind, []).append(body)
    out["adds_table"] = table_from_struct(pa.array(adds, type=ADD_TYPE), ADD_SCHEMA)
    out["removes_table"] = table_from_struct(pa.array(removes, type=REMOVE_TYPE), REMOVE_SCHEMA)
    return out


def sidecar_path(storage: Storage, path: str) -> str:
    if "://" in path or path.startswith("/"):
        return storage.fs._strip_protocol(path) if not storage.is_local else path.removeprefix("file://")
    return storage.join("_delta_log", SIDECARS_DIR, path)


def read_checkpoint(storage: Storage, checkpoint: Checkpoint) -> _CheckpointState:
    state = _CheckpointState()
    for f in checkpoint.files:
        if f.name.endswith(".json"):
            parsed = _read_json_checkpoint(storage, f)
            state.adds.append(parsed["adds_table"])
            state.removes.append(parsed["removes_table"])
            for k, v in parsed["small"].items():
                state.small.setdefault(k, []).extend(v)
        else:
            state.take(_read_parquet_actions(storage, f.path, f.name))
    sidecars = state.small.get("sidecar", [])
    if sidecars:
        paths = [sidecar_path(storage, s["path"]) for s in sidecars]

        def load(p: str) -> dict[str, Any]:
            if not storage.exists(p):
                raise CorruptLogError(
                    f"checkpoint {checkpoint.files[0].name} references sidecar {p.rsplit('/', 1)[-1]} which is missing"
                )
            return _read_parquet_actions(storage, p, p.rsplit("/", 1)[-1])

        with ThreadPoolExecutor(max_workers=min(8, len(paths))) as pool:
            for parsed in pool.map(load, paths):
                state.take(parsed)
    return state


def _filter_superseded(table: pa.Table, replay: _Replay) -> pa.Table:
    """Drop checkpoint rows whose file key a newer JSON commit already decided."""
    if not replay.seen_paths or table.num_rows == 0:
        return table
    candidates = pc.is_in(table.column("path"), value_set=pa.array(list(replay.seen_paths), pa.string()))
    idx = pc.indices_nonzero(candidates).to_pylist()
    if not idx:
        return table
    sub = table.take(idx)
    paths = sub.column("path").to_pylist()
    dvs = sub.column("deletionVector").to_pylist()
    drop = {i for i, p, dv in zip(idx, paths, dvs) if file_key(p, dv) in replay.seen}
    if not drop:
        return table
    keep = pc.invert(pc.is_in(pa.array(range(table.num_rows)), value_set=pa.array(sorted(drop))))
    return table.filter(keep)


# --- putting it together --------------------------------------------------------------


def load_snapshot(storage: Storage, segment: LogSegment) -> Snapshot:
    """Reconstruct the snapshot of ``segment`` (checkpoint + commits)."""
    replay = _Replay()
    _replay_commits(storage, segment, replay)

    cp_state = read_checkpoint(storage, segment.checkpoint) if segment.checkpoint else None
    cp_name = segment.checkpoint.files[0].name if segment.checkpoint else None

    protocol_action = replay.protocol
    metadata_action = replay.metadata
    if cp_state is not None:
        if protocol_action is None:
            found = cp_state.small.get("protocol") or []
            protocol_action = found[0] if found else None
            if protocol_action is None:
                raise NoProtocolError(f"no protocol action in checkpoint {cp_name} or the commits after it")
        if metadata_action is None:
            found = cp_state.small.get("metaData") or []
            metadata_action = found[0] if found else None
            if metadata_action is None:
                raise NoMetadataError(f"no metaData action in checkpoint {cp_name} or the commits after it")
        for t in cp_state.small.get("txn", []):
            if t.get("appId") is not None and t["appId"] not in replay.txns:
                replay.txns[t["appId"]] = t
        for d in cp_state.small.get("domainMetadata", []):
            if d.get("domain") is not None and d["domain"] not in replay.domains:
                replay.domains[d["domain"]] = d
    if protocol_action is None:
        raise NoProtocolError(f"no protocol action in the log up to version {segment.version}")
    if metadata_action is None:
        raise NoMetadataError(f"no metaData action in the log up to version {segment.version}")

    try:
        protocol = Protocol.from_action(protocol_action)
    except (TypeError, ValueError) as exc:
        raise CorruptLogError(f"the protocol action is invalid: {exc}") from None
    check_readable(protocol)
    if not isinstance(metadata_action.get("id"), str) or not isinstance(metadata_action.get("schemaString"), str):
        raise CorruptLogError("the metaData action lacks a string 'id' or 'schemaString'")
    metadata = Metadata.from_action(metadata_action)

    try:
        json_adds = table_from_struct(pa.array(replay.adds, type=ADD_TYPE), ADD_SCHEMA)
        json_removes = table_from_struct(pa.array(replay.removes, type=REMOVE_TYPE), REMOVE_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise CorruptLogError(f"a file action in the commits has a field of the wrong type: {exc}") from None
    add_tables = [json_adds]
    remove_tables = [json_removes]
    if cp_state is not None:
        add_tables += [_filter_superseded(t, replay) for t in cp_state.adds]
        remove_tables += [_filter_superseded(t, replay) for t in cp_state.removes]
    files = pa.concat_tables(add_tables) if len(add_tables) > 1 else add_tables[0]
    tombstones = pa.concat_tables(remove_tables) if len(remove_tables) > 1 else remove_tables[0]

    domains = {k: v for k, v in replay.domains.items() if not v.get("removed")}
    return Snapshot(
        version=segment.version,
        protocol=protocol,
        metadata=metadata,
        files=files,
        tombstones=tombstones,
        app_transactions=replay.txns,
        domain_metadata=domains,
        segment=segment,
        storage=storage,
    )
