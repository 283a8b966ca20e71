"""The fleet DAG under ``airflow dags test``: 50 tables, the due ones maintained by mapped tasks.

The fleet: the four demo tables (healthy, small files, expired log, a protocol feature
deltalog refuses) plus 46 more, half with small files. A refused table fails only its
own mapped task; the summary (HTML report included) lists every table.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import deltalake
import pytest

from deltalog import DeltaTable
from deltalog.maintenance.due import maintenance_due
from fleet_helpers import FLEET, healthy_table, small_files_table

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "dags"), str(REPO / "scripts")]

from demo import airflow_env  # noqa: E402

from airflow_homes import prepare_home  # noqa: E402

VENV_BIN = str(Path(sys.executable).parent)
pytestmark = [pytest.mark.slow, pytest.mark.airflow]


def _airflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [os.path.join(VENV_BIN, "airflow"), *args], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, f"airflow {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_fleet_dag_over_50_tables(tmp_path, tmp_path_factory):
    root = tmp_path / "lake"
    for name, build in FLEET.items():
        build(str(root / "demo" / name))
    for i in range(46):
        (small_files_table if i % 2 else healthy_table)(
            str(root / f"team{i % 5}" / f"t{i:02d}"), **({"n": 3} if i % 2 else {})
        )
    home = str(tmp_path / "airflow_home")
    env = airflow_env(home, "/unused", VENV_BIN)
    env.update(
        {
            "AIRFLOW_VAR_DELTALOG_FLEET_ROOT": str(root),
            "AIRFLOW_VAR_DELTALOG_FLEET_REPORT_DIR": str(tmp_path / "report"),
            "AIRFLOW_VAR_DELTALOG_FLEET_DEADLINE_MINUTES": "0",
            "AIRFLOW_VAR_DELTALOG_FLEET_TABLE_SETTINGS": json.dumps({"t01": {"target_file_size": "64m"}}),
            "AIRFLOW_VAR_DELTALOG_HISTORY_URI": str(tmp_path / "_deltalog" / "history"),
        }
    )
    prepare_home(tmp_path_factory, home)  # what `airflow db migrate` leaves (tests/airflow_homes.py)
    proc = subprocess.run(
        [os.path.join(VENV_BIN, "airflow"), "dags", "test", "deltalog_fleet_maintenance"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    with sqlite3.connect(os.path.join(home, "airflow.db")) as db:
        (run_state,) = db.execute("SELECT state FROM dag_run WHERE dag_id = 'deltalog_fleet_maintenance'").fetchone()
        events = db.execute(
            "SELECT a.uri FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE e.source_dag_id = 'deltalog_fleet_maintenance'"
        ).fetchall()
        tis = db.execute(
            "SELECT task_id, map_index, rendered_map_index, state FROM task_instance "
            "WHERE dag_id = 'deltalog_fleet_maintenance'"
        ).fetchall()
    states = {(t, r or str(m)): s for t, m, r, s in tis}
    mapped = {r: s for (t, r), s in states.items() if t == "maintain"}
    # 23 tables with small files, the demo's small_files and expired_log, and the refused one (the
    # history, one commit old, is measured and healthy).
    assert len(mapped) == 26, (mapped, proc.stdout[-3000:], proc.stderr[-3000:])
    assert mapped.pop("refused_protocol") == "failed"
    assert set(mapped.values()) == {"success"}, mapped
    assert states[("summary", "-1")] == "success" and run_state == "success"
    # One asset event per changed table (compacted or log cleaned), none for healthy or refused ones.
    changed = sorted(u for (u,) in events)
    assert len(changed) == 25 and len(set(changed)) == 25
    assert "file://" + str(root / "demo" / "expired_log") in changed
    assert not any(u.endswith(("/healthy", "/refused_protocol", "/t00")) for u in changed)

    for i in range(1, 46, 2):
        uri = str(root / f"team{i % 5}" / f"t{i:02d}")
        assert (
            not maintenance_due(DeltaTable(uri)).compaction
            and deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == 9
        )
    page = (tmp_path / "report" / "fleet-report.html").read_text()
    assert "the task ended without a result" not in page
    # One row per table, its name linked to its history (here: the query of the history's rows).
    assert page.count("<td>refused_protocol<details>") == 1 and page.count("<td>t01<details>") == 1
    assert "<svg" in page and "refused_protocol" in page and "catalogManaged" in page and "t45" in page

    # The maintenance history, read by deltalake: a measure row per table (the history's own too),
    # a row per operation each mapped task ran, each naming its task instance; one run id for the run.
    history = str(tmp_path / "_deltalog" / "history")
    recorded = deltalake.DeltaTable(history).to_pyarrow_table().to_pylist()
    measured = [r for r in recorded if r["operation"] == "measure"]
    assert len(measured) == 51 and {r["airflow_task_id"] for r in measured} == {"measure"}
    assert {r["table_uri"] for r in measured} >= {"file://" + history, "file://" + str(root / "demo" / "healthy")}
    assert {r["run_id"] for r in recorded} == {f"airflow/deltalog_fleet_maintenance/{recorded[0]['airflow_run_id']}"}
    refused = next(r for r in measured if r["table_uri"].endswith("/refused_protocol"))
    assert refused["status"] == "refused" and "catalogManaged" in refused["reason"]
    ops = [r for r in recorded if r["operation"] != "measure"]
    assert {r["airflow_task_id"] for r in ops} == {"maintain"} and {r["airflow_try_number"] for r in ops} == {1}
    assert len({r["airflow_map_index"] for r in ops}) == 25  # every maintained table but the refused one
    compactions = [r for r in ops if r["operation"] == "compaction"]
    assert len(compactions) == 24 and {r["status"] for r in compactions} == {"done"}
    t01 = next(r for r in compactions if r["table_uri"].endswith("/t01"))
    assert json.loads(t01["policy"])["target_file_size"] == {
        "value": 64 << 20,
        "source": "per-table override",
        "detail": "tables['t01']",
    }
    assert "SELECT * FROM delta.`" + history in page.replace("&#x27;", "'")
