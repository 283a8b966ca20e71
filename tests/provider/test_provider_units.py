"""Provider pieces without DAG runs: discovery, hook, checks, triggers under asyncio, operators called directly.

No metadata database is needed here (connections come from ``AIRFLOW_CONN_*``
environment variables), so these run in a few seconds; the DAG-run suites cover
the same pieces end to end.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest
from airflow_helpers import airflow_cli_json

from deltalog import DeltaTable
from deltalog.errors import InvalidArgumentError, OperationRefusedError, StorageError
from deltalog.log import activity
from deltalog.maintenance.health import compute_health
from deltalog_provider.hooks.connection import resolve_table_uri, settings_from_connection
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.hooks.retry_policy import deltalog_errors_as_task_failures
from deltalog_provider.operators import (
    DeltaCommitOperator,
    DeltaCompactOperator,
    DeltaHealthBranchOperator,
    DeltaHealthCheckOperator,
    DeltaVacuumOperator,
)
from deltalog_provider.operators.cancel import call_core
from deltalog_provider.sensors import DeltaMaintenanceDueSensor, DeltaTableVersionSensor
from deltalog_provider.triggers import DeltaMaintenanceDueTrigger, DeltaTableVersionTrigger
from deltalog_provider.utils import checks
from deltalog_provider.utils.checks import MaintenanceThresholds, evaluate_health, find_new_commit
from deltalog_provider.utils.commit_requests import derive_app_id, derive_txn_version, load_request
from deltalog_provider.version_compat import (
    AIRFLOW_V_3_2_PLUS,
    AirflowException,
    AirflowFailException,
    AirflowNotFoundException,
    Asset,
    AssetAlias,
)
from helpers import append, make_table, rows, table_with_a_removed_file, write_data_file

pytestmark = pytest.mark.airflow


def conn_env(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "deltalog", **fields}))


@dataclass
class FakeTI:
    dag_id: str = "dag"
    task_id: str = "task"
    map_index: int = -1
    try_number: int = 1
    pushed: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


# --- discovery --------------------------------------------------------------------------


def test_airflow_discovers_provider_hook_connection_type_and_triggers():
    """``airflow providers hooks`` imports every hook: ours must be listed with its class, not an error."""
    hooks = {h["connection_type"]: h for h in airflow_cli_json("providers", "hooks")}
    ours = hooks["deltalog"]  # an import error would show as "Error when importing hook!" in its fields
    assert ours["class"] == "deltalog_provider.hooks.delta_table.DeltaTableHook"
    assert ours["conn_id_attribute_name"] == "deltalog_conn_id"
    assert ours["package_name"] == "airflow-provider-deltalog"
    # The connection form's field behaviours: the CLI lists them from 3.2 (from get_provider_info);
    # 3.0 and 3.1 list none for any provider and ask the hook class when the form is shown.
    behaviours = airflow_cli_json("providers", "behaviours")
    if AIRFLOW_V_3_2_PLUS:
        assert any("deltalog" in json.dumps(b) for b in behaviours)
    assert DeltaTableHook.get_ui_field_behaviour()["relabeling"]["host"] == "Table root (URI or path)"
    triggers = [
        t for t in airflow_cli_json("providers", "triggers") if t["package_name"] == "airflow-provider-deltalog"
    ]
    assert triggers and all("deltalog_provider.triggers" in json.dumps(t) for t in triggers)


def test_cli_lists_the_provider():
    listed = {p["package_name"]: p for p in airflow_cli_json("providers", "list")}
    assert listed["airflow-provider-deltalog"]["version"] == __import__("deltalog").__version__


# --- hook ---------------------------------------------------------------------------------


def test_connection_settings_map_credentials_root_and_extras():
    from airflow.sdk import Connection

    s3 = Connection(
        conn_id="x",
        conn_type="deltalog",
        host="s3://bucket/warehouse",
        schema="bronze",
        login="AKIA",
        password="s3cret",
        extra=json.dumps({"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1", "anon": None}),
    )
    settings = settings_from_connection(s3)
    assert settings.root == "s3://bucket/warehouse/bronze"
    assert settings.storage_options == {
        "endpoint_url": "http://127.0.0.1:9000",
        "key": "AKIA",
        "secret": "s3cret",
        "client_kwargs": {"region_name": "eu-west-1"},
    }
    assert settings.resolve("events") == "s3://bucket/warehouse/bronze/events"
    assert settings.resolve("s3://other/t") == "s3://other/t"
    assert settings.resolve("/abs/t") == "/abs/t"

    azure = Connection(
        conn_id="y",
        conn_type="deltalog",
        login="acct",
        password="k",
        extra=json.dumps({"root": "abfss://c@acct.dfs.core.windows.net/wh", "storage_options": {"anon": False}}),
    )
    settings = settings_from_connection(azure)
    assert settings.root == "abfss://c@acct.dfs.core.windows.net/wh"
    assert settings.storage_options == {"anon": False, "account_name": "acct", "account_key": "k"}


def test_table_names_need_a_root():
    with pytest.raises(InvalidArgumentError, match="defines no table root"):
        resolve_table_uri("events", None)
    with pytest.raises(InvalidArgumentError):
        resolve_table_uri("  ", "/root")


@pytest.mark.parametrize(
    "location, remote",
    [
        ("s3://b/t", True),
        ("abfss://c@acct.dfs.core.windows.net/t", True),
        ("/data/t", False),
        ("file:///data/t", False),
        ("local:///data/t", False),
        ("C:\\data\\t", False),
        ("relative/t", False),
    ],
)
def test_one_is_remote_rule_for_storage_options(location, remote):
    from deltalog.storage.filesystem import Storage, is_remote

    assert is_remote(location) is remote
    if not location.startswith("abfss"):  # no Azure filesystem installed here
        assert Storage(location).is_local is not remote


def test_hook_reads_the_connection_and_never_logs_secrets(monkeypatch, tmp_path, caplog, capfd):
    (tmp_path / "events").mkdir()
    conn_env(monkeypatch, "deltalog_test", host=str(tmp_path), login="user", password="very-secret-value")
    hook = DeltaTableHook(deltalog_conn_id="deltalog_test")
    with caplog.at_level(logging.DEBUG):
        assert hook.resolve_uri("events") == str(tmp_path / "events")
        assert hook.get_table("events").uri == "file://" + str(tmp_path / "events")
        ok, message = hook.test_connection()
    assert ok and "1 entries" in message
    logged = caplog.text + "".join(capfd.readouterr())
    assert "very-secret-value" not in logged
    assert "'secret'" in logged  # the option name is logged, its value is not


def test_hook_without_connection(monkeypatch, tmp_path):
    assert DeltaTableHook().settings.root is None  # the default id may be missing
    assert DeltaTableHook().resolve_uri(str(tmp_path)) == str(tmp_path)
    with pytest.raises(AirflowNotFoundException):
        DeltaTableHook(deltalog_conn_id="no_such_conn").settings  # noqa: B018
    conn_env(monkeypatch, "deltalog_bad", host=str(tmp_path / "missing"))
    ok, message = DeltaTableHook(deltalog_conn_id="deltalog_bad").test_connection()
    assert not ok and "cannot list" in message


@pytest.mark.s3
def test_hook_operator_and_trigger_on_s3_through_the_connection(monkeypatch, s3_server, s3_bucket):
    from deltalog.create import create_table

    conn_env(
        monkeypatch,
        "deltalog_s3",
        host=f"s3://{s3_bucket}/warehouse",
        login="testing",
        password="testing",
        extra={"endpoint_url": s3_server, "region_name": "us-east-1"},
    )
    hook = DeltaTableHook(deltalog_conn_id="deltalog_s3")
    uri = hook.resolve_uri("events")
    create_table(uri, rows(1).schema, storage_options=hook.storage_options)
    ok, message = hook.test_connection()
    assert ok, message

    op = DeltaHealthCheckOperator(task_id="h", table="events", deltalog_conn_id="deltalog_s3", max_tombstone_bytes=0)
    report = op.execute({})
    assert report["version"] == 0 and report["due"] is False
    assert op.outlets == []  # a health check does not change the table

    trigger = DeltaTableVersionTrigger(
        table_uri=uri, after_version=-1, deltalog_conn_id="deltalog_s3", poke_interval=0.1
    )
    event = asyncio.run(asyncio.wait_for(anext(trigger.run()), 30))
    assert event.payload["status"] == "success" and event.payload["version"] == 0


# --- checks ------------------------------------------------------------------------------


def _commit_operation(table: DeltaTable, operation: str) -> None:
    from deltalog.commit.transaction import Transaction

    Transaction(table.storage, table.snapshot(), operation=operation).commit()


def test_find_new_commit_and_operation_filter(tmp_path):
    table = make_table(str(tmp_path / "t"))
    append(table, rows(1))  # 1 WRITE
    _commit_operation(table, "OPTIMIZE")  # 2
    assert find_new_commit(table, 2) is None
    assert find_new_commit(table, 0) == {"version": 2, "previous_version": 0, "operation": None}
    assert find_new_commit(table, 0, ["write"])["version"] == 1
    assert find_new_commit(table, 1, ["WRITE"]) is None
    assert find_new_commit(DeltaTable(str(tmp_path / "nope")), -1, missing_ok=True) is None
    assert checks.current_version(DeltaTable(str(tmp_path / "nope")), missing_ok=True) == -1


def test_versions_since_vacuum_looks_back_only_as_far_as_needed(tmp_path, monkeypatch):
    table = make_table(str(tmp_path / "t"))
    for i in range(3):
        append(table, rows(1, start=i))
    _commit_operation(table, "VACUUM END")  # 4
    append(table, rows(1, start=9))  # 5
    listing = table.list_log()
    assert activity.versions_since_vacuum(table.storage, listing, 5, window=10) == 1
    reads: list[int] = []
    real = activity.operation_of
    monkeypatch.setattr(activity, "operation_of", lambda s, li, v: reads.append(v) or real(s, li, v))
    assert activity.versions_since_vacuum(table.storage, listing, 3, window=2) == 2  # lower bound, window exhausted
    assert reads == [3, 2]
    assert activity.versions_since_vacuum(table.storage, listing, 3, window=100) == 4  # never vacuumed: 0..3
    # deltalog health reports it too (a lower bound when the look-back ends first).
    assert table.health().versions_since_vacuum == 1
    health = compute_health(table.snapshot(version=3), vacuum_lookback=2)
    assert health.versions_since_vacuum == 2
    assert compute_health(table.snapshot(), vacuum_lookback=0).versions_since_vacuum is None


def test_health_thresholds(tmp_path):
    table = make_table(str(tmp_path / "t"))
    append(table, rows(2))
    report = evaluate_health(table, MaintenanceThresholds(max_small_file_share=0.5))
    assert not report.due  # one small file: nothing to compact with
    append(table, rows(2, start=5))
    report = evaluate_health(
        table,
        MaintenanceThresholds(max_small_file_share=0.5, max_commits_since_checkpoint=1, max_versions_since_vacuum=5),
    )
    assert set(report.crossed) == {"small_file_share", "commits_since_checkpoint"}
    assert report.crossed["commits_since_checkpoint"] == {"value": 3, "threshold": 1}
    assert report.versions_since_vacuum == 3 and report.to_dict()["due"] is True
    with pytest.raises(InvalidArgumentError, match="max_tombstone_bytes"):
        MaintenanceThresholds.from_values(max_tombstone_bytes="lots")
    with pytest.raises(InvalidArgumentError):
        MaintenanceThresholds(max_small_file_share=-1)
    assert MaintenanceThresholds.from_values(max_small_file_share="0.25", max_commits_since_checkpoint="None") == (
        MaintenanceThresholds(max_small_file_share=0.25)
    )


# --- triggers ----------------------------------------------------------------------------


def _roundtrip(trigger: Any) -> Any:
    import importlib

    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # stored as JSON by the scheduler
    module, _, name = classpath.rpartition(".")
    clone = getattr(importlib.import_module(module), name)(**kwargs)
    assert clone.serialize() == (classpath, kwargs)
    return clone


def test_triggers_serialize_round_trip():
    version = DeltaTableVersionTrigger(table_uri="s3://b/t", after_version=3, operations=["WRITE"], poke_interval=5)
    assert _roundtrip(version).operations == ["WRITE"]
    due = DeltaMaintenanceDueTrigger(
        table_uri="/data/t", thresholds=MaintenanceThresholds(max_tombstone_bytes=10).to_dict(), target_file_size=1024
    )
    assert _roundtrip(due)._thresholds.max_tombstone_bytes == 10
    assert "secret" not in json.dumps(version.serialize()[1])


def test_version_trigger_waits_for_a_new_commit(tmp_path):
    table = make_table(str(tmp_path / "t"))
    trigger = DeltaTableVersionTrigger(table_uri=table.uri, after_version=0, poke_interval=0.05)

    async def scenario() -> Any:
        gen = trigger.run()
        pending = asyncio.ensure_future(anext(gen))
        await asyncio.sleep(0.3)
        assert not pending.done()  # nothing committed yet
        await asyncio.to_thread(append, table, rows(1))
        return await asyncio.wait_for(pending, 10)

    event = asyncio.run(scenario())
    assert event.payload == {"status": "success", "version": 1, "previous_version": 0, "operation": None}


def test_triggers_never_block_the_event_loop(tmp_path, monkeypatch):
    """The library call runs in a thread: a slow listing must not stop other coroutines."""
    table = make_table(str(tmp_path / "t"))
    append(table, rows(1))

    def slow_check(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.5)
        return {"version": 1}

    monkeypatch.setattr("deltalog_provider.triggers.delta_table.find_new_commit", slow_check)
    trigger = DeltaTableVersionTrigger(table_uri=table.uri, after_version=0, poke_interval=0.05)

    async def scenario() -> tuple[Any, int]:
        ticks = 0

        async def heartbeat() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        beat = asyncio.ensure_future(heartbeat())
        event = await anext(trigger.run())
        beat.cancel()
        return event, ticks

    event, ticks = asyncio.run(scenario())
    assert event.payload["status"] == "success"
    assert ticks >= 20, f"event loop was blocked (only {ticks} heartbeats during a 0.5 s check)"


def test_triggers_report_errors_with_retryability(tmp_path):
    not_a_table = tmp_path / "plain"
    not_a_table.mkdir()
    trigger = DeltaMaintenanceDueTrigger(
        table_uri=str(not_a_table), thresholds=MaintenanceThresholds(max_tombstone_bytes=0).to_dict()
    )
    event = asyncio.run(anext(trigger.run()))
    assert event.payload["status"] == "error" and event.payload["retryable"] is False
    assert "NotADeltaTableError" in event.payload["message"]


def test_triggers_poll_through_transient_storage_errors(tmp_path, monkeypatch):
    """A storage blip does not end the wait (before, the first one ended the deferral)."""
    table = make_table(str(tmp_path / "t"))
    append(table, rows(1))
    calls: list[int] = []
    real = checks.find_new_commit

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) <= 2:
            raise StorageError("cannot list s3://b/t/_delta_log: connection reset")
        return real(*args, **kwargs)

    monkeypatch.setattr("deltalog_provider.triggers.delta_table.find_new_commit", flaky)
    trigger = DeltaTableVersionTrigger(table_uri=table.uri, after_version=0, poke_interval=0.01)
    event = asyncio.run(anext(trigger.run()))
    assert event.payload["status"] == "success" and event.payload["version"] == 1 and len(calls) == 3


def test_triggers_report_transient_errors_past_the_retry_limit(tmp_path, monkeypatch):
    table = make_table(str(tmp_path / "t"))
    calls: list[int] = []

    def down(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        raise ConnectionError("endpoint unreachable")

    monkeypatch.setattr("deltalog_provider.triggers.delta_table.find_new_commit", down)
    trigger = DeltaTableVersionTrigger(table_uri=table.uri, after_version=0, poke_interval=0.01, retry_limit=2)
    event = asyncio.run(anext(trigger.run()))
    assert event.payload["status"] == "error" and event.payload["retryable"] is True
    assert "endpoint unreachable" in event.payload["message"] and len(calls) == 3  # first try + 2 retries
    assert _roundtrip(trigger).retry_limit == 2


def test_maintenance_trigger_fires_when_due(tmp_path):
    table = make_table(str(tmp_path / "t"))
    for i in range(3):
        append(table, rows(1, start=i))
    trigger = DeltaMaintenanceDueTrigger(
        table_uri=table.uri, thresholds=MaintenanceThresholds(max_commits_since_checkpoint=2).to_dict()
    )
    event = asyncio.run(asyncio.wait_for(anext(trigger.run()), 10))
    assert event.payload["status"] == "success" and event.payload["due"] is True
    assert event.payload["crossed"]["commits_since_checkpoint"]["value"] == 4


# --- sensors without a DAG run -------------------------------------------------------------


def test_deferrable_sensors_defer_with_their_trigger(tmp_path):
    from deltalog_provider.version_compat import TaskDeferred

    table = make_table(str(tmp_path / "t"))
    sensor = DeltaTableVersionSensor(task_id="s", table=str(tmp_path / "t"), deferrable=True, timeout=30)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, DeltaTableVersionTrigger) and trigger.after_version == 0
    assert deferred.value.method_name == "execute_complete"
    append(table, rows(1))
    assert sensor.execute_complete({}, {"status": "success", "version": 1})["version"] == 1
    with pytest.raises(AirflowFailException, match="unsupported"):
        sensor.execute_complete({}, {"status": "error", "message": "unsupported", "retryable": False})
    with pytest.raises(AirflowException) as retryable:
        sensor.execute_complete({}, {"status": "error", "message": "network", "retryable": True})
    assert not isinstance(retryable.value, AirflowFailException)

    due = DeltaMaintenanceDueSensor(
        task_id="d", table=str(tmp_path / "t"), max_commits_since_checkpoint=5, deferrable=True, poke_interval=2
    )
    with pytest.raises(TaskDeferred) as deferred:
        due.execute({})
    assert deferred.value.trigger.thresholds["max_commits_since_checkpoint"] == 5
    assert deferred.value.trigger.poke_interval == 2


def test_sensor_deferrable_default_comes_from_config(monkeypatch, tmp_path):
    from deltalog_provider.version_compat import conf

    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert conf.getboolean("operators", "default_deferrable") is True
    assert DeltaTableVersionSensor(task_id="s", table=str(tmp_path)).deferrable is True
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert DeltaTableVersionSensor(task_id="s2", table=str(tmp_path)).deferrable is False


def test_version_sensor_remembers_its_baseline(tmp_path):
    """Reschedule mode builds a new operator per poke: the baseline lives in task_state_store."""
    table = make_table(str(tmp_path / "t"))

    class Store(dict):
        def set(self, key: str, value: Any) -> None:
            self[key] = value

    store = Store()
    sensor = DeltaTableVersionSensor(task_id="s", table=str(tmp_path / "t"))
    assert sensor.poke({"task_state_store": store}) is False
    assert store == {"deltalog_baseline_version": 0}
    append(table, rows(1))
    again = DeltaTableVersionSensor(task_id="s", table=str(tmp_path / "t"))
    result = again.poke({"task_state_store": store})
    assert result.is_done and result.xcom_value["version"] == 1


# --- operators without a DAG run ------------------------------------------------------------


def test_outlets_follow_the_table():
    literal = DeltaVacuumOperator(task_id="a", table="/data/t/")
    assert literal.outlets == [Asset(uri="file:///data/t")]
    templated = DeltaVacuumOperator(task_id="b", table="{{ params.table }}")
    assert isinstance(templated.outlets[0], AssetAlias)
    assert DeltaVacuumOperator(task_id="c", table="/data/t", dry_run=True).outlets == []
    assert DeltaVacuumOperator(task_id="d", table="/data/t", emit_asset=False).outlets == []
    mine = Asset(uri="file:///data/t", name="events")
    assert DeltaVacuumOperator(task_id="e", table="/data/t", outlets=[mine]).outlets == [mine]
    assert DeltaHealthCheckOperator(task_id="f", table="/data/t", max_tombstone_bytes=1).outlets == []


def test_errors_map_to_failures_by_retryability():
    with pytest.raises(AirflowFailException, match="OperationRefusedError: unsafe"):
        with deltalog_errors_as_task_failures():
            raise OperationRefusedError("unsafe")
    with pytest.raises(AirflowException) as caught:
        with deltalog_errors_as_task_failures():
            raise StorageError("network down")
    assert not isinstance(caught.value, AirflowFailException)


def test_call_core_passes_cancel_only_when_accepted():
    event = threading.Event()
    assert call_core(lambda table, cancel=None: cancel, "t", cancel=event) is event
    assert call_core(lambda table: table, "t", cancel=event) == "t"


def test_kill_during_vacuum_planning_deletes_nothing(tmp_path, monkeypatch):
    import deltalog.vacuuming as vacuum_module

    _, old = table_with_a_removed_file(str(tmp_path / "t"))
    before = sorted(os.listdir(os.path.join(str(tmp_path / "t"), "_delta_log")))

    op = DeltaVacuumOperator(task_id="v", table=str(tmp_path / "t"), retention_hours=0, allow_short_retention=True)
    real_plan = vacuum_module.plan_vacuum

    def plan_then_sigterm(*args: Any, **kwargs: Any) -> Any:
        plan = real_plan(*args, **kwargs)
        assert plan.num_files == 1
        op.on_kill()  # what the task runner's SIGTERM handler calls
        return plan

    monkeypatch.setattr(vacuum_module, "plan_vacuum", plan_then_sigterm)
    with pytest.raises(AirflowException, match="cancelled"):
        op.execute({})
    assert os.path.exists(os.path.join(str(tmp_path / "t"), old))
    assert sorted(os.listdir(os.path.join(str(tmp_path / "t"), "_delta_log"))) == before


def test_health_branch_chooses_paths_per_check():
    op = DeltaHealthBranchOperator(
        task_id="b",
        table="/t",
        max_tombstone_bytes=0,
        follow_task_ids_if_due={"small_file_share": "compact", "tombstone_bytes": ["vacuum", "compact"]},
        follow_task_ids_if_healthy="done",
    )
    assert op.choose_branch({"crossed": {"tombstone_bytes": {}, "small_file_share": {}}}) == ["vacuum", "compact"]
    assert op.choose_branch({"crossed": {"commits_since_checkpoint": {}}}) == []
    assert op.choose_branch({"crossed": {}}) == ["done"]


def test_health_check_returns_the_report_unless_asked_to_fail(tmp_path):
    """Issue 15 fault 6: a due table is reported, not failed; fail_when_due=True fails it."""
    table = make_table(str(tmp_path / "t"))
    for i in range(3):
        append(table, rows(1, start=i))  # three small files: compaction finds a bin
    report = DeltaHealthCheckOperator(task_id="h", table=str(tmp_path / "t")).execute({})
    assert report["due"] is True and set(report["crossed"]) == {"compaction"}
    assert report["operations"] == {"compaction": True, "checkpoint": False, "vacuum": False, "log_cleanup": False}
    assert report["reasons"][0].startswith("compaction: 3 small files")
    with pytest.raises(AirflowFailException, match="needs maintenance"):
        DeltaHealthCheckOperator(task_id="h", table=str(tmp_path / "t"), fail_when_due=True).execute({})
    with pytest.raises(InvalidArgumentError, match="fail_when_due"):
        DeltaHealthCheckOperator(task_id="h2", table=str(tmp_path / "t"), fail_when_due="yes")


def test_threshold_without_work_is_not_due(tmp_path):
    """Issue 15 fault 7: one small file per partition crosses the share but compaction has no bin."""
    from fleet_helpers import one_small_file_per_partition

    table = one_small_file_per_partition(str(tmp_path / "t"))
    report = evaluate_health(table, MaintenanceThresholds(max_small_file_share=0.5, max_tombstone_bytes=0))
    assert not report.due and report.crossed == {}
    assert report.not_actionable["small_file_share"] == {"value": 1.0, "threshold": 0.5}
    sensor = DeltaMaintenanceDueSensor(task_id="d", table=str(tmp_path / "t"), max_small_file_share=0.5)
    assert sensor.poke({}) is False


def test_health_branch_accepts_operation_names():
    op = DeltaHealthBranchOperator(
        task_id="b", table="/t", follow_task_ids_if_due={"compaction": "compact", "vacuum": "vacuum"}
    )
    assert op.choose_branch({"crossed": {"compaction": {}}}) == ["compact"]
    assert op.choose_branch({"crossed": {"small_file_share": {}, "tombstone_bytes": {}}}) == ["compact", "vacuum"]


def test_commit_app_transaction_identity():
    import datetime as dt

    when = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    assert derive_app_id({"ti": FakeTI(), "logical_date": when}) == "airflow:dag:task:2024-05-01T00:00:00+00:00"
    assert derive_app_id({"ti": FakeTI(map_index=3), "logical_date": when}).startswith("airflow:dag:task:3:2024-05-01")
    # Airflow 3's default trigger has no logical date: the run id names the run.
    run = types.SimpleNamespace(run_id="manual__2024-05-01T01:00:00+00:00", run_after=when + dt.timedelta(hours=1))
    assert derive_app_id({"ti": FakeTI(), "logical_date": None, "dag_run": run}) == (
        "airflow:dag:task:manual__2024-05-01T01:00:00+00:00"
    )
    assert derive_txn_version({"logical_date": when}) == int(when.timestamp() * 1000)
    assert derive_txn_version({"logical_date": None, "dag_run": run}) == int(when.timestamp() * 1000) + 3_600_000
    with pytest.raises(InvalidArgumentError, match="neither a logical date nor a run id"):
        derive_app_id({"ti": FakeTI(), "logical_date": None})


def test_commit_request_forms(tmp_path):
    hook = DeltaTableHook()
    root = str(tmp_path)
    (tmp_path / "_requests").mkdir()
    (tmp_path / "_requests" / "r.json").write_text('{"add": []}')
    assert load_request({"add": []}, hook, root) == {"add": []}
    assert load_request('{"add": [{"path": "a"}]}', hook, root) == {"add": [{"path": "a"}]}
    assert load_request("{'add': []}", hook, root) == {"add": []}  # a dict rendered by Jinja
    assert load_request("_requests/r.json", hook, "file://" + root) == {"add": []}
    assert load_request(str(tmp_path / "_requests" / "r.json"), hook, "/elsewhere") == {"add": []}
    with pytest.raises(InvalidArgumentError, match="not found"):
        load_request("_requests/missing.json", hook, root)
    with pytest.raises(InvalidArgumentError, match="JSON"):
        load_request("{not json", hook, root)


def test_commit_retry_is_a_noop_and_an_older_run_commits_once(tmp_path, capfd):
    """Issue 15 fault 5: a backfill of an older date after a newer run commits its own data, once."""
    import datetime as dt

    table = make_table(str(tmp_path / "t"))
    newer_file = write_data_file(str(tmp_path / "t"), rows(3))
    older_file = write_data_file(str(tmp_path / "t"), rows(2, start=10))
    newer = {"ti": FakeTI(), "logical_date": dt.datetime(2024, 5, 2, tzinfo=dt.UTC)}
    op = DeltaCommitOperator(task_id="c", table=str(tmp_path / "t"), request={"add": [{"path": newer_file["path"]}]})
    first = op.execute(newer)
    assert first["version"] == 1 and not first["noop"]
    capfd.readouterr()
    retry = op.execute(newer)
    assert retry["noop"] is True and table.version() == 1
    assert "already committed by an earlier try" in capfd.readouterr().out
    assert op.get_openlineage_facets_on_complete(None).outputs[0].name == str(tmp_path / "t")

    older = {"ti": FakeTI(), "logical_date": dt.datetime(2024, 5, 1, tzinfo=dt.UTC)}
    backfill = DeltaCommitOperator(
        task_id="c", table=str(tmp_path / "t"), request={"add": [{"path": older_file["path"]}]}
    )
    assert backfill.execute(older)["version"] == 2
    assert backfill.execute(older)["noop"] is True  # a cleared backfill run commits nothing again
    # A run without a logical date (REST/CLI trigger) is keyed by its run id.
    manual = types.SimpleNamespace(run_id="manual__x", run_after=dt.datetime(2024, 5, 3, tzinfo=dt.UTC))
    third_file = write_data_file(str(tmp_path / "t"), rows(1, start=20))
    op3 = DeltaCommitOperator(task_id="c", table=str(tmp_path / "t"), request={"add": [{"path": third_file["path"]}]})
    assert op3.execute({"ti": FakeTI(), "logical_date": None, "dag_run": manual})["version"] == 3
    assert op3.execute({"ti": FakeTI(), "logical_date": None, "dag_run": manual})["noop"] is True
    assert table.version() == 3 and table.snapshot().files.num_rows == 3


def test_commit_shared_app_id_refuses_a_superseded_run(tmp_path):
    """With an explicit app id shared by runs, an older version after a newer one fails instead of dropping data."""
    table = make_table(str(tmp_path / "t"))
    add = write_data_file(str(tmp_path / "t"), rows(3))
    request = {"add": [{"path": add["path"]}]}
    shared = {"task_id": "c", "table": str(tmp_path / "t"), "request": request, "app_id": "ingest"}
    assert DeltaCommitOperator(txn_version=2, **shared).execute({"ti": FakeTI()})["version"] == 1
    with pytest.raises(AirflowFailException, match="newer than this run"):
        DeltaCommitOperator(txn_version=1, **shared).execute({"ti": FakeTI()})
    lenient = DeltaCommitOperator(txn_version=1, fail_if_superseded=False, **shared)
    assert lenient.execute({"ti": FakeTI()})["noop"] is True
    assert table.version() == 1


# OpenLineage: tests/provider/test_openlineage.py (against the real OpenLineage provider and client).


def test_create_table_operator_creates_once_and_keeps_an_existing_table(tmp_path):
    """The ingest DAG's "create on first run" without a hand-written task."""
    from deltalog_provider.operators import DeltaCreateTableOperator

    path = str(tmp_path / "events")
    schema = pa.schema([("id", pa.int64()), ("day", pa.string())])
    op = DeltaCreateTableOperator(
        task_id="create",
        table=path,
        schema=schema,
        partition_by="day",
        configuration='{"delta.appendOnly": "true"}',
        if_exists="ignore",
    )
    first = op.execute({})
    assert first["created"] is True and first["version"] == 0 and not op.is_noop(first)
    snap = DeltaTable(path).snapshot()
    assert snap.partition_columns == ["day"] and snap.metadata.configuration["delta.appendOnly"] == "true"
    assert snap.metadata.schema.names == ["id", "day"]
    again = op.execute({})
    assert again == {"table": "file://" + path, "created": False, "version": 0} and op.is_noop(again)
    strict = DeltaCreateTableOperator(task_id="c2", table=path, schema=snap.metadata.schema_string)
    with pytest.raises(AirflowFailException, match="TableAlreadyExistsError"):
        strict.execute({})
    assert DeltaTable(path).version() == 0


