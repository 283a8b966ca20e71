"""The fleet DAG takes its table list from an upstream asset (issue 17 item 2), in ``dag.test()`` runs.

A producer DAG emits an event on the ``deltalog_fleet_tables`` asset naming one table
directly and another through a list file; the fleet run maintains exactly those two,
though discovery would find a third. The next run (no event since the previous successful
one) falls back to the Variable, then to discovery. A malformed event fails the run
instead of falling back.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from airflow_helpers import (
    DAGS_FOLDER,
    forget_asset_events,
    run_dag,
    task_instance,
    task_states,
    write_dag_file,
    xcom_value,
)

from deltalog import DeltaTable
from deltalog.maintenance.due import maintenance_due

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "dags"))

from fleet_helpers import small_files_table  # noqa: E402

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

PRODUCER = """
import datetime as dt
from airflow.sdk import DAG, Asset, task

TABLES = Asset(name="deltalog_fleet_tables", uri="deltalog://fleet/tables")
with DAG("fleet_list_producer", schedule=None, start_date=dt.datetime(2026, 1, 1)) as dag:
    @task(outlets=[TABLES])
    def publish(**context):
        context["outlet_events"][TABLES].extra = EXTRA
    publish()
"""


def _forget_table_list_events() -> None:
    """Each test starts with no event on the table-list asset (a failed run leaves its event pending)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import delete, select

    with create_session() as session:
        asset_ids = select(AssetModel.id).where(AssetModel.name == "deltalog_fleet_tables")
        # synchronize_session=False: SQLAlchemy 1.4 (Airflow 3.0) cannot evaluate the subquery in Python.
        session.execute(
            delete(AssetEvent).where(AssetEvent.asset_id.in_(asset_ids)).execution_options(synchronize_session=False)
        )


@pytest.fixture
def fleet_files(airflow_db, tmp_path, monkeypatch):
    """The fleet DAG file (and its settings package) in the session dags folder; its Variables for a test."""
    _forget_table_list_events()
    for name, value in {
        "DELTALOG_FLEET_REPORT_DIR": str(tmp_path / "report"),
        "DELTALOG_FLEET_DEADLINE_MINUTES": "0",
        "DELTALOG_FLEET_TABLES": "",
        "DELTALOG_FLEET_SCHEDULE": "",
    }.items():
        monkeypatch.setenv(f"AIRFLOW_VAR_{name}", value)
    copied = [DAGS_FOLDER / "deltalog_fleet_maintenance.py", DAGS_FOLDER / "deltalog_example"]
    shutil.copy(REPO / "dags" / "deltalog_fleet_maintenance.py", copied[0])
    shutil.copytree(REPO / "dags" / "deltalog_example", copied[1], dirs_exist_ok=True)
    yield copied[0]
    copied[0].unlink()
    shutil.rmtree(copied[1])
    forget_asset_events("deltalog://fleet/tables")  # the next fleet run in this worker starts from none


@pytest.fixture
def fleet_dag(fleet_files, tmp_path, monkeypatch):
    """Three tables with small files under one root."""
    root = tmp_path / "lake"
    for name in ("a", "b", "c"):
        small_files_table(str(root / name), n=3)
    monkeypatch.setenv("AIRFLOW_VAR_DELTALOG_FLEET_ROOT", str(root))
    return root


def _due(path: Path) -> bool:
    return maintenance_due(DeltaTable(str(path))).compaction


