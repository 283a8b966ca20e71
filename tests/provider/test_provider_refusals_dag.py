"""Every refusal of the core fails its task at once (no retry) with a clear message, in a real DAG run.

Each task has ``retries=3``: a refusal must still end the task on its first try,
because retrying cannot make an unsafe vacuum safe or teach deltalog a table feature.
"""

from __future__ import annotations

import json
import os

import pytest
from airflow_helpers import run_dag, run_output, task_instance, task_states, write_dag_file

from deltalog.protocol.schema import arrow_schema_to_schema_string
from helpers import append, make_table, rows, write_data_file

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

EXPECTED_MESSAGES = {
    "vacuum_unsafe": "OperationRefusedError",
    "checkpoint_unsupported": "UnsupportedProtocolError",
    "health_not_a_table": "NotADeltaTableError",
    "sensor_missing_table": "TableNotFoundError",
    "health_due": "needs maintenance",
    "commit_bad_request": "InvalidCommitRequestError",
    "vacuum_bad_retention": "retention_hours must be a number",
}


def write_unsupported_table(path: str) -> None:
    """Version 0 of a table needing a writer feature deltalog lacks (written by hand: deltalog refuses to)."""
    os.makedirs(os.path.join(path, "_delta_log"))
    actions = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["someFutureWriterFeature"]}},
        {
            "metaData": {
                "id": "00000000-0000-0000-0000-000000000001",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": arrow_schema_to_schema_string(rows(1).schema),
                "partitionColumns": [],
                "configuration": {},
                "createdTime": 0,
            }
        },
    ]
    with open(os.path.join(path, "_delta_log", f"{0:020d}.json"), "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")


def test_refusals_fail_without_retry(airflow_db, tmp_path, capfd, caplog):
    good = str(tmp_path / "good")
    table = make_table(good)
    for i in range(3):
        append(table, rows(2, start=i * 2))
    unsupported = str(tmp_path / "unsupported")
    write_unsupported_table(unsupported)
    not_a_table = tmp_path / "plain"
    not_a_table.mkdir()
    write_data_file(str(not_a_table), rows(1))
    missing = str(tmp_path / "missing")
    before = sorted(os.listdir(os.path.join(good, "_delta_log")))

    dag_file = write_dag_file(
        "deltalog_refusals",
        f"""
        import datetime as dt
        from airflow.sdk import DAG
        from deltalog_provider.operators import (
            DeltaCheckpointOperator, DeltaCommitOperator, DeltaHealthCheckOperator, DeltaVacuumOperator)
        from deltalog_provider.sensors import DeltaTableVersionSensor

        with DAG("deltalog_refusals", schedule=None, start_date=dt.datetime(2024, 1, 1),
                 default_args={{"retries": 3, "retry_delay": dt.timedelta(seconds=0)}}) as dag:
            DeltaVacuumOperator(task_id="vacuum_unsafe", table={good!r}, retention_hours=1)
            DeltaVacuumOperator(task_id="vacuum_bad_retention", table={good!r}, retention_hours="a week")
            DeltaCheckpointOperator(task_id="checkpoint_unsupported", table={unsupported!r})
            DeltaHealthCheckOperator(task_id="health_not_a_table", table={str(not_a_table)!r},
                                     max_commits_since_checkpoint=10)
            DeltaTableVersionSensor(task_id="sensor_missing_table", table={missing!r}, poke_interval=1, timeout=30)
            DeltaHealthCheckOperator(task_id="health_due", table={good!r}, max_commits_since_checkpoint=1,
                                     fail_when_due=True)
            DeltaCommitOperator(task_id="commit_bad_request", table={good!r},
                                request={{"add": [{{"path": "no-such-file.parquet"}}]}})
        """,
    )
    dr = run_dag(dag_file, "deltalog_refusals")
    out = run_output(dr, capfd, caplog)

    assert str(dr.state) == "failed"
    states = task_states(dr)
    assert states == dict.fromkeys(EXPECTED_MESSAGES, "failed"), states
    for task_id, message in EXPECTED_MESSAGES.items():
        assert task_instance(dr, task_id).try_number == 1, f"{task_id} was retried"
        assert message in out, f"{task_id}: {message!r} not in the task output"
    # Nothing was written by any refused task.
    assert sorted(os.listdir(os.path.join(good, "_delta_log"))) == before
    assert not os.path.exists(os.path.join(unsupported, "_delta_log", "_last_checkpoint"))
