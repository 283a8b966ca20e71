"""``DeltaLogEventTrigger``: any writer's commits to a Delta table as asset events (Airflow 3 event-driven scheduling).

An ``AssetWatcher`` runs this trigger in the triggerer for as long as the DAG that declares the
asset exists (``deltalog_provider.assets`` builds such assets). It polls the table's
``_delta_log`` from the last version it saw (``deltalog.read_tail``: one LIST from there on S3),
and the core's :class:`deltalog.CommitWatch` decides, with no Airflow in it, which versions are new,
when to announce them (quiet period, max commits, max wait) and what to log about a table gone bad.
Each announcement is one ``TriggerEvent`` whose payload is a :class:`deltalog.CommitRange` (table,
versions, operations, writers, files and bytes, blind appends or not): Airflow stores it as the
asset event's extra (``{"from_trigger": true, "payload": {...}}``) and starts the DAGs scheduled on
the asset.

* **Restarts.** The trigger is made again from its kwargs (the DAG's) whenever a triggerer starts
  it; the last version it announced is kept in the metadata database (``triggers.watch_state``:
  the asset's state store on 3.3, a Variable before) and written before each announcement, so a
  restarted watcher announces the versions after it, each once (docs/events.md says what a crash at
  the very moment of an announcement can do).
* **One loop per root on 3.3.** Watchers made with ``share_root`` (every table found under one root)
  return the same ``shared_stream_key``: the triggerer runs one polling loop for all of them
  (``open_shared_stream``), and each watcher takes its table's result from it
  (``filter_shared_stream``). Before 3.3 the triggerer never asks, and each watcher polls in its
  own ``run()`` loop: the same decisions, one loop per table.
* **Bad input** never ends the trigger (an ended watcher would be started again, and one bad table
  must not stop the others of its loop): every problem is logged once when it has lasted
  ``grace_seconds``, again every ``problem_log_seconds``, and when it ends. A poll that fails is not
  retried in place: the next poll is the retry. Credentials the store refuses are fetched again from
  the connection (at most once a minute), so expiring ones are renewed.

Every read runs in a worker thread; the event loop only awaits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Hashable
from dataclasses import dataclass, field
from typing import Any

from deltalog import CommitWatch, LogPosition, LogTail, WatchSettings, access_problem, latest_position
from deltalog import read_tail as core_read_tail
from deltalog.storage import Storage
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.triggers.watch_state import WatchState, watch_state_for
from deltalog_provider.version_compat import BaseEventTrigger, TriggerEvent

__all__ = ["DEFAULT_POLL_INTERVAL", "DeltaLogEventTrigger", "SHARED_STREAM_NAME"]

log = logging.getLogger(__name__)

_MODULE = "deltalog_provider.triggers.delta_log"
#: Seconds between two polls of a table by default (one LIST on S3 each: docs/events.md has the cost).
DEFAULT_POLL_INTERVAL = 60.0
#: The first part of the shared-stream key of every log watcher (3.3+).
SHARED_STREAM_NAME = "deltalog.log_watch"
#: Credentials refused: the connection is fetched again at most this often (seconds).
CREDENTIALS_REFRESH_SECONDS = 60.0
#: Tables polled at once by one shared loop (each poll runs in a worker thread).
SHARED_LOOP_CONCURRENCY = 16
#: A shared loop hands its results on at most once per this many seconds.
TICK_SECONDS = 1.0


@dataclass
class _Outcome:
    """One poll of one table: what it found, or why it could not look."""

    at: float
    tail: LogTail | None = None
    error: BaseException | None = None


@dataclass
class _TableWatcher:
    """One table's watch: its storage, the core's decisions, where its position is kept (both loop kinds)."""

    trigger: DeltaLogEventTrigger
    watch: CommitWatch
    state: WatchState
    storage: Storage | None = None
    started: bool = False
    next_poll_at: float = 0.0
    credentials_at: float = 0.0
    outcome: _Outcome | None = field(default=None)

    @property
    def table(self) -> str:
        return self.trigger.table_uri

    def _log(self, notices: list[Any]) -> None:
        for notice in notices:
            self.trigger.log.log(logging.WARNING if notice.level == "warning" else logging.INFO, notice.message)

    async def _open_storage(self) -> Storage:
        settings = await DeltaTableHook.aget_settings(self.trigger.deltalog_conn_id)
        options = settings.options_for(self.table)
        self.credentials_at = time.monotonic()
        return await asyncio.to_thread(Storage, self.table, options)

    async def start(self) -> bool:
        """Open the table and learn where to watch from (the stored position, else its newest version)."""
        now = time.time()
        try:
            if self.storage is None:
                self.storage = await self._open_storage()
            fired = await self.state.load()
            if fired is None:
                fired = await asyncio.to_thread(latest_position, self.storage)
                await self.state.save(fired)
                how = "its newest version (first start)"
            else:
                how = f"the position kept in {self.state.where}"
        except Exception as exc:  # noqa: BLE001 - a watcher never ends: log (rate-limited) and try again
            self._log(self.watch.failed(access_problem(exc), now))
            self.next_poll_at = now + self.watch.settings.poll_interval
            return False
        self.watch.start_at(fired)
        self.started = True
        self.trigger.log.info(
            "watching %s from %s, %s (%s)", self.table, fired.summary_line(), how, self.watch.settings.summary_line()
        )
        return True

    async def poll(self) -> _Outcome:
        """One poll of the log from the last version seen (in a worker thread); never raises."""
        now = time.time()
        assert self.storage is not None
        try:
            thorough = self.watch.thorough(now)
            tail = await asyncio.to_thread(core_read_tail, self.storage, self.watch.position, thorough=thorough)
            return _Outcome(now, tail=tail)
        except Exception as exc:  # noqa: BLE001 - reported to the watch, which decides what to log
            return _Outcome(now, error=exc)

    async def take(self, outcome: _Outcome) -> list[TriggerEvent]:
        """What one poll means: lines logged, the position saved where it changed, at most one event."""
        self.outcome = None
        if outcome.error is not None:
            problem = access_problem(outcome.error)
            self._log(self.watch.failed(problem, outcome.at))
            if problem.kind == "denied" and time.monotonic() - self.credentials_at >= CREDENTIALS_REFRESH_SECONDS:
                try:  # expired or rotated credentials: the connection's current ones
                    self.storage = await self._open_storage()
                except Exception as exc:  # noqa: BLE001 - the next poll reports it
                    self.trigger.log.debug("%s: fetching the connection again failed: %s", self.table, exc)
            self.next_poll_at = outcome.at + self.watch.settings.poll_interval
            return []
        assert outcome.tail is not None
        before = self.watch.fired
        self._log(self.watch.observe(outcome.tail, outcome.at))
        if self.watch.fired != before:  # the table was replaced: its new start is kept too
            await self._save(self.watch.fired)
        events = []
        event = self.watch.ready(time.time())
        if event is not None and await self._save(self.watch.position_after(event)):
            self.watch.fired_range(event)
            self.trigger.log.info("announcing %s (%s)", event.summary_line(), event.reason)
            events.append(TriggerEvent(event.to_dict()))
        self.next_poll_at = time.time() + self.watch.next_poll_in(time.time())
        return events

    async def _save(self, position: LogPosition) -> bool:
        try:
            await self.state.save(position)
            return True
        except Exception as exc:  # noqa: BLE001 - not announced now: the next poll tries again
            self.trigger.log.warning(
                "%s: cannot record the watcher's position in %s (%s); the announcement waits for the next poll",
                self.table,
                self.state.where,
                exc,
            )
            return False


@dataclass
class _RootLoop:
    """The watchers sharing one polling loop (3.3+), by trigger."""

    watchers: dict[int, _TableWatcher] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class DeltaLogEventTrigger(BaseEventTrigger):
    """Announce the commits any writer makes to a Delta table, as asset events (module doc).

    :param table_uri: the table's resolved URI.
    :param deltalog_conn_id: the connection whose storage options apply (fetched in the triggerer).
    :param poll_interval: seconds between two polls of the log.
    :param quiet_seconds: announce once no new commit came for this long.
    :param max_commits: ... or once this many commits wait.
    :param max_wait_seconds: ... or once the oldest waiting commit was seen this long ago.
    :param quiet_operations: commitInfo operations that never start an event (None: compaction and vacuum,
        :data:`deltalog.log.commit_watch.DEFAULT_QUIET_OPERATIONS`); their versions ride along in the next.
    :param grace_seconds: a problem is logged once it lasts this long.
    :param problem_log_seconds: a problem that lasts is logged again this often.
    :param share_root: the root this table was found under: on Airflow 3.3 every watcher with the same root,
        connection and poll interval shares one polling loop (None: a loop of its own).
    """

    def __init__(
        self,
        *,
        table_uri: str,
        deltalog_conn_id: str = DeltaTableHook.default_conn_name,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        quiet_seconds: float = 30.0,
        max_commits: int = 100,
        max_wait_seconds: float = 600.0,
        quiet_operations: list[str] | None = None,
        grace_seconds: float = 120.0,
        problem_log_seconds: float = 900.0,
        share_root: str | None = None,
    ) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.deltalog_conn_id = deltalog_conn_id
        self.poll_interval = float(poll_interval)
        self.quiet_seconds = float(quiet_seconds)
        self.max_commits = int(max_commits)
        self.max_wait_seconds = float(max_wait_seconds)
        self.quiet_operations = sorted(quiet_operations) if quiet_operations is not None else None
        self.grace_seconds = float(grace_seconds)
        self.problem_log_seconds = float(problem_log_seconds)
        self.share_root = share_root
        self.settings = self._settings()  # checked now: a bad value fails the DAG's parse, not the triggerer
        #: Set by tests (and by nothing else) to keep the position somewhere other than the metadata database.
        self.watch_state: WatchState | None = None

    def _settings(self) -> WatchSettings:
        extra: dict[str, Any] = {}
        if self.quiet_operations is not None:
            extra["quiet_operations"] = frozenset(self.quiet_operations)
        return WatchSettings(
            poll_interval=self.poll_interval,
            quiet_seconds=self.quiet_seconds,
            max_commits=self.max_commits,
            max_wait_seconds=self.max_wait_seconds,
            grace_seconds=self.grace_seconds,
            problem_log_seconds=self.problem_log_seconds,
            **extra,
        )

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{_MODULE}.DeltaLogEventTrigger",
            {
                "table_uri": self.table_uri,
                "deltalog_conn_id": self.deltalog_conn_id,
                "poll_interval": self.poll_interval,
                "quiet_seconds": self.quiet_seconds,
                "max_commits": self.max_commits,
                "max_wait_seconds": self.max_wait_seconds,
                "quiet_operations": self.quiet_operations,
                "grace_seconds": self.grace_seconds,
                "problem_log_seconds": self.problem_log_seconds,
                "share_root": self.share_root,
            },
        )

    def _watcher(self) -> _TableWatcher:
        state = self.watch_state if self.watch_state is not None else watch_state_for(self, self.table_uri)
        return _TableWatcher(self, CommitWatch(self.table_uri, self.settings, LogPosition(-1)), state)

    # --- one loop per table (every release) ---------------------------------------------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        watcher = self._watcher()
        while True:
            if watcher.started or await watcher.start():
                for event in await watcher.take(await watcher.poll()):
                    yield event
            await asyncio.sleep(max(watcher.next_poll_at - time.time(), CommitWatch.MIN_POLL_SECONDS))

    # --- one loop per root (Airflow 3.3+) -----------------------------------------------------

    #: The loops of this process by shared-stream key; each loop's watchers register here (same event loop).
    _loops: dict[Hashable, _RootLoop] = {}

    @staticmethod
    def _stream_key(share_root: Any, conn_id: Any, poll_interval: Any) -> Hashable:
        return (SHARED_STREAM_NAME, str(share_root), str(conn_id), float(poll_interval))

    def shared_stream_key(self) -> Hashable | None:
        """Equal for the watchers of one root, connection and poll interval (3.3 runs them in one loop)."""
        if not self.share_root:
            return None
        return self._stream_key(self.share_root, self.deltalog_conn_id, self.poll_interval)

    @classmethod
    def _loop_for(cls, key: Hashable) -> _RootLoop:
        loop = cls._loops.get(key)
        if loop is None:
            loop = cls._loops[key] = _RootLoop()
        return loop

    @classmethod
    async def open_shared_stream(cls, kwargs: dict[str, Any]) -> AsyncIterator[Any]:
        """The root's one polling loop: every registered table polled when it is due, each result handed on."""
        key = cls._stream_key(kwargs.get("share_root"), kwargs.get("deltalog_conn_id"), kwargs["poll_interval"])
        loop = cls._loop_for(key)
        limit = asyncio.Semaphore(SHARED_LOOP_CONCURRENCY)
        # Every watcher of the root wakes for each tick: ticks are at least this far apart, the tables that
        # fall due in between polled together (a thousand watchers, not a thousand wake-ups per table).
        spacing = min(TICK_SECONDS, float(kwargs["poll_interval"]))
        log.info("one polling loop for the log watchers under %s (Airflow's shared stream)", kwargs.get("share_root"))

        async def poll(watcher: _TableWatcher) -> tuple[int, _Outcome]:
            async with limit:
                return id(watcher), await watcher.poll()

        while True:
            now = time.time()
            due = [w for w in loop.watchers.values() if w.started and w.outcome is None and w.next_poll_at <= now]
            if due:
                results = dict(await asyncio.gather(*(poll(w) for w in due)))
                for w in due:
                    w.outcome = results[id(w)]
                yield {"polled": len(due), "at": now}
            waits = [w.next_poll_at for w in loop.watchers.values() if w.started and w.outcome is None]
            sleep = max(min(waits, default=now + float(kwargs["poll_interval"])), now + spacing) - time.time()
            loop.wake.clear()
            try:
                await asyncio.wait_for(loop.wake.wait(), timeout=max(sleep, CommitWatch.MIN_POLL_SECONDS))
            except TimeoutError:
                pass

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        """This table's part of the root's loop: its own start, then the results the loop polled for it."""
        key = self.shared_stream_key()
        loop = self._loop_for(key)
        watcher = self._watcher()
        loop.watchers[id(self)] = watcher
        try:
            while not await watcher.start():
                await asyncio.sleep(max(watcher.next_poll_at - time.time(), CommitWatch.MIN_POLL_SECONDS))
            watcher.next_poll_at = 0.0
            loop.wake.set()  # poll it now, not at the loop's next wake-up
            async for _tick in shared_stream:
                outcome = watcher.outcome
                if outcome is not None:
                    for event in await watcher.take(outcome):
                        yield event
                    loop.wake.set()
        finally:
            loop.watchers.pop(id(self), None)
            if not loop.watchers:
                self._loops.pop(key, None)
