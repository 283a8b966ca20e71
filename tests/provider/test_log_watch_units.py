"""The log watcher on this Airflow release, under asyncio: its run loop, its restarts, its assets, bad tables.

Run in every release venv by the release matrix (tests/test_airflow_releases.py). The trigger's position is
kept in memory here (``MemoryWatchState``: no triggerer, so no Variable and no asset state store); the
stores themselves are exercised by a real triggerer in ``test_log_watch_triggerer.py``. On Airflow 3.3 the
watchers of one root run through Airflow's own ``SharedStreamManager`` (one polling loop for the root).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from deltalog import CommitRange, LogPosition
from deltalog.errors import InvalidArgumentError
from deltalog_provider.assets import (
    WATCHER_NAME,
    discovered_tables,
    log_asset_uri,
    watched_table_asset,
    watched_tables_under,
)
from deltalog_provider.triggers import DeltaLogEventTrigger
from deltalog_provider.triggers.watch_state import MemoryWatchState, variable_key
from deltalog_provider.utils.commit_events import commit_range_of, missed_versions, triggered_by, triggering_ranges
from deltalog_provider.utils.results import table_asset_uri
from deltalog_provider.version_compat import HAS_SHARED_STREAMS, BaseEventTrigger

pytestmark = pytest.mark.airflow

deltalake = pytest.importorskip("deltalake")


def write(uri: str, n: int = 1, mode: str = "append") -> None:
    """One commit by delta-rs: no deltalog code on the writer side."""
    deltalake.write_deltalake(uri, pa.table({"id": pa.array(range(n), pa.int64())}), mode=mode)


def trigger_for(uri: str, **kw: Any) -> DeltaLogEventTrigger:
    trigger = DeltaLogEventTrigger(
        table_uri=table_asset_uri(uri), **{"poll_interval": 0.05, "quiet_seconds": 0.2, "grace_seconds": 0, **kw}
    )
    trigger.watch_state = MemoryWatchState()
    return trigger


async def next_event(gen: Any, timeout: float = 30) -> dict[str, Any]:
    return (await asyncio.wait_for(anext(gen), timeout)).payload


def test_the_trigger_is_an_event_trigger_that_serializes_and_checks_its_settings():
    trigger = DeltaLogEventTrigger(table_uri="s3://lake/t", deltalog_conn_id="lake", quiet_operations=["OPTIMIZE"])
    assert isinstance(trigger, BaseEventTrigger)
    classpath, kwargs = trigger.serialize()
    assert classpath == "deltalog_provider.triggers.delta_log.DeltaLogEventTrigger"
    again = DeltaLogEventTrigger(**json.loads(json.dumps(kwargs)))  # what the triggerer makes from the DAG's
    assert again.serialize() == (classpath, kwargs) and again.settings == trigger.settings
    assert not any("secret" in str(v) for v in kwargs.values())
    with pytest.raises(InvalidArgumentError, match="max_commits"):
        DeltaLogEventTrigger(table_uri="s3://lake/t", max_commits=0)  # at parse time, not in the triggerer
    if HAS_SHARED_STREAMS:  # Airflow 3.3: the watchers of one root, connection and poll interval share a loop
        a = DeltaLogEventTrigger(table_uri="s3://lake/a", share_root="s3://lake")
        b = DeltaLogEventTrigger(table_uri="s3://lake/b", share_root="s3://lake")
        assert a.shared_stream_key() == b.shared_stream_key() is not None
        assert trigger.shared_stream_key() is None


def test_the_run_loop_announces_foreign_commits_records_first_and_resumes_after_a_restart(tmp_path):
    uri = str(tmp_path / "t")
    write(uri, 3, mode="overwrite")
    trigger = trigger_for(uri)
    state = trigger.watch_state
    assert isinstance(state, MemoryWatchState)

    async def first() -> dict[str, Any]:
        gen = trigger.run()
        pending = asyncio.ensure_future(next_event(gen))
        while state.position is None:  # the first start records the table's newest version
            await asyncio.sleep(0.02)
        assert state.position.version == 0 and not pending.done()
        for _ in range(3):
            await asyncio.to_thread(write, uri)
        event = await pending
        assert state.position.version == event["to_version"]  # recorded before it was yielded
        await gen.aclose()
        return event

    event = asyncio.run(first())
    assert (event["from_version"], event["to_version"], event["commits"]) == (1, 3, 3)
    assert event["operations"] == {"WRITE": 3} and event["blind_append_only"] is True
    assert all(w.startswith("delta-rs") for w in event["writers"]) and event["files_added"] == 3
    assert CommitRange.from_dict(event).table == table_asset_uri(uri)

    write(uri)  # while no triggerer runs
    deltalake.DeltaTable(uri).delete("id = 0")
    restarted = trigger_for(uri)
    restarted.watch_state = state  # what the metadata database kept

    async def second() -> dict[str, Any]:
        gen = restarted.run()
        try:
            return await next_event(gen)
        finally:
            await gen.aclose()

    after = asyncio.run(second())
    assert (after["from_version"], after["to_version"]) == (4, 5)  # nothing lost, nothing repeated
    assert after["blind_append_only"] is False and after["not_blind_append_versions"] == [5]


class Logged:
    """What the watcher logged: through the logging tree (caplog) and/or Airflow's structlog output, which
    differ by release (3.0 writes both); a line is counted in the source that has the most of it."""

    def __init__(self, caplog: Any, capfd: Any) -> None:
        captured = capfd.readouterr()
        self.sources = [caplog.text, captured.out + captured.err]

    def count(self, needle: str) -> int:
        return max(text.count(needle) for text in self.sources)


def logged(caplog: Any, capfd: Any) -> Logged:
    return Logged(caplog, capfd)


def test_a_table_gone_bad_is_logged_once_and_never_ends_the_watcher(tmp_path, caplog, capfd):
    uri = str(tmp_path / "t")
    write(uri, mode="overwrite")
    trigger = trigger_for(uri, problem_log_seconds=3600)

    async def scenario() -> dict[str, Any]:
        gen = trigger.run()
        pending = asyncio.ensure_future(next_event(gen))
        while trigger.watch_state.position is None:
            await asyncio.sleep(0.02)
        shutil.rmtree(tmp_path / "t")  # deleted under the watcher
        await asyncio.sleep(1.0)  # about twenty polls
        assert not pending.done()
        write(uri, mode="overwrite")  # created again: a new table at the same place
        await asyncio.to_thread(write, uri)
        try:
            return await pending
        finally:
            await gen.aclose()

    with caplog.at_level(logging.INFO):
        event = asyncio.run(scenario())
    text = logged(caplog, capfd)
    assert text.count("the table is gone") == 1, text.sources  # one line, not one per poll
    assert text.count("missing resolved") == 1 and text.count("another table now lives here") == 1
    assert (event["from_version"], event["to_version"], event["replaced_table"]) == (0, 1, True)  # the new table


def test_a_watched_asset_is_the_tables_log_with_the_trigger(tmp_path):
    table = table_asset_uri(str(tmp_path / "t"))
    asset = watched_table_asset(str(tmp_path / "t"), poll_interval=5, quiet_seconds=1)
    # Not the operators' outlet (declared without watchers elsewhere, it would drop the watcher at each parse).
    assert asset.uri == log_asset_uri(table) == table + "/_delta_log" and asset.extra["table"] == table
    (watcher,) = asset.watchers
    assert watcher.name == WATCHER_NAME and isinstance(watcher.trigger, DeltaLogEventTrigger)
    assert watcher.trigger.table_uri == table and watcher.trigger.poll_interval == 5


def test_the_tables_under_a_root_are_discovered_once_and_share_a_root(tmp_path, monkeypatch):
    import deltalog

    for name in ("a", "b"):
        write(str(tmp_path / "lake" / name), mode="overwrite")
    calls: list[str] = []
    real = deltalog.discover_tables

    def counting(root: str, **kw: Any) -> Any:
        calls.append(root)
        return real(root, **kw)

    monkeypatch.setattr(deltalog, "discover_tables", counting)
    root, cache = str(tmp_path / "lake"), str(tmp_path / "cache")
    assets = watched_tables_under(root, cache_dir=cache, poll_interval=30)
    assert sorted(a.extra["table"] for a in assets) == [table_asset_uri(f"{root}/a"), table_asset_uri(f"{root}/b")]
    assert {a.watchers[0].trigger.share_root for a in assets} == {root}
    assert {a.watchers[0].trigger.share_root for a in watched_tables_under(root, cache_dir=cache, share=False)} == {
        None
    }
    write(str(tmp_path / "lake" / "c"), mode="overwrite")
    assert len(watched_tables_under(root, cache_dir=cache)) == 2 and len(calls) == 1  # the cached discovery
    assert len(discovered_tables(root, cache_dir=cache, refresh_seconds=0)) == 3 and len(calls) == 2
    shutil.rmtree(tmp_path / "lake")
    assert len(discovered_tables(root, cache_dir=cache, refresh_seconds=0)) == 3  # failed: the last one found


def test_the_events_that_started_a_run_are_read_back_by_table():
    class Event:
        def __init__(self, extra: Any) -> None:
            self.extra = extra

    def payload(table: str, a: int, b: int, op: str = "WRITE") -> dict[str, Any]:
        return {
            "table": table,
            "from_version": a,
            "to_version": b,
            "commits": b - a + 1,
            "operations": {op: b - a + 1},
            "writers": {"delta-rs:py-1": b - a + 1},
            "files_added": 1,
            "bytes_added": 1,
            "files_removed": 0,
            "bytes_removed": 0,
            "blind_append_only": op == "WRITE",
            "not_blind_append_commits": 0,
            "not_blind_append_versions": [],
            "metadata_changed": False,
            "first_commit_at": None,
            "last_commit_at": None,
            "reason": "quiet",
            "watcher": "deltalog.log_watch",
            "format": 1,
        }

    context = {
        "triggering_asset_events": {
            "s3://lake/t": [
                Event({"from_trigger": True, "payload": payload("s3://lake/t", 8, 9, "MERGE")}),
                Event({"table": "s3://lake/t", "version": 7, "operation": "COMMIT"}),  # an operator's own event
                Event({"from_trigger": True, "payload": payload("s3://lake/t", 5, 7)}),
            ],
            "s3://lake/u": [Event({"from_trigger": True, "payload": {"something": "else"}})],
        }
    }
    assert [(r.from_version, r.to_version) for r in triggering_ranges(context)] == [(5, 7), (8, 9)]
    folded = triggered_by(context)["s3://lake/t"]
    assert (folded.from_version, folded.to_version, folded.commits, folded.events) == (5, 9, 5, 2)
    assert folded.operations == ("MERGE", "WRITE") and folded.blind_append_only is False
    assert commit_range_of({"payload": payload("s3://lake/t", 1, 1)}) is None  # not from a trigger
    assert triggering_ranges({}) == [] and variable_key("s3://lake/t").startswith("deltalog_log_watch__")

    # A lost event (5..7 fired, never stored): a task with the log asset as inlet covers it from the stored ones.
    class Inlets(dict):  # Airflow's InletEventsAccessors: iterates the inlets, indexing one gives its events
        def __iter__(self) -> Any:
            return iter(self.assets)

    class LogAsset:
        uri = "s3://lake/t/_delta_log"

    log_asset = LogAsset()
    stored = [Event({"from_trigger": True, "payload": payload("s3://lake/t", a, b)}) for a, b in [(1, 2), (3, 4)]]
    this_run = Event({"from_trigger": True, "payload": payload("s3://lake/t", 8, 9)})
    inlets = Inlets({log_asset: [*stored, this_run]})
    inlets.assets = [log_asset]
    lost = {"triggering_asset_events": {"s3://lake/t": [this_run]}, "inlet_events": inlets}
    folded = triggered_by(lost)["s3://lake/t"]
    assert (folded.from_version, folded.to_version, folded.commits, folded.events) == (5, 9, 5, 1)
    assert folded.blind_append_only is None  # the lost commits were never summarized
    assert (
        folded.row_values()["triggered_by_from_version"],
        triggered_by({**lost, "inlet_events": {}})["s3://lake/t"].from_version,
    ) == (5, 8)
    ranges = [CommitRange.from_dict(payload("s3://lake/t", a, b)) for a, b in [(8, 9), (12, 12)]]
    earlier = [CommitRange.from_dict(payload("s3://lake/t", a, b)) for a, b in [(1, 4), (8, 9), (12, 12), (13, 20)]]
    assert missed_versions(ranges, earlier) == [(5, 7), (10, 11)]  # also between two ranges of this run
    assert missed_versions(ranges, earlier[1:]) == []  # nothing stored before: a watcher's first event
    assert missed_versions([replace(ranges[0], replaced_table=True)], earlier) == []  # another table's versions
    assert missed_versions(ranges[:1], [earlier[0], *ranges[:1]]) == [(5, 7)]


@pytest.mark.skipif(not HAS_SHARED_STREAMS, reason="shared streams are Airflow 3.3's (before: one loop per table)")
def test_the_watchers_of_one_root_share_one_polling_loop(tmp_path, caplog, capfd):
    """Through Airflow's own ``SharedStreamManager``, as the 3.3 triggerer runs them: one loop polls the root's
    tables, a table gone bad is reported by its own watcher while the others keep announcing."""
    import structlog
    from airflow.triggers.shared_stream import SharedStreamManager

    root = tmp_path / "lake"
    for name in ("a", "b", "bad"):
        write(str(root / name), mode="overwrite")
    triggers = {name: trigger_for(str(root / name), share_root=str(root)) for name in ("a", "b", "bad")}
    manager = SharedStreamManager(log=structlog.get_logger("shared"), max_subscriber_queue=100, ack_timeout=300)
    polls: list[int] = []
    original = DeltaLogEventTrigger.open_shared_stream.__func__  # type: ignore[attr-defined]

    async def counting(cls: Any, kwargs: dict[str, Any]) -> Any:
        polls.append(1)
        async for item in original(cls, kwargs):
            yield item

    async def scenario() -> dict[str, list[dict[str, Any]]]:
        key = triggers["a"].shared_stream_key()
        streams = {
            name: t.filter_shared_stream(manager.subscribe(trigger_id=i, trigger=t, key=key))
            for i, (name, t) in enumerate(triggers.items())
        }
        pending = {name: asyncio.ensure_future(next_event(s)) for name, s in streams.items()}
        while any(t.watch_state.position is None for t in triggers.values()):
            await asyncio.sleep(0.02)
        shutil.rmtree(root / "bad")
        for name in ("a", "b"):
            await asyncio.to_thread(write, str(root / name))
            await asyncio.to_thread(write, str(root / name))
        got = {name: [await pending[name]] for name in ("a", "b")}
        await asyncio.to_thread(write, str(root / "a"))
        got["a"].append(await next_event(streams["a"]))
        assert not pending["bad"].done()  # the deleted table announces nothing, its watcher still runs
        pending["bad"].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pending["bad"]
        for i, s in enumerate(streams.values()):
            await s.aclose()
            await manager.unsubscribe(i, key)
        return got

    DeltaLogEventTrigger.open_shared_stream = classmethod(counting)  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.INFO):
            got = asyncio.run(scenario())
    finally:
        DeltaLogEventTrigger.open_shared_stream = classmethod(original)  # type: ignore[method-assign]
    assert polls == [1]  # one loop for the three tables
    assert [(e["from_version"], e["to_version"]) for e in got["a"]] == [(1, 2), (3, 3)]
    assert [(e["from_version"], e["to_version"]) for e in got["b"]] == [(1, 2)]
    assert got["b"][0]["table"] == table_asset_uri(str(root / "b"))
    assert logged(caplog, capfd).count("the table is gone") == 1
    assert DeltaLogEventTrigger._loops == {}  # the loop's registry is empty once every watcher left
    assert LogPosition.from_dict(triggers["a"].watch_state.position.to_dict()).version == 3


def test_credentials_the_store_refuses_are_fetched_again_from_the_connection(tmp_path, monkeypatch, caplog, capfd):
    """An expired token: the watcher logs it once, fetches the connection again, and announces on."""
    import deltalog_provider.triggers.delta_log as delta_log
    from deltalog_provider.hooks.delta_table import DeltaTableHook

    uri = str(tmp_path / "t")
    write(uri, mode="overwrite")
    trigger = trigger_for(uri)
    fetched: list[str] = []
    real_settings = DeltaTableHook.aget_settings.__func__  # type: ignore[attr-defined]

    async def counting(cls: Any, conn_id: str = "deltalog_default") -> Any:
        fetched.append(conn_id)
        return await real_settings(cls, conn_id)

    monkeypatch.setattr(DeltaTableHook, "aget_settings", classmethod(counting))
    monkeypatch.setattr(delta_log, "CREDENTIALS_REFRESH_SECONDS", 0.0)
    refusals = [OSError("An error occurred (ExpiredToken): The provided token has expired.")] * 3
    real_tail = delta_log.core_read_tail

    def expiring(*args: Any, **kwargs: Any) -> Any:
        if refusals:
            raise refusals.pop()
        return real_tail(*args, **kwargs)

    monkeypatch.setattr(delta_log, "core_read_tail", expiring)

    async def scenario() -> dict[str, Any]:
        gen = trigger.run()
        pending = asyncio.ensure_future(next_event(gen))
        while trigger.watch_state.position is None:
            await asyncio.sleep(0.02)
        await asyncio.to_thread(write, uri)
        try:
            return await pending
        finally:
            await gen.aclose()

    with caplog.at_level(logging.INFO):
        event = asyncio.run(scenario())
    assert (event["from_version"], event["to_version"]) == (1, 1)
    assert len(fetched) == 4  # at start, then after each of the three refusals
    text = logged(caplog, capfd)
    assert text.count("the store refused the credentials") == 1 and text.count("denied resolved") == 1


def test_the_fleet_maintains_the_tables_whose_commits_started_the_run():
    """The fleet DAG's ``find_tables`` (dags/deltalog_example/fleet_tables.py): the watchers' tables, or ``None``
    (the usual precedence) when no table's event started the run, or ``[]`` for the fleet's own events only."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dags"))
    from deltalog_example.fleet_tables import watched_tables_that_started

    class Key:
        def __init__(self, uri: str) -> None:
            self.uri = uri

    class Event:
        def __init__(self, extra: Any) -> None:
            self.extra = extra

    def watcher(table: str) -> Event:
        return Event({"from_trigger": True, "payload": {**_payload(table), "table": table}})

    lists = "deltalog://fleet/tables"
    assert watched_tables_that_started({}, lists) is None  # scheduled or manual
    assert (
        watched_tables_that_started({"triggering_asset_events": {Key(lists): [Event({"tables": ["x"]})]}}, lists)
        is None
    )
    started = {
        Key("s3://lake/a/_delta_log"): [watcher("s3://lake/a")],
        Key("s3://lake/b/_delta_log"): [watcher("s3://lake/b"), watcher("s3://lake/b")],
        Key("s3://lake/c"): [Event({"table": "s3://lake/c", "operation": "FLEET MAINTENANCE"})],
    }
    assert watched_tables_that_started({"triggering_asset_events": started}, lists) == ["s3://lake/a", "s3://lake/b"]
    own = {Key("s3://lake/c"): [Event({"table": "s3://lake/c", "operation": "FLEET MAINTENANCE"})]}
    assert watched_tables_that_started({"triggering_asset_events": own}, lists) == []


def _payload(table: str) -> dict[str, Any]:
    return {
        "table": table,
        "from_version": 1,
        "to_version": 1,
        "commits": 1,
        "operations": {"WRITE": 1},
        "writers": {"x": 1},
        "files_added": 1,
        "bytes_added": 1,
        "files_removed": 0,
        "bytes_removed": 0,
        "blind_append_only": True,
        "not_blind_append_commits": 0,
        "not_blind_append_versions": [],
        "metadata_changed": False,
        "first_commit_at": None,
        "last_commit_at": None,
        "reason": "quiet",
        "watcher": "deltalog.log_watch",
        "format": 1,
    }
