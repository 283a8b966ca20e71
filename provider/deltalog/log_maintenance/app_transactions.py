"""App transactions (``txn`` actions) in log maintenance: which ones a checkpoint keeps, which log cleanup must not lose.

Streaming writers make their commits idempotent with a ``txn`` action per ``(appId,
version)``: Delta Spark's streaming sink records its query id and batch id with each batch,
and on a restart skips a batch whose id the table already records (PROTOCOL.md,
"Transaction Identifiers"; deltalake's and deltalog's app transactions work the same way).
A checkpoint that leaves out a live txn, or a log cleanup that deletes the only commits
recording it, makes a restarted stream write that batch a second time.

PROTOCOL.md says a checkpoint must contain the transaction identifiers. Delta Spark (and
Delta Kernel) let ``delta.setTransactionRetentionDuration`` expire those whose
``lastUpdated`` is at or before ``now - retention``. deltalog honours the property, with
three rules that keep what Delta Spark's would drop:

- **The table's clock**, not this machine's alone: ``now`` is the earlier of the local
  clock and the commit timestamp of the version checkpointed (its in-commit timestamp, or
  the commit file's time made monotonic). A maintenance host whose clock runs days ahead
  cannot expire a txn a writer recorded a minute ago, and a checkpoint of an old version
  expires only what had expired at that version. When the version's commit time is not
  known (its commit file is gone), nothing expires.
- **A txn without ``lastUpdated``** (deltalake writes none) is kept: its age is unknown
  (Delta Spark drops it as soon as a retention is set).
- **A retention that does not parse** expires nothing, with a warning, instead of failing
  the checkpoint (a checkpoint with every txn is always a correct one).

Log cleanup (:class:`TxnHistory`) refuses a cutoff checkpoint that lacks a live txn the
commits (or older checkpoints) it would delete record, as it refuses an unreadable one: a
checkpoint written elsewhere, or by another clock, may have dropped one, and deleting the
commits would make the loss permanent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from deltalog.errors import CorruptCheckpointError, DeltaLogError, InvalidArgumentError
from deltalog.log.action_checks import check_txn
from deltalog.log.checkpoint_reader import read_checkpoint_small_actions
from deltalog.log.commit_lines import parse_action
from deltalog.log.history import CommitTimestamps, ict_enablement_version
from deltalog.log.listing import LogListing
from deltalog.log.snapshot import read_commit_files
from deltalog.protocol.properties import parse_interval_ms
from deltalog.storage.filesystem import Storage

__all__ = [
    "TXN_RETENTION_PROPERTY",
    "TxnHistory",
    "TxnRetention",
    "table_clock_at",
    "txn_retention",
    "txn_retention_at",
]

log = logging.getLogger(__name__)

TXN_RETENTION_PROPERTY = "delta.setTransactionRetentionDuration"
#: Commit files read at once by :class:`TxnHistory` (concurrently on object stores).
_READ_CHUNK = 32


@dataclass(frozen=True)
class TxnRetention:
    """When a table's app transactions expire at one version (``retention_ms`` None: never)."""

    retention_ms: int | None = None
    #: The table's time at the version: min(local clock, the version's commit timestamp); None when unknown.
    clock_ms: int | None = None
    #: Why nothing expires although the property is set (it does not parse).
    warning: str | None = None

    @property
    def cutoff_ms(self) -> int | None:
        """A txn last updated at or before this (ms since the epoch) has expired; None: none has."""
        if self.retention_ms is None or self.clock_ms is None:
            return None
        return self.clock_ms - self.retention_ms

    def expired(self, txn: dict[str, Any], written_by_ms: int | None = None) -> bool:
        """Whether ``txn`` has expired: its ``lastUpdated`` is at or before the cutoff.

        ``written_by_ms``: a time the txn is known to have been written by (the timestamp
        of the commit, or of the checkpoint's version, that holds it), the age of a txn
        without ``lastUpdated``; without either it never expires.
        """
        cutoff = self.cutoff_ms
        if cutoff is None:
            return False
        stamp = txn.get("lastUpdated")
        if not isinstance(stamp, int) or isinstance(stamp, bool):
            stamp = written_by_ms
        return stamp is not None and stamp <= cutoff