def test_create_table_operator_refuses_bad_input_before_writing(tmp_path):
    from deltalog_provider.operators import DeltaCreateTableOperator

    path = tmp_path / "t"
    bad = [
        {"schema": pa.schema([("id", pa.int64())]), "if_exists": "replace"},
        {"schema": 42},
        {"schema": pa.schema([("id", pa.int64())]), "configuration": "[1]"},
    ]
    for kwargs in bad:
        with pytest.raises(AirflowFailException, match="InvalidArgumentError"):
            DeltaCreateTableOperator(task_id="c", table=str(path), **kwargs).execute({})
    assert not path.exists()


def test_s3_connection_options_are_not_applied_to_local_tables(monkeypatch, tmp_path, caplog, capfd):
    """Issue 15 fault 9: an S3 connection's key, secret and endpoint reached local-path tables."""
    table = make_table(str(tmp_path / "local"))
    conn_env(
        monkeypatch,
        "deltalog_s3",
        host="s3://bucket/warehouse",
        login="AKIA",
        password="very-secret-value",
        extra={"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"},
    )
    hook = DeltaTableHook(deltalog_conn_id="deltalog_s3")
    with caplog.at_level(logging.INFO):
        local = hook.get_table(str(tmp_path / "local"))
    assert local.storage.storage_options == {}
    assert local.version() == table.version()
    # The log names the table's own location, not the connection's S3 root as if it were the table's.
    logged = caplog.text + "".join(capfd.readouterr())
    assert f"table {tmp_path / 'local'} is on file storage" in logged
    assert "very-secret-value" not in logged
    # Tables on the connection's store still get them; other stores and local paths do not.
    assert hook.storage_options_for("s3://bucket/warehouse/events")["key"] == "AKIA"
    assert hook.storage_options_for("s3a://other-bucket/t")["secret"] == "very-secret-value"
    assert hook.storage_options_for("gs://bucket/t") == {}
    assert hook.storage_options_for("file:///tmp/t") == {}
    assert hook.storage_options_for(str(tmp_path)) == {}


