"""The fleet view served by a real ``airflow api-server`` at 10k, 100k and 1M history rows (issue 35).

The histories come from ``tests/synthetic_history.py`` (1,000 tables, a quarter of the rows
on one table, the rows over the last 30 days: all of them inside the pages' default window;
cached under ``~/.cache/deltalog/fleet-histories``). For each size the benchmark starts
``airflow api-server`` (temporary AIRFLOW_HOME, SQLite, the simple auth manager) with
``[deltalog] history_uri`` set and its rollups in a fresh folder, signs in for a token,
and measures, with the server's memory (RSS of its whole process tree, sampled every 50 ms):

- the first fleet page after start on an empty rollup folder (what a new deployment pays once);
- warm: the fleet page, the busy table's page, ``/api/fleet``, ``/api/table`` for the busy
  table: time (the fastest of ``--repeat``; the machine is shared) and bytes;
- the server restarted on the same rollups: its first fleet page (nothing to rebuild);
- four concurrent fleet requests on the restarted server before any other: the slowest
  answer and the server's RSS at its peak and after.

``--provider-path DIR`` runs the server with another checkout's ``provider`` folder first on
its ``PYTHONPATH`` (``git archive main provider | tar -x -C /tmp/before``): the figures
before a change, in the same run and on the same machine. Sizes above ``--before-max-rows``
are skipped for it (the page before issue 35 reads every row into Python objects: 1M rows
would take minutes and gigabytes of the shared machine).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
for extra in (REPO / "tests", REPO / "tests" / "provider"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

log = logging.getLogger("benchmarks.fleet_view")

USERS = {"viewer": "VIEWER"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", default=None, help="history sizes, comma-separated (default 10000,100000,1000000)")
    parser.add_argument("--provider-path", default=None, help="serve another checkout's provider/ (the 'before')")
    parser.add_argument("--before-max-rows", type=int, default=100_000, help="largest size for --provider-path")
    parser.add_argument("--concurrent", type=int, default=4, help="concurrent fleet requests")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a request may take")


class RssSampler:
    """The RSS of a process and its children (MiB), sampled every 50 ms while running: peak and last."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.process = psutil.Process(pid)
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> float:
        from api_server import tree_rss_mb

        return tree_rss_mb(self.process.pid)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            time.sleep(0.05)

    def __enter__(self) -> RssSampler:
        self.peak = self.now()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def _server(home: Path, history: str, rollups: str, provider_path: str | None) -> tuple[dict[str, str], int]:
    from api_server import free_port, signed_in_env

    port = free_port()
    env = signed_in_env(
        home,
        port,
        USERS,
        AIRFLOW__DELTALOG__HISTORY_URI=history,
        AIRFLOW__DELTALOG__ROLLUP_URI=rollups,
        AIRFLOW__DELTALOG__COST_PER_CPU_HOUR="0.06",
        AIRFLOW__DELTALOG__COST_PER_GB_MONTH="0.023",
    )
    if provider_path:
        env["PYTHONPATH"] = os.pathsep.join([provider_path, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env, port


class Client:
    def __init__(self, base: str, timeout: float) -> None:
        from api_server import bearer_token

        self.base = base
        self.timeout = timeout
        self.token = bearer_token(base, "viewer")

    def get(self, path: str) -> tuple[float, int, int]:
        """(seconds, status, bytes) of one GET."""
        req = urllib.request.Request(self.base + path, headers={"Authorization": f"Bearer {self.token}"})
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                size = len(resp.read())
                return time.perf_counter() - started, resp.status, size
        except urllib.error.HTTPError as exc:
            return time.perf_counter() - started, exc.code, len(exc.read() or b"")


def _one_size(rows: int, args: argparse.Namespace, before: bool) -> list[dict[str, Any]]:
    from api_server import api_server, server_pid

    from synthetic_history import cached_history

    shape = cached_history(rows, tables=1000, busy_share=0.25, days=30)
    label = "before" if before else "after"
    busy = quote(shape.busy, safe="")
    paths = {
        "fleet page": "/deltalog/",
        "busy table's page": f"/deltalog/table?uri={busy}",
        "/api/fleet": "/deltalog/api/fleet",
        "/api/table (busy)": f"/deltalog/api/table?uri={busy}",
    }
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="deltalog-bench-fleet-view-") as tmp:
        rollups = str(Path(tmp) / "rollups")
        home = Path(tmp) / "airflow"
        env, port = _server(home, shape.history, rollups, args.provider_path if before else None)
        load = "/".join(f"{x:.1f}" for x in os.getloadavg())
        with api_server(home, env, port) as base:
            client = Client(base, args.timeout)
            with RssSampler(server_pid(port)) as rss:
                first, code, first_bytes = client.get(paths["fleet page"])
            log.info("%s %d rows: first fleet page %.2f s (%d), %d bytes", label, rows, first, code, first_bytes)
            out.append(
                {
                    "case": f"{label}: first fleet page after start, empty rollups, {rows:,} rows",
                    "ours_s": first,
                    "bytes": first_bytes,
                    "ours_peak_mb": rss.peak,
                    "note": f"HTTP {code}; load {load}",
                }
            )
            for name, path in paths.items():
                times, size, status = [], 0, 0
                with RssSampler(server_pid(port)) as rss:
                    for _ in range(max(1, args.repeat)):
                        seconds, status, size = client.get(path)
                        times.append(seconds)
                log.info("%s %d rows: %s %.3f s, %d bytes", label, rows, name, min(times), size)
                out.append(
                    {
                        "case": f"{label}: {name}, warm, {rows:,} rows",
                        "ours_s": min(times),
                        "median_s": statistics.median(times),
                        "bytes": size,
                        "ours_peak_mb": rss.peak,
                        "note": f"HTTP {status}; {size / 1e6:.2f} MB; load {load}",
                    }
                )
        # Restarted on the same rollups: the first page rebuilds nothing; then concurrent viewers.
        with api_server(home, env, port) as base:
            client = Client(base, args.timeout)
            pid = server_pid(port)
            with RssSampler(pid) as rss:
                again, code, _ = client.get(paths["fleet page"])
            out.append(
                {
                    "case": f"{label}: first fleet page after a restart, {rows:,} rows",
                    "ours_s": again,
                    "ours_peak_mb": rss.peak,
                    "note": f"HTTP {code}; rollups kept" if not before else f"HTTP {code}",
                }
            )
        with api_server(home, env, port) as base:
            clients = [Client(base, args.timeout) for _ in range(args.concurrent)]
            pid = server_pid(port)
            results: list[tuple[float, int, int]] = []
            with RssSampler(pid) as rss:
                threads = [
                    threading.Thread(target=lambda c=c: results.append(c.get(paths["fleet page"]))) for c in clients
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            time.sleep(1.0)
            after = rss.now()
            out.append(
                {
                    "case": f"{label}: {args.concurrent} concurrent fleet pages on a fresh server, {rows:,} rows",
                    "ours_s": max(r[0] for r in results),
                    "ours_peak_mb": rss.peak,
                    "rss_after_mb": after,
                    "note": f"HTTP {sorted({r[1] for r in results})}; server RSS peak {rss.peak:.0f} MiB, "
                    f"after {after:.0f} MiB",
                }
            )
    return out


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    sizes = [
        int(s) for s in (args.rows or ("10000,100000" if args.scale == "small" else "10000,100000,1000000")).split(",")
    ]
    rows: list[dict[str, Any]] = []
    for size in sizes:
        if args.provider_path and size <= args.before_max_rows:
            rows += _one_size(size, args, before=True)
        rows += _one_size(size, args, before=False)
    return rows


__all__ = ["add_arguments", "run"]
