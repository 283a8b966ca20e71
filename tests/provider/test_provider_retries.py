"""One transient-error policy for poke, reschedule and deferrable modes and the operators (issue 27).

The hook is kept for the task (fetched and logged once, not per poke), and every table read of
a poke, a trigger's poll or an operator's planning runs under ``DeltaTableHook``'s policy: a
storage blip is retried the same number of times in every mode, a refusal fails at once in
every mode. Faults are injected where the log is listed (``deltalog.log.listing``), below
everything the provider does, so the real check code runs in both modes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
from collections.abc import Callable
from typing import Any

import pytest

import deltalog.log.listing as listing
from deltalog.errors import InvalidArgumentError, StorageError
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.hooks.retry_policy import RetryPolicy, is_refusal, is_transient
from deltalog_provider.operators import DeltaCheckpointOperator, DeltaHealthCheckOperator
from deltalog_provider.sensors import DeltaMaintenanceDueSensor, DeltaTableVersionSensor
from deltalog_provider.version_compat import AirflowException, AirflowFailException, TaskDeferred
from helpers import append, make_table, rows

pytestmark = pytest.mark.airflow

#: Fast retries for the tests; the policy is the same whatever the numbers.
RETRIES = {"deltalog_retry_limit": 2, "deltalog_retry_delay": 0.01}


class Faults:
    """Make the next ``count`` log listings fail with ``error`` (every one when count is None)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real = listing._list_log_files
        self.count: int | None = 0
        self.error: Callable[[], BaseException] = lambda: StorageError("cannot list _delta_log: connection reset")
        self.raised = 0
        monkeypatch.setattr(listing, "_list_log_files", self._list)

    def _list(self, storage: Any) -> Any:
        if self.count is None or self.raised < self.count:
            self.raised += 1
            raise self.error()
        return self.real(storage)

    def arm(self, count: int | None, error: Callable[[], BaseException] | None = None) -> None:
        self.count, self.raised = count, 0
        if error is not None:
            self.error = error


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Faults:
    return Faults(monkeypatch)


def _sensor(kind: str, path: str, mode: str) -> Any:
    common = {"task_id": f"{kind}_{mode}", "table": path, "deferrable": mode == "deferrable", "timeout": 60, **RETRIES}
    if kind == "version":
        return DeltaTableVersionSensor(after_version=0, poke_interval=0.01, **common)
    return DeltaMaintenanceDueSensor(max_commits_since_checkpoint=1, poke_interval=0.01, **common)


def _ready(path: str) -> Any:
    """A table on which both sensors' conditions are met: a commit after version 0, two since no checkpoint."""
    table = make_table(path)
    append(table, rows(1))
    append(table, rows(1, start=1))
    return table


