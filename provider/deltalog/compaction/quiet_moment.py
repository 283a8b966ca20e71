"""Waiting for a quiet moment of the writers before a compaction commit lands where they work.

A DELETE/UPDATE/MERGE fails when a compaction commit lands while it runs, in a place it read
(:mod:`deltalog.compaction.writer_aware`). A writer that pauses between its transactions is
not running right after its own commit: a compaction commit that lands then meets no
transaction of it. So before a gated batch commits, :func:`wait_for_quiet_moment` looks at
what the writers did since the plan, and:

* commits now when the writers' recent cycles say none of their transactions runs at this
  offset after their last commit (the share of cycles with one running is at most
  :data:`~deltalog.compaction.writer_aware.RISK_LIMIT`; writers later than in any recent cycle
  are taken to be in a longer transaction than usual), when they made no commit for longer
  than their horizon (twice their longest cycle, at least a minute: they stopped), or when
  they have no rhythm (fewer than three commits: a plan gates no such writers, but a plan
  file written otherwise may);
  writers that do not record their transactions' length are waited for until their next
  commit, whose moment right after is the quiet one;
* else polls for the next commit file (a small existence check each poll: every
  :data:`~deltalog.compaction.writer_aware.LOCAL_POLL_SECONDS` on a local table,
  :data:`~deltalog.compaction.writer_aware.REMOTE_POLL_SECONDS` on an object store)
  and, when a commit of those writers appears, commits right after it;
* gives up after ``max_wait_s`` (or at the run's deadline): the batch is deferred, its
  rewritten files deleted, unless ``force`` (a breached objective), which commits anyway.

The offset since the writers' last commit is measured on this machine's clock from the moment
it saw that commit appear (counted from the look before, which a starved poll makes long);
only a commit that was already there when the wait began is dated by its own timestamp (so a
clock skew between this machine and the store shifts that first estimate, never the moment
after a commit seen here).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from deltalog.compaction.plan import CompactionPlan
from deltalog.compaction.writer_aware import RISK_LIMIT, WriterGate, lead_ms, poll_seconds
from deltalog.log.commit_lines import parse_commit
from deltalog.log.listing import commit_name, list_log
from deltalog.log.writer_activity import activity_from_commits, read_recent_commits, recent_commit
from deltalog.storage.filesystem import Storage

__all__ = ["DEFAULT_WRITER_WAIT_SECONDS", "UNKNOWN_QUIET_MS", "QuietMoment", "still_quiet", "wait_for_quiet_moment"]

log = logging.getLogger(__name__)

#: The longest a gated commit waits for its writers' quiet moment, by default.
DEFAULT_WRITER_WAIT_SECONDS = 60.0
#: How long the moment after a commit of writers whose transactions' starts are unknown is taken to be quiet.
UNKNOWN_QUIET_MS = 1000


@dataclass(frozen=True)
class QuietMoment:
    """The outcome of a wait: commit now (``ok``) or not, after how long, and why."""

    ok: bool
    waited_s: float
    reason: str
    #: Commits of the gate's writers that appeared while waiting.
    writer_commits: int = 0
    timed_out: bool = False
    #: How long after the writers' last commit the decision fell (ms; None: not known).
    offset_ms: float | None = None
    #: When it fell (the wait's ``clock()``): with ``offset_ms``, how long the moment has lasted since.
    decided_at: float | None = None

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out.pop("decided_at")
        return out


def _columns(plan: CompactionPlan) -> list[str]:
    try:
        return [str(f.get("name")) for f in json.loads(plan.schema_string).get("fields", [])]
    except (ValueError, AttributeError):
        return []


def wait_for_quiet_moment(
    storage: Storage,
    plan: CompactionPlan,
    gate: WriterGate,
    *,
    max_wait_s: float = DEFAULT_WRITER_WAIT_SECONDS,
    deadline: float | None = None,
    force: bool = False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    configuration: dict[str, str] | None = None,
) -> QuietMoment:
    """Wait until committing behind ``gate`` meets no running transaction of its writers (see the module docstring).

    ``deadline``: a ``clock()`` value the wait never passes. ``force``: commit when the wait runs
    out (a breached objective) instead of deferring. ``clock``, ``sleep`` and ``wall_ms`` are the
    clocks (replaced by tests).
    """
    started = clock()
    cadence = gate.cadence
    columns = _columns(plan)
    poll = poll_seconds(storage.is_local)
    lead = lead_ms(storage.is_local)

    def relevant(commits: list) -> list:
        act = activity_from_commits(commits, plan.partition_columns, columns, now_ms=wall_ms())
        return [d for d in act.dml if gate.stream_matches(d)]

    listing = list_log(storage)
    latest = listing.latest_commit if listing.latest_commit is not None else plan.snapshot_version
    since = read_recent_commits(
        storage, listing, configuration, after_version=max(plan.snapshot_version, cadence.last_version)
    )
    seen = relevant(since)
    last_ms = max([cadence.last_commit_ms, *(d.commit_ms for d in seen)])
    base_offset = max(0.0, float(wall_ms() - last_ms))
    base_at = clock()
    writer_commits = 0

    def offset() -> float:
        return base_offset + (clock() - base_at) * 1000

    while True:
        at = offset() + lead
        risk = cadence.risk(at)
        waited = clock() - started
        now = clock()
        if not cadence.has_rhythm:
            return QuietMoment(
                True,
                waited,
                f"the writers have no rhythm yet ({cadence.describe()}): nothing to wait for",
                0,
                False,
                offset(),
                now,
            )
        if cadence.overdue(at):
            return QuietMoment(
                True,
                waited,
                f"no commit of the writers for twice their longest cycle ({cadence.describe()}): taken as stopped",
                writer_commits,
                False,
                None,
                now,
            )
        if risk is None and writer_commits:
            risk = 0.0  # the moment right after a commit of writers whose transactions' starts are unknown
        if risk is not None and risk <= RISK_LIMIT:
            when = "right after their commit" if writer_commits else f"{offset() / 1000:.1f} s after their last commit"
            return QuietMoment(
                True,
                waited,
                f"quiet moment {when} ({cadence.describe()}); waited {waited:.1f} s",
                writer_commits,
                False,
                offset(),
                now,
            )
        out_of_time = waited >= max_wait_s or (deadline is not None and clock() >= deadline)
        if out_of_time:
            why = (
                f"no quiet moment of the DELETE/UPDATE/MERGE writers within {waited:.0f} s "
                f"({cadence.describe()}; a transaction is likely running)"
            )
            if force:
                return QuietMoment(True, waited, why + "; committed anyway", writer_commits, True, None, now)
            return QuietMoment(False, waited, why, writer_commits, True, None, now)
        looked_at = clock()
        sleep(poll)
        # New commit files since the last look: a commit of these writers starts the quiet moment. It
        # appeared at most the time since that look ago: a poll, or much longer when this process was
        # starved of CPU (a loaded machine, other tables' rewrites), and the moment is that much older.
        while True:
            path = storage.join("_delta_log", commit_name(latest + 1))
            if not storage.exists(path):
                break
            latest += 1
            try:
                data = storage.read_bytes(path)
            except FileNotFoundError:  # log cleanup cannot take the newest commit; be safe anyway
                break
            found = relevant([recent_commit(latest, wall_ms(), parse_commit(data, commit_name(latest)))])
            if found:
                writer_commits += 1
                base_at = clock()
                base_offset = max(poll, base_at - looked_at) * 1000  # it appeared since the last look
                log.debug("gate %s: writer commit %d seen", gate.key, latest)


def still_quiet(
    gate: WriterGate, moment: QuietMoment, local: bool, clock: Callable[[], float] = time.monotonic
) -> bool:
    """Whether a commit deciding now still lands in ``moment`` (its writers' cycles say no transaction of
    theirs runs yet at this offset); a moment of unknown offset (writers stopped, or no rhythm) stays quiet."""
    if moment.offset_ms is None or moment.decided_at is None:
        return True
    offset = moment.offset_ms + (clock() - moment.decided_at) * 1000 + lead_ms(local)
    risk = gate.cadence.risk(offset)
    if risk is None:  # right after a commit of writers whose transactions' starts are unknown: a second's grace
        return offset <= UNKNOWN_QUIET_MS
    return risk <= RISK_LIMIT or gate.cadence.overdue(offset)