def txn_retention(configuration: dict[str, str], clock_ms: int | None) -> TxnRetention:
    """The table's ``delta.setTransactionRetentionDuration`` on the clock ``clock_ms``."""
    raw = configuration.get(TXN_RETENTION_PROPERTY)
    if raw is None:
        return TxnRetention()
    try:
        retention = parse_interval_ms(raw, f"table property {TXN_RETENTION_PROPERTY}")
    except InvalidArgumentError as exc:
        return TxnRetention(warning=f"{exc}; no app transaction expired")
    return TxnRetention(retention, clock_ms)


def table_clock_ms(stamps: CommitTimestamps, version: int, now_ms: int) -> int | None:
    """The earlier of ``now_ms`` and the commit timestamp of ``version``; None when that commit is not readable."""
    if version not in stamps.listing.commits:
        return None
    try:
        return min(now_ms, stamps(version))
    except (DeltaLogError, OSError) as exc:
        log.info("the commit time of version %d is unknown (%s): no app transaction or tombstone expires", version, exc)
        return None


def table_clock_at(
    storage: Storage, listing: LogListing, configuration: dict[str, str], version: int, now_ms: int
) -> int | None:
    """The table's time at ``version``: the earlier of ``now_ms`` and that version's commit timestamp.

    What a checkpoint of ``version`` expires app transactions and tombstones by: a maintenance host
    whose clock runs ahead cannot expire what a writer recorded a minute ago. None when the version's
    commit is gone or unreadable (nothing expires then).
    """
    try:
        ict_from = ict_enablement_version(configuration)
    except ValueError:  # an enablement version that is no number: the commit files' times are the clock
        ict_from = None
    return table_clock_ms(CommitTimestamps(storage, listing, ict_from), version, now_ms)


def txn_retention_at(
    storage: Storage,
    listing: LogListing,
    configuration: dict[str, str],
    version: int,
    now_ms: int,
    clock_ms: int | None = None,
) -> TxnRetention:
    """:class:`TxnRetention` of the table at ``version`` (``clock_ms``: :func:`table_clock_at`, when known)."""
    if TXN_RETENTION_PROPERTY not in configuration:
        return TxnRetention()
    if clock_ms is None:
        clock_ms = table_clock_at(storage, listing, configuration, version, now_ms)
    return txn_retention(configuration, clock_ms)


@dataclass(frozen=True)
class _Mention:
    """The newest record of one appId in the history before a checkpoint."""

    txn: dict[str, Any]
    version: int  # of the commit or checkpoint that holds it
    in_commit: bool  # a commit says so (authoritative), not a checkpoint (derived)


