"""Log cleanup: delete expired ``_delta_log`` files per PROTOCOL.md "Metadata Cleanup".

The rules, in the order they are applied:

1. ``cutOffTimestamp`` is midnight UTC of ``now - delta.logRetentionDuration`` (default
   30 days); the ``cutoffCommit`` is the newest commit whose timestamp is not newer (the
   in-commit timestamp from ``delta.inCommitTimestampEnablementVersion`` on, else the
   file modification time made monotonic, as time travel sees it).
2. The ``cutOffCheckpoint`` is the newest checkpoint at or before the cutoff commit that
   can be read back completely (every part, every sidecar), with the commits after it
   rebuilds the latest version, and carries every app transaction (``txn``) the files
   before it record that has not expired (:mod:`deltalog.log_maintenance.app_transactions`:
   a streaming writer's exactly-once rests on them). None qualifies: nothing is deleted.
3. Deleted: commits, checkpoints of every kind and ``.crc`` files before the cutoff
   checkpoint, log compaction files starting at or before it, staged commits at or
   before it, and (older than both the cutoff and a day) sidecars no kept checkpoint
   references plus temp files left by crashed writers; with each deleted file its
   Hadoop checksum side file ``.<name>.crc`` (a kept file's never). Commit timestamps stay
   monotonic and unchanged: a kept commit whose file time was raised to 1 ms after
   its predecessor's keeps that predecessor's commit file (as Delta Spark does), since
   deleting it would move the kept commit's time-travel timestamp.
4. UniForm: Iceberg snapshots past the table's retention are expired and the metadata
   files only they referenced deleted (:mod:`deltalog.uniform.expire`, with the same dry
   run), whether or not log files expired; reported under ``iceberg``.
5. ``checkpointProtection``: when the cleanup would stop before
   ``delta.requireCheckpointProtectionBeforeVersion``, it proceeds only if deltalog
   supports every protocol in the history it deletes (the RFC's exception b).

Files go oldest version first and sidecars last, so a crash part-way leaves the kept
versions exactly as readable as before and a rerun finishes the job. The plan (dry
run) lists every file with its size and the oldest version kept.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from deltalog._flags import require_bools
from deltalog.errors import (
    CorruptCheckpointError,
    CorruptLogError,
    DeltaLogError,
    StorageError,
    UnsupportedProtocolError,
)
from deltalog.log.action_checks import check_protocol
from deltalog.log.checkpoint_reader import (
    check_file_actions,
    log_name,
    read_checkpoint_small_actions,
    read_protocol_and_metadata,
)
from deltalog.log.commit_lines import check_commits, parse_action
from deltalog.log.history import CommitTimestamps, format_ms, ict_enablement_version
from deltalog.log.listing import LAST_CHECKPOINT, SIDECARS_DIR, LogListing, build_segment, list_log
from deltalog.log.snapshot import read_commit_files
from deltalog.log_maintenance.app_transactions import TxnHistory
from deltalog.log_maintenance.last_checkpoint import describe_checkpoint
from deltalog.protocol.features import Operation
from deltalog.protocol.properties import (
    DAY_MS,
    DEFAULT_LOG_RETENTION,
    checkpoint_protection_version,
    config_bool,
    config_interval_ms,
)
from deltalog.protocol.table_protocol import Protocol, check_writable
from deltalog.protocol.uniform import uniform_iceberg_enabled
from deltalog.protocol.write_gate import check_can_write
from deltalog.storage.filesystem import FileInfo, Storage
from deltalog.storage.table_ref import TableRef, table_storage

log = logging.getLogger(__name__)

STAGED_COMMITS_DIR = "_staged_commits"
_STAGED_RE = re.compile(r"^(\d{20})\.[0-9a-fA-F-]+\.json$")
_TEMP_RE = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")
#: Deletion order within one version (sidecars and leftovers go after every checkpoint).
_KIND_ORDER = {
    "checksum": -1,
    "commit": 0,
    "crc": 1,
    "checkpoint": 2,
    "compacted": 3,
    "staged": 4,
    "temp": 5,
    "sidecar": 6,
}


@dataclass(frozen=True)
class LogCleanupResult:
    """The cleanup plan (dry run) or what was deleted."""

    dry_run: bool
    latest_version: int
    enabled: bool = True
    log_retention: str = DEFAULT_LOG_RETENTION
    cutoff_timestamp: int | None = None  # ms since the epoch (midnight UTC)
    cutoff_time: str | None = None
    cutoff_commit: int | None = None
    cutoff_checkpoint: int | None = None
    oldest_version_kept: int | None = None  # the oldest version that can still be read
    commits_kept_for_timestamps: int = 0  # older commit files kept so kept commits' timestamps stay put
    files: list[str] = field(default_factory=list)  # names inside _delta_log, in deletion order
    num_files: int = 0
    bytes: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)  # kind of log file -> how many
    num_deleted: int = 0
    skipped_reason: str | None = None
    duration_seconds: float = 0.0
    #: UniForm: the Iceberg snapshot expiry (``IcebergExpiryResult.to_dict()``), None without Iceberg metadata.
    iceberg: dict[str, Any] | None = None

    def summary_line(self) -> str:
        """One line for logs and the CLI."""
        iceberg = ""
        if self.iceberg and not self.iceberg.get("skipped_reason"):
            verb = "would expire" if self.dry_run else "expired"
            iceberg = f"; Iceberg: {verb} {len(self.iceberg.get('expired') or [])} snapshot(s)"
        if self.skipped_reason:
            return f"log cleanup: nothing deleted: {self.skipped_reason}{iceberg}"
        verb = "would delete" if self.dry_run else "deleted"
        count = self.num_files if self.dry_run else self.num_deleted
        return (
            f"log cleanup: {verb} {count} files ({self.bytes} bytes) older than {self.cutoff_time}; "
            f"oldest version kept: {self.oldest_version_kept}, table at version {self.latest_version}{iceberg}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        """Everything but the file list (for post-commit hook details)."""
        out = self.to_dict()
        out.pop("files")
        return out


@dataclass
class _Doomed:
    kind: str
    version: int
    file: FileInfo


def _midnight_utc(ms: int) -> int:
    day = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).date()
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp() * 1000)


def log_expiry_cutoff(configuration: dict[str, str], now_ms: int) -> int:
    """Log files older than this (ms) have expired: ``delta.logRetentionDuration`` before now, at midnight UTC
    (Delta Spark truncates the cutoff to the day, so a day's commits expire together)."""
    return _midnight_utc(
        now_ms - config_interval_ms(configuration, "delta.logRetentionDuration", DEFAULT_LOG_RETENTION)
    )


#: How often cleanup plans again when log files vanish while it plans (another cleanup running).
_REPLANS = 3


def cleanup_log(
    table: TableRef,
    *,
    dry_run: bool = False,
    now_ms: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> LogCleanupResult:
    """Delete the expired log files of ``table`` (or, with ``dry_run``, only say which).

    Checks the protocol before anything else, honours ``delta.enableExpiredLogCleanup``
    (a disabled table is reported as skipped) and never deletes anything when no
    checkpoint qualifies as the cutoff checkpoint. ``now_ms`` fixes the clock (tests).

    Another cleanup (a writer's post-commit hook, say) may delete log files while this
    one plans from its listing; planning then starts again from a fresh listing.
    ``table`` may also be a ``Storage``: the post-commit cleanup passes the committer's.
    """
    require_bools(dry_run=dry_run)
    storage = table_storage(table, storage_options)
    for attempt in range(1, _REPLANS + 1):
        try:
            seen: dict[str, Any] = {}
            result = _cleanup_log(storage, dry_run, now_ms, seen)
            return _with_iceberg_expiry(storage, result, seen.get("configuration") or {}, dry_run, now_ms)
        except FileNotFoundError as exc:
            if attempt == _REPLANS:
                raise StorageError(
                    f"log cleanup gave up: log files kept vanishing while it planned ({exc}); is another cleanup "
                    "running? Rerun it later"
                ) from None
            log.info("log cleanup: %s vanished while planning (a concurrent cleanup?); planning again", exc.filename)
    raise AssertionError("unreachable")


def _with_iceberg_expiry(
    storage: Storage, result: LogCleanupResult, configuration: dict[str, str], dry_run: bool, now_ms: int | None
) -> LogCleanupResult:
    """Expire Iceberg snapshots past the retention (UniForm) beside the log cleanup."""
    if not uniform_iceberg_enabled(configuration) and not storage.exists(storage.join("metadata", "version-hint.text")):
        return result  # no Iceberg metadata of deltalog's: nothing to expire (and pyiceberg is not loaded)
    from deltalog.uniform.expire import expire_iceberg_snapshots

    expiry = expire_iceberg_snapshots(storage, configuration, dry_run=dry_run, now_ms=now_ms)
    return dataclasses.replace(result, iceberg=expiry.to_dict())


def _cleanup_log(storage: Storage, dry_run: bool, now_ms: int | None, seen: dict[str, Any]) -> LogCleanupResult:
    started = time.perf_counter()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    listing = list_log(storage)
    latest = listing.latest_version
    assert latest is not None
    protocol, metadata = read_protocol_and_metadata(storage, listing)
    check_can_write(storage, protocol, "clean up the log", Operation.LOG_CLEANUP, metadata.configuration, commits=False)
    # Refuse the log every other command refuses, and never delete what an unreadable newest
    # checkpoint would need to be rebuilt from.
    check_file_actions(storage, build_segment(listing))
    conf = metadata.configuration
    seen["configuration"] = conf
    # The result's fields as the cleanup learns them; frozen into a LogCleanupResult by done().
    found: dict[str, Any] = {
        "log_retention": conf.get("delta.logRetentionDuration", DEFAULT_LOG_RETENTION),
        "enabled": config_bool(conf, "delta.enableExpiredLogCleanup", True),
    }

    def done(reason: str | None = None) -> LogCleanupResult:
        if reason:
            log.info("log cleanup of %s: nothing deleted: %s", storage.uri, reason)
        return LogCleanupResult(
            dry_run=dry_run,
            latest_version=latest,
            skipped_reason=reason,
            duration_seconds=round(time.perf_counter() - started, 3),
            **found,
        )

    if not found["enabled"]:
        return done("delta.enableExpiredLogCleanup is false")
    cutoff = log_expiry_cutoff(conf, now)
    found.update(cutoff_timestamp=cutoff, cutoff_time=format_ms(cutoff))

    stamps = CommitTimestamps(storage, listing, ict_enablement_version(conf))
    try:
        cutoff_commit = stamps.version_at(cutoff)
    except DeltaLogError:
        return done(f"no commit is older than the cutoff {format_ms(cutoff)}")
    found["cutoff_commit"] = cutoff_commit

    txn_history = TxnHistory(storage, listing, stamps, conf, now)
    checkpoint, why_not = _choose_cutoff_checkpoint(storage, listing, cutoff_commit, txn_history)
    if checkpoint is None:
        return done(why_not)
    found.update(cutoff_checkpoint=checkpoint, oldest_version_kept=checkpoint)

    protected = checkpoint_protection_version(protocol, conf)
    if protected > checkpoint:
        unsupported = _unsupported_history(storage, listing, checkpoint)
        if unsupported:
            return done(
                f"checkpointProtection: the cleanup would keep history from version {checkpoint}, before "
                f"delta.requireCheckpointProtectionBeforeVersion={protected}, and {unsupported}"
            )

    keep_from = first_commit_to_keep(listing, stamps, checkpoint)
    doomed = _plan(storage, listing, checkpoint, keep_from, cutoff, now)
    by_kind: dict[str, int] = {}
    for d in doomed:
        by_kind[d.kind] = by_kind.get(d.kind, 0) + 1
    found.update(
        commits_kept_for_timestamps=checkpoint - keep_from,
        files=[log_name(storage, d.file.path) for d in doomed],
        num_files=len(doomed),
        bytes=sum(d.file.size for d in doomed),
        by_kind=by_kind,
    )
    if not doomed:
        return done("nothing has expired: no log file is older than the cutoff checkpoint")
    if dry_run:
        return done()

    _repoint_hint(storage, listing, checkpoint)
    log.info("log cleanup of %s: deleting %d files before version %d", storage.uri, len(doomed), checkpoint)
    found["num_deleted"] = 0
    for d in doomed:
        try:
            if storage.delete(d.file.path):
                found["num_deleted"] += 1
        except OSError as exc:
            raise StorageError(
                f"log cleanup stopped after deleting {found['num_deleted']} of {len(doomed)} files: "
                f"cannot delete {log_name(storage, d.file.path)}: {exc} (the table stays readable; rerun to finish)"
            ) from None
    return done()


def _choose_cutoff_checkpoint(
    storage: Storage, listing: LogListing, cutoff_commit: int, txn_history: TxnHistory
) -> tuple[int | None, str]:
    """The newest checkpoint at or before ``cutoff_commit`` that is safe to keep as the oldest state."""
    candidates = sorted((v for v in listing.checkpoints if v <= cutoff_commit), reverse=True)
    if not candidates:
        return None, f"no checkpoint at or before the cutoff commit {cutoff_commit}"
    reasons = []
    for version in candidates:
        reason = _unsuitable(storage, listing, version)
        if reason is None:
            reason = txn_history.lost_by(version)
            if reason is None:
                return version, ""
            # A checkpoint written elsewhere (or on another clock) dropped a live txn: say so loudly.
            log.warning("checkpoint %d cannot be the cutoff checkpoint: %s", version, reason)
        else:
            log.info("checkpoint %d cannot be the cutoff checkpoint: %s", version, reason)
        reasons.append(f"version {version}: {reason}")
    return None, "no usable checkpoint at or before the cutoff commit (" + "; ".join(reasons[:3]) + ")"


def _unsuitable(storage: Storage, listing: LogListing, version: int) -> str | None:
    """Why the checkpoint at ``version`` must not become the oldest kept state, or None if it may."""
    for cp in listing.checkpoints[version]:
        try:
            describe_checkpoint(storage, cp)
        except CorruptCheckpointError as exc:
            return f"it cannot be read back ({exc})"
    kept = _without(listing, version)
    try:
        build_segment(kept, version)
        build_segment(kept)
    except DeltaLogError as exc:
        return f"the commits after it do not rebuild the table ({exc})"
    return None


def _without(listing: LogListing, version: int) -> LogListing:
    """The listing as it will be once everything before ``version`` is gone (for the readability check)."""
    return LogListing(
        commits={v: f for v, f in listing.commits.items() if v >= version},
        checkpoints={v: c for v, c in listing.checkpoints.items() if v >= version},
        crc={v: f for v, f in listing.crc.items() if v >= version},
        last_checkpoint=listing.last_checkpoint,
    )


def _unsupported_history(storage: Storage, listing: LogListing, checkpoint: int) -> str | None:
    """A description of the first protocol up to ``checkpoint`` deltalog cannot write, or None."""
    oldest = listing.oldest_reconstructable_version()
    protocols: list[tuple[int, dict[str, Any]]] = []
    if oldest is not None and oldest not in listing.commits and oldest in listing.checkpoints:
        for cp in listing.checkpoints[oldest]:
            small = read_checkpoint_small_actions(storage, cp, ("protocol",))
            protocols += [(oldest, p) for p in small.get("protocol", [])]
    versions = sorted(c for c in listing.commits if c <= checkpoint)
    files = [listing.commits[v] for v in versions]
    contents = read_commit_files(storage, files)
    check_commits((f.name, data) for f, data in zip(files, contents))
    for v, f, data in zip(versions, files, contents):
        for lineno, line in enumerate(data.split(b"\n"), start=1):
            if b'"protocol"' in line[:24]:
                protocols.append((v, parse_action(line, f.name, lineno)["protocol"]))
    for v, action in protocols:
        try:
            check_protocol(action, f"version {v}")  # an older protocol is not checked when the table is read
            check_writable(Protocol.from_action(action), "clean up the log", Operation.LOG_CLEANUP)
        except CorruptLogError as exc:
            return f"version {v} has an invalid protocol ({exc})"
        except UnsupportedProtocolError as exc:
            return f"version {v} has a protocol deltalog does not support ({exc})"
    return None


def first_commit_to_keep(listing: LogListing, stamps: CommitTimestamps, checkpoint: int) -> int:
    """The oldest commit file to keep so that no kept commit's timestamp changes.

    Without in-commit timestamps a commit's timestamp is its file time raised, when
    needed, to 1 ms after its predecessor's; deleting that predecessor would lower it
    and move timestamp-based time travel. Like Delta Spark, the commits before the
    cutoff checkpoint that such a chain needs are kept (their versions are no longer
    reconstructable, their timestamps still anchor the chain).
    """
    keep = checkpoint
    while keep - 1 in listing.commits and keep in listing.commits:
        if stamps.ict_from is not None and keep >= stamps.ict_from:
            break
        if listing.commits[keep].modification_time == stamps(keep):
            break
        keep -= 1
    return keep


def _plan(
    storage: Storage, listing: LogListing, checkpoint: int, keep_commits_from: int, cutoff: int, now: int
) -> list[_Doomed]:
    """Every file to delete when ``checkpoint`` becomes the oldest kept version, in deletion order."""
    doomed = [_Doomed("commit", v, f) for v, f in listing.commits.items() if v < keep_commits_from]
    doomed += [_Doomed("crc", v, f) for v, f in listing.crc.items() if v < checkpoint]
    for v, cps in listing.checkpoints.items():
        if v < checkpoint:
            doomed += [_Doomed("checkpoint", v, f) for cp in cps for f in cp.files]
    for v, parts in listing.incomplete_checkpoints.items():
        if v < checkpoint:
            doomed += [_Doomed("checkpoint", v, f) for f in parts]
    doomed += [_Doomed("compacted", start, f) for start, _end, f in listing.compacted if start <= checkpoint]
    for f in storage.list_dir(storage.join("_delta_log", STAGED_COMMITS_DIR)):
        m = _STAGED_RE.match(f.name)
        if m and int(m.group(1)) <= checkpoint:
            doomed.append(_Doomed("staged", int(m.group(1)), f))
    leftover_cutoff = min(cutoff, _midnight_utc(now) - DAY_MS)
    doomed += [
        _Doomed("temp", -1, f) for f in listing.other if _TEMP_RE.match(f.name) and _older_than(f, leftover_cutoff)
    ]
    doomed += _checksums_of(doomed, listing.other)
    doomed.sort(key=lambda d: (d.version, _KIND_ORDER[d.kind], d.file.path))
    sidecars = _doomed_sidecars(storage, listing, checkpoint, leftover_cutoff)
    return doomed + sidecars


def checksum_name(name: str) -> str:
    """The Hadoop checksum side file of ``name`` (``.<name>.crc``), which Hadoop's local filesystem
    writes beside every file it creates and deletes with it."""
    return f".{name}.crc"


def _checksums_of(doomed: list[_Doomed], others: list[FileInfo]) -> list[_Doomed]:
    """The Hadoop checksum side files of ``doomed`` files, deleted just before each (as Hadoop does).

    Without this, a log Delta Spark wrote on a local or HDFS path would keep an orphan
    ``.<name>.crc`` for every deleted file. A checksum of a kept file is never touched.
    """
    by_name = {f.name: f for f in others}
    out = []
    for d in doomed:
        side = by_name.get(checksum_name(d.file.name))
        if side is not None:
            out.append(_Doomed("checksum", d.version, side))
    return out


def _older_than(f: FileInfo, cutoff: int) -> bool:
    """Whether a listed file is older than ``cutoff``; False when it is gone since the listing.

    Local listings stat lazily, and a concurrent writer's temp file (a checkpoint being
    published right now) disappears when it is renamed into place.
    """
    try:
        return f.modification_time < cutoff
    except FileNotFoundError:
        return False


def _doomed_sidecars(storage: Storage, listing: LogListing, checkpoint: int, older_than: int) -> list[_Doomed]:
    """Sidecars (and temp files) in ``_sidecars`` that no kept checkpoint references and that are old enough.

    The age limit protects sidecars of a checkpoint being written right now, whose
    top-level file does not exist yet (PROTOCOL.md, Metadata Cleanup step 5).
    """
    files = storage.list_dir(storage.join("_delta_log", SIDECARS_DIR))
    if not files:
        return []
    referenced: set[str] = set()
    for v, cps in listing.checkpoints.items():
        if v < checkpoint:
            continue
        for cp in cps:
            try:
                small = read_checkpoint_small_actions(storage, cp, ("sidecar",))
            except CorruptCheckpointError:
                # Cannot tell what it references: keep every sidecar rather than guess.
                log.warning("keeping all sidecars: checkpoint %s is unreadable", cp.files[0].name)
                return []
            referenced.update(str(s.get("path", "")).rsplit("/", 1)[-1] for s in small.get("sidecar", []))
    names = {f.name for f in files}
    doomed = []
    for f in sorted(files, key=lambda f: f.name):
        owner = f.name[1:-4] if f.name.startswith(".") and f.name.endswith(".crc") else None
        if owner is not None and owner in names:
            continue  # a sidecar's checksum side file goes with its sidecar, below
        if f.name not in referenced and f.modification_time < older_than:
            doomed.append(_Doomed("sidecar", -1, f))
    return _checksums_of(doomed, files) + doomed


def _repoint_hint(storage: Storage, listing: LogListing, checkpoint: int) -> None:
    """Point ``_last_checkpoint`` at the cutoff checkpoint if it names one about to be deleted."""
    hint = listing.last_checkpoint
    if hint is None or hint.get("version", -1) >= checkpoint:
        return
    preferred = listing.preferred_checkpoint(checkpoint)
    doc = describe_checkpoint(storage, preferred).last_checkpoint
    storage.write_atomic(storage.join("_delta_log", LAST_CHECKPOINT), json.dumps(doc, separators=(",", ":")).encode())


__all__ = ["LogCleanupResult", "cleanup_log", "log_expiry_cutoff"]
