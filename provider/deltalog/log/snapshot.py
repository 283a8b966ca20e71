"""Snapshot reconstruction: one consistent table state from a log segment.

The newest action per file key wins. The JSON commits' add/remove lines are parsed
in one ``pyarrow.json`` call and reconciled with hash kernels (``arrow_replay``);
every other line is parsed too, or (commitInfo, which replay does not need) checked
in one vectorised pass against the line rule of ``commit_lines``: no line is ever
skipped unparsed. A per-line replay, newest first, takes over whenever the Arrow
reading could differ, and names the file and line of a corrupt action. The
checkpoint (already reconciled by its writer) is then streamed in batches, each
filtered with one vectorised ``is_in`` against the keys the commits touched. File
actions stay in Arrow end to end.
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog._arrow_utils import column_sum, table_from_struct
from deltalog.errors import (
    CorruptCheckpointError,
    CorruptLogError,
    DeltaLogError,
    NoMetadataError,
    NoProtocolError,
)
from deltalog.log.action_checks import (
    check_action,
    check_file_action,
    check_file_table,
    check_protocol,
    check_sidecar,
    check_table_metadata,
)
from deltalog.log.actions import (
    ADD_SCHEMA,
    ADD_TYPE,
    ALL_FILE_COLUMNS,
    REMOVE_SCHEMA,
    REMOVE_TYPE,
    FileColumns,
    Metadata,
    file_key,
)
from deltalog.log.commit_lines import is_blank, lines_pass, parse_action, parse_commit
from deltalog.log.listing import SIDECARS_DIR, Checkpoint, LogSegment
from deltalog.log.replay import (
    FILE_LINE_PREFIXES,
    empty_table,
    file_keys,
    has_absolute_keys,
    newest_per_key,
    parse_file_lines,
    string_array,
    take_newest_first,
)
from deltalog.protocol.table_protocol import Protocol, check_readable
from deltalog.storage.filesystem import FileInfo, Storage

__all__ = ["Snapshot", "SnapshotHead", "load_snapshot", "load_snapshot_head", "read_commit_files"]


@dataclass(frozen=True)
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
    #: The add/remove fields ``files`` and ``tombstones`` hold (all of them unless a reader asked for fewer).
    columns: FileColumns = field(default=ALL_FILE_COLUMNS, repr=False)
    #: What a reader should know about this state (a catalog-managed table read without its catalog).
    warnings: tuple[str, ...] = ()

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
        return column_sum(self.files, "size")

    def app_transaction_version(self, app_id: str) -> int | None:
        txn = self.app_transactions.get(app_id)
        return None if txn is None else int(txn["version"])

    def file_paths(self) -> list[str]:
        return self.files.column("path").to_pylist()

    def summary_line(self) -> str:
        """One line for logs and the CLI."""
        return f"{self.storage.uri} at version {self.version}: {self.num_files} files, {self.size_in_bytes} bytes"

    def to_dict(self, *, include_files: bool = True) -> dict[str, Any]:
        """The ``deltalog snapshot --json`` contract of docs/design.md."""
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
            "num_files": self.num_files,
            "size_in_bytes": self.size_in_bytes,
            "app_transactions": {k: v.get("version") for k, v in self.app_transactions.items()},
            "warnings": list(self.warnings),
        }
        if include_files:
            paths = self.files.column("path").to_pylist()
            names = self.files.schema.names
            sizes = self.files.column("size").to_pylist() if "size" in names else [None] * len(paths)
            if "partitionValues" in names:
                pvs = _maps_as_dicts(self.files.column("partitionValues"))
                out["files"] = [{"path": p, "size": s, "partitionValues": pv} for p, s, pv in zip(paths, sizes, pvs)]
            else:  # a projection without them (see ``columns``)
                out["files"] = [{"path": p, "size": s} for p, s in zip(paths, sizes)]
        return out


def _maps_as_dicts(column: pa.ChunkedArray) -> list[dict[str, str | None]]:
    """A map<string,string> column as one dict per row ({} for null), from its flat keys and values.

    About twice as fast as ``to_pylist()`` plus ``dict()`` per row (which builds a list
    of tuples first) and ten times faster than ``maps_as_pydicts``; it matters for the
    ``snapshot --json`` output of hundreds of thousands of files.
    """
    out: list[dict[str, str | None]] = []
    for chunk in column.chunks:
        offsets = chunk.offsets.to_pylist()
        keys = chunk.keys.to_pylist()
        items = chunk.items.to_pylist()
        valid = chunk.is_valid().to_pylist() if chunk.null_count else None
        for i in range(len(chunk)):
            start, end = offsets[i], offsets[i + 1]
            if start == end or (valid is not None and not valid[i]):
                out.append({})
            else:
                out.append(dict(zip(keys[start:end], items[start:end])))
    return out


# --- JSON commits ---------------------------------------------------------------------


def read_commit_files(storage: Storage, files: list[FileInfo]) -> list[bytes]:
    """Contents of the commit files, in order; concurrent for remote stores."""
    if storage.is_local:
        return [_read_local(f.path) for f in files]
    if not files:
        return []
    if storage.protocol in ("s3", "s3a") and len(files) > 1:
        return storage.read_many([f.path for f in files])
    with ThreadPoolExecutor(max_workers=min(32, len(files))) as pool:
        return list(pool.map(lambda f: storage.read_bytes(f.path), files))


def _read_local(path: str) -> bytes:
    """A whole local file through bare ``os.read`` calls.

    A quarter of the cost of ``open().read()`` (no buffered file object per file),
    which matters for logs of 10,000 small commit files.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _superseded(state: Any, kind: str, action: dict[str, Any]) -> bool:
    """Whether a newer action replaced ``action`` for the version read (``state``: what replay kept, newest first).

    A protocol or metaData is replaced by any newer one, a txn by a newer one of its
    appId, a domainMetadata by a newer one of its domain. Delta Spark and deltalake read
    the latest version of a table whose first metaData is a placeholder (a null
    ``schemaString``) replaced in the next commit; so does deltalog: only the versions an
    invalid action governs are unreadable, never the table.
    """
    if kind == "metaData":
        return state.metadata is not None
    if kind == "protocol":
        return state.protocol is not None
    if kind == "txn":
        app = action.get("appId")
        return isinstance(app, str) and app in state.txns
    if kind == "domainMetadata":
        domain = action.get("domain")
        return isinstance(domain, str) and domain in state.domains
    return False