def _outcome(run: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "done", run()
    except AirflowFailException as exc:
        return "failed without retry", str(exc)
    except AirflowException as exc:
        return "failed, retryable", str(exc)


def _poke(sensor: Any) -> Any:
    result = sensor.poke({})
    return result.xcom_value if result else None


def _deferred(sensor: Any, table_path: str, faults: Faults, count: int | None, error: Any = None) -> Any:
    """Defer while the condition is not met yet, meet it, then let the trigger poll under the faults."""
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    _ready_after_deferral(table_path)
    faults.arm(count, error)
    event = asyncio.run(asyncio.wait_for(anext(deferred.value.trigger.run()), 30))
    return lambda: sensor.execute_complete({}, event.payload)


def _ready_after_deferral(path: str) -> None:
    from deltalog import DeltaTable

    table = DeltaTable(path)
    while table.version() < 2:
        append(table, rows(1, start=table.version()))


def _both_modes(kind: str, tmp_path: Any, faults: Faults, count: int | None, error: Any = None) -> dict[str, Any]:
    """What poke mode and deferrable mode make of the same faults: (outcome, value, listings that failed)."""
    seen = {}
    path = str(tmp_path / "poke")
    _ready(path)
    faults.arm(count, error)
    outcome, value = _outcome(lambda: _poke(_sensor(kind, path, "poke")))
    seen["poke"] = (outcome, value, faults.raised)
    faults.arm(0)
    path = str(tmp_path / "deferrable")
    make_table(path)  # nothing to wait for yet: the sensor defers
    complete = _deferred(_sensor(kind, path, "deferrable"), path, faults, count, error)
    outcome, value = _outcome(complete)
    seen["deferrable"] = (outcome, value, faults.raised)
    return seen


def _same_payload(kind: str, poke: Any, deferred: Any) -> None:
    if kind == "version":
        assert poke["version"] == deferred["version"] == 2
    else:
        assert poke["due"] is deferred["due"] is True and set(poke["crossed"]) == set(deferred["crossed"])


@pytest.mark.parametrize("kind", ["version", "due"])
def test_a_transient_error_is_retried_alike_in_poke_and_deferrable_mode(kind, tmp_path, faults, capfd):
    seen = _both_modes(kind, tmp_path, faults, count=2)
    assert seen["poke"][0] == seen["deferrable"][0] == "done"
    assert seen["poke"][2] == seen["deferrable"][2] == 2  # two failed polls retried through, in each mode
    _same_payload(kind, seen["poke"][1], seen["deferrable"][1])
    said = re.findall(r"poll failed \(.*?\); retry \d of \d in [\d.]+s", capfd.readouterr().out)
    blip = "poll failed (StorageError: cannot list _delta_log: connection reset); retry {} of 2 in {}s"
    assert said == [blip.format(1, 0.01), blip.format(2, 0.02)] * 2  # poke mode, then the trigger: the same


@pytest.mark.parametrize("kind", ["version", "due"])
def test_a_lasting_transient_error_fails_both_modes_for_the_tasks_retries(kind, tmp_path, faults):
    seen = _both_modes(kind, tmp_path, faults, count=None)
    for mode in ("poke", "deferrable"):
        outcome, message, raised = seen[mode]
        assert outcome == "failed, retryable", mode
        assert "StorageError" in message and "connection reset" in message
        assert raised == 3, mode  # the first try and retry_limit=2 retries, nothing more


@pytest.mark.parametrize("kind", ["version", "due"])
def test_a_refusal_fails_both_modes_at_once_without_retry(kind, tmp_path, faults):
    """A permanent error is not retried in place, and fails the task without the task's retries."""
    seen = _both_modes(kind, tmp_path, faults, count=None, error=lambda: InvalidArgumentError("not a usable log"))
    for mode in ("poke", "deferrable"):
        outcome, message, raised = seen[mode]
        assert outcome == "failed without retry", mode
        assert "InvalidArgumentError: not a usable log" in message and raised == 1, mode


@pytest.mark.parametrize("kind", ["version", "due"])
def test_a_table_gone_while_waiting_fails_both_modes_without_retry(kind, tmp_path):
    """The real permanent error, no injected fault: the table's log is removed."""
    path = tmp_path / "poke"
    _ready(str(path))
    shutil.rmtree(path / "_delta_log")
    poke = _outcome(lambda: _poke(_sensor(kind, str(path), "poke")))
    path = tmp_path / "deferrable"
    make_table(str(path))
    sensor = _sensor(kind, str(path), "deferrable")
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    shutil.rmtree(path / "_delta_log")
    event = asyncio.run(asyncio.wait_for(anext(deferred.value.trigger.run()), 30))
    deferrable = _outcome(lambda: sensor.execute_complete({}, event.payload))
    assert poke[0] == deferrable[0] == "failed without retry"
    assert "NotADeltaTableError" in poke[1] and "NotADeltaTableError" in deferrable[1]


def test_the_trigger_carries_the_sensors_retry_policy(tmp_path):
    make_table(str(tmp_path / "t"))
    sensor = DeltaTableVersionSensor(task_id="s", table=str(tmp_path / "t"), deferrable=True, **RETRIES)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert (trigger.retry_limit, trigger.retry_delay) == (2, 0.01)
    assert trigger.hook.retry_policy == sensor.hook.retry_policy == RetryPolicy(retry_limit=2, retry_delay=0.01)
    _, kwargs = trigger.serialize()
    assert type(trigger)(**kwargs).hook.retry_policy == trigger.hook.retry_policy


# --- the hook, once per task ---------------------------------------------------------------


def test_the_connection_is_fetched_and_logged_once_per_task(monkeypatch, tmp_path, capfd):
    table = make_table(str(tmp_path / "events"))
    monkeypatch.setenv(
        "AIRFLOW_CONN_DELTALOG_ONCE", json.dumps({"conn_type": "deltalog", "host": str(tmp_path), "login": "u"})
    )
    fetched: list[str] = []
    real = DeltaTableHook.get_connection

    def counting(conn_id: str) -> Any:
        fetched.append(conn_id)
        return real(conn_id)

    monkeypatch.setattr(DeltaTableHook, "get_connection", staticmethod(counting))
    sensor = DeltaTableVersionSensor(task_id="s", table="events", deltalog_conn_id="deltalog_once", after_version=0)
    capfd.readouterr()
    assert [sensor.poke({}) for _ in range(3)] == [False, False, False]  # poke mode: one operator, three pokes
    append(table, rows(1))
    assert sensor.poke({}).xcom_value["version"] == 1
    assert fetched == ["deltalog_once"]
    assert capfd.readouterr().out.count("connection 'deltalog_once': table root") == 1

    fetched.clear()
    op = DeltaHealthCheckOperator(task_id="h", table="events", deltalog_conn_id="deltalog_once")
    op.execute({})
    op.execute({})  # a second execute of the same task (a retry in-process) reuses the hook
    assert fetched == ["deltalog_once"] and op.hook is op.hook


# --- operators: reads retried, writes tried once -------------------------------------------------


def test_an_operators_reads_ride_out_a_blip(tmp_path, faults):
    table = make_table(str(tmp_path / "t"))
    append(table, rows(1))
    faults.arm(2)
    report = DeltaHealthCheckOperator(task_id="h", table=table.uri, **RETRIES).execute({})
    assert report["version"] == 1 and faults.raised == 2
    faults.arm(None)
    with pytest.raises(AirflowException) as failed:
        DeltaHealthCheckOperator(task_id="h2", table=table.uri, **RETRIES).execute({})
    assert not isinstance(failed.value, AirflowFailException) and faults.raised == 3


def test_an_operators_write_is_tried_once_and_left_to_the_tasks_retries(tmp_path, faults):
    table = make_table(str(tmp_path / "t"))
    append(table, rows(1))
    faults.arm(1)
    with pytest.raises(AirflowException) as failed:
        DeltaCheckpointOperator(task_id="c", table=table.uri, **RETRIES).execute({})
    assert not isinstance(failed.value, AirflowFailException) and "StorageError" in str(failed.value)
    assert faults.raised == 1
    assert DeltaCheckpointOperator(task_id="c", table=table.uri, **RETRIES).execute({})["version"] == 1  # the retry


# --- the policy itself ------------------------------------------------------------------------


def test_which_errors_are_transient_and_which_are_refusals():
    assert is_transient(StorageError("x")) and is_transient(ConnectionError()) and is_transient(TimeoutError())
    assert not is_transient(InvalidArgumentError("x")) and not is_transient(ValueError("x"))
    assert is_refusal(InvalidArgumentError("x")) and not is_refusal(StorageError("x"))
    assert not is_refusal(ConnectionError()) and not is_refusal(KeyError("x"))  # unknown: an ordinary failure


def test_the_policy_waits_longer_each_time_and_checks_its_numbers():
    assert RetryPolicy().delays() == [1.0, 2.0, 4.0]
    assert RetryPolicy(retry_limit=8, retry_delay=10).delays()[-3:] == [60.0, 60.0, 60.0]
    assert RetryPolicy(retry_limit=0).delays() == []
    for bad in ({"retry_limit": -1}, {"retry_limit": True}, {"retry_limit": "3"}, {"retry_delay": float("nan")}):
        with pytest.raises(InvalidArgumentError):
            RetryPolicy(**bad)
    with pytest.raises(AirflowFailException, match="retry_limit"):  # bad numbers fail the task at once
        DeltaHealthCheckOperator(task_id="h", table="/t", deltalog_retry_limit=-1).execute({})


def test_the_policy_waits_what_it_promises_in_a_thread_and_in_an_event_loop(caplog):
    policy = RetryPolicy(retry_limit=3, retry_delay=0.05)
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) % 4:
            raise ConnectionError("reset")
        return "ok"

    log = logging.getLogger("deltalog_provider.test")
    with caplog.at_level(logging.WARNING, logger=log.name):
        assert policy.call(flaky, log=log, what="flaky") == "ok"
        assert asyncio.run(policy.acall(flaky, log=log, what="flaky")) == "ok"
    waits = [float(r.getMessage().rsplit(" in ", 1)[1].rstrip("s")) for r in caplog.records]
    assert waits == policy.delays() * 2 == [0.05, 0.1, 0.2] * 2 and len(calls) == 8
