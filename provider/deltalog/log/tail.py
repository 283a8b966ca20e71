"""The new end of a table's log: which versions follow a position, and what each of them did.

What a watcher of a table polls (``deltalog.log.commit_watch``, the Airflow trigger of issue 42).
A poll never replays the log or loads a snapshot: it lists ``_delta_log`` from the last version it
saw on (on S3 and GCS one LIST that starts there, :meth:`Storage.list_log_after`; on a local disk
two ``stat`` calls while nothing is new) and reads only the new commit files, each into a
:class:`CommitSummary` (its commitInfo, how many files it added and removed, their bytes).

What a poll can find besides new commits is a :class:`TailProblem`, never a guess:

* ``gap``: commit ``N`` is missing while a later one exists. Versions are contiguous in a Delta
  log, so the commits after the hole are not reported until it fills (a store that lists a new
  object late) or forever (a damaged log);
* ``corrupt``: a new commit file is not readable as Delta actions (a torn or merged line, an empty
  file). The commits before it are reported, it and those after it are not;
* ``replaced``: the commit file of the last version seen changed, or the log no longer reaches that
  version: another table now lives at the location (deleted and created again, or rewritten);
  :attr:`LogTail.restart` says where the new table's log begins;
* ``missing``: the location is gone; ``not_delta``: the location holds files but no ``_delta_log``
  with commits (the table stopped being Delta).

Access failures (the store unreachable, credentials refused or expired) are exceptions, as for
every other read, so a caller's retry policy applies; :func:`access_problem` names them for a
watcher that keeps going.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

from deltalog.errors import CorruptLogError, DeltaLogError, StorageError
from deltalog.log.commit_lines import parse_commit
from deltalog.log.listing import commit_name
from deltalog.log.snapshot import read_commit_files
from deltalog.storage.filesystem import FileInfo, Storage

__all__ = [
    "APPEND_OPERATIONS",
    "CommitSummary",
    "LogPosition",
    "LogTail",
    "MAX_COMMITS_PER_POLL",
    "TAIL_PROBLEMS",
    "TailProblem",
    "access_problem",
    "latest_position",
    "read_tail",
    "summarize_commit",
]

#: What a poll may report instead of (or after) new commits; the first two come from exceptions.
TAIL_PROBLEMS = ("unreachable", "denied", "missing", "not_delta", "replaced", "gap", "corrupt")
#: commitInfo operations that append data and nothing else when they remove no file (Delta Spark's and
#: delta-rs's names): with ``isBlindAppend`` absent, such a commit without removes is a blind append.
APPEND_OPERATIONS = frozenset({"WRITE", "STREAMING UPDATE", "COPY INTO", "CREATE TABLE", "CREATE OR REPLACE TABLE"})
#: New commits read by one poll at most; a longer backlog is read by the next polls.
MAX_COMMITS_PER_POLL = 1000
#: Words of an error message that mean the store refused the credentials (they are wrong, or expired).
_DENIED_WORDS = (
    "403",
    "accessdenied",
    "access denied",
    "forbidden",
    "expiredtoken",
    "expired token",
    "token has expired",
    "invalidaccesskeyid",
    "signaturedoesnotmatch",
    "authorizationfailure",
    "authenticationfailed",
    "invalid_grant",
    "nocredentials",
    "unable to locate credentials",
)


@dataclass(frozen=True)
class LogPosition:
    """A version a watcher has seen (-1: none, the table did not exist yet) and its commit file then.

    ``size``, ``modified_ms`` and ``crc32`` of the commit file let the next poll tell "nothing new
    since" from "another table now lives here" without reading the file again while it is unchanged.
    """

    version: int
    size: int | None = None
    modified_ms: int | None = None
    crc32: int | None = None

    def summary_line(self) -> str:
        """``version 12`` or ``before the table's first commit``."""
        return f"version {self.version}" if self.version >= 0 else "before the table's first commit"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LogPosition:
        """The position ``to_dict`` wrote; ValueError for anything else (a damaged record)."""
        if (
            not isinstance(data, dict)
            or isinstance(data.get("version"), bool)
            or not isinstance(data.get("version"), int)
        ):
            raise ValueError(f"not a log position: {data!r}")
        values = {k: data.get(k) for k in ("size", "modified_ms", "crc32")}
        if any(v is not None and (isinstance(v, bool) or not isinstance(v, int)) for v in values.values()):
            raise ValueError(f"not a log position: {data!r}")
        return cls(int(data["version"]), **values)


