"""Metrics per table and operation reach a real StatsD listener from a real task run.

A UDP listener on localhost records every datagram. Airflow is configured as a deployment
would be (``[metrics] statsd_on``, host and port from the environment), and the DAG runs
with ``airflow dags test --use-executor``: LocalExecutor starts each task in a supervised
process talking to a real ``airflow api-server``'s execution API, which is where Airflow
sets up its metrics backend (an in-process ``dags test`` sends no metrics at all, Airflow's
own included). The DAG: operators compact a table (history given: rows and metrics), vacuum
it, and are refused a short-retention vacuum; a fleet task finds its time budget spent
(deferred work, metrics without any history).
"""

from __future__ import annotations

import socket
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import deltalake
import pytest
from api_server import VENV_BIN, airflow_env, api_server, free_port

from deltalog_provider.utils.metrics import table_stat_key
from fleet_helpers import small_files_table

#: A real API server, LocalExecutor and a StatsD listener: on the lock's Airflow only (the release matrix
#: checks the seam's Stats on each release in test_history_units.py).
pytestmark = [pytest.mark.slow, pytest.mark.lock_only]


class Listener:
    """Every StatsD line sent to 127.0.0.1:``port`` while it runs."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data, _ = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            self.lines += data.decode("utf-8", "replace").splitlines()

    def __enter__(self) -> Listener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()

    def values(self, name: str) -> list[tuple[float, str]]:
        """(value, type) of every line for the metric ``name``."""
        out = []
        for line in self.lines:
            metric, _, rest = line.partition(":")
            if metric == name:
                value, _, kind = rest.partition("|")
                out.append((float(value), kind.split("|")[0]))
        return out


@pytest.fixture()
def listener() -> Iterator[Listener]:
    with Listener() as it:
        yield it


def test_a_task_run_sends_metrics_per_table_and_operation(tmp_path: Path, listener: Listener) -> None:
    lake = tmp_path / "lake"
    events = small_files_table(str(lake / "events"), n=5)
    orders = small_files_table(str(lake / "orders"), n=4)
    small_bytes = sum(events.snapshot().files.column("size").to_pylist())  # what compaction replaces, vacuum frees
    history = str(tmp_path / "_deltalog" / "history")
    home = tmp_path / "airflow"
    port = free_port()
    env = airflow_env(
        home,
        port,
        AIRFLOW__METRICS__STATSD_ON="True",
        AIRFLOW__METRICS__STATSD_HOST="127.0.0.1",
        AIRFLOW__METRICS__STATSD_PORT=str(listener.port),
        AIRFLOW__METRICS__STATSD_PREFIX="airflow",
        AIRFLOW__API_AUTH__JWT_SECRET="deltalog-metrics-test-jwt-secret-0123456789",
    )
    (home / "dags").mkdir(parents=True)
    (home / "dags" / "deltalog_metrics.py").write_text(
        textwrap.dedent(
            f"""
            import datetime as dt
            import time
            from airflow.sdk import DAG, task
            from deltalog_provider.operators import DeltaCompactOperator, DeltaVacuumOperator

            with DAG("deltalog_metrics", schedule=None, start_date=dt.datetime(2024, 1, 1)) as dag:
                compact = DeltaCompactOperator(task_id="compact", table={events.uri!r}, history_uri={history!r})
                vacuum = DeltaVacuumOperator(task_id="vacuum", table={events.uri!r}, retention_hours=0,
                                             allow_short_retention=True, history_uri={history!r})
                refused = DeltaVacuumOperator(task_id="vacuum_refused", table={events.uri!r}, retention_hours=1,
                                              history_uri={history!r})

                @task
                def fleet_out_of_time(**context):
                    from deltalog.fleet.maintain import maintain_table
                    from deltalog_provider.utils.history import task_recorder

                    recorder = task_recorder(context, None)  # no history: the metrics alone
                    assert recorder is not None
                    out = maintain_table({orders.uri!r}, deadline=time.monotonic() - 1, history=recorder,
                                         due_operations=["compaction"])
                    return out.status

                compact >> vacuum >> refused
                fleet_out_of_time()
            """
        )
    )
    with api_server(home, env, port):
        run = subprocess.run(
            [str(VENV_BIN / "airflow"), "dags", "test", "deltalog_metrics", "--use-executor"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            cwd=str(home),
        )
    output = run.stdout[-4000:] + run.stderr[-4000:]
    assert "vacuum_refused" in output and "failed" in output.lower(), output  # the refusal failed its task
    events_key, orders_key = table_stat_key(events.uri), table_stat_key(orders.uri)
    assert events_key == str(lake / "events").strip("/").replace("/", "_")  # the table's location, no scheme

    def got(name: str) -> list[tuple[float, str]]:
        return listener.values(f"airflow.deltalog.{name}")

    # The compaction: its duration, its status, what it read and wrote, the table after it.
    ((ms, kind),) = got(f"compaction.duration.{events_key}")
    assert kind == "ms" and ms > 0, listener.lines
    assert got(f"compaction.done.{events_key}") == [(1.0, "c")]
    assert got(f"compaction.files_read.{events_key}") == [(5.0, "c")]
    assert got(f"compaction.files_written.{events_key}") == [(1.0, "c")]
    assert got(f"table.live_files.{events_key}")[0] == (1.0, "g")
    assert got(f"table.small_files.{events_key}")[0] == (1.0, "g")
    assert got(f"table.versions_since_checkpoint.{events_key}")
    # The vacuum reclaimed the five compacted-away files; the short-retention vacuum was refused.
    assert got(f"vacuum.files_removed.{events_key}") == [(5.0, "c")]
    assert got(f"vacuum.bytes_reclaimed.{events_key}") == [(float(small_bytes), "c")]
    assert got(f"vacuum.refused.{events_key}") == [(1.0, "c")]
    # The fleet task: the budget was spent before the table started: deferred work, counted.
    assert got(f"compaction.deferred.{orders_key}") == [(1.0, "c")]
    # Airflow's own task metrics came through the same backend (the listener saw a real task run).
    assert any(line.startswith("airflow.ti.") or line.startswith("airflow.task") for line in listener.lines)
    # The history got the operators' rows (the fleet task recorded none: it had no history).
    rows = deltalake.DeltaTable(history).to_pyarrow_table().to_pylist()
    assert sorted((r["airflow_task_id"], r["status"]) for r in rows) == [
        ("compact", "done"),
        ("vacuum", "done"),
        ("vacuum_refused", "refused"),
    ]
