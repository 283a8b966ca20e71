"""The single-table compaction keeps to the run's deadline: DeltaCompactOperator(deadline_margin=...)."""

from __future__ import annotations

import datetime as dt
import time
import types

import pytest

import deltalog.compaction.batches as compaction_module
from deltalog.errors import InvalidArgumentError
from deltalog_provider.operators import DeltaCompactOperator
from helpers import append, make_table, rows


async def on_deadline(**_: object) -> None:  # the alert's callback (never fires here)
    return None


def _two_bin_table(path: str):
    t = make_table(path, partition_by=["part"])
    for part in ("a", "b"):
        for i in range(3):
            append(t, rows(2, start=i * 2, part=part), {"part": part}, run_hooks=False)
    return t


def test_compaction_stops_at_the_run_deadline_minus_the_margin(tmp_path, monkeypatch):
    from airflow.sdk import DAG, AsyncCallback, DeadlineAlert, DeadlineReference

    path = str(tmp_path / "t")
    _two_bin_table(path)
    real = compaction_module.run_local
    monkeypatch.setattr(
        compaction_module,
        "run_local",
        lambda s, p, batch, o, **kw: (time.sleep(2.5 * len(batch)), real(s, p, batch, o, **kw))[1],
    )
    alert = DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=dt.timedelta(seconds=3),
        callback=AsyncCallback(on_deadline),
    )
    with DAG("budgeted", schedule=None, start_date=dt.datetime(2026, 1, 1), deadline=alert):
        op = DeltaCompactOperator(task_id="compact", table=path, deadline_margin=dt.timedelta(seconds=1))
    run = types.SimpleNamespace(start_date=dt.datetime.now(dt.UTC))  # 2 s of budget: one 2.5 s bin starts
    result = op.execute({"dag_run": run})
    assert result["num_bins_committed"] == 1 and [s["kind"] for s in result["skipped"]] == ["deferred"]

    with DAG("no_deadline", schedule=None, start_date=dt.datetime(2026, 1, 1)):
        free = DeltaCompactOperator(task_id="compact", table=path, deadline_margin=dt.timedelta(seconds=1))
    assert free.work_deadline({"dag_run": run}) is None  # no Deadline Alert: no budget
    assert free.execute({"dag_run": run})["num_bins_committed"] == 1  # the deferred bin, next run


def test_deadline_margin_is_checked():
    with pytest.raises(InvalidArgumentError, match="timedelta"):
        DeltaCompactOperator(task_id="c", table="/t", deadline_margin=300)
