"""Optimistic transactions: read a snapshot, stage actions, commit with put-if-absent.

A transaction records what it read (files, partition predicates, the whole
table) so that, when another writer wins the race for the next version, the
winning commits can be checked against Delta's conflict rules before retrying
at the next version.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from deltalog._version import __version__
from deltalog.actions import Metadata, to_json_line
from deltalog.errors import CommitFailedError, InvalidArgumentError
from deltalog.log import commit_name
from deltalog.protocol import Protocol, check_writable
from deltalog.snapshot import Snapshot
from deltalog.storage import Storage

log = logging.getLogger(__name__)

SERIALIZABLE = "Serializable"
WRITE_SERIALIZABLE = "WriteSerializable"
SNAPSHOT_ISOLATION = "SnapshotIsolation"

DEFAULT_MAX_ATTEMPTS = 1000


@dataclass
class HookResult:
    """Outcome of one post-commit hook; a failed hook never fails the commit."""

    name: str
    ok: bool
    detail: dict[str, Any] | str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CommitResult:
    """What a commit did (or, for an already-applied app transaction, did not do)."""

    version: int
    read_version: int | None
    operation: str
    attempts: int = 1
    noop: bool = False
    reason: str | None = None
    num_actions: int = 0
    operation_metrics: dict[str, Any] = field(default_factory=dict)
    hooks: list[HookResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["hooks"] = [h.to_dict() for h in self.hooks]
        return d


class Transaction:
    """One optimistic transaction against a table.

    Typical use::

        txn = Transaction(storage, snapshot, operation="WRITE", operation_parameters={"mode": "Append"})
        txn.add(add_actions)
        result = txn.commit()
    """

    def __init__(
        self,
        storage: Storage,
        snapshot: Snapshot | None,
        *,
        operation: str,
        operation_parameters: dict[str, Any] | None = None,
        isolation_level: str | None = None,
        user_metadata: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        single_writer: bool = False,
        run_hooks: bool = True,
    ) -> None:
        if max_attempts < 1:
            raise InvalidArgumentError(f"max_attempts must be at least 1, got {max_attempts}")
        self.storage = storage
        self.snapshot = snapshot
        self.operation = operation
        self.operation_parameters = dict(operation_parameters or {})
        self.isolation_level = isolation_level
        self.user_metadata = user_metadata
        self.max_attempts = max_attempts
        self.single_writer = single_writer
        self.run_hooks = run_hooks
        self.actions: list[dict[str, Any]] = []
        self.app_id: str | None = None
        self.app_version: int | None = None
        # What this transaction read, for conflict detection.
        self.read_whole_table = False
        self.read_predicates: list[dict[str, Any]] = []  # partition-value equality filters
        self.read_file_paths: set[str] = set()

    # --- staging ----------------------------------------------------------------------

    def add(self, adds: list[dict[str, Any]]) -> None:
        self.actions.extend({"add": a} for a in adds)

    def remove(self, removes: list[dict[str, Any]]) -> None:
        self.actions.extend({"remove": r} for r in removes)
        self.read_file_paths.update(r["path"] for r in removes)

    def update_metadata(self, metadata: Metadata) -> None:
        self.actions.append({"metaData": metadata.to_action()})

    def update_protocol(self, protocol: Protocol) -> None:
        self.actions.append({"protocol": protocol.to_dict()})

    def set_app_transaction(self, app_id: str, version: int) -> None:
        if not app_id or not isinstance(version, int) or version < 0:
            raise InvalidArgumentError("an app transaction needs a non-empty appId and a non-negative integer version")
        self.app_id, self.app_version = app_id, version

    def set_domain_metadata(self, domain: str, configuration: str, removed: bool = False) -> None:
        self.actions.append({"domainMetadata": {"domain": domain, "configuration": configuration, "removed": removed}})

    def read_files(self, paths: list[str]) -> None:
        self.read_file_paths.update(paths)

    def read_partitions(self, predicate: dict[str, Any]) -> None:
        self.read_predicates.append(predicate)

    def read_table(self) -> None:
        self.read_whole_table = True

    # --- committing -----------------------------------------------------------------

    @property
    def read_version(self) -> int:
        return -1 if self.snapshot is None else self.snapshot.version

    def _all_data_change_false(self) -> bool:
        file_actions = [a for a in self.actions if "add" in a or "remove" in a]
        return bool(file_actions) and all(
            not next(iter(a.values())).get("dataChange", True) for a in file_actions
        )

    def effective_isolation_level(self) -> str:
        if self._all_data_change_false() and all(("add" in a or "remove" in a) for a in self.actions):
            return SNAPSHOT_ISOLATION
        return self.isolation_level or (
            self.snapshot.metadata.configuration.get("delta.isolationLevel", SERIALIZABLE)
            if self.snapshot
            else SERIALIZABLE
        )

    def is_blind_append(self) -> bool:
        return (
            not self.read_whole_table
            and not self.read_predicates
            and not self.read_file_paths
            and all("add" in a and a["add"].get("dataChange", True) for a in self.actions if "add" in a or "remove" in a)
            and not any("remove" in a for a in self.actions)
        )

    def _commit_info(self, operation_metrics: dict[str, Any] | None, timestamp: int) -> dict[str, Any]:
        info: dict[str, Any] = {
            "timestamp": timestamp,
            "operation": self.operation,
            "operationParameters": {
                k: v if isinstance(v, str) else json.dumps(v) for k, v in self.operation_parameters.items()
            },
            "isolationLevel": self.effective_isolation_level(),
            "isBlindAppend": self.is_blind_append(),
            "engineInfo": f"deltalog/{__version__}",
        }
        if self.snapshot is not None:
            info["readVersion"] = self.snapshot.version
        if operation_metrics:
            info["operationMetrics"] = {k: str(v) for k, v in operation_metrics.items()}
        if self.user_metadata is not None:
            info["userMetadata"] = self.user_metadata
        return info

    def commit(self, operation_metrics: dict[str, Any] | None = None) -> CommitResult:
        """Write the staged actions as the next version, retrying on lost races."""
        from deltalog.conflicts import check_conflicts  # local: conflicts imports this module's constants

        if self.snapshot is not None:
            check_writable(self.snapshot.protocol, f"commit {self.operation}")
            if self.app_id is not None:
                done = self.snapshot.app_transaction_version(self.app_id)
                if done is not None and done >= self.app_version:
                    return CommitResult(
                        version=self.snapshot.version,
                        read_version=self.snapshot.version,
                        operation=self.operation,
                        attempts=0,
                        noop=True,
                        reason=f"app transaction {self.app_id!r} is already at version {done} "
                        f"(requested {self.app_version}): nothing committed",
                    )
        attempt_version = self.read_version + 1
        backoff = 0.01
        for attempt in range(1, self.max_attempts + 1):
            now = int(time.time() * 1000)
            actions = [{"commitInfo": self._commit_info(operation_metrics, now)}]
            if self.app_id is not None:
                actions.append({"txn": {"appId": self.app_id, "version": self.app_version, "lastUpdated": now}})
            actions.extend(self.actions)
            body = ("\n".join(to_json_line(a) for a in actions) + "\n").encode()
            path = self.storage.join("_delta_log", commit_name(attempt_version))
            try:
                self.storage.put_if_absent(path, body, single_writer=self.single_writer)
            except FileExistsError:
                log.info("version %d was taken by another writer; checking for conflicts", attempt_version)
                next_version = check_conflicts(self, attempt_version)
                if next_version is None:  # our app transaction landed meanwhile (lost response)
                    return CommitResult(
                        version=attempt_version,
                        read_version=self.read_version,
                        operation=self.operation,
                        attempts=attempt,
                        noop=True,
                        reason=f"app transaction {self.app_id!r} version {self.app_version} was committed "
                        "by a concurrent writer: nothing committed",
                    )
                attempt_version = next_version
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            result = CommitResult(
                version=attempt_version,
                read_version=None if self.snapshot is None else self.snapshot.version,
                operation=self.operation,
                attempts=attempt,
                num_actions=len(self.actions),
                operation_metrics=dict(operation_metrics or {}),
            )
            if self.run_hooks:
                from deltalog.hooks import run_post_commit_hooks  # hooks import this module

                result.hooks = run_post_commit_hooks(self.storage, result)
            return result
        raise CommitFailedError(
            f"gave up committing {self.operation} after {self.max_attempts} attempts: every version was taken"
        )
