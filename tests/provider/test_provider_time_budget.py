"""The single-table compaction keeps to the run's deadline: DeltaCompactOperator(deadline_margin=...).

With Deadline Alerts (Airflow 3.1+) the budget is the run's deadline; without them (3.0, or
simulated on later releases) it is the task's execution_timeout, with one logged line.
"""

from __future__ import annotations

import datetime as dt
import time
import types

import pytest

import deltalog.compaction.batches as compaction_module
import deltalog_provider.version_compat as compat
from deltalog.errors import InvalidArgumentError
from deltalog_provider.operators import DeltaCompactOperator
from deltalog_provider.version_compat import HAS_DEADLINE_ALERTS, deadline_kwargs
from helpers import append, make_table, rows


async def on_deadline(**_: object) -> None:  # the alert's callback (never fires here)
    return None


def _two_bin_table(path: str):
    t = make_table(path, partition_by=["part"])
    for part in ("a", "b"):
        for i in range(3):
            append(t, rows(2, start=i * 2, part=part), {"part": part}, run_hooks=False)
    return t


def _slow_bins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each bin takes 2.5 s, so a budget of about 2 s lets exactly one bin start."""
    real = compaction_module.run_local
    monkeypatch.setattr(
        compaction_module,
        "run_local",
        lambda s, p, batch, o, **kw: (time.sleep(2.5 * len(batch)), real(s, p, batch, o, **kw))[1],
    )


def test_compaction_stops_at_the_run_deadline_minus_the_margin(tmp_path, monkeypatch):
    from airflow.sdk import DAG

    if not HAS_DEADLINE_ALERTS:  # Airflow 3.0: a DAG cannot have one (the fallback is tested below)
        assert deadline_kwargs(1, on_deadline) == {}
        with DAG("budgeted", schedule=None, start_date=dt.datetime(2026, 1, 1)) as dag:
            pass
        assert compat.dag_deadline_alerts(dag) is None
        return
    path = str(tmp_path / "t")
    _two_bin_table(path)
    _slow_bins(monkeypatch)
    deadline = deadline_kwargs(1, on_deadline)  # one minute, made three seconds below
    deadline["deadline"].interval = dt.timedelta(seconds=3)
    with DAG("budgeted", schedule=None, start_date=dt.datetime(2026, 1, 1), **deadline):
        op = DeltaCompactOperator(task_id="compact", table=path, deadline_margin=dt.timedelta(seconds=1))
    run = types.SimpleNamespace(start_date=dt.datetime.now(dt.UTC))  # 2 s of budget: one 2.5 s bin starts
    result = op.execute({"dag_run": run})
    assert result["num_bins_committed"] == 1 and [s["kind"] for s in result["skipped"]] == ["deferred"]

    with DAG("no_deadline", schedule=None, start_date=dt.datetime(2026, 1, 1)):
        free = DeltaCompactOperator(task_id="compact", table=path, deadline_margin=dt.timedelta(seconds=1))
    assert free.work_deadline({"dag_run": run}) is None  # no Deadline Alert: no budget
    assert free.execute({"dag_run": run})["num_bins_committed"] == 1  # the deferred bin, next run


def test_without_deadline_alerts_the_budget_is_the_execution_timeout(tmp_path, monkeypatch, caplog):
    """Airflow 3.0 (simulated on later releases): no DAG deadline, so execution_timeout minus the margin."""
    from airflow.sdk import DAG

    monkeypatch.setattr(compat, "HAS_DEADLINE_ALERTS", False)
    monkeypatch.setattr(compat, "_said", set())
    assert compat.deadline_kwargs(60, on_deadline) == {}  # the DAG gets no alert
    path = str(tmp_path / "t")
    _two_bin_table(path)
    _slow_bins(monkeypatch)
    with DAG("timeout_budget", schedule=None, start_date=dt.datetime(2026, 1, 1)):
        op = DeltaCompactOperator(
            task_id="compact",
            table=path,
            deadline_margin=dt.timedelta(seconds=1),
            execution_timeout=dt.timedelta(seconds=3),
        )
    ti = types.SimpleNamespace(start_date=dt.datetime.now(dt.UTC))  # 2 s of budget: one 2.5 s bin starts
    with caplog.at_level("WARNING", logger="deltalog_provider.version_compat"):
        result = op.execute({"ti": ti})
    assert result["num_bins_committed"] == 1 and [s["kind"] for s in result["skipped"]] == ["deferred"]
    said = [r.getMessage() for r in caplog.records if "time budget is the task's execution_timeout" in r.getMessage()]
    assert len(said) == 1 and "no Deadline Alerts" in said[0]
    op.work_deadline({"ti": ti})  # said once per process, not once per call
    assert len([r for r in caplog.records if "time budget is the task's execution_timeout" in r.getMessage()]) == 1

    with DAG("no_timeout", schedule=None, start_date=dt.datetime(2026, 1, 1)):
        free = DeltaCompactOperator(task_id="compact", table=path, deadline_margin=dt.timedelta(seconds=1))
    assert free.work_deadline({"ti": ti}) is None  # neither a deadline nor a timeout: no budget
    assert free.execute({"ti": ti})["num_bins_committed"] == 1


def test_deadline_margin_is_checked():
    with pytest.raises(InvalidArgumentError, match="timedelta"):
        DeltaCompactOperator(task_id="c", table="/t", deadline_margin=300)
