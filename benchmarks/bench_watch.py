"""Event-driven maintenance (issue 42): what watching Delta logs costs, and how soon a foreign commit starts a run.

Cases (``python benchmarks/run.py watch [--cases poll,triggerer,latency] [--tables 1000]``):

- ``poll``: one poll of one table's log, idle and with two new commits, on the S3 test server (its own
  process, requests counted by it) and locally: deltalog's watcher poll (``read_tail``: one LIST from the
  last version seen) side by side with what polling with deltalake costs (``DeltaTable.update_incremental``
  then ``version()``, the peer's way to learn a table's newest version) and with a full listing of the
  log (``find_new_commit``, what the version sensor does). Median client CPU and wall of ``--polls`` polls.
- ``triggerer``: a real ``airflow triggerer`` (this venv's Airflow, SQLite home) watching ``--tables``
  tables under one root (``watched_tables_under``), on S3 and locally, with the default 60 s poll: its
  CPU (process tree) and resident memory over ``--window`` seconds once every watcher runs, and the S3
  requests per minute (the server's count); with the root's watchers in one shared loop (Airflow 3.3's
  ``shared_stream_key``) and, for comparison, one loop per table (what 3.0-3.2 run). Cost per table: the
  requests at S3's LIST price.
- ``latency``: a triggerer and a scheduler (SQLite) and a DAG scheduled on a watched table: from a
  deltalake commit to the asset event and to the DAG run's queuing and start, ``--commits`` times, against
  two poll intervals (the goal).

Every number comes from this run on this machine; the load of other processes is printed with it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

log = logging.getLogger("benchmarks.watch")

#: S3's price of LIST requests (US East, per 1,000), what a watcher's polls are.
LIST_PRICE_PER_1000 = 0.005
CASES = ("poll", "triggerer", "latency")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--tables", type=int, default=1000, help="tables watched by the triggerer (default 1000)")
    parser.add_argument("--window", type=float, default=180.0, help="seconds of steady state measured (default 180)")
    parser.add_argument("--polls", type=int, default=30, help="polls per side in the poll case (default 30)")
    parser.add_argument("--commits", type=int, default=5, help="commits timed in the latency case (default 5)")
    parser.add_argument("--poll-interval", type=float, default=10.0, help="the latency case's poll interval (s)")


def _cpu() -> float:
    """This process's CPU seconds, all threads (nanosecond resolution: a poll is a millisecond or two)."""
    return time.process_time()


def _write(uri: str, options: dict[str, str] | None = None, mode: str = "append") -> None:
    import deltalake
    import pyarrow as pa

    deltalake.write_deltalake(uri, pa.table({"id": pa.array([1], pa.int64())}), mode=mode, storage_options=options)


# --- one poll, side by side -------------------------------------------------------------------------------


