"""Metrics per table and operation reach a real StatsD listener, and a real OTLP receiver, from a real task run.

Airflow is configured as a deployment would be, once with StatsD (``[metrics] statsd_on``, a
UDP listener on localhost recording every datagram) and once with OpenTelemetry
(``[metrics] otel_on``, the standard ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` pointing at an
HTTP listener on localhost decoding every OTLP export). The DAG runs with ``airflow dags test
--use-executor``: LocalExecutor starts each task in a supervised process talking to a real
``airflow api-server``'s execution API, which is where Airflow sets up its metrics backend (an
in-process ``dags test`` sends no metrics at all, Airflow's own included); the task processes
take the backend from the environment of ``dags test``, so one API server serves both runs. The DAG: operators
compact a table (history given: rows and metrics), vacuum it, and are refused a
short-retention vacuum; a fleet task finds its time budget spent (deferred work, metrics
without any history). Both backends must carry the same numbers; OpenTelemetry also the
``table``, ``operation`` and ``status`` attributes.
"""

from __future__ import annotations

import gzip
import socket
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from api_server import VENV_BIN, airflow_env, api_server, free_port

from airflow_homes import prepare_home
from deltalog_provider.utils.metrics import table_stat_key
from fleet_helpers import small_files_table
from isolated_reads import deltalake_rows

#: A real API server, LocalExecutor and metric listeners: on the lock's Airflow only (the release matrix
#: checks the seam's Stats on each release in test_history_units.py).
pytestmark = [pytest.mark.slow, pytest.mark.lock_only]


class StatsdListener:
    """Every StatsD line sent to 127.0.0.1:``port`` while it runs."""

    backend = "statsd"

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

    def __enter__(self) -> StatsdListener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()

    def settings(self) -> dict[str, str]:
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        }

    def _values(self, name: str, kind: str) -> list[float]:
        out = []
        for line in self.lines:
            metric, _, rest = line.partition(":")
            value, _, kinds = rest.partition("|")
            if metric == name and kinds.split("|")[0] == kind:
                out.append(float(value))
        return out

    def counter(self, name: str) -> float | None:
        """The total sent for a counter (None: never sent)."""
        values = self._values(name, "c")
        return sum(values) if values else None

    def gauges(self, name: str) -> list[float]:
        return self._values(name, "g")

    def timings_ms(self, name: str) -> list[float]:
        return self._values(name, "ms")

    def names(self) -> set[str]:
        return {line.partition(":")[0] for line in self.lines}

    def attributes(self, name: str) -> list[dict[str, str]]:
        return []  # StatsD has no tags: the table is in the name


class OtlpListener:
    """An OTLP/HTTP metrics receiver on 127.0.0.1:``port``: every data point of every export, decoded."""

    backend = "otel"

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
            ExportMetricsServiceResponse,
        )

        #: (metric name, kind, value, attributes, series start, time) per data point.
        self.points: list[tuple[str, str, float, dict[str, str], int, int]] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                listener.add(request)
                reply = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, request: Any) -> None:
        points = []
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    for p in getattr(metric, kind).data_points:
                        attrs = {a.key: a.value.string_value for a in p.attributes}
                        if kind in ("sum", "gauge"):
                            value = p.as_double if p.WhichOneof("value") == "as_double" else float(p.as_int)
                        else:  # histogram, exponential_histogram: the sum of what was recorded
                            value = p.sum
                        points.append((metric.name, kind, value, attrs, p.start_time_unix_nano, p.time_unix_nano))
        with self._lock:
            self.points += points

    def __enter__(self) -> OtlpListener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def settings(self) -> dict[str, str]:
        return {
            "AIRFLOW__METRICS__OTEL_ON": "True",
            "AIRFLOW__METRICS__OTEL_PREFIX": "airflow",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"http://127.0.0.1:{self.port}/v1/metrics",
            "OTEL_METRIC_EXPORT_INTERVAL": "1000",
        }

    def _last(self, name: str, kinds: tuple[str, ...]) -> list[tuple[float, dict[str, str]]]:
        """The last value of each series (attributes and start: one process's instrument) of ``name``."""
        series: dict[tuple[Any, ...], tuple[int, float, dict[str, str]]] = {}
        for metric, kind, value, attrs, start, at in self.points:
            if metric == name and kind in kinds:
                key = (tuple(sorted(attrs.items())), start)
                if key not in series or at >= series[key][0]:
                    series[key] = (at, value, attrs)
        return [(value, attrs) for _, value, attrs in series.values()]

    def counter(self, name: str) -> float | None:
        """The total of a counter over its series: each series is cumulative (None: never sent)."""
        series = self._last(name, ("sum",))
        return sum(value for value, _ in series) if series else None

    def gauges(self, name: str) -> list[float]:
        return [value for value, _ in self._last(name, ("gauge",))]

    def timings_ms(self, name: str) -> list[float]:
        return [value for value, _ in self._last(name, ("histogram", "exponential_histogram"))]

    def names(self) -> set[str]:
        return {point[0] for point in self.points}

    def attributes(self, name: str) -> list[dict[str, str]]:
        return [attrs for _, attrs in self._last(name, ("sum", "gauge", "histogram", "exponential_histogram"))]