@dataclass
class TxnHistory:
    """The txn actions of the log files log cleanup may delete, read once, to check a cutoff checkpoint.

    Reads every commit file up to the newest cutoff checkpoint asked about (those before
    it are the files cleanup deletes: one read each) and the txn column of the checkpoints
    before it; older candidates reuse what was read.
    """

    storage: Storage
    listing: LogListing
    stamps: CommitTimestamps
    configuration: dict[str, str]
    now_ms: int
    _commits: dict[int, list[dict[str, Any]]] | None = field(default=None, repr=False)
    _read_below: int = field(default=-1, repr=False)
    _checkpoints: dict[int, list[dict[str, dict[str, Any]] | None]] = field(default_factory=dict, repr=False)

    def lost_by(self, checkpoint: int) -> str | None:
        """Why keeping history only from ``checkpoint`` on would lose a live txn, or None when nothing is lost."""
        try:
            mentions = self._mentions_upto(checkpoint)
        except DeltaLogError as exc:
            return f"the app transactions of the commits before it cannot be read ({exc})"
        if not mentions:
            return None
        retention = txn_retention(self.configuration, table_clock_ms(self.stamps, checkpoint, self.now_ms))
        carried = [c for c in self._checkpoint_txns(checkpoint) if c is not None]
        if not carried:
            return "its app transactions cannot be read"
        problems = []
        for app, m in sorted(mentions.items()):
            if retention.expired(m.txn, self._time_of(m.version)):
                continue
            where = f"commit {m.version}" if m.in_commit else f"the checkpoint of version {m.version}"
            for txns in carried:
                have = txns.get(app)
                if have is None:
                    problems.append(f"it lacks app transaction {app!r} version {m.txn['version']} ({where})")
                    break
                if m.in_commit and have.get("version") != m.txn["version"]:
                    problems.append(
                        f"it records app transaction {app!r} at version {have.get('version')}, "
                        f"{where} at {m.txn['version']}"
                    )
                    break
        if not problems:
            return None
        more = f" and {len(problems) - 2} more" if len(problems) > 2 else ""
        return (
            "; ".join(problems[:2]) + more + ", not expired (delta.setTransactionRetentionDuration); deleting the "
            "log before it would lose what a restarted stream needs to skip a batch it already committed"
        )

    def _time_of(self, version: int) -> int | None:
        try:
            return self.stamps(version) if version in self.listing.commits else None
        except (DeltaLogError, OSError):
            return None

    def _mentions_upto(self, checkpoint: int) -> dict[str, _Mention]:
        """The newest txn per appId as of ``checkpoint``: in the commits up to it (its own included, which it
        must carry too) and the checkpoints before it."""
        commits = self._commit_txns(checkpoint + 1)
        sources: list[tuple[int, bool, list[dict[str, Any]]]] = [
            (v, True, txns) for v, txns in commits.items() if v <= checkpoint and txns
        ]
        for v in self.listing.checkpoints:
            if v < checkpoint:
                for by_app in self._checkpoint_txns(v):
                    if by_app:
                        sources.append((v, False, list(by_app.values())))
        # Oldest first, a commit after the checkpoint of its own version: the newest record wins.
        sources.sort(key=lambda s: (s[0], s[1]))
        out: dict[str, _Mention] = {}
        for version, in_commit, txns in sources:
            for t in txns:
                out[t["appId"]] = _Mention(t, version, in_commit)
        return out

    def _commit_txns(self, below: int) -> dict[int, list[dict[str, Any]]]:
        if self._commits is None or below > self._read_below:
            versions = sorted(v for v in self.listing.commits if v < below)
            files = [self.listing.commits[v] for v in versions]
            found: dict[int, list[dict[str, Any]]] = {}
            # A few files at a time (commits of 10,000 adds are megabytes each); a file without the
            # bytes "txn" in quotes holds no txn action and is not split into lines.
            for start in range(0, len(files), _READ_CHUNK):
                chunk = files[start : start + _READ_CHUNK]
                for v, f, data in zip(versions[start:], chunk, read_commit_files(self.storage, chunk)):
                    if data.find(b'"txn"') < 0:
                        continue
                    for lineno, line in enumerate(data.split(b"\n"), start=1):
                        if b'"txn"' not in line[:24]:
                            continue
                        action = parse_action(line, f.name, lineno)
                        if "txn" in action:
                            check_txn(action["txn"], f"{f.name}: line {lineno}")
                            found.setdefault(v, []).append(action["txn"])
            self._commits, self._read_below = found, below
        return self._commits

    def _checkpoint_txns(self, version: int) -> list[dict[str, dict[str, Any]] | None]:
        """Per checkpoint at ``version``: its txns by appId (None when unreadable)."""
        if version not in self._checkpoints:
            out: list[dict[str, dict[str, Any]] | None] = []
            for cp in self.listing.checkpoints.get(version, []):
                try:
                    small = read_checkpoint_small_actions(self.storage, cp, ("txn",))
                    txns = small.get("txn", [])
                    for t in txns:
                        check_txn(t, f"checkpoint {cp.files[0].name}", CorruptCheckpointError)
                    out.append({t["appId"]: t for t in txns})
                except DeltaLogError as exc:
                    log.warning("the app transactions of checkpoint %s cannot be read: %s", cp.files[0].name, exc)
                    out.append(None)
            self._checkpoints[version] = out
        return self._checkpoints[version]
