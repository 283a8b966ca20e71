"""Commit requests: how a Spark job (or any writer of Parquet files) hands work to a commit.

A request is a small JSON document naming data files already written into the
table folder, plus what to remove, the operation and, optionally, an
application transaction that makes the commit idempotent::

    {
      "operation": "WRITE",
      "operationParameters": {"mode": "Append"},
      "add": [{"path": "day=2024-05-01/part-0001.parquet"}],
      "remove": ["day=2024-05-01/part-0000.parquet"],
      "dataChange": true,
      "appId": "ingest.load_events", "txnVersion": 42,
      "tableId": "5f1c...", "readVersion": 17
    }

Paths are relative to the table root, exactly as the files are named on storage
(hive-style directories keep their ``%XX`` escapes); they are URI-encoded for
the log. Anything missing is filled from storage: ``size`` and
``modificationTime`` from the file's metadata, ``partitionValues`` from the
hive-style directories, ``stats`` from the Parquet footer. Everything is
validated before a byte is written; a bad request gets one clear error.

``tableId`` (the ``metaData.id`` of the table the request was made for) and ``readVersion``
(the table version its writer saw) make the request belong to one table
(:mod:`deltalog.write_checks.handoffs`): another id, or a version the table never reached, is
refused before anything is read. A request without ``tableId`` (written by an older writer)
is still accepted, because every file in it is checked against the table itself: an added
file must be in this table's folder, readable, of its schema and not yet live, a removed one
must be live; it is logged (INFO) as naming no table. ``deltalog.engines.spark.ingest`` writes both.
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlparse

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from deltalog._flags import require_bools
from deltalog.commit.result import CommitResult
from deltalog.commit.transaction import DEFAULT_MAX_ATTEMPTS, Transaction, partition_keys
from deltalog.errors import InvalidCommitRequestError, OperationRefusedError, StorageError
from deltalog.log.load import snapshot_at
from deltalog.log.snapshot import Snapshot
from deltalog.protocol.features import Operation
from deltalog.protocol.file_stats import stats_from_parquet_metadata, stats_json
from deltalog.protocol.isolation import ISOLATION_LEVELS
from deltalog.protocol.partition_values import PartitionValueError, canonical_partition_value, describe_type
from deltalog.protocol.schema import void_write_problem
from deltalog.protocol.write_gate import check_can_write
from deltalog.storage.filesystem import Storage
from deltalog.storage.table_ref import TableRef, table_storage
from deltalog.write_checks import clustering, identity
from deltalog.write_checks.claimed_stats import check_claimed_stats, parse_stats
from deltalog.write_checks.handoffs import check_made_at, check_table_id
from deltalog.write_checks.hidden_paths import HiddenRule
from deltalog.write_checks.iceberg_compat import check_iceberg_file, check_iceberg_schema, iceberg_compat_version
from deltalog.write_checks.row_rules import RowRuleChecker
from deltalog.write_checks.schema_enforcement import check_file_schema

__all__ = ["AddSpec", "CommitRequest", "commit_request", "load_commit_request", "prepare_actions"]

log = logging.getLogger(__name__)

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_REQUEST_KEYS = {
    "add",
    "remove",
    "operation",
    "operationParameters",
    "dataChange",
    "appId",
    "txnVersion",
    "userMetadata",
    "readPartitions",
    "readWholeTable",
    "isolationLevel",
    "tableId",
    "readVersion",
}
_ADD_KEYS = {"path", "size", "partitionValues", "modificationTime", "stats", "tags", "dataChange"}
#: Characters left as they are when a storage path becomes a log path (RFC 2396 path characters).
_LOG_PATH_SAFE = "/=:@&+$,;!*'()~"


# --- paths ------------------------------------------------------------------------------


def to_log_path(relative_path: str) -> str:
    """The ``path`` of an add/remove action for a file at ``relative_path`` on storage (URI-encoded)."""
    return quote(relative_path, safe=_LOG_PATH_SAFE)


def from_log_path(log_path: str) -> str:
    """The storage path (relative to the table, or absolute) of an add/remove ``path`` (URI-decoded)."""
    return unquote(log_path)


def partition_values_from_path(relative_path: str) -> dict[str, str | None]:
    """``{column: value}`` from hive-style directories (``k=v``, ``%XX`` unescaped, the hive null as None)."""
    out: dict[str, str | None] = {}
    for part in relative_path.split("/")[:-1]:
        if "=" not in part:
            continue
        key, value = part.split("=", 1)
        value = unquote(value)
        out[unquote(key)] = None if value == HIVE_NULL else value
    return out


# --- the request document -----------------------------------------------------------------


@dataclass
class AddSpec:
    """One file to add, as the request gave it (missing fields are None)."""

    path: str
    size: int | None = None
    partitionValues: dict[str, str | None] | None = None
    modificationTime: int | None = None
    stats: str | None = None
    tags: dict[str, str] | None = None
    dataChange: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class CommitRequest:
    """A parsed, shape-checked commit request (not yet checked against a table)."""

    add: list[AddSpec] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    operation: str = "WRITE"
    operationParameters: dict[str, Any] = field(default_factory=dict)
    dataChange: bool = True
    appId: str | None = None
    txnVersion: int | None = None
    userMetadata: str | None = None
    readPartitions: list[dict[str, Any]] = field(default_factory=list)
    readWholeTable: bool = False
    isolationLevel: str | None = None
    #: The ``metaData.id`` of the table the request was made for, and the version its writer saw.
    tableId: str | None = None
    readVersion: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["add"] = [a.to_dict() for a in self.add]
        return {k: v for k, v in d.items() if v is not None}


def _bad(message: str) -> InvalidCommitRequestError:
    return InvalidCommitRequestError(f"invalid commit request: {message}")


def _partition_value(column: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise _bad(f"partition value of {column!r} must be a string, number, boolean or null, got {value!r}")


def _parse_add(i: int, entry: Any) -> AddSpec:
    if isinstance(entry, str):
        entry = {"path": entry}
    if not isinstance(entry, dict):
        raise _bad(f"add[{i}] must be an object with a 'path' (or a path string)")
    unknown = sorted(set(entry) - _ADD_KEYS)
    if unknown:
        raise _bad(f"add[{i}] has unknown field(s) {', '.join(unknown)}")
    path = entry.get("path")
    if not isinstance(path, str) or not path.strip():
        raise _bad(f"add[{i}] needs a non-empty string 'path'")
    spec = AddSpec(path=path)
    for key in ("size", "modificationTime"):
        value = entry.get(key)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise _bad(f"add[{i}] ({path}): {key} must be a non-negative integer, got {value!r}")
            setattr(spec, key, value)
    pv = entry.get("partitionValues")
    if pv is not None:
        if not isinstance(pv, dict):
            raise _bad(f"add[{i}] ({path}): partitionValues must be an object")
        spec.partitionValues = {str(k): _partition_value(str(k), v) for k, v in pv.items()}
    stats = entry.get("stats")
    if stats is not None:
        if isinstance(stats, str):
            try:
                parsed = json.loads(stats)
            except ValueError:
                raise _bad(f"add[{i}] ({path}): stats is not valid JSON") from None
            if not isinstance(parsed, dict):
                raise _bad(f"add[{i}] ({path}): stats must be a JSON object")
            spec.stats = stats
        elif isinstance(stats, dict):
            spec.stats = json.dumps(stats, separators=(",", ":"))
        else:
            raise _bad(f"add[{i}] ({path}): stats must be an object or a JSON string")
    tags = entry.get("tags")
    if tags is not None:
        if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
            raise _bad(f"add[{i}] ({path}): tags must be an object of strings")
        spec.tags = {str(k): v for k, v in tags.items()}
    if entry.get("dataChange") is not None:
        if not isinstance(entry["dataChange"], bool):
            raise _bad(f"add[{i}] ({path}): dataChange must be true or false")
        spec.dataChange = entry["dataChange"]
    return spec


def _parse(doc: Any) -> CommitRequest:
    if not isinstance(doc, dict):
        raise _bad("the document must be a JSON object")
    unknown = sorted(set(doc) - _REQUEST_KEYS)
    if unknown:
        raise _bad(f"unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(_REQUEST_KEYS))})")
    req = CommitRequest()
    adds = doc.get("add") or []
    removes = doc.get("remove") or []
    if not isinstance(adds, list) or not isinstance(removes, list):
        raise _bad("'add' and 'remove' must be lists")
    req.add = [_parse_add(i, a) for i, a in enumerate(adds)]
    for i, r in enumerate(removes):
        path = r.get("path") if isinstance(r, dict) else r
        if not isinstance(path, str) or not path.strip():
            raise _bad(f"remove[{i}] must be a path string or an object with a 'path'")
        req.remove.append(path)
    if not req.add and not req.remove:
        raise _bad("it neither adds nor removes a file")
    op = doc.get("operation", "WRITE")
    if not isinstance(op, str) or not op.strip():
        raise _bad("'operation' must be a non-empty string")
    req.operation = op
    params = doc.get("operationParameters")
    if params is not None and not isinstance(params, dict):
        raise _bad("'operationParameters' must be an object")
    req.operationParameters = dict(params) if params else ({"mode": "Append"} if op == "WRITE" else {})
    if doc.get("dataChange") is not None:
        if not isinstance(doc["dataChange"], bool):
            raise _bad("'dataChange' must be true or false")
        req.dataChange = doc["dataChange"]
    app_id, txn_version = doc.get("appId"), doc.get("txnVersion")
    _check_app_txn(app_id, txn_version, "appId/txnVersion")
    req.appId, req.txnVersion = app_id, txn_version
    if doc.get("userMetadata") is not None:
        if not isinstance(doc["userMetadata"], str):
            raise _bad("'userMetadata' must be a string")
        req.userMetadata = doc["userMetadata"]
    read_parts = doc.get("readPartitions") or []
    if not isinstance(read_parts, list) or not all(isinstance(p, dict) for p in read_parts):
        raise _bad("'readPartitions' must be a list of {column: value} objects")
    req.readPartitions = read_parts
    if not isinstance(doc.get("readWholeTable", False), bool):
        raise _bad("'readWholeTable' must be true or false")
    req.readWholeTable = doc.get("readWholeTable", False)
    level = doc.get("isolationLevel")
    if level is not None and level not in ISOLATION_LEVELS:
        raise _bad(f"'isolationLevel' must be one of {', '.join(ISOLATION_LEVELS)}")
    req.isolationLevel = level
    table_id, read_version = doc.get("tableId"), doc.get("readVersion")
    if table_id is not None and (not isinstance(table_id, str) or not table_id.strip()):
        raise _bad(f"'tableId' must be the id of the table the request was made for (a string), got {table_id!r}")
    if read_version is not None and (
        isinstance(read_version, bool) or not isinstance(read_version, int) or read_version < 0
    ):
        raise _bad(
            f"'readVersion' must be the table version the writer read (a non-negative integer), got {read_version!r}"
        )
    req.tableId, req.readVersion = table_id, read_version
    return req


def _check_app_txn(app_id: Any, version: Any, what: str) -> None:
    if (app_id is None) != (version is None):
        raise _bad(f"{what}: give both an app id and a transaction version, or neither")
    if app_id is not None and (not isinstance(app_id, str) or not app_id):
        raise _bad(f"{what}: the app id must be a non-empty string")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 0):
        raise _bad(f"{what}: the transaction version must be a non-negative integer, got {version!r}")


def load_commit_request(
    path_or_dict: str | dict[str, Any] | CommitRequest, storage_options: dict[str, Any] | None = None
) -> CommitRequest:
    """Parse a request from a dict or a JSON file (local path or fsspec URI) and check its shape."""
    if isinstance(path_or_dict, CommitRequest):
        return path_or_dict
    if isinstance(path_or_dict, dict):
        return _parse(path_or_dict)
    if not isinstance(path_or_dict, str) or not path_or_dict:
        raise _bad("give a JSON file path or a dict")
    try:
        with fsspec.open(path_or_dict, "rb", **(storage_options or {})) as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise InvalidCommitRequestError(f"commit request file {path_or_dict} does not exist") from None
    except OSError as exc:
        raise InvalidCommitRequestError(f"cannot read commit request {path_or_dict}: {exc}") from None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InvalidCommitRequestError(f"commit request {path_or_dict} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidCommitRequestError(
            f"commit request {path_or_dict} is nested too deeply to be a commit request"
        ) from None
    return _parse(doc)


# --- checking a request against the table ---------------------------------------------


def _relative(storage: Storage, path: str, rule: HiddenRule) -> str:
    """The request path as a clean path relative to the table root; refuses anything outside it or hidden."""
    raw = path.strip()
    parsed = urlparse(raw)
    is_uri = len(parsed.scheme) > 1
    if is_uri or raw.startswith("/"):
        if storage.is_local:
            full = parsed.path if parsed.scheme == "file" else raw
        else:
            full = storage.fs._strip_protocol(raw) if is_uri else raw
        root = storage.root.rstrip("/") + "/"
        full = posixpath.normpath(full)
        if not full.startswith(root):
            raise _bad(f"{path!r} is outside the table at {storage.uri}")
        rel = full[len(root) :]
    else:
        rel = posixpath.normpath(raw)
    if rel in ("", ".") or rel.startswith("../") or rel == ".." or rel.startswith("/"):
        raise _bad(f"{path!r} is outside the table at {storage.uri}")
    hidden = rule.hidden_component(rel)
    if hidden is not None:
        raise _bad(
            f"{path!r} is in or is a hidden path ('{hidden}' starts with '_' or '.' and is not a partition "
            "directory of the table), where no data file may live"
        )
    return rel


def _canonical(column: str, value: str | None, typ: pa.DataType, where: str) -> str | None:
    """The partition value in its canonical form (PROTOCOL.md serialization); refuses one the type cannot hold."""
    try:
        return canonical_partition_value(value, typ)
    except PartitionValueError as exc:
        raise _bad(
            f"{where}: partition value {value!r} of column {column!r} is not a valid {describe_type(typ)}: {exc}"
        ) from None


@dataclass
class _TableView:
    """What the checks need from the snapshot, computed once."""

    partition_keys: list[str]
    partition_types: dict[str, pa.DataType]
    live: dict[str, int]  # storage path (URI-decoded) -> row of snapshot.files
    files: pa.Table
    hidden: HiddenRule

    def rows(self, indices: list[int]) -> list[dict[str, Any]]:
        return self.files.take(indices).to_pylist() if indices else []


def _view(snapshot: Snapshot) -> _TableView:
    md = snapshot.metadata
    keys = partition_keys(md)
    fields = {f.name: f for f in md.schema}
    types = {k: fields[c].type for k, c in zip(keys, md.partition_columns) if c in fields}
    # Decoded, so a file is recognised whichever writer encoded its path (unquote is
    # a no-op for the common path without '%').
    live = {from_log_path(p): i for i, p in enumerate(snapshot.files.column("path").to_pylist())}
    return _TableView(keys, types, live, snapshot.files, HiddenRule.for_metadata(md))


def _partition_values(view: _TableView, spec: AddSpec, rel: str) -> dict[str, str | None]:
    """The file's partition values (from the request or its hive directories), canonical for their types."""
    from_path = partition_values_from_path(rel)
    if spec.partitionValues is None:
        missing = [k for k in view.partition_keys if k not in from_path]
        if missing:
            raise _bad(
                f"{rel!r} gives no partitionValues and its path has no hive-style directory for "
                f"{', '.join(repr(m) for m in missing)}"
            )
        given = {k: from_path[k] for k in view.partition_keys}
    else:
        given = dict(spec.partitionValues)
    if set(given) != set(view.partition_keys):
        raise _bad(
            f"{rel!r} has partition values for {sorted(given)} but the table is partitioned by "
            f"{sorted(view.partition_keys)}"
        )
    pv = {k: _canonical(k, v, view.partition_types.get(k, pa.string()), rel) for k, v in given.items()}
    for k, v in from_path.items():
        if k in pv and spec.partitionValues is not None:
            in_path = _canonical(k, v, view.partition_types.get(k, pa.string()), rel)
            if in_path != pv[k]:
                raise _bad(f"{rel!r}: partitionValues says {k}={given[k]!r} but the path says {k}={v!r}")
    return pv


