"""Issue 34 end to end: the fleet DAG maintains breached tables first and a real SMTP server gets one alert per run.

The lake of ``tests/objectives_helpers.py`` (its history shows ``orders`` over its small-file
objective for three days and ``events`` unvacuumed for ten days against seven), plus
``partitions``, whose small files (one per partition) no compaction can merge: a breach
that stays. Two ``dag.test()`` runs of the example fleet DAG, with an ``aiosmtpd`` server on a
free localhost port as the ``smtp_default`` connection and the SMTP provider's
``SmtpNotifier`` (``deltalog_alert_email``):

1. ``measure`` ranks the three breached tables before ``customers`` (which has the most to
   gain), ``maintain`` fixes ``orders`` (compaction) and ``events`` (a vacuum the objective
   asks for, though no file is due), and the server receives exactly one message naming
   them: ``orders`` and ``events`` resolved (with their breach start), ``partitions`` new.
2. The same breach again: exactly one more message, ``partitions`` still open, nothing else.

The check and branch operators' decisions are checked by executing them directly (no run).
About 40 s for the two runs on an idle 2-core machine with the lock's Airflow (3.3), 2.5
minutes on 3.0 (whose ``dag.test`` reserializes the DAGs folder first).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
import time
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from airflow_helpers import DAGS_FOLDER, forget_asset_events, run_dag, task_states, xcom_value
from api_server import free_port

from deltalog.errors import InvalidArgumentError

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from fleet_helpers import one_small_file_per_partition  # noqa: E402
from objectives_helpers import breach_fleet  # noqa: E402

pytestmark = [pytest.mark.airflow, pytest.mark.slow]


class _Inbox:
    """aiosmtpd's handler: every message the server accepts."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"


@pytest.fixture
def smtp_server(monkeypatch):
    """A real SMTP server on a free localhost port, as the ``smtp_default`` connection (no TLS, no login)."""
    from aiosmtpd.controller import Controller

    inbox = _Inbox()
    for _ in range(5):  # another worker may take the port between the probe and the bind
        controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
        try:
            controller.start()
            break
        except (OSError, RuntimeError):
            time.sleep(0.2)
    else:
        pytest.fail("no free port for the SMTP server")
    monkeypatch.setenv(
        "AIRFLOW_CONN_SMTP_DEFAULT",
        json.dumps(
            {
                "conn_type": "smtp",
                "host": "127.0.0.1",
                "port": controller.port,
                "extra": {"disable_tls": True, "disable_ssl": True, "timeout": 10, "retry_limit": 1},
            }
        ),
    )
    yield inbox
    controller.stop()


def _body(message: Message) -> str:
    parts = [p for p in message.walk() if p.get_content_type() in ("text/html", "text/plain")]
    return "\n".join(str(p.get_payload(decode=True).decode("utf-8", "replace")) for p in parts)


def _section(body: str, title: str) -> str:
    """The HTML list under ``title`` (empty when the message has no such section)."""
    start = body.find(f"<h3>{title}</h3>")
    if start < 0:
        return ""
    end = body.find("</ul>", start)
    return body[start:end]


@pytest.fixture
def fleet_dag(airflow_db, tmp_path, monkeypatch):
    """The example fleet DAG over the breach lake, its settings, history and alert address as Variables."""
    lake = breach_fleet(str(tmp_path / "lake"))
    one_small_file_per_partition(str(tmp_path / "lake" / "partitions"), partitions=4)
    settings = json.loads(json.dumps(lake.settings))
    settings["tables"]["partitions"] = {"max_small_files": 2}  # four partitions, one file each: cannot be met
    settings["tables"]["history"] = {"max_small_files": 1000}  # the history: a file per day, by design
    for name, value in {
        "DELTALOG_FLEET_ROOT": lake.root,
        "DELTALOG_FLEET_TABLES": "",
        "DELTALOG_FLEET_SCHEDULE": "",
        "DELTALOG_FLEET_DEADLINE_MINUTES": "0",
        "DELTALOG_FLEET_REPORT_DIR": str(tmp_path / "report"),
        "DELTALOG_FLEET_TABLE_SETTINGS": json.dumps(settings),
        "DELTALOG_HISTORY_URI": lake.history,
        "DELTALOG_ALERT_EMAIL": "data-platform@example.com",
        "DELTALOG_ALERT_FROM": "deltalog@example.com",
    }.items():
        monkeypatch.setenv(f"AIRFLOW_VAR_{name}", value)
    copied = [DAGS_FOLDER / "deltalog_fleet_maintenance.py", DAGS_FOLDER / "deltalog_example"]
    shutil.copy(REPO / "dags" / "deltalog_fleet_maintenance.py", copied[0])
    shutil.copytree(REPO / "dags" / "deltalog_example", copied[1], dirs_exist_ok=True)
    yield lake
    copied[0].unlink()
    shutil.rmtree(copied[1])
    forget_asset_events("deltalog://fleet/tables")  # the next fleet run in this worker starts from none