def _poll_case(args: argparse.Namespace) -> list[dict[str, Any]]:
    import deltalake

    from deltalog import latest_position, read_tail
    from deltalog.log.activity import find_new_commit
    from deltalog.storage import Storage
    from s3_server import create_bucket, deltalake_options_for, start_s3_server_process, storage_options_for

    rows = []
    endpoint, counter, proc = start_s3_server_process()
    try:
        bucket = create_bucket(endpoint, "watch-bench")
        places = {
            "S3": (f"s3://{bucket}/t", storage_options_for(endpoint), deltalake_options_for(endpoint), counter),
            "local": (str(Path(tempfile.mkdtemp(prefix="watch-bench-")) / "t"), {}, None, None),
        }
        for where, (uri, ours_opts, rs_opts, count) in places.items():
            for i in range(200):  # a 200-commit log (no checkpoint: deltalake writes none by default here)
                _write(uri, rs_opts, mode="overwrite" if i == 0 else "append")
            storage = Storage(uri, ours_opts)
            position = latest_position(storage)
            for state in ("idle", "2 new commits"):
                if state != "idle":
                    _write(uri, rs_opts)
                    _write(uri, rs_opts)
                for name in (
                    "deltalog watcher poll (read_tail)",
                    "deltalake update_incremental + version",
                    "full log listing (find_new_commit)",
                ):
                    cpus, walls, requests = [], [], []
                    for _ in range(args.polls):
                        # deltalake keeps its state: it starts each poll where the watcher does (the last version seen)
                        rs = deltalake.DeltaTable(uri, storage_options=rs_opts, version=position.version)
                        before = count.snapshot() if count else None
                        c0, t0 = _cpu(), time.perf_counter()
                        if name.startswith("deltalog"):
                            read_tail(storage, position)
                        elif name.startswith("deltalake"):
                            rs.update_incremental()
                            rs.version()
                        else:
                            find_new_commit(storage, position.version)
                        walls.append(time.perf_counter() - t0)
                        cpus.append(_cpu() - c0)
                        if count:
                            requests.append(count.since(before))
                    note = ""
                    if requests:
                        median = sorted(requests, key=lambda r: sum(r.values()))[len(requests) // 2]
                        note = ", ".join(f"{k} {v}" for k, v in sorted(median.items()))
                    cpu_ms = 1000 * sum(cpus) / len(cpus)
                    rows.append(
                        {
                            "case": f"poll, {where}, 200-commit log, {state}: {name}",
                            "ours_s": statistics.median(walls),
                            "note": f"CPU {cpu_ms:.2f} ms per poll; "
                            + (f"requests per poll: {note}" if note else "no requests (local)"),
                        }
                    )
    finally:
        proc.terminate()
        proc.wait()
    return rows


# --- a real triggerer watching many tables ------------------------------------------------------------------


DAG = """
import datetime as dt
from airflow.sdk import DAG
from deltalog_provider.assets import watched_tables_under
with DAG("watched_fleet", schedule=watched_tables_under(ROOT, deltalog_conn_id="bench", cache_dir=CACHE,
         poll_interval=POLL, quiet_seconds=QUIET, share=SHARE), start_date=dt.datetime(2025, 1, 1), catchup=False):
    pass
"""


def _airflow_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
        AIRFLOW__TRIGGERER__CAPACITY="5000",
        AIRFLOW__LOGGING__LOGGING_LEVEL="INFO",
        PYTHONWARNINGS="ignore",
        **(extra or {}),
    )
    return env