@dataclass
class _Replay:
    """Accumulates reconciled state while commits are replayed newest first."""

    seen: set[str] = field(default_factory=set)
    adds: list[dict[str, Any]] = field(default_factory=list)
    removes: list[dict[str, Any]] = field(default_factory=list)
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    txns: dict[str, dict[str, Any]] = field(default_factory=dict)
    domains: dict[str, dict[str, Any]] = field(default_factory=dict)
    protocol_where: str = ""
    metadata_where: str = ""
    #: Keep the first invalid non-file action here (True) rather than raise it at once.
    defer: bool = False
    action_error: DeltaLogError | None = None

    def file_action(self, kind: str, action: Any, where: str) -> None:
        if not isinstance(action, dict) or not isinstance(action.get("path"), str):
            raise CorruptLogError(f"{where}: {kind} action without a string 'path'")
        try:
            check_file_action(kind, action, where)  # every one, superseded or not, as the Arrow path does
        except CorruptLogError as exc:
            if not self.defer:
                raise
            if self.action_error is None:  # raised after the protocol checks, like the other actions'
                self.action_error = exc
            return
        path = action["path"]
        dv = action.get("deletionVector")
        key = file_key(path, dv)
        if key in self.seen:
            return
        self.seen.add(key)
        if kind == "add":
            if not isinstance(action.get("size"), int):
                raise CorruptLogError(f"{where}: add action for {path!r} has no integer 'size'")
            self.adds.append(action)
        else:
            self.removes.append(action)

    def other_action(self, kind: str, action: Any, where: str) -> None:
        """Record a non-file action, checked first (action_checks): the newest metaData in full.

        The Arrow path (``defer=False``) raises, then takes the per-line path, which knows
        the line; that one keeps the first problem in ``action_error`` so that load_snapshot
        reports it after the protocol checks (a table of an unknown feature is refused as such).
        """
        if kind == "commitInfo":
            return
        if not isinstance(action, dict):
            raise CorruptLogError(f"{where}: {kind} action is not an object")
        if _superseded(self, kind, action):
            return  # it governs only older versions: they cannot be read if it is invalid, this one can
        try:
            if kind == "metaData" and self.metadata is None:
                check_table_metadata(action, where)
            else:
                check_action(kind, action, where)
        except DeltaLogError as exc:
            if not self.defer:
                raise
            if self.action_error is None:
                self.action_error = exc
            if kind not in ("metaData", "protocol"):  # the newest of those is checked again in load_snapshot
                return
        if kind == "metaData":
            if self.metadata is None:
                self.metadata = action
                self.metadata_where = where
        elif kind == "protocol":
            if self.protocol is None:
                self.protocol = action
                self.protocol_where = where
        elif kind == "txn":
            app = action.get("appId")
            if app is not None and app not in self.txns:
                self.txns[app] = action
        elif kind == "domainMetadata":
            domain = action.get("domain")
            if domain is not None and domain not in self.domains:
                self.domains[domain] = action


