"""Delta's conflict rules, applied when another writer won the race for a version.

Each rule has its own exception so callers can react precisely (a compaction
re-plans only the bins whose inputs a concurrent delete took; an Airflow task
fails without retrying on a metadata change). Rules and their order follow
Delta Spark's ``ConflictChecker``: protocol, metadata, domain metadata, app
transaction ids, concurrent appends matching what we read, deletes of files we
read, deletes of files we delete. Commits whose file actions all have
``dataChange=false`` run at SnapshotIsolation, so concurrent blind appends never
conflict with them; under WriteSerializable a winning blind append never
conflicts either.

Before any rule, every winning commit is scanned for this transaction itself:
its own ``txnId`` (a write whose response was lost) or its app transaction
``(appId, version)`` already recorded by a concurrent attempt. Both mean the
work is done, whatever else happened in between.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from deltalog.commit.row_tracking import DOMAIN as ROW_TRACKING_DOMAIN
from deltalog.commit.row_tracking import parse_high_water_mark
from deltalog.errors import CommitFailedError, CorruptLogError, StorageError
from deltalog.log.action_checks import check_txn
from deltalog.log.actions import as_dict
from deltalog.log.commit_lines import parse_commit
from deltalog.log.listing import commit_name
from deltalog.log.snapshot import Snapshot
from deltalog.protocol.isolation import SERIALIZABLE, SNAPSHOT_ISOLATION
from deltalog.protocol.log_paths import canonical_path
from deltalog.storage.filesystem import Storage

__all__ = ["ConcurrentDeleteDeleteError", "ConcurrentDeleteReadError", "ReadPredicate", "check_conflicts", "read_fresh"]

#: A read predicate: partition column -> value (or a collection of values), or a
#: callable that gets a file's partitionValues and says whether the read covered it.
ReadPredicate = dict[str, Any] | Callable[[dict[str, Any]], bool]


class PendingCommit(Protocol):
    """What the conflict rules read of a transaction (``deltalog.commit.transaction.Transaction``
    has it): declared here so the transaction imports these rules and nothing imports it back."""

    @property
    def storage(self) -> Storage: ...
    @property
    def snapshot(self) -> Snapshot | None: ...
    @property
    def operation(self) -> str: ...
    @property
    def txn_id(self) -> str: ...
    @property
    def app_id(self) -> str | None: ...
    @property
    def app_version(self) -> int | None: ...
    @property
    def removes(self) -> list[dict[str, Any]]: ...
    @property
    def domain_updates(self) -> list[dict[str, Any]]: ...
    @property
    def read_whole_table(self) -> bool: ...
    @property
    def read_predicates(self) -> list[ReadPredicate]: ...
    @property
    def read_file_paths(self) -> set[str]: ...
    def effective_isolation_level(self) -> str: ...


class ConflictError(CommitFailedError):
    """A concurrent commit makes this transaction's result wrong; nothing was written."""

    def __init__(self, message: str, winning_version: int, paths: list[str] | None = None) -> None:
        super().__init__(message)
        self.winning_version = winning_version
        self.paths = paths or []


class ProtocolChangedError(ConflictError):
    """A concurrent commit changed the table protocol."""


class MetadataChangedError(ConflictError):
    """A concurrent commit changed the table metadata (schema, partitioning, properties)."""


class ConcurrentAppendError(ConflictError):
    """A concurrent commit added files matching what this transaction read."""

    retryable = True  # re-reading the table and redoing the work can succeed


class ConcurrentDeleteReadError(ConflictError):
    """A concurrent commit removed a file this transaction read."""

    retryable = True


class ConcurrentDeleteDeleteError(ConflictError):
    """A concurrent commit removed a file this transaction also removes."""

    retryable = True


class ConcurrentTransactionError(ConflictError):
    """A concurrent commit wrote the same application id at a lower version (the same app committing twice at once)."""

    retryable = True


class ConcurrentDomainMetadataError(ConflictError):
    """A concurrent commit changed the same metadata domain."""

    retryable = True


def _required_str(body: dict[str, Any], key: str, name: str, kind: str) -> str:
    """``body[key]`` of a winning commit's action; one the conflict rules match on cannot be missing."""
    value = body.get(key)
    if not isinstance(value, str):
        raise CorruptLogError(f"{name}: {kind} action has no string {key!r}")
    return value