#: Bytes read from the end of a remote data file in the first request; most footers fit.
_FOOTER_GUESS = 64 * 1024


def _read_footer(storage: Storage, full: str, rel: str, size: int) -> pq.FileMetaData:
    """The file's Parquet footer (only the footer is read); a file that is not Parquet is bad input.

    On object stores the footer is fetched by range from the known size (one GET for most
    files, two for a footer over 64 KiB), not through a file object that would HEAD again.
    """
    not_parquet = "data file {!r} is not a readable Parquet file ({})"
    try:
        if storage.is_local:
            with storage.open_input(full) as fh:
                return pq.read_metadata(fh)
        if size < 12:
            raise _bad(not_parquet.format(rel, f"{size} bytes"))
        tail = storage.fs.cat_file(full, start=max(0, size - _FOOTER_GUESS), end=size)
        if tail[-4:] != b"PAR1":
            raise _bad(not_parquet.format(rel, "no Parquet magic bytes at its end"))
        needed = int.from_bytes(tail[-8:-4], "little") + 8
        if needed > size:
            raise _bad(not_parquet.format(rel, "its footer length exceeds the file"))
        if needed > len(tail):
            tail = storage.fs.cat_file(full, start=size - needed, end=size)
        return pq.read_metadata(pa.BufferReader(tail[-needed:]))
    except InvalidCommitRequestError:
        raise
    except FileNotFoundError:
        raise _bad(f"data file {rel!r} disappeared while its footer was read") from None
    except OSError as exc:
        if exc.errno is not None and not storage.is_local:
            raise StorageError(f"cannot read the footer of data file {rel!r} ({exc}); nothing committed") from None
        raise _bad(not_parquet.format(rel, exc)) from None
    except (pa.ArrowException, ValueError) as exc:
        raise _bad(not_parquet.format(rel, exc)) from None