@dataclass(frozen=True)
class CommitSummary:
    """What one commit did, from its own file: the commitInfo's operation and writer, files and bytes.

    ``blind_append``: the commit only added files (no remove, no metadata or protocol change) and
    says so (``isBlindAppend``), or says nothing and is an append operation (:data:`APPEND_OPERATIONS`);
    a commit with ``isBlindAppend: false`` never is.
    """

    version: int
    timestamp_ms: int
    operation: str | None
    engine_info: str | None
    blind_append: bool
    files_added: int
    bytes_added: int
    files_removed: int
    bytes_removed: int
    changes_metadata: bool
    size: int
    modified_ms: int
    crc32: int

    @property
    def position(self) -> LogPosition:
        return LogPosition(self.version, self.size, self.modified_ms, self.crc32)

    def summary_line(self) -> str:
        """``version 7: WRITE by Apache-Spark/4.1.0 Delta-Lake/4.0.0, +3 files (1024 bytes), -0``."""
        by = f" by {self.engine_info}" if self.engine_info else ""
        return (
            f"version {self.version}: {self.operation or 'no commitInfo'}{by}, +{self.files_added} files "
            f"({self.bytes_added} bytes), -{self.files_removed} files"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TailProblem:
    """Why a poll reports no (more) commits: one of :data:`TAIL_PROBLEMS`, a sentence, the version concerned."""

    kind: str
    message: str
    version: int | None = None

    def summary_line(self) -> str:
        return f"{self.kind}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LogTail:
    """What one poll found after ``position``: the next commits in order, the newest version listed, a problem.

    ``commits`` are contiguous from ``position.version + 1``. ``restart`` is set with a ``replaced``
    problem: the position to watch the new table from (its log's start).
    """

    position: LogPosition
    commits: tuple[CommitSummary, ...] = ()
    latest_listed: int | None = None
    problem: TailProblem | None = None
    restart: LogPosition | None = None
    files_listed: int = 0
    commits_read: int = field(default=0)
    #: False when a local poll took the two-``stat`` shortcut (nothing new): a hole further on is not seen then.
    listed: bool = True

    @property
    def end(self) -> LogPosition:
        """Where the next poll starts: the last new commit, else where this one started."""
        return self.commits[-1].position if self.commits else self.position

    def summary_line(self) -> str:
        new = f"versions {self.commits[0].version}..{self.commits[-1].version}" if self.commits else "nothing new"
        problem = f"; {self.problem.summary_line()}" if self.problem else ""
        return f"after {self.position.summary_line()}: {new}{problem}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _version_of(name: str) -> int | None:
    """The version of a ``<20 digits>.json`` commit file name."""
    if len(name) == 25 and name.endswith(".json") and name[:20].isascii() and name[:20].isdigit():
        return int(name[:20])
    return None


def _versioned(name: str) -> int | None:
    """The version any file named after one carries (a commit, checkpoint, checksum, compaction)."""
    head = name[:20]
    return int(head) if len(name) > 21 and name[20] == "." and head.isascii() and head.isdigit() else None


def summarize_commit(version: int, data: bytes, info: FileInfo) -> CommitSummary:
    """The :class:`CommitSummary` of one commit file's bytes; CorruptLogError when it is not Delta actions."""
    name = info.name
    if not data.strip():
        raise CorruptLogError(f"{name} is empty: no Delta action in it")
    actions = parse_commit(data, name)
    commit_info: dict[str, Any] = {}
    added = removed = bytes_added = bytes_removed = 0
    changes_metadata = False
    for action in actions:
        kind, body = next(iter(action.items()))
        if kind == "add":
            added += 1
            bytes_added += _size(body)
        elif kind == "remove":
            removed += 1
            bytes_removed += _size(body)
        elif kind == "commitInfo":
            commit_info = body
        elif kind in ("metaData", "protocol"):
            changes_metadata = True
    operation = commit_info.get("operation")
    operation = operation if isinstance(operation, str) else None
    engine = commit_info.get("engineInfo")
    claimed = commit_info.get("isBlindAppend")
    if removed or changes_metadata or claimed is False:
        blind = False
    else:
        blind = claimed is True or (
            claimed is None and operation is not None and operation.upper() in APPEND_OPERATIONS
        )
    stamp = commit_info.get("inCommitTimestamp", commit_info.get("timestamp"))
    timestamp = stamp if isinstance(stamp, int) and not isinstance(stamp, bool) else info.modification_time
    return CommitSummary(
        version=version,
        timestamp_ms=int(timestamp),
        operation=operation,
        engine_info=engine if isinstance(engine, str) else None,
        blind_append=blind,
        files_added=added,
        bytes_added=bytes_added,
        files_removed=removed,
        bytes_removed=bytes_removed,
        changes_metadata=changes_metadata,
        size=info.size,
        modified_ms=info.modification_time,
        crc32=zlib.crc32(data),
    )


def _size(body: dict[str, Any]) -> int:
    size = body.get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else 0


def latest_position(storage: Storage) -> LogPosition:
    """Where a new watcher starts: the table's newest commit (one listing of its log), or -1 before it exists.

    A location without a log yet (a table still to be created, a folder that is not Delta) starts
    at -1: its first commit will be new. Access failures raise (StorageError).
    """
    files = storage.list_dir(storage.log_dir)
    commits = {v: f for f in files if (v := _version_of(f.name)) is not None}
    if not commits:
        return LogPosition(-1)
    newest = max(commits)
    info = commits[newest]
    return LogPosition(newest, info.size, info.modification_time, zlib.crc32(storage.read_bytes(info.path)))


def _local_unchanged(storage: Storage, position: LogPosition) -> bool:
    """On a local disk: the last commit seen is as it was and the next one does not exist (two ``stat`` calls).

    The common answer of an idle table, without listing a log of thousands of entries. Anything else
    (a change, a new commit, a hole to look for) falls through to the listing.
    """
    import os

    if position.version < 0 or position.size is None:
        return False
    try:
        st = os.stat(storage.join("_delta_log", commit_name(position.version)))
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StorageError(f"cannot read {storage.log_dir}: {exc}") from None
    if st.st_size != position.size or int(st.st_mtime * 1000) != position.modified_ms:
        return False
    return not os.path.exists(storage.join("_delta_log", commit_name(position.version + 1)))


def read_tail(
    storage: Storage, position: LogPosition, *, max_commits: int = MAX_COMMITS_PER_POLL, thorough: bool = False
) -> LogTail:
    """The commits after ``position`` (at most ``max_commits``), read from their own files (module doc).

    On a local disk a poll that finds the last commit unchanged and no next one stops there (two ``stat``
    calls); ``thorough`` lists the log anyway, so that a hole further on is seen (a watcher asks for that
    now and then). Raises what the store raises (StorageError, OSError): unreachable, credentials refused.
    """
    if storage.is_local and not thorough and _local_unchanged(storage, position):
        return LogTail(position, listed=False)
    after = commit_name(position.version - 1) if position.version >= 1 else ""
    files = storage.list_log_after(after)
    commits = {v: f for f in files if (v := _version_of(f.name)) is not None}
    others = [v for f in files if (v := _versioned(f.name)) is not None]
    latest = max(commits) if commits else None
    listed = len(files)
    expected = position.version + 1
    if position.version >= 0:
        checked = _check_position(storage, position, commits, bool(others))
        if isinstance(checked, LogPosition):
            position = checked  # the same commit, touched: its new size and time are what the next poll expects
        elif checked is not None:
            replaced, restart = checked
            return LogTail(position, latest_listed=latest, problem=replaced, restart=restart, files_listed=listed)
    elif commits and 0 not in commits:
        expected = min(commits)  # a table that appeared with its oldest commits cleaned up: its log starts here
    new: list[FileInfo] = []
    while expected in commits and len(new) < max_commits:
        new.append(commits[expected])
        expected += 1
    problem: TailProblem | None = None
    later = [v for v in commits if v > expected]
    if later and expected not in commits:
        problem = TailProblem(
            "gap",
            f"commit {expected} ({commit_name(expected)}) is missing while commit {min(later)} exists: "
            "versions after the hole are not reported until it is filled",
            expected,
        )
    summaries: list[CommitSummary] = []
    try:
        contents = read_commit_files(storage, new)
    except FileNotFoundError as exc:  # removed between the listing and the read
        contents = []
        problem = TailProblem("missing", f"a commit file vanished while it was read: {exc}", None)
    for info, data in zip(new, contents):
        version = _version_of(info.name)
        assert version is not None
        try:
            summaries.append(summarize_commit(version, data, info))
        except CorruptLogError as exc:
            problem = TailProblem("corrupt", f"commit {version} cannot be read: {exc}", version)
            break
    return LogTail(
        position,
        tuple(summaries),
        latest_listed=latest,
        problem=problem,
        files_listed=listed,
        commits_read=len(summaries),
    )


def _check_position(
    storage: Storage, position: LogPosition, commits: dict[int, FileInfo], versioned_files: bool
) -> tuple[TailProblem, LogPosition | None] | LogPosition | None:
    """None while the log still continues from ``position`` (a position when only its file's time or size
    as listed changed, its bytes not); else the problem and the new table's start."""
    mine = commits.get(position.version)
    if mine is not None:
        if position.size is None or (mine.size, mine.modification_time) == (position.size, position.modified_ms):
            return None
        data = storage.read_bytes(mine.path)
        if zlib.crc32(data) == position.crc32:
            return LogPosition(position.version, mine.size, mine.modification_time, position.crc32)
        return (
            TailProblem(
                "replaced",
                f"commit {position.version} is no longer the file seen before: another table now lives here "
                "(deleted and created again, or its log rewritten)",
                position.version,
            ),
            LogPosition(-1),
        )
    if any(v > position.version for v in commits) or versioned_files:
        return None  # the log continues (log cleanup removed the commit file of this version)
    gone = _absence(storage, position)
    if gone is not None:
        return gone, None
    # The log exists but no longer reaches this version: a new table with fewer versions, or a log cut back.
    return (
        TailProblem(
            "replaced",
            f"the log no longer reaches version {position.version}: another table now lives here "
            "(deleted and created again, or its log rewritten)",
            position.version,
        ),
        LogPosition(-1),
    )


def _absence(storage: Storage, position: LogPosition) -> TailProblem | None:
    """``missing`` or ``not_delta`` when the log holds no commit at all, else None (one more listing)."""
    every = storage.list_dir(storage.log_dir)
    if any(_version_of(f.name) is not None for f in every):
        return None
    if not storage.root_exists():
        return TailProblem("missing", f"the table is gone: {storage.uri} does not exist", None)
    return TailProblem(
        "not_delta",
        f"{storage.uri} is no longer a Delta table: no commit in {storage.log_dir}",
        None,
    )


def access_problem(exc: BaseException) -> TailProblem:
    """A failed poll's exception as a :class:`TailProblem`: ``denied`` when the store refused the credentials
    (wrong or expired), else ``unreachable``."""
    text = f"{type(exc).__name__}: {exc}"
    lowered = text.lower().replace("_", "")
    if any(word.replace("_", "") in lowered for word in _DENIED_WORDS):
        return TailProblem("denied", f"the store refused the credentials ({_short(text)})")
    if isinstance(exc, DeltaLogError) and not isinstance(exc, StorageError):
        return TailProblem("unreachable", _short(text))
    return TailProblem("unreachable", f"cannot reach the table ({_short(text)})")


def _short(text: str, limit: int = 300) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."
