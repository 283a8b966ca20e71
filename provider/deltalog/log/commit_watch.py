"""A table's commits as events: which new versions to announce, when, and what to say about bad logs.

The decisions behind the Airflow watcher of issue 42 (``deltalog_provider.triggers.delta_log``), with
no I/O and no clock of its own, so that tests drive it with handmade logs and chosen times. A
:class:`CommitWatch` is fed what each poll found (:func:`deltalog.log.tail.read_tail`) and answers:

* **which versions are new**: those after the last version announced (``fired``), contiguous;
* **when to announce them** (debouncing, :class:`WatchSettings`): once no new commit came for
  ``quiet_seconds``, or ``max_commits`` are waiting, or the first of them has waited
  ``max_wait_seconds`` (a table that commits every second still gets an event every few minutes, not
  one per commit). Commits of ``quiet_operations`` (compactions, vacuums: maintenance, ours included)
  never start an event; they are reported in the next one, so every version is in exactly one event;
* **what the event says** (:class:`CommitRange`): the versions, their operations and writers
  (``engineInfo``), files and bytes added and removed, and whether any commit was not a blind append;
* **what to log about a bad table** (:class:`Notice`): one line when a problem has lasted
  ``grace_seconds`` (so a blip the next poll rides out leaves none), a reminder every ``problem_log_seconds``
  while it lasts, one line when it ends. A problem never produces an event: commits after a hole or a
  corrupt commit wait; a table replaced by another at the same location starts over from the new
  table's first commit (the event says ``replaced_table``), never mixing the two tables' versions.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import Any

from deltalog.errors import InvalidArgumentError
from deltalog.log.tail import CommitSummary, LogPosition, LogTail, TailProblem

__all__ = [
    "DEFAULT_QUIET_OPERATIONS",
    "EVENT_FORMAT",
    "CommitRange",
    "CommitWatch",
    "Notice",
    "WATCHER",
    "WatchSettings",
]

#: The operations of maintenance (Delta Spark's, delta-rs's and deltalog's names): their commits never start
#: an event on their own (maintaining a table must not start maintaining it again).
DEFAULT_QUIET_OPERATIONS = frozenset({"OPTIMIZE", "REORG", "VACUUM START", "VACUUM END"})
#: Names the events this module decides (``watcher`` of every event; a consumer tells them from others by it).
WATCHER = "deltalog.log_watch"
#: The event's layout; a change that drops or renames a key bumps it.
EVENT_FORMAT = 1
#: Versions listed by name in ``not_blind_append_versions`` at most (the count is always exact).
MAX_LISTED_VERSIONS = 50
#: A local table's log is listed whole at least this often (seconds), though two ``stat`` calls say
#: nothing is new: so that a hole after the next version is seen too.
THOROUGH_SECONDS = 600.0


@dataclass(frozen=True)
class WatchSettings:
    """How a watcher polls and debounces (docs/events.md has the defaults and their cost).

    :param poll_interval: seconds between polls of the log (one LIST on S3 each).
    :param quiet_seconds: announce once no new commit came for this long (0: at the first poll that sees one).
    :param max_commits: ... or once this many commits wait, whatever the quiet period.
    :param max_wait_seconds: ... or once the oldest waiting commit was seen this long ago.
    :param quiet_operations: commitInfo operations that never start an event (they ride along in the next one).
    :param grace_seconds: a problem is logged only once it lasts this long (a network blip, a store that lists
        a new object late, a writer that is not atomic, a table being created again): a blip the next poll
        rides out leaves no line. Nothing is announced past a problem meanwhile either way.
    :param problem_log_seconds: a problem still there is logged again this often (not once per poll).
    """

    poll_interval: float = 60.0
    quiet_seconds: float = 30.0
    max_commits: int = 100
    max_wait_seconds: float = 600.0
    quiet_operations: frozenset[str] = DEFAULT_QUIET_OPERATIONS
    grace_seconds: float = 120.0
    problem_log_seconds: float = 900.0

    def __post_init__(self) -> None:
        for name in ("poll_interval", "quiet_seconds", "max_wait_seconds", "grace_seconds", "problem_log_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
                raise InvalidArgumentError(f"{name} must be a number of seconds, at least 0, got {value!r}")
        if self.poll_interval < 0.01:
            raise InvalidArgumentError(f"poll_interval must be at least 0.01 seconds, got {self.poll_interval!r}")
        if isinstance(self.max_commits, bool) or not isinstance(self.max_commits, int) or self.max_commits < 1:
            raise InvalidArgumentError(f"max_commits must be a whole number, at least 1, got {self.max_commits!r}")
        if not all(isinstance(op, str) for op in self.quiet_operations):
            raise InvalidArgumentError(
                f"quiet_operations must be operation names, got {sorted(self.quiet_operations)!r}"
            )
        object.__setattr__(self, "quiet_operations", frozenset(op.upper() for op in self.quiet_operations))

    def summary_line(self) -> str:
        return (
            f"poll every {self.poll_interval:g}s; announce after {self.quiet_seconds:g}s quiet, "
            f"{self.max_commits} commits or {self.max_wait_seconds:g}s"
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["quiet_operations"] = sorted(self.quiet_operations)
        return out


@dataclass(frozen=True)
class CommitRange:
    """One event: versions ``from_version``..``to_version`` of ``table``, all of them, and what they did.

    ``operations`` and ``writers`` count the commits by commitInfo ``operation`` and ``engineInfo``
    (``"unknown"`` for a commit that names none). ``blind_append_only`` is False as soon as one commit
    removed a file, changed the metadata or protocol, said ``isBlindAppend: false`` or is not an append
    (:data:`deltalog.log.tail.APPEND_OPERATIONS`); those versions are listed (the first
    :data:`MAX_LISTED_VERSIONS`) and counted. ``reason``: ``quiet``, ``max_commits`` or ``max_wait``.
    """

    table: str
    from_version: int
    to_version: int
    commits: int
    operations: dict[str, int]
    writers: dict[str, int]
    files_added: int
    bytes_added: int
    files_removed: int
    bytes_removed: int
    blind_append_only: bool
    not_blind_append_commits: int
    not_blind_append_versions: tuple[int, ...]
    metadata_changed: bool
    first_commit_at: str | None
    last_commit_at: str | None
    reason: str
    replaced_table: bool = False
    watcher: str = WATCHER
    format: int = EVENT_FORMAT

    def summary_line(self) -> str:
        """``s3://b/t versions 5..9 (5 commits: WRITE 4, MERGE 1; +12 files, -3 files; not only blind appends)``."""
        ops = ", ".join(f"{op} {n}" for op, n in sorted(self.operations.items(), key=lambda kv: (-kv[1], kv[0])))
        blind = "blind appends only" if self.blind_append_only else "not only blind appends"
        return (
            f"{self.table} versions {self.from_version}..{self.to_version} ({self.commits} commits: {ops}; "
            f"+{self.files_added} files, -{self.files_removed} files; {blind})"
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["not_blind_append_versions"] = list(self.not_blind_append_versions)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> CommitRange:
        """An event's payload read back (an asset event's extra); ValueError when it is not one of ours."""
        if not isinstance(data, dict) or data.get("watcher") != WATCHER:
            raise ValueError("not an event of deltalog's log watcher")
        names = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in names}
        try:
            values["not_blind_append_versions"] = tuple(values.get("not_blind_append_versions") or ())
            event = cls(**values)
        except TypeError as exc:
            raise ValueError(f"an incomplete event of deltalog's log watcher: {exc}") from None
        if not (isinstance(event.from_version, int) and isinstance(event.to_version, int)):
            raise ValueError("an event of deltalog's log watcher without its versions")
        return event