@dataclass
class WinningCommit:
    """The parts of one winning commit the rules look at."""

    version: int
    info: dict[str, Any] = field(default_factory=dict)
    protocol: bool = False
    metadata: bool = False
    txns: dict[str, int] = field(default_factory=dict)
    domains: set[str] = field(default_factory=set)
    adds: list[tuple[str, dict[str, Any], bool]] = field(default_factory=list)  # path, partitionValues, dataChange
    removes: list[tuple[str, bool]] = field(default_factory=list)  # path, dataChange
    #: The row ID high-water mark this commit set (delta.rowTracking domain), if any.
    row_id_high_water_mark: int | None = None

    @property
    def where(self) -> str:
        op = self.info.get("operation")
        return f"commit {self.version}" + (f" ({op})" if op else "")

    @property
    def is_blind_append(self) -> bool:
        return bool(self.info.get("isBlindAppend"))

    @classmethod
    def parse(cls, version: int, data: bytes) -> WinningCommit:
        name = commit_name(version)
        out = cls(version)
        for action in parse_commit(data, name):
            ((kind, body),) = action.items()
            if not isinstance(body, dict):
                raise CorruptLogError(f"{name}: {kind} action is not an object")
            if kind == "commitInfo":
                out.info = body
            elif kind == "protocol":
                out.protocol = True
            elif kind == "metaData":
                out.metadata = True
            elif kind == "txn":
                check_txn(body, name)
                out.txns[body["appId"]] = body["version"]
            elif kind == "domainMetadata":
                out.domains.add(_required_str(body, "domain", name, kind))
                if body.get("domain") == ROW_TRACKING_DOMAIN and not body.get("removed"):
                    out.row_id_high_water_mark = parse_high_water_mark(body.get("configuration"))
            elif kind == "add":
                path = _required_str(body, "path", name, kind)
                out.adds.append((path, as_dict(body.get("partitionValues")), body.get("dataChange", True)))
            elif kind == "remove":
                out.removes.append((_required_str(body, "path", name, kind), body.get("dataChange", True)))
        return out


@dataclass
class ConflictCheck:
    """The outcome of checking the winners of a lost race (when no rule was violated)."""

    next_version: int
    winners: list[int] = field(default_factory=list)
    #: A winner that is this very transaction (same txnId): the commit landed.
    own_version: int | None = None
    #: A winner that recorded this transaction's appId at >= its version: nothing to do.
    app_txn_commit: int | None = None
    app_txn_recorded: int | None = None
    #: The newest winner's in-commit timestamp, so ours stays monotonic.
    last_timestamp: int | None = None
    #: The highest row ID high-water mark a winner set: fresh row IDs are assigned above it on retry
    #: (two writers assigning row IDs do not conflict; the loser reassigns, as Delta Spark does).
    row_id_high_water_mark: int | None = None


