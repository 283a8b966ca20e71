"""Maintenance operators in one real DAG run: XCom metrics, asset events with extras, idempotent commits.

The run: commit a request from a file, commit one handed over by XCom, a commit whose
first try "loses the response" after committing (its retry must commit nothing),
a compaction plan for Spark and a local compaction, checkpoint (through a connection's
table root, so the asset comes through an alias), log cleanup, manifest, a dry-run
vacuum and a real one, and a conversion of a Parquet folder. Each operation (not the plan,
not the dry run) appends its row to the maintenance history, given as an operator argument
or as the connection's extra, naming its task instance and try.
"""

from __future__ import annotations

import json
import os

import pytest
from airflow_helpers import asset_events, run_dag, task_instance, task_states, write_dag_file, xcom_value

from deltalog import DeltaTable
from helpers import append, make_table, rows, write_data_file
from isolated_reads import deltalake_rows, deltalake_table

pytestmark = [pytest.mark.airflow, pytest.mark.slow]


def test_maintenance_operators_in_a_dag_run(airflow_db, tmp_path, monkeypatch):
    warehouse = tmp_path / "warehouse"
    table_path = str(warehouse / "events")
    table = make_table(table_path, partition_by=["part"])
    first = append(table, rows(5, part="a"), {"part": "a"})
    assert first.version == 1
    plain = tmp_path / "plain_parquet"
    for part in ("x", "y"):
        write_data_file(str(plain), rows(3, part=part), {"part": part})
    old_file = table.snapshot().file_paths()[0]

    # A request file written next to the table (as a Spark job would), adding one file
    # and removing the first one (so vacuum has something to delete).
    add = write_data_file(table_path, rows(4, start=10, part="b"), {"part": "b"})
    os.makedirs(os.path.join(table_path, "_requests"))
    with open(os.path.join(table_path, "_requests", "one.json"), "w") as fh:
        json.dump({"add": [{"path": add["path"]}], "remove": [old_file]}, fh)
    xcom_add = write_data_file(table_path, rows(2, start=20, part="c"), {"part": "c"})
    for i in range(3):  # small files for compaction
        append(table, rows(2, start=100 + i * 2, part="e"), {"part": "e"})  # versions 2..4
    flaky_add = write_data_file(table_path, rows(3, start=30, part="d"), {"part": "d"})

    history = str(tmp_path / "_deltalog" / "history")
    monkeypatch.setenv(
        "AIRFLOW_CONN_DELTALOG_WAREHOUSE",
        json.dumps({"conn_type": "deltalog", "host": str(warehouse), "extra": {"history_uri": history}}),
    )
    dag_file = write_dag_file(
        "deltalog_ops",
        f'''
        import datetime as dt
        from airflow.sdk import DAG, task
        from deltalog_provider.operators import (
            DeltaCheckpointOperator, DeltaCommitOperator, DeltaCompactOperator, DeltaConvertOperator,
            DeltaLogCleanupOperator, DeltaManifestOperator, DeltaVacuumOperator)

        TABLE = {table_path!r}
        HISTORY = {history!r}

        class FlakyCommit(DeltaCommitOperator):
            """Commits, then fails its first try as if the response had been lost."""
            def execute(self, context):
                result = super().execute(context)
                if context["ti"].try_number == 1:
                    raise RuntimeError("connection reset after the commit landed")
                return result

        with DAG("deltalog_ops", schedule=None, start_date=dt.datetime(2024, 1, 1),
                 default_args={{"retries": 1, "retry_delay": dt.timedelta(seconds=0)}}) as dag:
            @task
            def make_request():
                return {{"add": [{{"path": {xcom_add["path"]!r}}}], "operation": "WRITE"}}

            commit_file = DeltaCommitOperator(task_id="commit_file", table=TABLE, request="_requests/one.json",
                                              history_uri=HISTORY)
            commit_xcom = DeltaCommitOperator(task_id="commit_xcom", table=TABLE, request=make_request())
            commit_flaky = FlakyCommit(task_id="commit_flaky", table=TABLE,
                                       request={{"add": [{{"path": {flaky_add["path"]!r}}}]}}, history_uri=HISTORY)
            plan = DeltaCompactOperator(task_id="plan", table=TABLE, plan_only=True,
                                        plan_path="_compaction/plan-{{{{ ts_nodash }}}}.json", history_uri=HISTORY)
            compact = DeltaCompactOperator(task_id="compact", table=TABLE, target_size="{{{{ 64 * 1024 * 1024 }}}}",
                                           history_uri="{{{{ '" + HISTORY + "' }}}}")
            convert = DeltaConvertOperator(task_id="convert", table={str(plain)!r}, partition_by="part string",
                                           history_uri=HISTORY)
            checkpoint = DeltaCheckpointOperator(task_id="checkpoint", table="events",
                                                 deltalog_conn_id="deltalog_warehouse")
            cleanup = DeltaLogCleanupOperator(task_id="log_cleanup", table=TABLE, history_uri=HISTORY)
            manifest = DeltaManifestOperator(task_id="manifest", table=TABLE, full=True, history_uri=HISTORY)
            vacuum_dry = DeltaVacuumOperator(task_id="vacuum_dry", table=TABLE, retention_hours=0,
                                             allow_short_retention=True, dry_run=True, history_uri=HISTORY)
            vacuum = DeltaVacuumOperator(task_id="vacuum", table=TABLE, retention_hours="{{{{ 0 }}}}",
                                         allow_short_retention=True, history_uri=HISTORY)
            (commit_file >> commit_xcom >> commit_flaky >> plan >> compact >> checkpoint >> cleanup >> manifest
             >> vacuum_dry >> vacuum)
        ''',
    )
    dr = run_dag(dag_file, "deltalog_ops")
    states = task_states(dr)
    assert set(states.values()) == {"success"}, states
    assert str(dr.state) == "success"

    # Commits: metrics in XCom; the flaky one committed exactly once over two tries.
    c1, c2, c3 = (xcom_value(dr, t) for t in ("commit_file", "commit_xcom", "commit_flaky"))
    assert (c1["version"], c2["version"]) == (5, 6)
    assert c1["operation_metrics"]["numAddedFiles"] == 1 and c1["operation_metrics"]["numRemovedFiles"] == 1
    assert task_instance(dr, "commit_flaky").try_number == 2
    assert c3["noop"] is True and c3["version"] == 7
    live = DeltaTable(table_path).snapshot()
    paths = set(live.file_paths())
    assert flaky_add["path"] in paths and xcom_add["path"] in paths and old_file not in paths
    app_ids = live.app_transactions
    assert any(str(k).startswith("airflow:deltalog_ops:commit_flaky") for k in app_ids), app_ids

    # Compaction: the plan (XCom and file, readable by the Spark side) then the local rewrite.
    from deltalog.compaction import CompactionPlan

    plan = xcom_value(dr, "plan")
    assert plan["plan_only"] is True and plan["num_bins"] == 1 and plan["snapshot_version"] == 7
    plan_file = os.path.join(table_path, plan["plan_path"])
    with open(plan_file, "rb") as fh:
        assert len(CompactionPlan.from_json(fh.read()).bins) == 1
    compacted = xcom_value(dr, "compact")
    assert (compacted["num_files_removed"], compacted["num_files_added"], compacted["versions"]) == (3, 1, [8])
    expected_ids = [*range(10, 14), 20, 21, *range(30, 33), *range(100, 106)]
    assert sorted(deltalake_table(table_path, columns=["id"]).column("id").to_pylist()) == expected_ids

    checkpoint = xcom_value(dr, "checkpoint")
    assert checkpoint["version"] == 8 and checkpoint["num_add_files"] == len(paths)
    assert xcom_value(dr, "manifest")["num_files"] == len(paths)
    dry = xcom_value(dr, "vacuum_dry")
    assert dry["dry_run"] is True and dry["num_files_to_delete"] == 4 and "files" not in dry.get("plan", {})
    vac = xcom_value(dr, "vacuum")
    assert vac["num_deleted_files"] == 4 and vac["end_commit_version"] == 10
    assert not os.path.exists(os.path.join(table_path, old_file))

    # Asset events on the table's Asset, with version/operation/metrics as extra. Dry runs
    # declare no outlet; the checkpoint (table name + connection root) reports through its alias.
    # No-ops emit none (issue 15 fault 8): the flaky commit's retry committed nothing (its
    # first try, which committed, failed), and log cleanup found nothing expired.
    events = asset_events(dr, "file://" + table_path)
    by_task = {e["task_id"]: e["extra"] for e in events}
    assert xcom_value(dr, "log_cleanup")["num_deleted"] == 0
    assert set(by_task) == {
        "commit_file",
        "commit_xcom",
        "compact",
        "checkpoint",
        "manifest",
        "vacuum",
    }
    assert by_task["commit_file"]["version"] == 5 and by_task["commit_file"]["operation"] == "COMMIT"
    assert by_task["commit_file"]["metrics"]["version"] == 5
    assert by_task["compact"]["operation"] == "OPTIMIZE" and by_task["compact"]["version"] == 8
    assert by_task["compact"]["metrics"]["num_files_removed"] == 3
    assert by_task["checkpoint"]["operation"] == "CHECKPOINT" and by_task["checkpoint"]["version"] == 8
    assert by_task["vacuum"]["version"] == 10 and by_task["vacuum"]["metrics"]["num_deleted_files"] == 4
    assert all(e["extra"]["table"] == "file://" + table_path for e in events)

    # Convert: a Parquet folder became a Delta table that deltalake reads; its own asset got the event.
    converted = xcom_value(dr, "convert")
    assert (converted["version"], converted["num_files"], converted["num_records"]) == (0, 2, 6)
    assert deltalake_table(str(plain)).num_rows == 6
    (event,) = asset_events(dr, "file://" + str(plain))
    assert event["task_id"] == "convert" and event["extra"]["operation"] == "CONVERT"

    # The maintenance history, read by deltalake: a row per operation, in order; the plan and the dry
    # run wrote none, nor did commit_xcom (no history given); the flaky commit recorded each try.
    recorded = deltalake_rows(history)
    recorded.sort(key=lambda r: (r["airflow_task_id"], r["airflow_try_number"]))
    assert [(r["airflow_task_id"], r["airflow_try_number"], r["operation"], r["status"]) for r in recorded] == [
        ("checkpoint", 1, "checkpoint", "done"),  # the connection's extra
        ("commit_file", 1, "commit", "done"),
        ("commit_flaky", 1, "commit", "done"),
        ("commit_flaky", 2, "commit", "nothing_due"),
        ("compact", 1, "compaction", "done"),
        ("convert", 1, "convert", "done"),
        ("log_cleanup", 1, "log_cleanup", "nothing_due"),
        ("manifest", 1, "manifest", "done"),
        ("vacuum", 1, "vacuum", "done"),
    ]
    assert {r["run_id"] for r in recorded} == {f"airflow/deltalog_ops/{dr.run_id}"}
    assert {(r["airflow_dag_id"], r["airflow_run_id"], r["airflow_map_index"]) for r in recorded} == {
        ("deltalog_ops", dr.run_id, -1)
    }
    by_op = {r["operation"]: r for r in recorded}
    assert by_op["compaction"]["files_read"] == 3 and by_op["compaction"]["live_files_after"] == len(paths)
    assert by_op["vacuum"]["files_removed"] == 4 and by_op["vacuum"]["bytes_reclaimed"] > 0
    assert by_op["convert"]["table_uri"] == "file://" + str(plain) and by_op["convert"]["live_files_after"] == 2