def _airflow(env: dict[str, str], *args: str, timeout: float = 1800) -> None:
    airflow = str(Path(sys.executable).parent / "airflow")
    proc = subprocess.run([airflow, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"airflow {' '.join(args)}: {proc.stderr[-3000:]}")


def _home(base: Path, dag: str, env_extra: dict[str, str]) -> tuple[Path, dict[str, str]]:
    home = base / "home"
    (home / "dags").mkdir(parents=True)
    (home / "dags" / "bench_dag.py").write_text(textwrap.dedent(dag))
    env = _airflow_env(home, env_extra)
    _airflow(env, "db", "migrate")
    for _ in range(2):  # Airflow 3.0 registers watchers at the second parse (their assets active by then)
        _airflow(env, "dags", "reserialize")
        with sqlite3.connect(home / "airflow.db") as conn:
            if conn.execute("SELECT count(*) FROM trigger").fetchone()[0]:
                break
    return home, env


def _tree_cpu_rss(pid: int) -> tuple[float, float]:
    import psutil

    cpu = rss = 0.0
    root = psutil.Process(pid)
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            cpu += t.user + t.system
            rss += p.memory_info().rss
        except psutil.Error:
            continue
    return cpu, rss / (1 << 20)


def _triggerer_run(home: Path, env: dict[str, str], tables: int, window: float, counter: Any) -> dict[str, Any]:
    airflow = str(Path(sys.executable).parent / "airflow")
    log_path = home / "triggerer.log"
    with open(log_path, "wb") as fh:
        proc = subprocess.Popen(
            [airflow, "triggerer"], env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        t0 = time.monotonic()
        while log_path.read_text(errors="replace").count("watching ") < tables:
            if proc.poll() is not None:
                raise RuntimeError(log_path.read_text(errors="replace")[-3000:])
            if time.monotonic() - t0 > 3600:
                raise RuntimeError(f"{tables} watchers not started in an hour")
            time.sleep(2)
        started = time.monotonic() - t0
        start_cpu, start_rss = _tree_cpu_rss(proc.pid)
        time.sleep(60)  # the first polls after the starts
        cpu0, _ = _tree_cpu_rss(proc.pid)
        before = counter.snapshot() if counter else None
        w0 = time.monotonic()
        peak = 0.0
        while time.monotonic() - w0 < window:
            time.sleep(5)
            peak = max(peak, _tree_cpu_rss(proc.pid)[1])
        cpu1, rss = _tree_cpu_rss(proc.pid)
        elapsed = time.monotonic() - w0
        requests = counter.since(before) if counter else {}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    per_minute = {k: round(v * 60 / elapsed, 1) for k, v in requests.items()}
    return {
        "start_s": started,
        "start_cpu_s": start_cpu,
        "start_mb": start_rss,
        "cpu_share": (cpu1 - cpu0) / elapsed,
        "rss_mb": rss,
        "peak_mb": peak,
        "requests_per_minute": per_minute,
        "shared_loops": log_path.read_text(errors="replace").count("one polling loop for the log watchers"),
    }


def _triggerer_case(args: argparse.Namespace) -> list[dict[str, Any]]:
    from deltalog_provider.version_compat import AIRFLOW_VERSION_STRING, HAS_SHARED_STREAMS
    from s3_server import ACCESS_KEY, REGION, SECRET_KEY, create_bucket, deltalake_options_for, start_s3_server_process

    rows = []
    endpoint, counter, proc = start_s3_server_process()
    try:
        create_bucket(endpoint, "fleet")
        rs_opts = deltalake_options_for(endpoint)
        for i in range(args.tables):
            _write(f"s3://fleet/root/t{i:05d}", rs_opts, mode="overwrite")
        local_root = Path(tempfile.mkdtemp(prefix="watch-fleet-"))
        for i in range(args.tables):
            _write(str(local_root / f"t{i:05d}"), mode="overwrite")
        conn = json.dumps(
            {
                "conn_type": "deltalog",
                "login": ACCESS_KEY,
                "password": SECRET_KEY,
                "extra": {"endpoint_url": endpoint, "region_name": REGION},
            }
        )
        shares = [True, False] if HAS_SHARED_STREAMS else [False]
        for where, root in (("S3", "s3://fleet/root"), ("local", str(local_root))):
            for shared in shares:
                base = Path(tempfile.mkdtemp(prefix="watch-bench-home-"))
                dag = (
                    DAG.replace("ROOT", repr(root))
                    .replace("CACHE", repr(str(base / "cache")))
                    .replace("POLL", "60.0")
                    .replace("QUIET", "30.0")
                    .replace("SHARE", repr(shared))
                )
                home, env = _home(base, dag, {"AIRFLOW_CONN_BENCH": conn})
                got = _triggerer_run(home, env, args.tables, args.window, counter if where == "S3" else None)
                shutil.rmtree(base, ignore_errors=True)
                lists = got["requests_per_minute"].get("LIST", 0.0)
                monthly = lists * 60 * 24 * 30 / 1000 * LIST_PRICE_PER_1000
                loops = "one shared loop per root" if shared else "one loop per table"
                rows.append(
                    {
                        "case": f"triggerer watching {args.tables} tables, {where}, poll 60 s, {loops} "
                        f"(Airflow {AIRFLOW_VERSION_STRING})",
                        "ours_cpu_s": got["cpu_share"],
                        "ours_peak_mb": got["peak_mb"],
                        "note": (
                            f"CPU share of one core in steady state; start of all watchers {got['start_s']:.0f} s, "
                            f"{got['start_cpu_s']:.0f} CPU s; requests/min {got['requests_per_minute'] or 'none'}; "
                            f"per table {lists / args.tables:.2f} LIST/min, ${monthly / args.tables:.3f}/month "
                            f"(S3 LIST ${LIST_PRICE_PER_1000}/1000); shared loops logged: {got['shared_loops']}"
                        ),
                    }
                )
        shutil.rmtree(local_root, ignore_errors=True)
    finally:
        proc.terminate()
        proc.wait()
    return rows


# --- latency: a foreign commit to the run's start ---------------------------------------------------------------

LATENCY_DAG = """
import datetime as dt
from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator
from deltalog_provider.assets import watched_table_asset
with DAG("on_commit", schedule=[watched_table_asset(TABLE, poll_interval=POLL, quiet_seconds=QUIET)],
         start_date=dt.datetime(2025, 1, 1), catchup=False, max_active_runs=16):
    EmptyOperator(task_id="noop")
"""


def _latency_case(args: argparse.Namespace) -> list[dict[str, Any]]:
    import datetime as dt

    base = Path(tempfile.mkdtemp(prefix="watch-latency-"))
    table = str(base / "t")
    _write(table, mode="overwrite")
    poll = args.poll_interval
    quiet = poll / 2
    dag = LATENCY_DAG.replace("TABLE", repr(table)).replace("POLL", repr(poll)).replace("QUIET", repr(quiet))
    home, env = _home(base, dag, {"AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1"})
    airflow = str(Path(sys.executable).parent / "airflow")
    procs = []
    for component in ("triggerer", "scheduler"):
        fh = open(home / f"{component}.log", "wb")  # noqa: SIM115 - kept by the child
        procs.append(
            subprocess.Popen([airflow, component], env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        )
    db = home / "airflow.db"
    samples: list[tuple[float, float, float]] = []
    try:
        t0 = time.monotonic()
        while "watching" not in (home / "triggerer.log").read_text(errors="replace"):
            if time.monotonic() - t0 > 900:
                raise RuntimeError("the watcher did not start")
            time.sleep(1)
        for _ in range(args.commits):
            with sqlite3.connect(db) as conn:
                runs_before = conn.execute("SELECT count(*) FROM dag_run").fetchone()[0]
            committed = dt.datetime.now(dt.UTC)
            _write(table)
            deadline = time.monotonic() + 20 * poll + 300
            while True:
                with sqlite3.connect(db) as conn:
                    run = conn.execute(
                        "SELECT queued_at, start_date FROM dag_run ORDER BY id DESC LIMIT 1 OFFSET 0"
                    ).fetchone()
                    count = conn.execute("SELECT count(*) FROM dag_run").fetchone()[0]
                    event = conn.execute("SELECT max(timestamp) FROM asset_event").fetchone()[0]
                if count > runs_before and run[1]:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("no run started")
                time.sleep(0.5)

            def at(value: str) -> dt.datetime:
                return dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)

            samples.append(
                (
                    (at(event) - committed).total_seconds(),
                    (at(run[0]) - committed).total_seconds(),
                    (at(run[1]) - committed).total_seconds(),
                )
            )
            time.sleep(poll)  # the next commit after the table went quiet again
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)
    events, queued, started = (sorted(s[i] for s in samples) for i in range(3))
    return [
        {
            "case": f"foreign commit -> run start, poll {poll:g} s, quiet {quiet:g} s ({len(samples)} commits, local table)",
            "ours_s": statistics.median(started),
            "target": f"under two poll intervals ({2 * poll:g} s)",
            "met": max(started) < 2 * poll,
            "note": (
                f"asset event after {statistics.median(events):.1f} s (max {events[-1]:.1f}), run queued "
                f"{statistics.median(queued):.1f} s (max {queued[-1]:.1f}), started {statistics.median(started):.1f} s "
                f"(max {started[-1]:.1f})"
            ),
        }
    ]


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(cases) - set(CASES)
    if unknown:
        raise SystemExit(f"error: unknown case(s) {', '.join(sorted(unknown))}; use {', '.join(CASES)}")
    load = os.getloadavg()
    log.info("load average %.1f %.1f %.1f", *load)
    rows: list[dict[str, Any]] = []
    if "poll" in cases:
        rows += _poll_case(args)
    if "latency" in cases:
        rows += _latency_case(args)
    if "triggerer" in cases:
        rows += _triggerer_case(args)
    for r in rows:
        r["note"] = f"{r.get('note', '')} [load {load[0]:.1f}]".strip()
    return rows