def test_aws_conn_id_supplies_s3_credentials_from_an_amazon_connection(monkeypatch):
    """Issue 15 fault 10: reuse an Amazon provider connection instead of a raw key and secret."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DELTALOG_TEST",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIAFROMAWS",
                "password": "aws-secret",
                "extra": {"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:9"},
            }
        ),
    )
    conn_env(monkeypatch, "deltalog_aws", host="s3://bucket/wh", extra={"aws_conn_id": "aws_deltalog_test"})
    options = DeltaTableHook(deltalog_conn_id="deltalog_aws").storage_options_for("s3://bucket/wh/events")
    assert options == {
        "key": "AKIAFROMAWS",
        "secret": "aws-secret",
        "endpoint_url": "http://127.0.0.1:9",
        "client_kwargs": {"region_name": "eu-west-1"},
    }
    # The deltalog connection's own settings win over the AWS connection's.
    conn_env(
        monkeypatch,
        "deltalog_aws2",
        host="s3://bucket/wh",
        extra={"aws_conn_id": "aws_deltalog_test", "endpoint_url": "http://minio:9000"},
    )
    assert DeltaTableHook(deltalog_conn_id="deltalog_aws2").storage_options["endpoint_url"] == "http://minio:9000"
    # The trigger's async path resolves the same options.
    import asyncio

    settings = asyncio.run(DeltaTableHook.aget_settings("deltalog_aws"))
    assert settings.options_for("s3://bucket/wh/events") == options


def test_aws_conn_id_without_the_amazon_provider_is_one_clear_error(monkeypatch):
    conn_env(monkeypatch, "deltalog_aws3", host="s3://bucket/wh", extra={"aws_conn_id": "aws_default"})
    monkeypatch.setitem(sys.modules, "airflow.providers.amazon.aws.hooks.base_aws", None)
    with pytest.raises(InvalidArgumentError, match=r"Amazon provider is not installed.*\[amazon\]"):
        DeltaTableHook(deltalog_conn_id="deltalog_aws3").get_table("events")


def test_provider_documentation_url_is_the_distributions():
    """Issue 15 fault 10: the UI's and REST API's provider list needs a ``documentation-url``.

    Airflow 3.3 reads it from the distribution's Project-URL "Documentation", older releases from
    get_provider_info(): both must name the same page (schema validity: test_provider_info_schema).
    """
    import importlib.metadata

    from deltalog_provider.get_provider_info import DOCUMENTATION_URL, get_provider_info

    urls = dict(
        (label.strip(), url.strip())
        for label, _, url in (
            entry.partition(",")
            for entry in importlib.metadata.metadata("airflow-provider-deltalog").get_all("Project-URL") or []
        )
    )
    assert urls["Documentation"] == DOCUMENTATION_URL == get_provider_info()["documentation-url"]
    assert urls["Changelog"].endswith("/CHANGELOG.md") and urls["Source"]
    listed = airflow_cli_json("providers", "get", "airflow-provider-deltalog")
    assert listed and listed[0]["Version"] == __import__("deltalog").__version__


def test_kill_during_vacuum_deletes_stops_between_files(tmp_path, monkeypatch):
    """on_kill reaches the core: the delete loop stops at the next file, VACUUM END records it."""
    import deltalog.vacuuming.delete as delete_module
    from deltalog.commit.transaction import Transaction

    table = make_table(str(tmp_path / "t"))
    for i in range(6):
        append(table, rows(1, start=i))
    snap = table.snapshot()
    txn = Transaction(table.storage, snap, operation="DELETE")
    txn.remove([{"path": p, "dataChange": True, "deletionTimestamp": 0} for p in snap.file_paths()])
    txn.commit()
    op = DeltaVacuumOperator(task_id="v", table=str(tmp_path / "t"), retention_hours=0, allow_short_retention=True)
    unlinked: list[str] = []
    real_unlink = delete_module._unlink

    def unlink_then_kill(path: str) -> None:
        real_unlink(path)
        unlinked.append(path)
        if len(unlinked) == 2:
            op.on_kill()

    monkeypatch.setattr(delete_module, "_unlink", unlink_then_kill)
    with pytest.raises(AirflowException, match="OperationCancelledError: .* cancelled after deleting 2 of 6 files"):
        op.execute({})
    left = [p for p in snap.file_paths() if os.path.exists(os.path.join(str(tmp_path / "t"), p))]
    assert len(unlinked) == 2 and len(left) == 4
    last = table.history(limit=1)[0]
    assert last.operation == "VACUUM END" and last.operationParameters["status"] == "FAILED"


# --- DeltaCompactOperator(engine="spark"): plan -> SparkSubmitHook -> commit, with a stand-in spark-submit ---

#: A ``spark-submit`` stand-in on PATH: does the Spark job's work with the local engine (same files, same
#: request), so the operator's hook, argument and commit plumbing is tested without a JVM.
FAKE_SPARK_SUBMIT = """#!{python}
import json, os, sys, time
args = sys.argv[1:]
opt = lambda name: args[args.index(name) + 1]
if os.environ.get("FAKE_SPARK_SLEEP"):
    time.sleep(float(os.environ["FAKE_SPARK_SLEEP"]))