@dataclass
class _CommitState:
    """What the JSON commits of a segment decided, reconciled newest first.

    ``adds`` and ``removes`` hold the newest action per file key (newest first);
    ``keys`` every distinct file key the commits touched, so older checkpoint rows
    with those keys can be dropped.
    """

    adds: pa.Table
    removes: pa.Table
    keys: pa.Array
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    txns: dict[str, dict[str, Any]] = field(default_factory=dict)
    domains: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Where the newest protocol / metaData action is ("<commit>: line N"; empty on the Arrow path).
    protocol_where: str = ""
    metadata_where: str = ""
    #: A file action of the wrong type; raised after the protocol checks, whose errors come first.
    error: CorruptLogError | None = None
    #: The first invalid non-file action (per-line path); likewise raised after the protocol checks.
    action_error: DeltaLogError | None = None


_INFO_PREFIX = b'{"commitInfo":'


def _replay_commits(storage: Storage, segment: LogSegment) -> _CommitState:
    """Replay the segment's JSON commits: the Arrow path, or the exact per-line path when it declines."""
    state = _replay_commits_arrow(read_commit_files(storage, segment.commits))
    if state is None:  # rare (a corrupt or unusual log): read again rather than hold every commit twice
        state = _replay_commits_python(segment.commits, read_commit_files(storage, segment.commits))
    return state


def _replay_commits_arrow(contents: list[bytes]) -> _CommitState | None:
    """File actions through pyarrow.json and hash kernels; the rare other actions in Python.

    Returns None when the result might differ from the per-line path (a corrupt or
    unusually spelled line), which then runs instead and names the exact problem.
    Consumes ``contents``: each commit's bytes are released once split into lines.
    """
    # The add/remove lines go straight into one buffer, commit by commit, so neither the
    # commits nor hundreds of thousands of line objects are held at once.
    buffer = bytearray()
    count = longest = 0
    others: list[bytes] = []
    contents.reverse()
    while contents:
        lines = contents.pop().split(b"\n")
        file_lines = [line for line in lines if line.startswith(FILE_LINE_PREFIXES)]
        if file_lines:
            count += len(file_lines)
            longest = max(longest, max(map(len, file_lines)))
            buffer += b"\n".join(file_lines)
            buffer += b"\n"
        others += [line for line in lines if line and not line.startswith(FILE_LINE_PREFIXES)]
    # Replay does not need commitInfo, but a torn one, or one merged with another action,
    # means the commit is not what it seems: every such line is checked, in one pass.
    # (Picked out of the few non-file lines: a third pass over every line cost 15 ms per
    # 10,000 commits, four times the check itself.)
    infos = [line for line in others if line.startswith(_INFO_PREFIX)]
    if not lines_pass(infos, _INFO_PREFIX):
        return None
    others = [line for line in others if not line.startswith(_INFO_PREFIX)]
    del infos
    replay = _Replay()
    try:
        for line in reversed(others):  # newest first, like the per-line path
            if is_blank(line):
                continue
            ((kind, body),) = parse_action(line, "", 0).items()
            if kind in ("add", "remove"):
                return None  # a file action spelled differently: its order among the others matters
            replay.other_action(kind, body, "")
    except DeltaLogError:  # a corrupt line or an invalid action: the per-line path names where
        return None
    del others
    parsed = parse_file_lines(buffer, count, longest)
    del buffer
    if parsed is None:
        return None
    add, remove = parsed
    state = _CommitState(
        empty_table(ADD_SCHEMA),
        empty_table(REMOVE_SCHEMA),
        pa.nulls(0, pa.string()),
        protocol=replay.protocol,
        metadata=replay.metadata,
        txns=replay.txns,
        domains=replay.domains,
        protocol_where=replay.protocol_where,
        metadata_where=replay.metadata_where,
        action_error=replay.action_error,
    )
    if len(add) == 0:
        return state
    keys = pc.coalesce(
        file_keys(pc.struct_field(add, "path"), pc.struct_field(add, "deletionVector")),
        file_keys(pc.struct_field(remove, "path"), pc.struct_field(remove, "deletionVector")),
    )
    winners, state.keys = newest_per_key(keys)
    adds, removes = take_newest_first(add, remove, winners)
    del add, remove, keys
    state.adds = _tables_from_structs(adds, ADD_SCHEMA)
    state.removes = _tables_from_structs(removes, REMOVE_SCHEMA)
    return state


