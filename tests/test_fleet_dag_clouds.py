"""The fleet DAG under ``airflow dags test`` on Azurite and on fake-gcs-server (issue 28).

One lake per store (a healthy table, two with small files, one with a protocol feature deltalog
refuses) is uploaded to the emulator and maintained by ``deltalog_fleet_maintenance``: the
small-file tables are compacted by their mapped tasks, the refused table fails only its own,
the summary succeeds, and deltalake reads the compacted tables. On Azure the deltalog
connection borrows the identity of a ``wasb_default`` connection (``azure_conn_id``); on GCS it
names the emulator's endpoint itself. One Airflow home (one ``db migrate``) serves both runs.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import deltalake
import pytest

from deltalog import DeltaTable
from deltalog.storage import Storage
from fleet_helpers import healthy_table, refused_protocol_table, small_files_table

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "dags"), str(REPO / "scripts")]

from demo import airflow_env  # noqa: E402

from airflow_homes import prepare_home  # noqa: E402

VENV_BIN = str(Path(sys.executable).parent)
pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.azure, pytest.mark.gcs]
LAKE = {"healthy": healthy_table, "small_a": small_files_table, "small_b": small_files_table}


def _airflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [os.path.join(VENV_BIN, "airflow"), *args], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, f"airflow {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _upload_lake(local: Path, root: str, options: dict[str, Any]) -> None:
    for name, build in {**LAKE, "refused": refused_protocol_table}.items():
        build(str(local / name))
        storage = Storage(f"{root}/{name}", options)
        storage.fs.put(str(local / name) + "/", storage.root + "/", recursive=True)


def _mapped_states(home: str, run_id: str) -> tuple[str, dict[str, str], str]:
    with sqlite3.connect(os.path.join(home, "airflow.db")) as db:
        (run_state,) = db.execute("SELECT state FROM dag_run WHERE run_id = ?", (run_id,)).fetchone()
        tis = db.execute(
            "SELECT task_id, map_index, rendered_map_index, state FROM task_instance WHERE run_id = ?", (run_id,)
        ).fetchall()
    mapped = {(r or str(m)).rsplit("/", 1)[-1]: s for t, m, r, s in tis if t == "maintain"}
    summary = next(s for t, _, _, s in tis if t == "summary")
    return run_state, mapped, summary


def test_fleet_dag_on_azurite_and_fake_gcs_server(tmp_path, tmp_path_factory, azure_server, gcs_server) -> None:
    import azure_server as az
    import gcs_server as gcs

    container = az.create_container(azure_server)
    bucket = gcs.create_bucket(gcs_server)
    stores = {
        "azure": (
            f"abfs://{container}/lake",
            az.storage_options_for(azure_server),
            az.deltalake_options_for(azure_server),
            {
                "AIRFLOW_CONN_WASB_DEFAULT": json.dumps(
                    {
                        "conn_type": "wasb",
                        "host": az.blob_endpoint(azure_server),
                        "login": az.ACCOUNT,
                        "password": az.ACCOUNT_KEY,
                    }  # fmt: skip
                ),
                "AIRFLOW_CONN_DELTALOG_DEFAULT": json.dumps(
                    {
                        "conn_type": "deltalog",
                        "host": f"abfs://{container}/lake",
                        "extra": {"azure_conn_id": "wasb_default"},
                    }
                ),
            },
        ),
        "gcs": (
            f"gs://{bucket}/lake",
            gcs.storage_options_for(gcs_server),
            gcs.deltalake_options_for(gcs_server),
            {
                "AIRFLOW_CONN_DELTALOG_DEFAULT": json.dumps(
                    {
                        "conn_type": "deltalog",
                        "host": f"gs://{bucket}/lake",
                        "extra": gcs.storage_options_for(gcs_server),
                    }
                )
            },
        ),
    }
    home = str(tmp_path / "airflow_home")
    base_env = airflow_env(home, "/unused", VENV_BIN)
    prepare_home(tmp_path_factory, home)  # what `airflow db migrate` leaves (tests/airflow_homes.py)
    for day, (store, (root, options, dl_options, conns)) in enumerate(stores.items(), start=1):
        _upload_lake(tmp_path / store, root, options)
        env = {
            **base_env,
            **conns,
            "AIRFLOW_VAR_DELTALOG_FLEET_ROOT": root,
            "AIRFLOW_VAR_DELTALOG_FLEET_REPORT_DIR": str(tmp_path / f"report-{store}"),
            "AIRFLOW_VAR_DELTALOG_FLEET_DEADLINE_MINUTES": "0",
        }
        logical_date = f"2026-11-0{day}"
        proc = subprocess.run(
            [os.path.join(VENV_BIN, "airflow"), "dags", "test", "deltalog_fleet_maintenance", logical_date],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        with sqlite3.connect(os.path.join(home, "airflow.db")) as db:
            (run_id,) = db.execute(
                "SELECT run_id FROM dag_run WHERE dag_id = 'deltalog_fleet_maintenance' AND logical_date LIKE ?",
                (f"{logical_date}%",),
            ).fetchone()
        run_state, mapped, summary = _mapped_states(home, run_id)
        context = f"{store}: {mapped}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert mapped == {"small_a": "success", "small_b": "success", "refused": "failed"}, context
        assert summary == "success" and run_state == "success", context
        for name in ("small_a", "small_b"):
            uri = f"{root}/{name}"
            assert DeltaTable(uri, options).snapshot().num_files == 1, context
            assert deltalake.DeltaTable(uri, storage_options=dl_options).to_pyarrow_table().num_rows == 18
        assert DeltaTable(f"{root}/healthy", options).snapshot().version == 1
        page = (tmp_path / f"report-{store}" / "fleet-report.html").read_text()
        assert "refused" in page and "catalogManaged" in page and "small_b" in page