def read_fresh(storage: Storage, path: str) -> bytes:
    """Read a log file that may have been created after this process listed the log.

    fsspec filesystems cache directory listings, and s3fs answers "not found" from
    a cached listing of ``_delta_log`` without asking S3; a conflict check must see
    commits that appeared a moment ago, so it never trusts that cache.
    """
    if storage.is_local:
        return storage.read_bytes(path)
    try:
        if storage.protocol in ("s3", "s3a"):
            with contextlib.suppress(TypeError):  # s3fs before max_concurrency existed: fall through
                return storage.fs.cat_file(path, max_concurrency=1)  # one GET, no HEAD, no listing cache
        storage.fs.invalidate_cache(posixpath.dirname(path))
        return storage.fs.cat_file(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from None


def read_winning_commits(txn: PendingCommit, first_version: int) -> list[WinningCommit]:
    """Every commit from ``first_version`` on, in order, up to the first version not yet written."""
    out: list[WinningCommit] = []
    version = first_version
    while True:
        path = txn.storage.join("_delta_log", commit_name(version))
        try:
            data = read_fresh(txn.storage, path)
        except FileNotFoundError:
            return out
        out.append(WinningCommit.parse(version, data))
        version += 1


def _matches(partition_values: dict[str, Any], predicate: Any) -> bool:
    if callable(predicate):
        return bool(predicate(partition_values))
    for col, expected in predicate.items():
        value = partition_values.get(col)
        if isinstance(expected, list | tuple | set | frozenset):
            if value not in expected:
                return False
        elif value != expected:
            return False
    return True


def check_conflicts(txn: PendingCommit, taken_version: int) -> ConflictCheck:
    """Check every commit from ``taken_version`` on against ``txn``.

    Returns where to retry (or that the work is already done); raises a
    ConflictError subclass when a rule is violated. Reads only the winning
    commits, never the whole snapshot.
    """
    winners = read_winning_commits(txn, taken_version)
    check = ConflictCheck(next_version=taken_version + len(winners), winners=[w.version for w in winners])
    for w in winners:
        ict = w.info.get("inCommitTimestamp")
        if isinstance(ict, int):
            check.last_timestamp = ict
        if w.row_id_high_water_mark is not None:
            check.row_id_high_water_mark = max(check.row_id_high_water_mark or -1, w.row_id_high_water_mark)
    for w in winners:
        if w.info.get("txnId") == txn.txn_id:
            check.own_version = w.version
            return check
        if txn.app_id is not None and txn.app_id in w.txns and w.txns[txn.app_id] >= (txn.app_version or 0):
            check.app_txn_commit = w.version
            check.app_txn_recorded = w.txns[txn.app_id]
            return check
    if txn.snapshot is None:
        return check  # a table creation that lost: the caller reports "already exists"
    for w in winners:
        _check_one(txn, w)
    return check


def _check_one(txn: PendingCommit, w: WinningCommit) -> None:

    isolation = txn.effective_isolation_level()
    if w.protocol:
        raise ProtocolChangedError(
            f"{w.where} changed the table protocol concurrently; re-read the table and retry", w.version
        )
    if w.metadata:
        raise MetadataChangedError(
            f"{w.where} changed the table metadata (schema, partitioning or properties) concurrently; "
            "re-read the table and retry",
            w.version,
        )
    ours = {d["domain"] for d in txn.domain_updates}
    clash = sorted(d for d in w.domains if d in ours)
    if clash:
        raise ConcurrentDomainMetadataError(f"{w.where} changed metadata domain {clash[0]!r} concurrently", w.version)
    if txn.app_id is not None and txn.app_id in w.txns:
        raise ConcurrentTransactionError(
            f"{w.where} committed application transaction {txn.app_id!r} version {w.txns[txn.app_id]} "
            f"while this one commits version {txn.app_version}: the same application is writing twice at once",
            w.version,
        )
    if isolation != SNAPSHOT_ISOLATION and not (isolation != SERIALIZABLE and w.is_blind_append):
        if txn.read_whole_table or txn.read_predicates:
            for path, pv, data_change in w.adds:
                if not data_change:
                    continue
                if txn.read_whole_table or any(_matches(pv, p) for p in txn.read_predicates):
                    raise ConcurrentAppendError(
                        f"{w.where} added {path!r}, which matches data this {txn.operation} read; "
                        "re-read the table and retry",
                        w.version,
                        [path],
                    )
    # Paths compared in their canonical form: one file spelled two ways is one file.
    ours_removed = {canonical_path(r["path"]) for r in txn.removes}
    read = {canonical_path(p) for p in txn.read_file_paths} if not txn.read_whole_table else set()
    for path, data_change in w.removes:
        # A dataChange=false remove (compaction) keeps the rows in another file, so
        # what we read is still valid; removing the same file twice never is.
        key = canonical_path(path)
        if data_change and key not in ours_removed and (txn.read_whole_table or key in read):
            raise ConcurrentDeleteReadError(
                f"{w.where} removed {path!r}, which this {txn.operation} read; re-read the table and retry",
                w.version,
                [path],
            )
    both = [path for path, _ in w.removes if canonical_path(path) in ours_removed]
    if both:
        raise ConcurrentDeleteDeleteError(
            f"{w.where} removed {both[0]!r}"
            + (f" and {len(both) - 1} more file(s)" if len(both) > 1 else "")
            + f", which this {txn.operation} also removes",
            w.version,
            both,
        )
