"""Issue 15 fault 8: operations that change nothing emit no asset event.

One DAG run over a table that needs nothing: a compaction with no bins, a checkpoint
that already exists, a manifest generation with nothing new, a log cleanup that deletes
nothing. Only the first checkpoint and the first manifest change anything, so only they
produce events; a DAG scheduled on the table would otherwise start for nothing.
"""

from __future__ import annotations

import pytest
from airflow_helpers import asset_events, run_dag, task_states, write_dag_file, xcom_value

from helpers import append, make_table, rows

pytestmark = [pytest.mark.airflow, pytest.mark.slow]


def test_noop_operations_emit_no_asset_events(airflow_db, tmp_path):
    table_path = str(tmp_path / "quiet")
    append(make_table(table_path), rows(5))
    dag_file = write_dag_file(
        "deltalog_noop",
        f"""
        import datetime as dt
        from airflow.sdk import DAG
        from deltalog_provider.operators import (
            DeltaCheckpointOperator, DeltaCompactOperator, DeltaLogCleanupOperator, DeltaManifestOperator)

        TABLE = {table_path!r}
        with DAG("deltalog_noop", schedule=None, start_date=dt.datetime(2024, 1, 1)) as dag:
            (DeltaCompactOperator(task_id="compact", table=TABLE)
             >> DeltaCheckpointOperator(task_id="checkpoint", table=TABLE)
             >> DeltaCheckpointOperator(task_id="checkpoint_again", table=TABLE)
             >> DeltaManifestOperator(task_id="manifest", table=TABLE)
             >> DeltaManifestOperator(task_id="manifest_again", table=TABLE)
             >> DeltaLogCleanupOperator(task_id="log_cleanup", table=TABLE))
        """,
    )
    dr = run_dag(dag_file, "deltalog_noop")
    assert set(task_states(dr).values()) == {"success"}, task_states(dr)
    assert xcom_value(dr, "compact")["noop"] is True
    assert xcom_value(dr, "checkpoint_again")["already_existed"] is True
    assert xcom_value(dr, "manifest_again")["manifests_written"] == []
    assert xcom_value(dr, "log_cleanup")["num_deleted"] == 0
    events = asset_events(dr, "file://" + table_path)
    assert sorted(e["task_id"] for e in events) == ["checkpoint", "manifest"]