from deltalog import DeltaTable
from deltalog.compaction import CompactionPlan
from deltalog.compaction.local import run_local
from deltalog.storage.filesystem import Storage
storage = DeltaTable(opt("--table")).storage
plan = CompactionPlan.from_json(Storage(opt("--plan")).read_bytes(Storage(opt("--plan")).root))
outputs, _ = run_local(storage, plan)
request = {{"add": [o.add for o in outputs], "remove": [f.path for b in plan.bins for f in b.files]}}
request.update(tableId=plan.table_id, readVersion=plan.snapshot_version)  # as the real job names its plan
out = Storage(opt("--output-request"))
out.write_atomic(out.root, json.dumps(request).encode())
"""


@pytest.fixture
def fake_spark(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "spark-submit"
    script.write_text(FAKE_SPARK_SUBMIT.format(python=sys.executable))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_FAKE", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    return "spark_fake"


def test_compact_operator_runs_the_spark_engine_through_the_spark_hook(tmp_path, fake_spark):
    table = make_table(str(tmp_path / "t"))
    for i in range(3):
        append(table, rows(2, start=i * 2))
    op = DeltaCompactOperator(task_id="c", table=table.uri, engine="spark", spark_conn_id=fake_spark)
    metrics = op.execute({})
    assert metrics["engine"] == "spark" and metrics["num_files_removed"] == 3 and metrics["num_files_added"] == 1
    assert len(table.snapshot().file_paths()) == 1
    assert os.listdir(os.path.join(str(tmp_path / "t"), "_compaction")) == []  # plan and request cleaned up
    with pytest.raises(AirflowFailException, match="master"):
        DeltaCompactOperator(
            task_id="c2", table=table.uri, engine="spark", spark_conn_id=fake_spark, spark_options={"master": "x"}
        ).execute({})


def test_vacuum_operator_plans_on_the_spark_connection_s_master(tmp_path, fake_spark, monkeypatch):
    """engine="spark": the core's Spark engine gets the connection's master and the conf; the task deletes what
    the plan names. (The Spark job itself is tested in tests/test_vacuum_spark.py; here the plan is the local
    engine's, to test the operator without a JVM.)"""
    import deltalog.vacuuming as vacuum_module

    table, old = table_with_a_removed_file(str(tmp_path / "t"))
    real_plan = vacuum_module.plan_vacuum
    seen: list[dict[str, Any]] = []

    def recorded(*args: Any, **kwargs: Any) -> Any:
        seen.append(dict(kwargs))
        return real_plan(*args, **{**kwargs, "engine": "local", "spark_options": None})

    monkeypatch.setattr(vacuum_module, "plan_vacuum", recorded)
    op = DeltaVacuumOperator(
        task_id="v",
        table=table.uri,
        retention_hours=0,
        allow_short_retention=True,
        engine="spark",
        spark_conn_id=fake_spark,
        spark_options={"conf": {"spark.driver.memory": "2g"}},
    )
    metrics = op.execute({})
    assert seen[0]["engine"] == "spark"
    assert seen[0]["spark_options"] == {"conf": {"spark.driver.memory": "2g"}, "master": "local[1]"}
    assert metrics["num_deleted_files"] == 1 and not os.path.exists(os.path.join(table.uri, old))
    with pytest.raises(AirflowFailException, match="names the master"):
        DeltaVacuumOperator(
            task_id="v2", table=table.uri, engine="spark", spark_conn_id=fake_spark, spark_options={"master": "x"}
        ).execute({})


def test_killing_a_spark_compaction_kills_the_job_and_commits_nothing(tmp_path, fake_spark, monkeypatch):
    table = make_table(str(tmp_path / "t"))
    for i in range(3):
        append(table, rows(2, start=i * 2))
    version = table.version()
    monkeypatch.setenv("FAKE_SPARK_SLEEP", "60")
    op = DeltaCompactOperator(task_id="c", table=table.uri, engine="spark", spark_conn_id=fake_spark)
    threading.Timer(2.0, op.on_kill).start()
    started = time.monotonic()
    with pytest.raises(AirflowException):
        op.execute({})
    assert time.monotonic() - started < 30 and table.version() == version


def test_operators_log_the_core_results_own_summary_line(tmp_path, capfd):
    """One summary per result, shared with the CLI: operators no longer look up result keys by name."""
    from deltalog.compaction import compact

    table = make_table(str(tmp_path / "t"))
    for i in range(3):
        append(table, rows(2, start=i * 2))
    expected = compact(table, plan_only=True).summary_line()
    capfd.readouterr()
    DeltaCompactOperator(task_id="c", table=table.uri, plan_only=True).execute({})
    assert f"OPTIMIZE {table.uri}: {expected}" in capfd.readouterr().out and "None" not in expected
    metrics = DeltaCompactOperator(task_id="c2", table=table.uri).execute({})
    out = capfd.readouterr().out
    assert "-> 1 files" in out and f"in versions {metrics['versions']}" in out


# --- copies, pickles, serialization (Airflow 3.0's `dags test` deep-copies the DAG) ----------------


def test_operators_sensors_and_triggers_deep_copy_and_pickle(tmp_path):
    """Nothing a task holds before it runs is a lock, a thread or a pyarrow buffer."""
    import copy
    import datetime as dt
    import pickle

    from airflow.sdk import DAG

    from deltalog_provider.operators import DeltaCreateTableOperator

    path = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])
    with DAG("copyable", schedule=None, start_date=dt.datetime(2026, 1, 1)) as dag:
        tasks = [
            DeltaCreateTableOperator(task_id="create", table=path, schema=schema, if_exists="ignore"),
            DeltaCompactOperator(task_id="compact", table=path, deadline_margin=dt.timedelta(minutes=5)),
            DeltaVacuumOperator(task_id="vacuum", table=path, dry_run=True),
            DeltaHealthBranchOperator(task_id="branch", table=path, follow_task_ids_if_due="compact"),
            DeltaTableVersionSensor(task_id="version", table=path, deferrable=True),
            DeltaMaintenanceDueSensor(task_id="due", table=path, max_small_file_share=0.5, mode="reschedule"),
        ]
    assert set(copy.deepcopy(dag).task_dict) == {t.task_id for t in tasks}
    for task in tasks:
        clone = pickle.loads(pickle.dumps(task))
        assert clone.task_id == task.task_id and clone.table == path
    # The schema is kept as Delta schema JSON (text a serialized DAG can hold), and creates the same table.
    create = tasks[0]
    assert isinstance(create.schema, str) and json.loads(create.schema)["type"] == "struct"
    create.execute({})
    assert DeltaTable(path).snapshot().metadata.schema == schema

    # A deep copy is the same task: it shares the cancel event; a pickle starts with a fresh one.
    compact = tasks[1]
    compact.on_kill()
    assert copy.deepcopy(compact)._cancel is compact._cancel and compact._cancel.is_set()
    assert not pickle.loads(pickle.dumps(compact))._cancel.is_set()

    for trigger in (
        DeltaTableVersionTrigger(table_uri=path, after_version=0, poke_interval=1),
        DeltaMaintenanceDueTrigger(
            table_uri=path, thresholds=MaintenanceThresholds(max_commits_since_checkpoint=1).to_dict()
        ),
    ):
        assert pickle.loads(pickle.dumps(trigger)).serialize() == trigger.serialize()
        assert copy.deepcopy(trigger).serialize() == trigger.serialize()