@dataclass(frozen=True)
class Notice:
    """A line for the log: ``warning`` when a problem starts or lasts, ``info`` when it ends or for progress."""

    level: str
    message: str

    def summary_line(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Open:
    """A problem being reported: since when, how many polls, when it was last logged."""

    problem: TailProblem
    since: float
    polls: int = 1
    logged_at: float | None = None


class _ProblemLog:
    """One line per problem: when it starts (after ``grace``), every ``every`` seconds while it lasts, when it ends."""

    def __init__(self, table: str, every: float) -> None:
        self.table = table
        self.every = every
        self.open: dict[str, _Open] = {}

    def report(self, problem: TailProblem, now: float, grace: float = 0.0) -> Notice | None:
        entry = self.open.get(problem.kind)
        if entry is None or entry.problem.version != problem.version:
            entry = self.open[problem.kind] = _Open(problem, now, 0)
        entry.polls += 1
        entry.problem = problem
        if now - entry.since < grace:
            return None
        if entry.logged_at is None:
            entry.logged_at = now
            return Notice("warning", f"{self.table}: {problem.message}")
        if now - entry.logged_at >= self.every:
            entry.logged_at = now
            return Notice(
                "warning",
                f"{self.table}: still {problem.kind} ({entry.polls} polls in {now - entry.since:.0f}s): {problem.message}",
            )
        return None

    def resolve(self, kinds: set[str], now: float) -> list[Notice]:
        """Close every open problem not in ``kinds`` (a logged one gets its recovery line)."""
        out = []
        for kind in [k for k in self.open if k not in kinds]:
            entry = self.open.pop(kind)
            if entry.logged_at is not None:
                out.append(
                    Notice(
                        "info", f"{self.table}: {kind} resolved after {now - entry.since:.0f}s ({entry.polls} polls)"
                    )
                )
        return out


@dataclass
class _Pending:
    """The commits seen but not announced yet, folded (memory does not grow with their number)."""

    first: int | None = None
    last: CommitSummary | None = None
    commits: int = 0
    triggering: int = 0
    operations: dict[str, int] = field(default_factory=dict)
    writers: dict[str, int] = field(default_factory=dict)
    files_added: int = 0
    bytes_added: int = 0
    files_removed: int = 0
    bytes_removed: int = 0
    not_blind: list[int] = field(default_factory=list)
    not_blind_count: int = 0
    metadata_changed: bool = False
    first_ms: int | None = None
    last_ms: int | None = None
    first_trigger_seen: float | None = None
    last_trigger_seen: float | None = None

    def add(self, commit: CommitSummary, triggering: bool, now: float) -> None:
        if self.first is None:
            self.first = commit.version
        self.last = commit
        self.commits += 1
        op = commit.operation or "unknown"
        self.operations[op] = self.operations.get(op, 0) + 1
        writer = commit.engine_info or "unknown"
        self.writers[writer] = self.writers.get(writer, 0) + 1
        self.files_added += commit.files_added
        self.bytes_added += commit.bytes_added
        self.files_removed += commit.files_removed
        self.bytes_removed += commit.bytes_removed
        if not commit.blind_append:
            self.not_blind_count += 1
            if len(self.not_blind) < MAX_LISTED_VERSIONS:
                self.not_blind.append(commit.version)
        self.metadata_changed = self.metadata_changed or commit.changes_metadata
        self.first_ms = commit.timestamp_ms if self.first_ms is None else min(self.first_ms, commit.timestamp_ms)
        self.last_ms = commit.timestamp_ms if self.last_ms is None else max(self.last_ms, commit.timestamp_ms)
        if triggering:
            self.triggering += 1
            if self.first_trigger_seen is None:
                self.first_trigger_seen = now
            self.last_trigger_seen = now


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


class CommitWatch:
    """The watcher of one table (module doc). Times are seconds on one clock the caller chooses.

    ``fired`` is the last version announced: what a caller keeps durably, and what a watcher that
    restarts is made with, so that it announces every version after it exactly once more. ``position``
    is where the next poll lists from (the last version seen).
    """

    #: Shortest wait between two polls (a quiet period about to end is checked then, not earlier).
    MIN_POLL_SECONDS = 0.01

    def __init__(self, table: str, settings: WatchSettings, fired: LogPosition) -> None:
        self.table = table
        self.settings = settings
        self.fired = fired
        self.position = fired
        self._pending = _Pending()
        self._replaced = False
        self._problems = _ProblemLog(table, settings.problem_log_seconds)
        self._listed_at: float | None = None

    def start_at(self, fired: LogPosition) -> None:
        """Watch from ``fired`` (a watcher that could not read its table at start learns where it is later)."""
        self.fired = self.position = fired
        self._pending = _Pending()

    # --- what the polls found --------------------------------------------------------

    def observe(self, tail: LogTail, now: float) -> list[Notice]:
        """Take in one poll's result; the lines to log. ``fired`` may change (a replaced table): save it."""
        notices: list[Notice] = []
        if tail.listed:
            self._listed_at = now
        if tail.position.version == self.position.version:
            self.position = tail.position  # the same commit, its listed size or time refreshed
        for commit in tail.commits:
            if commit.version != self.position.version + 1:
                raise InvalidArgumentError(
                    f"{self.table}: a poll from {self.position.summary_line()} returned version {commit.version}"
                )
            triggering = (commit.operation or "").upper() not in self.settings.quiet_operations
            self._pending.add(commit, triggering, now)
            self.position = commit.position
        problem = tail.problem
        open_kinds = set() if problem is None else {problem.kind}
        notices += self._problems.resolve(open_kinds, now)
        if problem is None:
            return notices
        if problem.kind == "replaced":
            notices.append(
                Notice(
                    "warning",
                    f"{self.table}: {problem.message}; versions seen of the old table but not announced are dropped, "
                    "the new table is watched from its first commit",
                )
            )
            self._problems.open.pop("replaced", None)
            restart = tail.restart or LogPosition(-1)
            self.fired = self.position = restart
            self._pending = _Pending()
            self._replaced = True
            return notices
        notice = self._problems.report(problem, now, self.settings.grace_seconds)
        if notice is not None:
            notices.append(notice)
        return notices

    def failed(self, problem: TailProblem, now: float) -> list[Notice]:
        """A poll that could not read the log (``unreachable``, ``denied``): the lines to log."""
        notices = self._problems.resolve({problem.kind}, now)
        notice = self._problems.report(problem, now, self.settings.grace_seconds)
        return notices + ([notice] if notice is not None else [])

    def thorough(self, now: float) -> bool:
        """Whether the next poll should list the log even where a shortcut says nothing is new: never listed
        yet, a problem open, or not listed for :data:`THOROUGH_SECONDS`."""
        return self._listed_at is None or bool(self._problems.open) or now - self._listed_at >= THOROUGH_SECONDS

    @property
    def problems(self) -> dict[str, TailProblem]:
        """The problems open now, by kind."""
        return {kind: entry.problem for kind, entry in self._problems.open.items()}

    # --- deciding -----------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        """Commits seen and not announced yet."""
        return self._pending.commits

    def ready(self, now: float) -> CommitRange | None:
        """The event to fire now, or None (nothing waits, or the debouncing says later). Call :meth:`fired_range`
        once it is recorded; until then the same range is offered again."""
        pending = self._pending
        if not pending.triggering or pending.last is None or pending.first is None:
            return None
        s = self.settings
        reason = None
        if pending.commits >= s.max_commits:
            reason = "max_commits"
        elif pending.last_trigger_seen is not None and now - pending.last_trigger_seen >= s.quiet_seconds:
            reason = "quiet"
        elif pending.first_trigger_seen is not None and now - pending.first_trigger_seen >= s.max_wait_seconds:
            reason = "max_wait"
        if reason is None:
            return None
        return CommitRange(
            table=self.table,
            from_version=pending.first,
            to_version=pending.last.version,
            commits=pending.commits,
            operations=dict(sorted(pending.operations.items())),
            writers=dict(sorted(pending.writers.items())),
            files_added=pending.files_added,
            bytes_added=pending.bytes_added,
            files_removed=pending.files_removed,
            bytes_removed=pending.bytes_removed,
            blind_append_only=pending.not_blind_count == 0,
            not_blind_append_commits=pending.not_blind_count,
            not_blind_append_versions=tuple(pending.not_blind),
            metadata_changed=pending.metadata_changed,
            first_commit_at=_iso(pending.first_ms),
            last_commit_at=_iso(pending.last_ms),
            reason=reason,
            replaced_table=self._replaced,
        )

    def position_after(self, event: CommitRange) -> LogPosition:
        """What ``fired`` becomes once ``event`` is announced (what a caller records before firing it)."""
        last = self._pending.last
        if last is None or event.to_version != last.version:
            raise InvalidArgumentError(f"{self.table}: versions ..{event.to_version} are not the ones waiting")
        return last.position

    def fired_range(self, event: CommitRange) -> None:
        """``event`` (from :meth:`ready`) is announced: its versions are done."""
        self.fired = self.position_after(event)
        self._pending = _Pending()
        self._replaced = False

    def next_poll_in(self, now: float) -> float:
        """Seconds until the next poll: the poll interval, or sooner when a quiet period or the longest wait ends."""
        wait = self.settings.poll_interval
        pending = self._pending
        if pending.triggering and pending.last_trigger_seen is not None and pending.first_trigger_seen is not None:
            quiet_ends = pending.last_trigger_seen + self.settings.quiet_seconds - now
            wait_ends = pending.first_trigger_seen + self.settings.max_wait_seconds - now
            wait = min(wait, max(quiet_ends, self.MIN_POLL_SECONDS), max(wait_ends, self.MIN_POLL_SECONDS))
        return max(wait, self.MIN_POLL_SECONDS)

    def summary_line(self) -> str:
        waiting = f", {self._pending.commits} commits waiting" if self._pending.commits else ""
        return (
            f"{self.table}: announced through {self.fired.summary_line()}, seen {self.position.summary_line()}{waiting}"
        )