def _fill_add(
    storage: Storage, snapshot: Snapshot, view: _TableView, spec: AddSpec, rel: str, data_change: bool
) -> dict[str, Any]:
    full = storage.join(*rel.split("/"))
    if not storage.is_local:
        # The writer created the file after this process may have listed its folder;
        # fsspec would answer from that cached listing.
        storage.fs.invalidate_cache(posixpath.dirname(full))
    try:
        info = storage.info(full)
    except FileNotFoundError:
        raise _bad(f"data file {rel!r} does not exist in the table folder") from None
    if spec.size is not None and spec.size != info.size:
        raise _bad(f"data file {rel!r} has {info.size} bytes on storage but the request says {spec.size}")
    pv = _partition_values(view, spec, rel)
    # The footer is read even when the request carries stats: the file must be
    # Parquet, fit the schema, and the stats must be true of it.
    footer = _read_footer(storage, full, rel, info.size)
    md = snapshot.metadata

    def read_columns(names: list[str]) -> pa.Table:
        with storage.open_input(full) as fh:
            # Not pq.read_table: its dataset scan of a Python file object can abort the process at exit.
            return pq.ParquetFile(fh).read(columns=names)

    check_file_schema(footer, md, snapshot.protocol, rel, pv, read_columns)
    if spec.stats is not None:
        check_claimed_stats(parse_stats(spec.stats), footer, md, rel)
        stats = spec.stats
    else:
        stats = stats_json(
            stats_from_parquet_metadata(footer, md.schema, md.partition_columns, configuration=md.configuration)
        )
    action: dict[str, Any] = {
        "path": to_log_path(rel),
        "partitionValues": pv,
        "size": info.size,
        "modificationTime": spec.modificationTime if spec.modificationTime is not None else info.modification_time,
        "dataChange": data_change if spec.dataChange is None else spec.dataChange,
        "stats": stats,
    }
    if spec.tags:
        action["tags"] = spec.tags
    if iceberg_compat_version(md.configuration):
        check_iceberg_file(rel, footer.schema.to_arrow_schema(), md, stats)
    return action