Listener = StatsdListener | OtlpListener


@pytest.fixture(params=["statsd", "otel"])
def listener(request: pytest.FixtureRequest) -> Iterator[Listener]:
    with StatsdListener() if request.param == "statsd" else OtlpListener() as it:
        yield it


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """An Airflow home with a running API server (no metrics of its own), for the DAG runs."""
    home = prepare_home(tmp_path_factory, tmp_path_factory.mktemp("airflow"))
    port = free_port()
    env = airflow_env(home, port, AIRFLOW__API_AUTH__JWT_SECRET="deltalog-metrics-test-jwt-secret-0123456789")
    with api_server(home, env, port):
        yield home, env


def test_a_task_run_sends_metrics_per_table_and_operation(
    tmp_path: Path, listener: Listener, deployment: tuple[Path, dict[str, str]]
) -> None:
    lake = tmp_path / "lake"
    events = small_files_table(str(lake / "events"), n=5)
    orders = small_files_table(str(lake / "orders"), n=4)
    small_bytes = sum(events.snapshot().files.column("size").to_pylist())  # what compaction replaces, vacuum frees
    history = str(tmp_path / "_deltalog" / "history")
    home, server_env = deployment
    env = {**server_env, **listener.settings()}
    dag_id = f"deltalog_metrics_{listener.backend}"
    (home / "dags" / f"{dag_id}.py").write_text(
        textwrap.dedent(
            f"""
            import datetime as dt
            import time
            from airflow.sdk import DAG, task
            from deltalog_provider.operators import DeltaCompactOperator, DeltaVacuumOperator

            with DAG({dag_id!r}, schedule=None, start_date=dt.datetime(2024, 1, 1)) as dag:
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
    run = subprocess.run(
        [str(VENV_BIN / "airflow"), "dags", "test", dag_id, "--use-executor"],
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

    def name(metric: str) -> str:
        return f"airflow.deltalog.{metric}"

    sent = sorted(n for n in listener.names() if ".deltalog." in n)
    # The compaction: its duration, its status, what it read and wrote, the table after it.
    (ms,) = listener.timings_ms(name(f"compaction.duration.{events_key}"))
    assert ms > 0, sent
    assert listener.counter(name(f"compaction.done.{events_key}")) == 1
    assert listener.counter(name(f"compaction.files_read.{events_key}")) == 5
    assert listener.counter(name(f"compaction.files_written.{events_key}")) == 1
    assert set(listener.gauges(name(f"table.live_files.{events_key}"))) == {1.0}  # after compaction and vacuum
    assert set(listener.gauges(name(f"table.small_files.{events_key}"))) == {1.0}
    assert listener.gauges(name(f"table.versions_since_checkpoint.{events_key}"))
    # The vacuum reclaimed the five compacted-away files; the short-retention vacuum was refused.
    assert listener.counter(name(f"vacuum.files_removed.{events_key}")) == 5
    assert listener.counter(name(f"vacuum.bytes_reclaimed.{events_key}")) == small_bytes
    assert listener.counter(name(f"vacuum.refused.{events_key}")) == 1
    # The fleet task: the budget was spent before the table started: deferred work, counted.
    assert listener.counter(name(f"compaction.deferred.{orders_key}")) == 1
    # Airflow's own task metrics came through the same backend (the listener saw a real task run).
    assert any(n.startswith(("airflow.ti.", "airflow.task")) for n in listener.names()), sorted(listener.names())
    if listener.backend == "otel":  # dimensions: the table's URI, the operation, how it ended
        assert listener.attributes(name(f"vacuum.refused.{events_key}")) == [
            {"table": events.uri, "operation": "vacuum", "status": "refused"}
        ]
        assert {a["table"] for a in listener.attributes(name(f"table.live_files.{events_key}"))} == {events.uri}
    # The history got the operators' rows (the fleet task recorded none: it had no history).
    rows = deltalake_rows(history)
    assert sorted((r["airflow_task_id"], r["status"]) for r in rows) == [
        ("compact", "done"),
        ("vacuum", "done"),
        ("vacuum_refused", "refused"),
    ]