def test_breached_tables_first_one_alert_per_run_new_resolved_still_open(fleet_dag, smtp_server):
    from deltalog import check_objectives
    from deltalog.storage.filesystem import canonical_uri

    lake = fleet_dag
    dag_file = DAGS_FOLDER / "deltalog_fleet_maintenance.py"
    run = run_dag(dag_file, "deltalog_fleet_maintenance")
    states = task_states(run)
    assert states["objectives_alert"] == "success" and states["summary"] == "success", states

    # Breached first (by gain per second among them), then the rest by gain: customers has the most to gain.
    # partitions breaches too, but no operation can lower its count (no bin): it is not planned.
    due = [e for e in xcom_value(run, "measure")["due"] if "service" in e]
    names = [Path(e["uri"]).name for e in due]
    assert set(names[:2]) == {"orders", "events"} and names[2:] == ["customers"], names
    assert all(e["service"] == "breached" and e["first_because"] for e in due[:2])
    events_entry = next(e for e in due if Path(e["uri"]).name == "events")
    assert events_entry["objective_work"] and "max_days_since_vacuum" in events_entry["objective_work"]["vacuum"]

    (message,) = smtp_server.messages  # exactly one message for the run
    assert message["To"] == "data-platform@example.com" and "deltalog objectives" in message["Subject"]
    body = _body(message)
    resolved, new = _section(body, "Resolved"), _section(body, "New breaches")
    assert canonical_uri(lake.orders) in resolved and canonical_uri(lake.events) in resolved
    assert f"breached since {lake.orders_since:%Y-%m-%d %H:%M} UTC" in resolved
    # Seven days after the last vacuum, counted from the run's measurement (its days to four decimals): seconds
    # off the vacuum itself, so the minute shown is the vacuum's or a neighbour.
    near = (lake.events_since + dt.timedelta(seconds=s) for s in (-15, 0, 15))
    assert any(f"breached since {t:%Y-%m-%d %H:%M} UTC" in resolved for t in near), resolved
    assert "partitions" in new and "max_small_files: 4 &gt; 2" in new
    assert not _section(body, "Still open") and "customers" not in body

    judged = {Path(t.table_uri).name: t for t in check_objectives([lake.orders, lake.events], settings=lake.settings)}
    assert judged["orders"].met and judged["events"].met  # fixed by the run

    run = run_dag(dag_file, "deltalog_fleet_maintenance")
    assert task_states(run)["objectives_alert"] == "success"
    assert len(smtp_server.messages) == 2  # one more, not one per table or objective
    body = _body(smtp_server.messages[1])
    still = _section(body, "Still open")
    assert "partitions" in still and not _section(body, "New breaches") and not _section(body, "Resolved")
    assert "orders" not in body and "events" not in body
    report = xcom_value(run, "objectives_alert")
    assert report["sent"] == 1 and [c["objective"] for c in report["report"]["still_open"]] == ["max_small_files"]


class _TaskInstance:
    """What the branch operator pushes its report to before it skips the other path."""

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def test_check_fails_naming_the_breach_and_branch_follows_it(tmp_path, monkeypatch):
    """The operators' own decisions (Airflow's BranchMixIn does the skipping, as for the health branch)."""
    from deltalog_provider.operators import DeltaObjectivesBranchOperator, DeltaObjectivesCheckOperator
    from deltalog_provider.version_compat import AirflowFailException
    from helpers import append, make_table, rows

    table = make_table(str(tmp_path / "t"))
    for i in range(3):
        append(table, rows(2, start=i * 2), run_hooks=False)
    settings = json.dumps({"defaults": {"max_small_files": 2}})
    tables = f"# the lake\n{tmp_path / 't'}\n"  # one a line, as a Variable would hold them
    with pytest.raises(AirflowFailException, match=r"objectives breached: file://.*/t \(max_small_files: 3 > 2"):
        DeltaObjectivesCheckOperator(task_id="check", tables=tables, settings=settings).execute({})
    report = DeltaObjectivesCheckOperator(task_id="r", tables=tables, settings=settings, fail_on_breach=False)
    (t,) = report.execute({})["tables"]
    assert t["met"] is False and (t["objectives"][0]["value"], t["objectives"][0]["target"]) == (3, 2)

    chosen: list[Any] = []
    for limit, expected in ((2, ["page_someone"]), (5, ["all_good"])):
        branch = DeltaObjectivesBranchOperator(
            task_id="branch",
            tables=[str(tmp_path / "t")],
            settings={"defaults": {"max_small_files": limit}},
            follow_task_ids_if_breached="page_someone",
            follow_task_ids_if_met=["all_good"],
        )
        monkeypatch.setattr(branch, "do_branch", lambda context, ids: chosen.append(ids))
        ti = _TaskInstance()
        branch.execute({"ti": ti})
        assert chosen[-1] == expected and ti.pushed["return_value"]["tables"][0]["met"] is (limit == 5)

    with pytest.raises(InvalidArgumentError, match="max_small_files in defaults must be a non-negative integer"):
        DeltaObjectivesCheckOperator(task_id="bad", tables=tables, settings={"defaults": {"max_small_files": "2"}})