def _remove_action(row: dict[str, Any], data_change: bool, now: int) -> dict[str, Any]:
    action: dict[str, Any] = {
        "path": row["path"],
        "deletionTimestamp": now,
        "dataChange": data_change,
        "extendedFileMetadata": True,
        "partitionValues": dict(row["partitionValues"] or []),
        "size": row["size"],
    }
    if row.get("tags"):
        action["tags"] = dict(row["tags"])
    if row.get("deletionVector") is not None:
        # The remove must name the same logical file (path + DV) as the live add.
        action["deletionVector"] = {k: v for k, v in row["deletionVector"].items() if v is not None}
    for key in ("baseRowId", "defaultRowCommitVersion"):
        if row.get(key) is not None:
            action[key] = row[key]
    return action


def _no_duplicates(paths: list[str], where: str) -> None:
    seen: set[str] = set()
    for p in paths:
        if p in seen:
            raise _bad(f"{p!r} is listed twice under {where!r}")
        seen.add(p)


def prepare_actions(
    storage: Storage, snapshot: Snapshot, request: CommitRequest
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Validate ``request`` against the table and build its add and remove actions (nothing is written)."""
    md = snapshot.metadata
    check_iceberg_schema(md.schema_string, md.partition_columns, iceberg_compat_version(md.configuration))
    if request.add:
        void = void_write_problem(json.loads(md.schema_string))
        if void:
            raise OperationRefusedError(
                f"refusing to add data files: {void}, and no data file can be written for such a schema (PROTOCOL.md "
                "'Void Type'); change the column's type first"
            )
    view = _view(snapshot)
    rels = [_relative(storage, a.path, view.hidden) for a in request.add]
    _no_duplicates(rels, "add")
    for rel in rels:  # a link inside the table may lead out of it; vacuum would then delete outside the root
        if storage.real_relative(rel) is None:
            raise _bad(f"{rel!r} leaves the table at {storage.uri} through a symbolic link; add files inside the root")
    for rel in rels:
        if rel in view.live:
            raise _bad(f"{rel!r} is already in the table (version {snapshot.version}); it cannot be added again")
    remove_rels = [_relative(storage, p, view.hidden) for p in request.remove]
    _no_duplicates(remove_rels, "remove")
    both = sorted(set(rels) & set(remove_rels))
    if both:
        raise _bad(f"{both[0]!r} is both added and removed")
    now = int(time.time() * 1000)
    for rel in remove_rels:
        if rel not in view.live:
            raise _bad(f"cannot remove {rel!r}: it is not a live file of the table at version {snapshot.version}")
    removes = [_remove_action(row, request.dataChange, now) for row in view.rows([view.live[r] for r in remove_rels])]

    def fill(pair: tuple[AddSpec, str]) -> dict[str, Any]:
        return _fill_add(storage, snapshot, view, pair[0], pair[1], request.dataChange)

    pairs = list(zip(request.add, rels))
    if len(pairs) < 4:
        adds = [fill(p) for p in pairs]
    else:
        # Every file's footer is read; many small reads overlap well (remote latency, local syscalls).
        workers = min(8 if storage.is_local else 16, len(pairs))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            adds = list(pool.map(fill, pairs))
    _check_row_rules(storage, snapshot, adds)
    return adds, removes


def _check_row_rules(storage: Storage, snapshot: Snapshot, adds: list[dict[str, Any]]) -> None:
    """Every new row keeps the table's CHECK constraints, invariants, generated columns and defaults (DuckDB)."""
    checker = RowRuleChecker(
        snapshot.metadata, defaults="allowColumnDefaults" in snapshot.protocol.effective_writer_features()
    )
    if not adds or not checker.active:
        return
    for a in adds:
        rel = from_log_path(a["path"])
        checker.check_file(
            rel,
            dict(a.get("partitionValues") or {}),
            lambda r: storage.open_input(storage.join(*r.split("/"))),
        )


def _metrics(adds: list[dict[str, Any]], removes: list[dict[str, Any]]) -> dict[str, Any]:
    rows = 0
    rows_known = True
    for a in adds:
        try:
            rows += int(json.loads(a["stats"])["numRecords"])
        except (KeyError, TypeError, ValueError):
            rows_known = False
    out: dict[str, Any] = {
        "numFiles": len(adds),
        "numOutputBytes": sum(a["size"] for a in adds),
        "numAddedFiles": len(adds),
        "numRemovedFiles": len(removes),
        "numRemovedBytes": sum(r.get("size") or 0 for r in removes),
    }
    if rows_known:
        out["numOutputRows"] = rows
    return out


def _check_owner(storage: Storage, snapshot: Snapshot, req: CommitRequest) -> None:
    """The request is this table's (its ``tableId`` and ``readVersion``), checked before anything else, even
    before an app transaction already done makes it a no-op: a request for another table is never silently done."""
    if req.tableId is not None:
        check_table_id("the commit request", "tableId", req.tableId, snapshot.metadata.id, storage.uri)
    else:
        log.info(
            "the commit request names no table ('tableId'); accepted because each of its files is checked against "
            "%s (writers should add the table id: deltalog.engines.spark.ingest does)",
            storage.uri,
        )
    if req.readVersion is not None:
        check_made_at("the commit request", "readVersion", req.readVersion, snapshot.version, storage.uri)


def commit_request(
    table: TableRef,
    request: str | dict[str, Any] | CommitRequest,
    *,
    app_id: str | None = None,
    txn_version: int | None = None,
    storage_options: dict[str, Any] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    run_hooks: bool = True,
) -> CommitResult:
    """Turn a commit request into one Delta commit (or a no-op if its app transaction already landed).

    ``app_id``/``txn_version`` override the request's ``appId``/``txnVersion``
    (giving different ones in both places is an error).
    """
    require_bools(run_hooks=run_hooks)
    req = load_commit_request(request, storage_options)
    _check_app_txn(app_id, txn_version, "app_id/txn_version")
    if app_id is not None:
        if req.appId is not None and (req.appId, req.txnVersion) != (app_id, txn_version):
            raise _bad(
                f"the request names app transaction {req.appId!r}/{req.txnVersion} but the caller gave "
                f"{app_id!r}/{txn_version}"
            )
        req.appId, req.txnVersion = app_id, txn_version
    storage = table_storage(table, storage_options)
    snapshot = snapshot_at(storage)
    check_can_write(
        storage,
        snapshot.protocol,
        f"commit {req.operation}",
        Operation.COMMIT_REQUEST,
        snapshot.metadata.configuration,
        commits=True,
        schema_string=snapshot.metadata.schema_string,
        partition_columns=snapshot.metadata.partition_columns,
    )
    _check_owner(storage, snapshot, req)
    txn = Transaction(
        storage,
        snapshot,
        operation=req.operation,
        operation_parameters=req.operationParameters,
        isolation_level=req.isolationLevel,
        user_metadata=req.userMetadata,
        max_attempts=max_attempts,
        run_hooks=run_hooks,
        feature_operation=Operation.COMMIT_REQUEST,
    )
    if req.appId is not None:
        assert req.txnVersion is not None
        txn.set_app_transaction(req.appId, req.txnVersion)
        done = snapshot.app_transaction_version(req.appId)
        if done is not None and done >= req.txnVersion:
            # Checked before the files: a retried request must be a no-op even if its
            # files were cleaned up since the first attempt landed.
            return txn.commit()
    adds, removes = prepare_actions(storage, snapshot, req)
    advanced = identity.check_and_advance(
        snapshot.metadata,
        [from_log_path(a["path"]) for a in adds],
        lambda rel: storage.open_input(storage.join(*rel.split("/"))),
    )
    if advanced is not None:
        # The identity columns' high-water marks move past the new values in the same commit.
        txn.update_metadata(advanced)
    if clustering.is_clustered(snapshot.protocol):
        clustering.check_clustering_stats(adds, clustering.clustering_columns(snapshot.domain_metadata))
    txn.add(adds)
    txn.remove(removes)
    for predicate in req.readPartitions:
        txn.read_partitions(predicate)
    if req.readWholeTable:
        txn.read_table()
    log.info("committing %s: %d file(s) added, %d removed", req.operation, len(adds), len(removes))
    return txn.commit(_metrics(adds, removes))