def _tables_from_structs(arrays: list[pa.StructArray], schema: pa.Schema) -> pa.Table:
    tables = [table_from_struct(a, schema) for a in arrays if len(a)]
    if not tables:
        return empty_table(schema)
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _replay_commits_python(files: list[FileInfo], contents: list[bytes]) -> _CommitState:
    """The exact path: every line parsed by the line rule, newest first; names the file and line of any problem."""
    replay = _Replay(defer=True)
    for f, data in zip(reversed(files), reversed(contents)):
        name = f.name
        lines = data.split(b"\n")
        for idx in range(len(lines) - 1, -1, -1):
            line = lines[idx]
            if not line or is_blank(line):
                continue
            ((kind, body),) = parse_action(line, name, idx + 1).items()
            where = f"{name}: line {idx + 1}"
            if kind == "add" or kind == "remove":
                replay.file_action(kind, body, where)
            else:
                replay.other_action(kind, body, where)
    state = _CommitState(
        empty_table(ADD_SCHEMA),
        empty_table(REMOVE_SCHEMA),
        string_array(list(replay.seen)),
        protocol=replay.protocol,
        metadata=replay.metadata,
        txns=replay.txns,
        domains=replay.domains,
        protocol_where=replay.protocol_where,
        metadata_where=replay.metadata_where,
        action_error=replay.action_error,
    )
    try:
        state.adds = table_from_struct(pa.array(replay.adds, type=ADD_TYPE), ADD_SCHEMA)
        state.removes = table_from_struct(pa.array(replay.removes, type=REMOVE_TYPE), REMOVE_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        state.error = CorruptLogError(f"a file action in the commits has a field of the wrong type: {exc}")
    return state


# --- checkpoints ----------------------------------------------------------------------

_CHECKPOINT_ACTIONS = ("metaData", "protocol", "txn", "domainMetadata", "sidecar", "checkpointMetadata")
#: Rows per batch when streaming a checkpoint: superseded rows are dropped batch by
#: batch, so a 500,000-file checkpoint is never held twice.
_CHECKPOINT_BATCH_ROWS = 16_384
_READ_BUFFER = 1 << 20


@dataclass(frozen=True)
class _Superseded:
    """The file keys newer JSON commits decided, and whether any is absolute (then rows are compared canonical)."""

    keys: pa.Array
    absolute: bool

    @classmethod
    def of(cls, keys: pa.Array | None) -> _Superseded | None:
        if keys is None or len(keys) == 0:
            return None
        return cls(keys, has_absolute_keys(keys))


def _filter_superseded(table: pa.Table, superseded_keys: _Superseded | None) -> pa.Table:
    """Drop checkpoint rows whose file key a newer JSON commit already decided."""
    if superseded_keys is None or table.num_rows == 0:
        return table
    keys = superseded_keys.keys
    # Relative paths (nearly all) are canonical as written: rows are canonicalised only when an
    # absolute key could match one of theirs.
    row_keys = file_keys(table.column("path"), table.column("deletionVector"), canonical=superseded_keys.absolute)
    superseded = pc.is_in(row_keys, value_set=keys)
    if not pc.any(superseded).as_py():
        return table
    return table.filter(pc.invert(superseded))


def _read_parquet_actions(
    storage: Storage,
    path: str,
    name: str,
    exclude_keys: _Superseded | None,
    columns: FileColumns = ALL_FILE_COLUMNS,
    file_actions: bool = True,
) -> _CheckpointState:
    """Stream the action columns deltalog needs from one checkpoint/sidecar Parquet file.

    Only the known add/remove fields of ``columns`` are read (never ``stats_parsed`` or
    ``partitionValues_parsed``), and rows superseded by newer commits are dropped
    batch by batch. ``file_actions=False`` reads the other actions only.
    """
    state = _CheckpointState()
    try:
        # Local files go to Arrow's native reader (no Python file object, no GIL per read)
        # and are streamed through a read buffer: pre-buffering would hold every column
        # chunk whole (on a 500,000-file checkpoint, as much again as the result). Remote
        # files keep pre-buffering, which coalesces the ranged reads.
        with contextlib.nullcontext(path) if storage.is_local else storage.open_input(path) as source:
            pf = pq.ParquetFile(source, buffer_size=_READ_BUFFER, pre_buffer=not storage.is_local)
            top = {f.name: f for f in pf.schema_arrow}
            read: list[str] = []
            kinds = []
            for kind, schema in (("add", columns.add), ("remove", columns.remove)) if file_actions else ():
                if kind not in top or not pa.types.is_struct(top[kind].type):
                    continue
                present = {top[kind].type.field(i).name for i in range(top[kind].type.num_fields)}
                wanted = [n for n in schema.names if n in present]
                if "path" not in wanted:
                    continue
                read += [f"{kind}.{n}" for n in wanted]
                kinds.append((kind, schema))
            small = [k for k in _CHECKPOINT_ACTIONS if k in top]
            read += small
            if not read:
                return state
            found: dict[str, list[pa.Table]] = {kind: [] for kind, _ in kinds}
            # Many newer file actions (a long log after the checkpoint) make ``is_in`` rebuild a
            # large hash set per batch: filter groups of batches at least 4x that set's size then.
            group_rows = 4 * len(exclude_keys.keys) if exclude_keys is not None else 0
            grouped = group_rows > _CHECKPOINT_BATCH_ROWS
            pending: dict[str, list[pa.Table]] = {kind: [] for kind, _ in kinds}

            def flush(kind: str) -> None:
                if pending[kind]:
                    part = _filter_superseded(pa.concat_tables(pending[kind]), exclude_keys)
                    pending[kind] = []
                    if part.num_rows:
                        found[kind].append(part)

            for batch in pf.iter_batches(batch_size=_CHECKPOINT_BATCH_ROWS, columns=read):
                table = pa.Table.from_batches([batch])
                for kind, schema in kinds:
                    part = _struct_to_table(table, kind, schema)
                    check_file_table(kind, part, f"checkpoint {name}", CorruptCheckpointError)
                    if not grouped:
                        part = _filter_superseded(part, exclude_keys)
                    part = _share_null_columns(part)
                    # Parquet readers do not check UTF-8; a damaged page would otherwise
                    # surface as a UnicodeDecodeError wherever a path is first read.
                    part.validate(full=True)
                    if not part.num_rows:
                        continue
                    if not grouped:
                        found[kind].append(part)
                        continue
                    pending[kind].append(part)
                    if sum(t.num_rows for t in pending[kind]) >= group_rows:
                        flush(kind)
                for k in small:
                    column = table.column(k)
                    if column.null_count < len(column):
                        state.small.setdefault(k, []).extend(column.filter(column.is_valid()).to_pylist())
            for kind, schema in kinds:
                flush(kind)
                tables = found[kind] or [empty_table(schema)]
                (state.adds if kind == "add" else state.removes).append(
                    pa.concat_tables(tables) if len(tables) > 1 else tables[0]
                )
            return state
    except FileNotFoundError:
        raise CorruptLogError(f"checkpoint file {name} disappeared while reading it") from None
    except (OSError, ValueError, pa.ArrowException) as exc:
        # A damaged footer or page can also surface as invalid UTF-8 in names or strings.
        raise CorruptCheckpointError(f"checkpoint file {name} is not a readable Parquet file: {exc}") from None


def _share_null_columns(table: pa.Table) -> pa.Table:
    """Point every all-null column at one shared null array instead of per-batch buffers.

    Checkpoints carry many columns that are null in every row (deletion vectors, tags,
    row tracking on most tables); holding their zeroed buffers batch by batch costs
    tens of MB on a 500,000-file table for no information.
    """
    n = table.num_rows
    if n == 0 or n > _CHECKPOINT_BATCH_ROWS:
        return table
    for i, column in enumerate(table.columns):
        if column.null_count == n:
            typ = column.type
            shared = _SHARED_NULLS.get(typ)
            if shared is None:
                shared = _SHARED_NULLS[typ] = pa.nulls(_CHECKPOINT_BATCH_ROWS, typ)
            table = table.set_column(i, table.schema.field(i), shared.slice(0, n))
    return table


_SHARED_NULLS: dict[pa.DataType, pa.Array] = {}


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
    #: Parquet files whose file actions were left for someone else to read (``file_actions=False``).
    deferred: list[FileInfo] = field(default_factory=list)

    def take(self, other: _CheckpointState) -> None:
        self.adds += other.adds
        self.removes += other.removes
        self.deferred += other.deferred
        for k, values in other.small.items():
            self.small.setdefault(k, []).extend(values)


def _read_json_checkpoint(
    storage: Storage, f: FileInfo, exclude_keys: _Superseded | None, columns: FileColumns = ALL_FILE_COLUMNS
) -> _CheckpointState:
    actions = parse_commit(storage.read_bytes(f.path), f.name)
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    state = _CheckpointState()
    for a in actions:
        ((kind, body),) = a.items()
        if kind in _CHECKPOINT_ACTIONS:
            state.small.setdefault(kind, []).append(body)
    try:
        add_table = table_from_struct(pa.array(adds, type=ADD_TYPE), columns.add)
        remove_table = table_from_struct(pa.array(removes, type=REMOVE_TYPE), columns.remove)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise CorruptCheckpointError(
            f"checkpoint file {f.name} has a file action with a field of the wrong type: {exc}"
        ) from None
    check_file_table("add", add_table, f"checkpoint {f.name}", CorruptCheckpointError)
    check_file_table("remove", remove_table, f"checkpoint {f.name}", CorruptCheckpointError)
    state.adds.append(_filter_superseded(add_table, exclude_keys))
    state.removes.append(_filter_superseded(remove_table, exclude_keys))
    return state


def sidecar_path(storage: Storage, path: str) -> str:
    if "://" in path or path.startswith("/"):
        return storage.fs._strip_protocol(path) if not storage.is_local else path.removeprefix("file://")
    return storage.join("_delta_log", SIDECARS_DIR, path)


def read_checkpoint(
    storage: Storage,
    checkpoint: Checkpoint,
    exclude_keys: pa.Array | None = None,
    columns: FileColumns = ALL_FILE_COLUMNS,
    parquet_file_actions: bool = True,
) -> _CheckpointState:
    """The actions of a complete checkpoint (all parts, all sidecars).

    ``exclude_keys``: file keys decided by newer commits; their rows are dropped while
    reading, so superseded rows never occupy memory. ``columns``: the add/remove fields read.
    ``parquet_file_actions=False``: the file actions of Parquet files (parts, sidecars) are
    not read; those files are listed in ``deferred`` (a JSON checkpoint is read whole).
    """
    state = _CheckpointState()
    superseded = _Superseded.of(exclude_keys)
    for f in checkpoint.files:
        if f.name.endswith(".json"):
            state.take(_read_json_checkpoint(storage, f, superseded, columns))
        else:
            state.take(_read_parquet_actions(storage, f.path, f.name, superseded, columns, parquet_file_actions))
            if not parquet_file_actions:
                state.deferred.append(f)
    sidecars = state.small.get("sidecar", [])
    if sidecars:
        for s in sidecars:
            check_sidecar(s, f"checkpoint {checkpoint.files[0].name}", CorruptCheckpointError)
        paths = [sidecar_path(storage, s["path"]) for s in sidecars]

        def load(p: str) -> _CheckpointState:
            if not storage.exists(p):
                raise CorruptLogError(
                    f"checkpoint {checkpoint.files[0].name} references sidecar {p.rsplit('/', 1)[-1]} which is missing"
                )
            if not parquet_file_actions:  # a sidecar holds file actions only
                return _CheckpointState(deferred=[storage.info(p)])
            return _read_parquet_actions(storage, p, p.rsplit("/", 1)[-1], superseded, columns)

        with ThreadPoolExecutor(max_workers=min(8, len(paths))) as pool:
            for parsed in pool.map(load, paths):
                state.take(parsed)
    return state


# --- putting it together --------------------------------------------------------------


def load_snapshot(storage: Storage, segment: LogSegment, columns: FileColumns = ALL_FILE_COLUMNS) -> Snapshot:
    """Reconstruct the snapshot of ``segment`` (checkpoint + commits).

    ``columns``: the add/remove fields the snapshot holds (a projection reads fewer
    checkpoint columns; every action is checked as in a full load).
    """
    return _load(storage, segment, columns, True).snapshot


@dataclass(frozen=True)
class SnapshotHead:
    """A version's state but for the file actions of its Parquet checkpoint files, which someone else reads.

    What a distributed reader (the Spark vacuum) needs from the driver: the version,
    protocol and metadata, checked as a snapshot load checks them; in ``snapshot.files`` /
    ``tombstones`` the newest file actions of the JSON commits after the checkpoint (and
    of a JSON checkpoint); ``decided_keys``, the file keys those commits decided (a
    checkpoint row with one of them is superseded); ``deferred``, the Parquet checkpoint
    files (parts, sidecars) whose add/remove rows were not read. ``snapshot`` is *not* the
    table's file list unless ``deferred`` is empty.
    """

    snapshot: Snapshot
    decided_keys: pa.Array
    deferred: list[FileInfo]


def load_snapshot_head(storage: Storage, segment: LogSegment, columns: FileColumns = ALL_FILE_COLUMNS) -> SnapshotHead:
    """:class:`SnapshotHead` of ``segment``: a snapshot load that leaves the Parquet checkpoint files' file actions unread."""
    return _load(storage, segment, columns, False)


def _load(storage: Storage, segment: LogSegment, columns: FileColumns, parquet_file_actions: bool) -> SnapshotHead:
    replay = _replay_commits(storage, segment)
    if not columns.is_full:  # the commits are parsed in full (line checks), then projected
        replay.adds = replay.adds.select(columns.add.names)
        replay.removes = replay.removes.select(columns.remove.names)

    cp_state = (
        read_checkpoint(storage, segment.checkpoint, replay.keys, columns, parquet_file_actions)
        if segment.checkpoint
        else None
    )
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
    if protocol_action is None:
        raise NoProtocolError(f"no protocol action in the log up to version {segment.version}")
    if metadata_action is None:
        raise NoMetadataError(f"no metaData action in the log up to version {segment.version}")

    # Every non-file action is checked here, once, so that every command refuses an invalid
    # one alike; a checkpoint's as CorruptCheckpointError (an older checkpoint may rebuild
    # the version). The protocol comes first: an unknown feature is refused as such.
    in_checkpoint = f"checkpoint {cp_name}"
    if replay.protocol is not None:
        check_protocol(protocol_action, replay.protocol_where)
    else:
        check_protocol(protocol_action, in_checkpoint, CorruptCheckpointError)
    protocol = Protocol.from_action(protocol_action)
    check_readable(protocol)
    if replay.action_error is not None:
        raise replay.action_error
    if cp_state is not None:
        for kind in ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata"):
            for action in cp_state.small.get(kind, []):
                if not (isinstance(action, dict) and _superseded(replay, kind, action)):
                    check_action(kind, action, in_checkpoint, CorruptCheckpointError)
        # Only checked actions are keyed by their appId / domain.
        for t in cp_state.small.get("txn", []):
            replay.txns.setdefault(t["appId"], t)
        for d in cp_state.small.get("domainMetadata", []):
            replay.domains.setdefault(d["domain"], d)
    if replay.metadata is None:  # the commits' newest metaData was checked in full during replay
        check_table_metadata(metadata_action, in_checkpoint, CorruptCheckpointError)
    metadata = Metadata.from_action(metadata_action)

    if replay.error is not None:
        raise replay.error
    add_tables = [replay.adds]
    remove_tables = [replay.removes]
    if cp_state is not None:
        add_tables += cp_state.adds
        remove_tables += cp_state.removes
    files = pa.concat_tables(add_tables) if len(add_tables) > 1 else add_tables[0]
    tombstones = pa.concat_tables(remove_tables) if len(remove_tables) > 1 else remove_tables[0]

    domains = {k: v for k, v in replay.domains.items() if not v.get("removed")}
    snapshot = Snapshot(
        version=segment.version,
        protocol=protocol,
        metadata=metadata,
        files=files,
        tombstones=tombstones,
        app_transactions=replay.txns,
        domain_metadata=domains,
        segment=segment,
        storage=storage,
        columns=columns,
    )
    return SnapshotHead(snapshot, replay.keys, cp_state.deferred if cp_state is not None else [])