def test_alias_event_extras_are_flat_where_airflow_needs_it(monkeypatch, caplog):
    """Airflow 3.0 hashes the extra of an alias-added event: nested values become JSON text there."""
    import deltalog_provider.version_compat as compat

    extra = {"table": "file:///t", "version": 3, "metrics": {"num_files": 2}, "ran": ["compaction"]}
    monkeypatch.setattr(compat, "AIRFLOW_V_3_1_PLUS", True)
    assert compat.alias_event_extra(extra) is extra
    monkeypatch.setattr(compat, "AIRFLOW_V_3_1_PLUS", False)
    monkeypatch.setattr(compat, "_said", set())
    with caplog.at_level("WARNING", logger="deltalog_provider.version_compat"):
        flat = compat.alias_event_extra(extra)
        compat.alias_event_extra(extra)
    assert flat == {"table": "file:///t", "version": 3, "metrics": '{"num_files": 2}', "ran": '["compaction"]'}
    assert frozenset(flat.items())  # what Airflow 3.0 does with it
    assert len([r for r in caplog.records if "alias" in r.getMessage()]) == 1


def test_inlet_events_after_filters_where_airflow_cannot(monkeypatch):
    """From 3.2 the accessor's .after() filters on the server; before, the event timestamps are compared here."""
    import datetime as dt

    from deltalog_provider.version_compat import inlet_events_after

    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    events = [types.SimpleNamespace(timestamp=start + dt.timedelta(hours=h), extra={"h": h}) for h in range(4)]
    assert [e.extra["h"] for e in inlet_events_after(events, start + dt.timedelta(hours=1))] == [2, 3]

    class Accessor(list):
        def after(self, when: str) -> list:
            return [e for e in self if e.timestamp > dt.datetime.fromisoformat(when)]

    assert [e.extra["h"] for e in inlet_events_after(Accessor(events), start)] == [1, 2, 3]
