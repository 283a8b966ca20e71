"""Optimistic transactions: read a snapshot, stage actions, commit with put-if-absent.

A transaction records what it read (files, partition predicates, the whole
table) so that, when another writer wins the race for the next version, the
winning commits can be checked against Delta's conflict rules
(:mod:`deltalog.commit.conflicts`) and the same actions retried at the next free
version. Only the winning commits are read on a lost race, never the whole
snapshot again, so a retry costs one small read per winner.

Every commit carries a random ``txnId`` in its commitInfo. If a write's response
is lost (an S3 PUT that landed but timed out and was re-sent), the retry finds
its own txnId in the "winning" commit and reports success instead of committing
the same actions twice.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
import uuid
from collections.abc import Sequence
from typing import Any

from deltalog._flags import require_bools
from deltalog._version import __version__
from deltalog.commit import row_tracking
from deltalog.commit.conflicts import ReadPredicate, check_conflicts, read_fresh
from deltalog.commit.post_commit import PostCommitHook, run_post_commit_hooks
from deltalog.commit.result import CommitResult
from deltalog.errors import (
    CommitFailedError,
    CommitOutcomeUnknownError,
    InvalidArgumentError,
    OperationRefusedError,
    StorageError,
    TableAlreadyExistsError,
)
from deltalog.log.actions import Metadata, file_key, to_json_line
from deltalog.log.listing import commit_name
from deltalog.log.snapshot import Snapshot
from deltalog.protocol.features import Operation
from deltalog.protocol.isolation import ISOLATION_LEVELS, SERIALIZABLE, SNAPSHOT_ISOLATION, WRITE_SERIALIZABLE
from deltalog.protocol.table_protocol import Protocol, check_writable
from deltalog.protocol.uniform import uniform_iceberg_enabled
from deltalog.protocol.write_gate import check_can_write, check_uniform
from deltalog.storage.filesystem import Storage

__all__ = ["DEFAULT_MAX_ATTEMPTS", "Transaction", "partition_keys"]

log = logging.getLogger(__name__)


#: Attempts before giving up. Generous on purpose: a blind append can only lose a
#: race to contention, never to a conflict, so it should practically never give up.
DEFAULT_MAX_ATTEMPTS = 1000
#: Jittered exponential backoff between attempts (seconds): the first retry is
#: immediate (the conflict check has just brought us to the tip of the log), later
#: ones sleep a random time up to BASE * 2**n, capped.
BACKOFF_BASE = 0.002
BACKOFF_CAP = 0.5
#: Lost races in a row whose winning version could not be read: storage is inconsistent.
_MAX_UNREADABLE = 5

ICT_ENABLED = "delta.enableInCommitTimestamps"
ICT_ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"


def _backoff(attempt: int, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP) -> float:
    """Seconds to sleep before attempt ``attempt + 1`` (full jitter)."""
    if attempt <= 1:
        return 0.0
    return random.uniform(0.0, min(cap, base * 2 ** (attempt - 2)))


def _is_true(value: Any) -> bool:
    return str(value).strip().lower() == "true"


class Transaction:
    """One optimistic transaction against a table.

    Typical use::

        txn = Transaction(storage, snapshot, operation="WRITE", operation_parameters={"mode": "Append"})
        txn.add(add_actions)
        result = txn.commit()

    ``snapshot=None`` creates a table: the transaction must then stage both a
    protocol and a metaData action and commits version 0.
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
        run_hooks: bool = True,
        allow_system_domains: bool = False,
        feature_operation: Operation | None = None,
        post_commit_hooks: Sequence[PostCommitHook] | None = None,
    ) -> None:
        """``feature_operation`` is the column of the feature table (:mod:`deltalog.protocol.features`) the
        commit is checked against; ``None`` (a commit of arbitrary actions) uses the commit request's."""
        require_bools(run_hooks=run_hooks, allow_system_domains=allow_system_domains)
        if max_attempts < 1:
            raise InvalidArgumentError(f"max_attempts must be at least 1, got {max_attempts}")
        if isolation_level is not None and isolation_level not in ISOLATION_LEVELS:
            raise InvalidArgumentError(
                f"unknown isolation level {isolation_level!r}: use one of {', '.join(ISOLATION_LEVELS)}"
            )
        if not operation or not isinstance(operation, str):
            raise InvalidArgumentError("a transaction needs an operation name, e.g. 'WRITE'")
        self.storage = storage
        self.snapshot = snapshot
        self.operation = operation
        self.operation_parameters = dict(operation_parameters or {})
        self.isolation_level = isolation_level
        self.user_metadata = user_metadata
        self.max_attempts = max_attempts
        self.run_hooks = run_hooks
        #: What runs after a landed commit (``run_hooks``): None = the standard hooks
        #: (``deltalog.commit.standard_post_commit.standard_hooks()``: checkpoint, log cleanup, manifests).
        self.post_commit_hooks = list(post_commit_hooks) if post_commit_hooks is not None else None
        self.allow_system_domains = allow_system_domains
        self.feature_operation = feature_operation
        self._row_hwm: int | None = None
        self._row_live: dict[str, dict[str, int]] = {}
        self.txn_id = str(uuid.uuid4())
        self.adds: list[dict[str, Any]] = []
        self.removes: list[dict[str, Any]] = []
        self.metadata_update: Metadata | None = None
        self.protocol_update: Protocol | None = None
        self.domain_updates: list[dict[str, Any]] = []
        self.app_id: str | None = None
        self.app_version: int | None = None
        # What this transaction read, for conflict detection.
        self.read_whole_table = False
        self.read_predicates: list[ReadPredicate] = []
        self.read_file_paths: set[str] = set()

    # --- staging ----------------------------------------------------------------------

    def add(self, adds: list[dict[str, Any]]) -> None:
        """Stage ``add`` actions (``path`` and ``size`` required; dataChange defaults to true)."""
        now = int(time.time() * 1000)
        for a in adds:
            if not isinstance(a, dict) or not isinstance(a.get("path"), str) or not a["path"]:
                raise InvalidArgumentError("every add action needs a non-empty string 'path'")
            if not isinstance(a.get("size"), int) or isinstance(a.get("size"), bool) or a["size"] < 0:
                raise InvalidArgumentError(f"add action for {a['path']!r} needs a non-negative integer 'size'")
            action = dict(a)
            action.setdefault("partitionValues", {})
            action.setdefault("modificationTime", now)
            action.setdefault("dataChange", True)
            self.adds.append(action)

    def remove(self, removes: list[dict[str, Any]]) -> None:
        """Stage ``remove`` actions; the removed files count as read (a concurrent delete conflicts)."""
        now = int(time.time() * 1000)
        for r in removes:
            if not isinstance(r, dict) or not isinstance(r.get("path"), str) or not r["path"]:
                raise InvalidArgumentError("every remove action needs a non-empty string 'path'")
            action = dict(r)
            action.setdefault("deletionTimestamp", now)
            action.setdefault("dataChange", True)
            self.removes.append(action)
            self.read_file_paths.add(action["path"])

    def update_metadata(self, metadata: Metadata) -> None:
        self.metadata_update = metadata

    def update_protocol(self, protocol: Protocol) -> None:
        self.protocol_update = protocol

    def set_app_transaction(self, app_id: str, version: int) -> None:
        """Make the commit idempotent: it lands at most once per (app_id, version)."""
        if not isinstance(app_id, str) or not app_id:
            raise InvalidArgumentError("an app transaction needs a non-empty string appId")
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise InvalidArgumentError(f"app transaction version must be a non-negative integer, got {version!r}")
        self.app_id, self.app_version = app_id, version

    def set_domain_metadata(self, domain: str, configuration: str, removed: bool = False) -> None:
        if not isinstance(domain, str) or not domain:
            raise InvalidArgumentError("a metadata domain needs a non-empty name")
        if domain.startswith("delta.") and not self.allow_system_domains:
            raise OperationRefusedError(f"refusing to change system-controlled metadata domain {domain!r}")
        self.domain_updates.append({"domain": domain, "configuration": configuration, "removed": removed})

    def read_files(self, paths: list[str]) -> None:
        self.read_file_paths.update(paths)

    def read_partitions(self, predicate: ReadPredicate) -> None:
        self.read_predicates.append(predicate)

    def read_table(self) -> None:
        self.read_whole_table = True

    # --- what the commit is ---------------------------------------------------------

    @property
    def read_version(self) -> int:
        return -1 if self.snapshot is None else self.snapshot.version

    @property
    def protocol(self) -> Protocol | None:
        """The protocol the commit will be checked against (the staged one wins)."""
        return self.protocol_update or (self.snapshot.protocol if self.snapshot else None)

    @property
    def metadata(self) -> Metadata | None:
        return self.metadata_update or (self.snapshot.metadata if self.snapshot else None)

    @property
    def configuration(self) -> dict[str, str]:
        md = self.metadata
        return dict(md.configuration) if md else {}

    def _only_rearranges_data(self) -> bool:
        """True when every action is a dataChange=false file action (compaction, stats)."""
        file_actions = self.adds + self.removes
        return (
            bool(file_actions)
            and all(a.get("dataChange") is False for a in file_actions)
            and self.metadata_update is None
            and self.protocol_update is None
            and not self.domain_updates
        )

    def effective_isolation_level(self) -> str:
        """SnapshotIsolation for data-rearranging commits, else the requested/table level."""
        if self._only_rearranges_data():
            return SNAPSHOT_ISOLATION
        if self.isolation_level:
            return self.isolation_level
        configured = self.configuration.get("delta.isolationLevel", SERIALIZABLE)
        return configured if configured in (SERIALIZABLE, WRITE_SERIALIZABLE) else SERIALIZABLE

    def is_blind_append(self) -> bool:
        """Delta's definition: only adds, and nothing read that the result depends on."""
        return not self.removes and not self.read_whole_table and not self.read_predicates and not self.read_file_paths

    def ict_enabled(self) -> bool:
        """In-commit timestamps: the property is true *and* the protocol has the writer feature."""
        protocol = self.protocol
        return (
            protocol is not None
            and _is_true(self.configuration.get(ICT_ENABLED, "false"))
            and "inCommitTimestamp" in protocol.effective_writer_features()
        )

    def _enables_ict(self) -> bool:
        """This commit turns in-commit timestamps on for an existing table."""
        if self.snapshot is None or self.metadata_update is None or not self.ict_enabled():
            return False
        old = self.snapshot
        return not (
            _is_true(old.metadata.configuration.get(ICT_ENABLED, "false"))
            and "inCommitTimestamp" in old.protocol.effective_writer_features()
        )

    # --- checks before anything is written ----------------------------------------------

    def _validate(self) -> None:
        if self.snapshot is None and (self.protocol_update is None or self.metadata_update is None):
            raise InvalidArgumentError("creating a table needs both a protocol and a metaData action")
        # The gate every operation passes: the protocol allows this commit, the storage creates atomically.
        current = self.snapshot.protocol if self.snapshot is not None else self.protocol_update
        assert current is not None
        # The state the commit leaves is what the checks judge: its properties, schema and (UniForm) what its
        # Iceberg metadata can express.
        metadata = self.metadata
        assert metadata is not None
        check_can_write(
            self.storage,
            current,
            f"commit {self.operation}",
            self.feature_operation,
            self.configuration,
            commits=True,
            schema_string=metadata.schema_string,
            partition_columns=metadata.partition_columns,
        )
        if self.protocol_update is not None and self.snapshot is not None:
            check_writable(self.protocol_update, f"commit {self.operation}", self.feature_operation)
        protocol = self.protocol
        assert protocol is not None
        config = self.configuration
        if uniform_iceberg_enabled(config):
            if self.protocol_update is not None:
                check_uniform(
                    protocol, f"commit {self.operation}", config, metadata.schema_string, metadata.partition_columns
                )
            with_dv = [a["path"] for a in self.adds if a.get("deletionVector")]
            if with_dv:
                raise OperationRefusedError(
                    f"refusing to commit {self.operation}: {with_dv[0]!r} carries a deletion vector, and the table "
                    "keeps Iceberg metadata (UniForm) whose icebergCompat version cannot express deletion vectors"
                )
        if _is_true(config.get(ICT_ENABLED, "false")) and not self.ict_enabled():
            raise InvalidArgumentError(
                "delta.enableInCommitTimestamps=true needs the inCommitTimestamp writer feature in the protocol"
            )
        writer_features = protocol.effective_writer_features()
        if _is_true(config.get("delta.appendOnly", "false")) and "appendOnly" in writer_features:
            changed = [r["path"] for r in self.removes if r.get("dataChange", True)]
            if changed:
                raise OperationRefusedError(
                    f"refusing to remove {changed[0]!r}: the table is append-only (delta.appendOnly=true); "
                    "only dataChange=false rewrites may remove files"
                )
        if self.domain_updates and "domainMetadata" not in writer_features:
            raise OperationRefusedError(
                "refusing to write domain metadata: the table protocol does not support the domainMetadata "
                "writer feature"
            )
        self._check_unique_actions()
        expected = set(partition_keys(metadata))
        for a in self.adds:
            pv = a.get("partitionValues") or {}
            if set(pv) != expected:
                raise InvalidArgumentError(
                    f"add action for {a['path']!r} has partition values for {sorted(pv)} but the table is "
                    f"partitioned by {sorted(expected)}"
                )

    def _check_unique_actions(self) -> None:
        """PROTOCOL.md: one action per (path, DV) and kind; one per path among adds and among removes."""
        for kind, actions in (("add", self.adds), ("remove", self.removes)):
            seen: set[str] = set()
            for a in actions:
                if a["path"] in seen:
                    raise InvalidArgumentError(f"{a['path']!r} appears twice among the {kind} actions of one commit")
                seen.add(a["path"])
        add_keys = {file_key(a["path"], a.get("deletionVector")) for a in self.adds}
        for r in self.removes:
            if file_key(r["path"], r.get("deletionVector")) in add_keys:
                raise InvalidArgumentError(
                    f"{r['path']!r} is both added and removed (same deletion vector) in one commit"
                )
        domains = [d["domain"] for d in self.domain_updates]
        if len(domains) != len(set(domains)):
            raise InvalidArgumentError("a metadata domain appears twice in one commit")

    def _already_applied(self) -> CommitResult | None:
        if self.snapshot is None or self.app_id is None:
            return None
        done = self.snapshot.app_transaction_version(self.app_id)
        assert self.app_version is not None
        if done is None or done < self.app_version:
            return None
        return self._noop(
            self.snapshot.version,
            0,
            f"app transaction {self.app_id!r} is already at version {done} (requested {self.app_version}): "
            "nothing committed",
        )

    def _noop(self, version: int, attempts: int, reason: str) -> CommitResult:
        log.info("%s: %s", self.operation, reason)
        return CommitResult(
            version=version,
            read_version=None if self.snapshot is None else self.snapshot.version,
            operation=self.operation,
            attempts=attempts,
            noop=True,
            reason=reason,
            app_id=self.app_id,
            app_version=self.app_version,
            table_configuration=self.configuration,
        )

    # --- serialising one attempt -----------------------------------------------------

    def _previous_commit_timestamp(self) -> int | None:
        """ICT (or, before ICT was enabled, file mtime) of the commit at the read version."""
        if self.snapshot is None:
            return None
        from deltalog.log.history import read_commit_info  # small import, only for ICT tables

        f = self.snapshot.segment.listing.commits.get(self.snapshot.version)
        if f is None:
            return None
        info = read_commit_info(self.storage, f.path, f.name) or {}
        ict = info.get("inCommitTimestamp")
        return ict if isinstance(ict, int) else f.modification_time

    def _commit_info(self, timestamp: int, ict: int | None, operation_metrics: dict[str, Any] | None) -> dict[str, Any]:
        info: dict[str, Any] = {}
        if ict is not None:
            info["inCommitTimestamp"] = ict
        info["timestamp"] = timestamp
        info["operation"] = self.operation
        info["operationParameters"] = {
            k: v if isinstance(v, str) else json.dumps(v) for k, v in self.operation_parameters.items()
        }
        if self.snapshot is not None:
            info["readVersion"] = self.snapshot.version
        info["isolationLevel"] = self.effective_isolation_level()
        info["isBlindAppend"] = self.is_blind_append()
        if operation_metrics:
            info["operationMetrics"] = {k: str(v) for k, v in operation_metrics.items()}
        if self.user_metadata is not None:
            info["userMetadata"] = self.user_metadata
        info["engineInfo"] = f"deltalog/{__version__}"
        info["txnId"] = self.txn_id
        return info

    def _serialize(
        self, version: int, previous_timestamp: int | None, operation_metrics: dict[str, Any] | None
    ) -> tuple[bytes, int | None]:
        """The commit file for ``version``: commitInfo first, then protocol, metaData, txn, domains, files."""
        now = int(time.time() * 1000)
        ict = None
        if self.ict_enabled():
            ict = now if previous_timestamp is None else max(now, previous_timestamp + 1)
        lines = [
            to_json_line({"commitInfo": self._commit_info(ict if ict is not None else now, ict, operation_metrics)})
        ]
        if self.protocol_update is not None:
            lines.append(to_json_line({"protocol": self.protocol_update.to_dict()}))
        if self.metadata_update is not None:
            action = self.metadata_update.to_action()
            if self._enables_ict():
                # PROTOCOL.md: a table that had commits without ICT records where ICT starts.
                action["configuration"][ICT_ENABLEMENT_VERSION] = str(version)
                action["configuration"][ICT_ENABLEMENT_TIMESTAMP] = str(ict)
            lines.append(to_json_line({"metaData": action}))
        if self.app_id is not None:
            # On the table's clock when it has one: a txn expires (delta.setTransactionRetentionDuration) by
            # lastUpdated, and this machine's clock running behind the table's would age it early.
            updated = ict if ict is not None else now
            txn = {"appId": self.app_id, "version": self.app_version, "lastUpdated": updated}
            lines.append(to_json_line({"txn": txn}))
        adds, removes, domains = self.adds, self.removes, self.domain_updates
        if self._row_hwm is not None:
            # Row tracking: fresh row IDs above the mark and this version as the row commit version.
            adds, removes, mark = row_tracking.assign(adds, removes, self._row_live, self._row_hwm, version)
            if mark is not None:
                domains = [*domains, row_tracking.domain_action(mark)]
        lines.extend(to_json_line({"domainMetadata": d}) for d in domains)
        lines.extend(to_json_line({"remove": r}) for r in removes)
        lines.extend(to_json_line({"add": a}) for a in adds)
        return ("\n".join(lines) + "\n").encode(), ict

    @property
    def num_actions(self) -> int:
        return (
            len(self.adds)
            + len(self.removes)
            + len(self.domain_updates)
            + (self.metadata_update is not None)
            + (self.protocol_update is not None)
            + (self.app_id is not None)
        )

    # --- committing -----------------------------------------------------------------

    def commit(self, operation_metrics: dict[str, Any] | None = None) -> CommitResult:
        """Write the staged actions as the next version, retrying on lost races.

        Raises a :class:`deltalog.commit.conflicts.ConflictError` subclass when a winning
        commit invalidates this one, CommitFailedError when every attempt lost, and
        returns a no-op result when the app transaction was already committed.
        """

        self._validate()
        done = self._already_applied()
        if done is not None:
            return done
        self._prepare_row_tracking()
        version = self.read_version + 1
        ict_on = self.ict_enabled()
        previous_ts = self._previous_commit_timestamp() if ict_on else None
        path_for = self.storage.join
        winners = unreadable = 0
        for attempt in range(1, self.max_attempts + 1):
            body, ict = self._serialize(version, previous_ts, operation_metrics)
            try:
                self._put(path_for("_delta_log", commit_name(version)), body)
            except FileExistsError:
                log.info("%s: version %d was taken by another writer; checking for conflicts", self.operation, version)
                check = check_conflicts(self, version)
                winners += len(check.winners)
                unreadable = 0 if check.winners else unreadable + 1
                if unreadable >= _MAX_UNREADABLE:
                    raise StorageError(
                        f"version {version} of {self.storage.uri} exists but cannot be read back; the storage "
                        "answers inconsistently, so committing is unsafe"
                    ) from None
                if check.own_version is not None:
                    log.info(
                        "%s: version %d is this transaction's own commit (lost response)",
                        self.operation,
                        check.own_version,
                    )
                    return self._landed(check.own_version, attempt, winners, operation_metrics, None)
                if check.app_txn_commit is not None:
                    return self._noop(
                        check.app_txn_commit,
                        attempt,
                        f"app transaction {self.app_id!r} version {check.app_txn_recorded} was committed at table "
                        f"version {check.app_txn_commit} by a concurrent writer (requested {self.app_version}): "
                        "nothing committed",
                    )
                if self.snapshot is None:
                    raise TableAlreadyExistsError(
                        f"cannot create a table at {self.storage.uri}: another writer created it concurrently"
                    ) from None
                version = check.next_version
                if self._row_hwm is not None and check.row_id_high_water_mark is not None:
                    self._row_hwm = max(self._row_hwm, check.row_id_high_water_mark)
                if ict_on and check.last_timestamp is not None:
                    previous_ts = check.last_timestamp
                if attempt < self.max_attempts:
                    pause = _backoff(attempt)
                    if pause:
                        time.sleep(pause)
                continue
            return self._landed(version, attempt, winners, operation_metrics, ict)
        raise CommitFailedError(
            f"gave up committing {self.operation} after {self.max_attempts} attempts: every version was taken "
            "by concurrent writers (raise max_attempts to wait longer)"
        )

    def _prepare_row_tracking(self) -> None:
        """Under row tracking, the mark to assign above and the live files' row fields (copied into removes)."""
        self._row_hwm = None
        self._row_live = {}
        if self.snapshot is None or not row_tracking.assigns_row_ids(self.protocol, self.configuration):
            return
        if any(d["domain"] == row_tracking.DOMAIN for d in self.domain_updates):
            return  # the caller manages the mark itself (allow_system_domains)
        self._row_hwm = row_tracking.high_water_mark(self.snapshot.domain_metadata)
        paths = [r["path"] for r in self.removes] + [a["path"] for a in self.adds]
        self._row_live = row_tracking.live_row_fields(self.snapshot.files, paths)

    def _put(self, path: str, body: bytes) -> None:
        """Create the version file; FileExistsError when the version exists, ours or another writer's.

        A write that fails may still have landed (a timeout or reset connection after the
        store accepted it). Reporting that as a failure would let callers delete files the
        landed version references, so the version is read back: absent means nothing
        landed (the error stands), present goes through the lost-race path, which
        recognises our own ``txnId``; unreadable too means the outcome is unknown.
        """
        try:
            self.storage.put_if_absent(path, body)
            return
        except (OSError, StorageError) as exc:
            if isinstance(exc, FileExistsError):
                raise
            failure = exc

        try:
            read_fresh(self.storage, path)
        except FileNotFoundError:
            raise failure from None
        except (OSError, StorageError) as again:
            raise CommitOutcomeUnknownError(
                f"writing {path} failed ({failure}) and reading it back failed too ({again}); the commit may "
                "have landed: read the table to find out before deleting any file it names"
            ) from None
        log.warning(
            "%s: writing %s reported %s but the version exists; checking whose it is", self.operation, path, failure
        )
        raise FileExistsError(path)

    def _landed(
        self,
        version: int,
        attempts: int,
        winners: int,
        operation_metrics: dict[str, Any] | None,
        ict: int | None,
    ) -> CommitResult:
        result = CommitResult(
            version=version,
            read_version=None if self.snapshot is None else self.snapshot.version,
            operation=self.operation,
            attempts=attempts,
            num_actions=self.num_actions,
            operation_metrics=dict(operation_metrics or {}),
            isolation_level=self.effective_isolation_level(),
            in_commit_timestamp=ict,
            app_id=self.app_id,
            app_version=self.app_version,
            txn_id=self.txn_id,
            winning_commits=winners,
            table_configuration=self.configuration,
        )
        log.info("%s committed version %d after %d attempt(s)", self.operation, version, attempts)
        if self.run_hooks:
            hooks = self.post_commit_hooks
            if hooks is None:
                # Imported when a commit first needs them: they load the checkpoint writer, log
                # cleanup and manifests (below this layer), which a transaction's import should not.
                from deltalog.commit.standard_post_commit import standard_hooks

                hooks = standard_hooks()
            result = dataclasses.replace(result, hooks=run_post_commit_hooks(self.storage, result, hooks))
        return result


def partition_keys(metadata: Metadata) -> list[str]:
    """The keys of ``partitionValues``: physical column names when column mapping is on."""
    if metadata.column_mapping_mode == "none":
        return list(metadata.partition_columns)
    from deltalog.protocol.file_stats import physical_name

    fields = {f.name: f for f in metadata.schema}
    return [physical_name(fields[c]) if c in fields else c for c in metadata.partition_columns]