@pytest.mark.spark
def test_table_list_from_an_upstream_asset_event_then_variable_then_discovery(fleet_dag, tmp_path, monkeypatch):
    root = fleet_dag
    listing = tmp_path / "tables.txt"
    listing.write_text(f"# from the producer\n{root / 'b'}\n")
    producer = write_dag_file(
        "fleet_list_producer", PRODUCER.replace("EXTRA", repr({"tables": [str(root / "a")], "list_uri": str(listing)}))
    )
    assert set(task_states(run_dag(producer, "fleet_list_producer")).values()) == {"success"}

    fleet = DAGS_FOLDER / "deltalog_fleet_maintenance.py"
    run = run_dag(fleet, "deltalog_fleet_maintenance")
    assert xcom_value(run, "find_tables") == [str(root / "a"), str(root / "b")]
    assert task_states(run)["summary"] == "success" and str(run.state) == "success"
    assert not _due(root / "a") and not _due(root / "b") and _due(root / "c")

    # No event since that run: the Variable names the tables. Every table counts as large here,
    # so c compacts with Spark, through the spark_default connection's master (as deltalog_maintenance).
    monkeypatch.setenv("AIRFLOW_VAR_DELTALOG_FLEET_TABLES", f'["{root / "c"}"]')
    monkeypatch.setenv("AIRFLOW_VAR_DELTALOG_SPARK_COMPACTION_MIN_BYTES", "0")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    run = run_dag(fleet, "deltalog_fleet_maintenance")
    assert xcom_value(run, "find_tables") == [str(root / "c")] and not _due(root / "c")
    assert xcom_value(run, "summary")["tables"][0]["ran"] == ["compaction (spark): 1 bins"]
    monkeypatch.delenv("AIRFLOW_VAR_DELTALOG_SPARK_COMPACTION_MIN_BYTES")

    # Neither: discovery under the root.
    monkeypatch.setenv("AIRFLOW_VAR_DELTALOG_FLEET_TABLES", "")
    run = run_dag(fleet, "deltalog_fleet_maintenance")
    assert xcom_value(run, "find_tables") == [str(root / n) for n in ("a", "b", "c")]


def test_a_malformed_table_list_event_fails_the_run(fleet_dag):
    producer = write_dag_file("fleet_list_producer", PRODUCER.replace("EXTRA", repr({"tabels": ["x"]})))
    assert set(task_states(run_dag(producer, "fleet_list_producer")).values()) == {"success"}
    run = run_dag(DAGS_FOLDER / "deltalog_fleet_maintenance.py", "deltalog_fleet_maintenance")
    states = task_states(run)
    assert states["find_tables"] == "failed" and str(run.state) == "failed"
    # Bad input is not retried: one try, no retry delay holding the run open.
    assert task_instance(run, "find_tables").try_number == 1
    assert task_instance(run, "summary").try_number == 1
    assert all(_due(fleet_dag / n) for n in ("a", "b", "c"))  # nothing was maintained


@pytest.mark.s3
def test_fleet_dag_on_s3_with_a_list_file_from_an_asset_event(
    fleet_files, tmp_path, monkeypatch, s3_server, s3_bucket, s3_storage_options, s3_deltalake_options
):
    """On the S3 test server through the deltalog connection: the event's list file is an S3 object."""
    import fsspec

    from deltalog.fleet.lease import LEASE_NAME
    from deltalog.storage.filesystem import Storage
    from isolated_reads import deltalake_table

    fs = fsspec.filesystem("s3", **s3_storage_options)
    for name in ("events", "other"):
        small_files_table(str(tmp_path / name), n=3)
        fs.put(str(tmp_path / name) + "/", f"{s3_bucket}/lake/{name}/", recursive=True)
    fs.pipe_file(f"{s3_bucket}/lists/nightly.txt", f"s3://{s3_bucket}/lake/events\n".encode())
    monkeypatch.setenv(
        "AIRFLOW_CONN_DELTALOG_DEFAULT",
        json.dumps(
            {
                "conn_type": "deltalog",
                "login": s3_storage_options["key"],
                "password": s3_storage_options["secret"],
                "extra": {"endpoint_url": s3_server, "region_name": "us-east-1"},
            }
        ),
    )
    monkeypatch.setenv("AIRFLOW_VAR_DELTALOG_FLEET_ROOT", f"s3://{s3_bucket}/lake")
    producer = write_dag_file(
        "fleet_list_producer", PRODUCER.replace("EXTRA", repr({"list_uri": f"s3://{s3_bucket}/lists/nightly.txt"}))
    )
    assert set(task_states(run_dag(producer, "fleet_list_producer")).values()) == {"success"}
    run = run_dag(fleet_files, "deltalog_fleet_maintenance")
    assert xcom_value(run, "find_tables") == [f"s3://{s3_bucket}/lake/events"]
    (table,) = xcom_value(run, "summary")["tables"]
    assert table["status"] == "done" and table["ran"] == ["compaction: 1 bins"]
    assert (table["small_files_before"], table["small_files_after"]) == (3, 1)
    events = f"s3://{s3_bucket}/lake/events"
    assert deltalake_table(events, storage_options=s3_deltalake_options).num_rows == 9
    assert not fs.exists(f"{s3_bucket}/lake/events/{LEASE_NAME}")
    assert maintenance_due(DeltaTable(f"s3://{s3_bucket}/lake/other", s3_storage_options)).compaction
    assert Storage(events, s3_storage_options)._reads() is not None  # options obstore serves (S3 reads)
