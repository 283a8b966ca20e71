"""The provider's history and metrics plumbing, piece by piece (the DAG tests run it for real).

Metric names per table, which operator records as which operation, the connection's
``history_uri`` extra (never a storage option), and the recorder a task gets.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from deltalog import JournalRow, OperationSpan, RunContext, make_row
from deltalog.journal.record import utc_now
from deltalog_provider.hooks.connection import settings_from_connection
from deltalog_provider.operators import (
    DeltaCheckpointOperator,
    DeltaCompactOperator,
    DeltaCreateTableOperator,
    DeltaVacuumOperator,
)
from deltalog_provider.utils import metrics as metrics_module
from deltalog_provider.utils.history import history_operation, task_recorder
from deltalog_provider.utils.metrics import emit_row_metrics, table_stat_key


def test_table_stat_keys_are_the_location_made_safe():
    assert table_stat_key("s3://lake/sales/orders") == "lake_sales_orders"
    assert table_stat_key("file:///data/delta/events/") == "data_delta_events"
    assert table_stat_key("abfss://c@acct.dfs.core.windows.net/t w/ü") == "c_acct_dfs_core_windows_net_t_w"
    long = table_stat_key("s3://bucket/" + "/".join(f"level{i}" for i in range(40)))
    assert len(long) <= 120 and long.endswith("level39") and not long.startswith("_")


def test_each_operator_records_as_its_operation():
    assert history_operation(DeltaCompactOperator(task_id="c", table="/t")) == "compaction"
    assert history_operation(DeltaCompactOperator(task_id="p", table="/t", purge_deletion_vectors=True)) == "purge"
    assert history_operation(DeltaVacuumOperator(task_id="v", table="/t")) == "vacuum"
    assert history_operation(DeltaCheckpointOperator(task_id="k", table="/t", history_uri="/h")) == "checkpoint"
    assert history_operation(DeltaCreateTableOperator(task_id="n", table="/t", schema="{}")) is None


def test_the_connection_names_the_history_apart_from_the_storage_options():
    conn = SimpleNamespace(host="s3://lake", schema=None, login="k", password="s")
    settings = settings_from_connection(conn, {"history_uri": "s3://lake/_deltalog/history", "endpoint_url": "x"})
    assert settings.history_uri == "s3://lake/_deltalog/history"
    assert "history_uri" not in settings.storage_options and settings.storage_options["endpoint_url"] == "x"


def _ti() -> SimpleNamespace:
    return SimpleNamespace(dag_id="d", run_id="manual__1", task_id="t", map_index=2, try_number=3)


def test_a_task_without_history_or_metrics_records_nothing(monkeypatch):
    monkeypatch.setattr("deltalog_provider.utils.history.metrics_enabled", lambda: False)
    assert task_recorder({"ti": _ti()}, None) is None


def test_a_task_recorder_names_the_task_instance_and_feeds_the_metrics(tmp_path, monkeypatch):
    monkeypatch.setattr("deltalog_provider.utils.history.metrics_enabled", lambda: True)
    recorder = task_recorder({"ti": _ti()}, str(tmp_path / "history"))
    assert recorder is not None and recorder.on_row is emit_row_metrics
    assert (tmp_path / "history" / "_delta_log").is_dir()  # created before any work
    assert recorder.context == RunContext("airflow/d/manual__1", "d", "manual__1", "t", 2, 3)
    metrics_only = task_recorder({"ti": _ti()}, None)
    assert metrics_only is not None and metrics_only.uri is None


def test_a_row_becomes_timers_counters_and_gauges(monkeypatch):
    sent: list[tuple[str, str, float, dict]] = []

    class FakeStats:
        @staticmethod
        def timing(name, value, tags=None):
            sent.append(("timing", name, value, tags))

        @staticmethod
        def incr(name, count=1, tags=None):
            sent.append(("incr", name, count, tags))

        @staticmethod
        def gauge(name, value, tags=None):
            sent.append(("gauge", name, value, tags))

    monkeypatch.setattr(metrics_module, "Stats", FakeStats)
    now = utc_now()
    span = OperationSpan(RunContext(), "s3://lake/t", "vacuum", now, now)
    row: JournalRow = make_row(span, "done", files_removed=4, bytes_removed=400, bytes_reclaimed=400)
    emit_row_metrics(row)
    names = {(kind, name): value for kind, name, value, _ in sent}
    assert names == {
        ("timing", "deltalog.vacuum.duration.lake_t"): 0.0,
        ("incr", "deltalog.vacuum.done.lake_t"): 1,
        ("incr", "deltalog.vacuum.files_removed.lake_t"): 4,
        ("incr", "deltalog.vacuum.bytes_removed.lake_t"): 400,
        ("incr", "deltalog.vacuum.bytes_reclaimed.lake_t"): 400,
    }
    assert all(tags == {"table": "s3://lake/t", "operation": "vacuum", "status": "done"} for *_, tags in sent)


@pytest.mark.parametrize("status", ["deferred", "refused", "failed"])
def test_deferred_work_and_refusals_are_counted(monkeypatch, status):
    counted = []
    monkeypatch.setattr(
        metrics_module,
        "Stats",
        SimpleNamespace(timing=lambda *a, **k: None, gauge=lambda *a, **k: None, incr=lambda n, **k: counted.append(n)),
    )
    now = utc_now()
    emit_row_metrics(make_row(OperationSpan(RunContext(), "s3://lake/t", "compaction", now, now), status))
    assert counted == [f"deltalog.compaction.{status}.lake_t"]


def test_the_fleet_view_reads_the_history_with_its_connections_storage_options(monkeypatch):
    """``[deltalog] history_conn_id``: the deltalog connection's options, for the history's store only."""
    import json

    from deltalog_provider.fleet_view.source import HistoryLocation, HistoryUnavailable, storage_options

    conn = {"conn_type": "deltalog", "host": "s3://lake", "login": "k", "password": "s", "extra": {"endpoint_url": "e"}}
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_HISTORY", json.dumps(conn))
    options = storage_options(HistoryLocation("s3://lake/_deltalog/history", "lake_history"))
    assert (options["key"], options["secret"], options["endpoint_url"]) == ("k", "s", "e")
    assert storage_options(HistoryLocation("/var/history", "lake_history")) == {}  # a local history gets no S3 key
    assert storage_options(HistoryLocation("s3://lake/_deltalog/history", None)) == {}
    with pytest.raises(HistoryUnavailable, match="'no_such_connection' cannot be read"):
        storage_options(HistoryLocation("s3://lake/_deltalog/history", "no_such_connection"))


def test_the_seams_stats_takes_what_the_metrics_send():
    """On every release the seam's ``Stats`` (the Task SDK's facade, or ``airflow.stats`` before it) has the
    calls and keywords ``emit_row_metrics`` uses (the end-to-end StatsD test runs on the lock)."""
    import inspect

    from deltalog_provider.version_compat import Stats, metrics_enabled

    for name, keywords in (("incr", {"count", "tags"}), ("gauge", {"tags"}), ("timing", {"tags"})):
        params = set(inspect.signature(getattr(Stats, name)).parameters)
        assert keywords <= params, (name, params)
    assert metrics_enabled() is False  # the test configuration sends no metrics
