"""Delta's conflict rules, applied when another writer won the race for a version.

Each rule has its own exception so callers can react precisely (a compaction
re-plans only the bins whose inputs a concurrent delete took; an Airflow task
fails without retrying on a metadata change). Rules follow Delta Spark's
``ConflictChecker``; commits whose file actions all have ``dataChange=false``
run at SnapshotIsolation, so concurrent blind appends never conflict with them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deltalog.errors import CommitFailedError, CorruptLogError
from deltalog.log import commit_name
from deltalog.snapshot import parse_commit

if TYPE_CHECKING:
    from deltalog.transaction import Transaction


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


class ConcurrentDeleteReadError(ConflictError):
    """A concurrent commit removed a file this transaction read."""


class ConcurrentDeleteDeleteError(ConflictError):
    """A concurrent commit removed a file this transaction also removes."""


class ConcurrentTransactionError(ConflictError):
    """A concurrent commit wrote the same application transaction id."""


class ConcurrentDomainMetadataError(ConflictError):
    """A concurrent commit changed the same metadata domain."""


def _matches(partition_values: dict[str, Any], predicate: dict[str, Any]) -> bool:
    for col, expected in predicate.items():
        value = partition_values.get(col)
        if isinstance(expected, list | tuple | set | frozenset):
            if value not in expected:
                return False
        elif value != expected:
            return False
    return True


def _as_dict(pv: Any) -> dict[str, Any]:
    if not pv:
        return {}
    return dict(pv) if isinstance(pv, dict) else {k: v for k, v in pv}


def read_winning_commit(txn: Transaction, version: int) -> list[dict[str, Any]] | None:
    path = txn.storage.join("_delta_log", commit_name(version))
    try:
        return parse_commit(txn.storage.read_bytes(path), commit_name(version))
    except FileNotFoundError:
        return None


def check_conflicts(txn: Transaction, taken_version: int) -> int | None:
    """Check every commit from ``taken_version`` on against ``txn``.

    Returns the next version to try, or None when a winning commit already
    recorded this transaction's (appId, version) (the commit is then a no-op).
    Raises a ConflictError subclass when a rule is violated.
    """
    from deltalog.transaction import SERIALIZABLE, SNAPSHOT_ISOLATION

    isolation = txn.effective_isolation_level()
    our_removes = {a["remove"]["path"] for a in txn.actions if "remove" in a}
    our_domains = {a["domainMetadata"]["domain"] for a in txn.actions if "domainMetadata" in a}
    version = taken_version
    while True:
        actions = read_winning_commit(txn, version)
        if actions is None:
            return version
        where = f"commit {version}"
        info: dict[str, Any] = {}
        for action in actions:
            ((kind, body),) = action.items()
            if kind == "commitInfo":
                info = body
        winner_blind = bool(info.get("isBlindAppend"))
        for action in actions:
            ((kind, body),) = action.items()
            if not isinstance(body, dict):
                raise CorruptLogError(f"{commit_name(version)}: {kind} action is not an object")
            if kind == "protocol":
                raise ProtocolChangedError(
                    f"{where} changed the table protocol concurrently; re-read the table and retry", version
                )
            if kind == "metaData":
                raise MetadataChangedError(
                    f"{where} changed the table metadata (schema, partitioning or properties) concurrently", version
                )
            if kind == "txn" and txn.app_id is not None and body.get("appId") == txn.app_id:
                if int(body.get("version", -1)) >= (txn.app_version or 0):
                    return None
                raise ConcurrentTransactionError(
                    f"{where} committed application transaction {txn.app_id!r} concurrently", version
                )
            if kind == "domainMetadata" and body.get("domain") in our_domains:
                raise ConcurrentDomainMetadataError(
                    f"{where} changed metadata domain {body.get('domain')!r} concurrently", version
                )
            if kind == "remove":
                path = body.get("path")
                if path in our_removes:
                    raise ConcurrentDeleteDeleteError(
                        f"{where} removed {path!r}, which this {txn.operation} also removes", version, [path]
                    )
                if body.get("dataChange", True) and (txn.read_whole_table or path in txn.read_file_paths):
                    raise ConcurrentDeleteReadError(
                        f"{where} removed {path!r}, which this {txn.operation} read", version, [path]
                    )
            if kind == "add" and body.get("dataChange", True) and isolation != SNAPSHOT_ISOLATION:
                if isolation != SERIALIZABLE and winner_blind:
                    continue  # WriteSerializable: blind appends may be reordered before us
                pv = _as_dict(body.get("partitionValues"))
                if txn.read_whole_table or any(_matches(pv, p) for p in txn.read_predicates):
                    raise ConcurrentAppendError(
                        f"{where} added {body.get('path')!r} matching data this {txn.operation} read",
                        version,
                        [body.get("path")],
                    )
        version += 1
