"""The main job: the example DAGs end to end on a month-old demo table, with real Airflow and Spark.

1. Seeds ``.demo/events``: 45 days of small daily appends (many small files), a few
   re-ingested days (old tombstones), two orphan files, all dated back (see
   ``dags/deltalog_example/seed.py``).
2. Creates a throw-away ``AIRFLOW_HOME`` (SQLite) and runs ``airflow db migrate``.
3. ``airflow dags test deltalog_ingest``: a Spark job (``spark-submit --master local[2]``)
   writes today's events as Parquet, deltalog commits them.
4. ``airflow dags test deltalog_maintenance``: health check, compaction, checkpoint,
   vacuum, log cleanup, manifest, summary.
5. Checks every task instance (success, or skipped on the branch not taken), reads the
   table with deltalake (an independent reader) and prints a before/after table.
6. Fleet mode: seeds ``.demo/fleet`` with four tables of different needs (healthy, small
   files, an expired log, a protocol feature deltalog refuses), runs
   ``airflow dags test deltalog_fleet_maintenance`` and prints the fleet summary
   (also written as ``.demo/fleet-report.html``) and what the DAG runs appended to the
   maintenance history (``.demo/_deltalog/history``, read back with deltalake). The fleet has
   service-level objectives (docs/objectives.md) and a history written before objectives
   existed (schema version 1): it shows the small-file table over its objective for three days
   and the expired-log table vacuumed ten days ago against a weekly objective; the demo prints
   both breached and since when (72 hours, 3 days) before the run and met after it, and the
   run's objectives alert.

Exit status 0 only if every run succeeded, every task did (in the fleet run, all but the
refused table's), and the rows read back are exactly the rows written. Usage: ``python scripts/demo.py [--keep-airflow-home]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAGS = os.path.join(REPO, "dags")
#: The test helpers the demo builds its fleet and reads its results with (free of pytest).
TESTS = os.path.join(REPO, "tests")
sys.path.insert(0, DAGS)

from deltalog import DeltaTable  # noqa: E402
from deltalog_example.report import TableReport, operations_since, render_before_after, table_report  # noqa: E402
from deltalog_example.seed import seed_history  # noqa: E402

log = logging.getLogger("deltalog.demo")

#: Tasks that must succeed in every maintenance run; the rest may only be skipped by the engine branch.
MAINTENANCE_CORE = ["health_check", "choose_engine", "checkpoint", "vacuum", "log_cleanup", "manifest", "summary"]
ENGINE_PATHS = {"local": ["compact_local"], "spark": ["compact_spark"]}


class DemoError(Exception):
    """A step of the demo failed; the message says which and why."""


def airflow_env(home: str, table: str, venv_bin: str) -> dict[str, str]:
    """Environment of every ``airflow`` command: SQLite home, the repo's DAGs, local Spark, demo settings."""
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__DAGS_FOLDER": DAGS,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "PATH": venv_bin + os.pathsep + env.get("PATH", ""),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_DELTALOG_DEFAULT": json.dumps({"conn_type": "deltalog"}),
            "AIRFLOW_VAR_DELTALOG_TABLE_URI": table,
            "AIRFLOW_VAR_DELTALOG_INGEST_ROWS": "20000",
            "AIRFLOW_VAR_DELTALOG_INGEST_FILES": "8",
            "AIRFLOW_VAR_DELTALOG_SPARK_CONF": json.dumps({"spark.driver.memory": "1g"}),
            # Airflow 3.3.2's `dags test` crashes after a successful run of a DAG with a
            # deadline (apache/airflow#73428); the scheduler-driven stack keeps it on.
            "AIRFLOW_VAR_DELTALOG_MAINTENANCE_DEADLINE_MINUTES": "0",
            "PYTHONWARNINGS": "ignore",
        }
    )
    return env


def run_airflow(args: list[str], env: dict[str, str], log_path: str, what: str) -> float:
    """Run one ``airflow`` CLI command, output to ``log_path``; raise DemoError on failure."""
    started = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as out:
        airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
        proc = subprocess.run([airflow, *args], env=env, stdout=out, stderr=subprocess.STDOUT, timeout=900)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        with open(log_path, encoding="utf-8") as f:
            tail = "".join(f.readlines()[-25:])
        raise DemoError(f"{what} failed (exit {proc.returncode}, log {log_path}):\n{tail}")
    return seconds


def dags_test(dag_id: str, day: str, env: dict[str, str], logs: str) -> float:
    """``airflow dags test DAG DAY`` with its output in ``logs/<dag_id>.log``; returns the seconds taken."""
    return run_airflow(["dags", "test", dag_id, day], env, os.path.join(logs, f"{dag_id}.log"), dag_id)


def task_states(home: str, dag_id: str) -> tuple[str, dict[str, str]]:
    """State of the latest run of ``dag_id`` and of each of its task instances (from the SQLite metadata DB)."""
    with sqlite3.connect(os.path.join(home, "airflow.db")) as db:
        row = db.execute(
            "SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (dag_id,)
        ).fetchone()
        if row is None:
            raise DemoError(f"no run of {dag_id} was recorded")
        states = dict(
            db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?", (dag_id, row[0]))
        )
    return row[1], states


def check_ingest(home: str) -> dict[str, str]:
    run_state, states = task_states(home, "deltalog_ingest")
    bad = {t: s for t, s in states.items() if s != "success"}
    if run_state != "success" or bad or len(states) != 3:
        raise DemoError(f"deltalog_ingest: run {run_state}, tasks not successful: {bad or states}")
    return states


def check_maintenance(home: str) -> tuple[str, dict[str, str]]:
    """Every core task succeeded, one engine path ran completely and the other was skipped."""
    run_state, states = task_states(home, "deltalog_maintenance")
    if run_state != "success":
        raise DemoError(f"deltalog_maintenance: run {run_state}: {states}")
    failed = {t: states.get(t) for t in MAINTENANCE_CORE if states.get(t) != "success"}
    if failed:
        raise DemoError(f"deltalog_maintenance: tasks not successful: {failed}")
    for engine, tasks in ENGINE_PATHS.items():
        other = [t for e, ts in ENGINE_PATHS.items() if e != engine for t in ts]
        if all(states.get(t) == "success" for t in tasks) and all(states.get(t) == "skipped" for t in other):
            return engine, states
    raise DemoError(f"deltalog_maintenance: no compaction path ran completely: {states}")


def _tests_on_path() -> None:
    if TESTS not in sys.path:
        sys.path.insert(0, TESTS)


def deltalake_read(table: str, columns: list[str] | None = None) -> Any:
    """The table as deltalake (delta-rs), a reader independent of deltalog, reads it: in a child process
    that is joined (``tests/isolated_reads.py``). deltalake's Arrow scan can abort the process that ran it
    when that process exits (apache/arrow#34314): in this process that would turn a correct demo into exit
    134; the child leaves without finalizing, and only a complete result with exit 0 is taken."""
    _tests_on_path()
    from isolated_reads import IsolatedReadError, deltalake_table

    try:
        return deltalake_table(table, columns=columns)
    except IsolatedReadError as exc:
        raise DemoError(str(exc)) from None


def deltalake_rows(table: str) -> tuple[int, int]:
    """(rows, distinct event ids) read by deltalake (delta-rs), a reader independent of deltalog."""
    data = deltalake_read(table, ["event_id"])
    return data.num_rows, len(set(data.column("event_id").to_pylist()))


def run(keep_home: bool = False) -> int:
    started = time.perf_counter()
    demo_started = dt.datetime.now(dt.UTC)
    demo_dir = os.path.join(REPO, ".demo")
    table = os.path.join(demo_dir, "events")
    logs = os.path.join(demo_dir, "logs")
    shutil.rmtree(table, ignore_errors=True)
    # The history of an earlier demo run names tables this run builds anew (same paths): start without it,
    # so what the objectives show (a breach and since when) is this run's seeded history, not the last run's.
    shutil.rmtree(os.path.join(demo_dir, "_deltalog"), ignore_errors=True)
    os.makedirs(logs, exist_ok=True)
    venv_bin = os.path.dirname(sys.executable)
    if shutil.which("spark-submit", path=venv_bin) is None:
        raise DemoError(f"spark-submit not found in {venv_bin}: run scripts/bootstrap.sh first")
    if shutil.which("java") is None:
        raise DemoError("java not found: Spark needs a Java 17+ runtime (scripts/bootstrap.sh installs one)")

    print(f"[1/6] seeding a month-old demo table with many small files at {table}")
    seeded = seed_history(table)
    print(
        f"      {seeded.versions} versions over {seeded.first_day}..{seeded.last_day}, {seeded.live_files} live files, "
        f"{seeded.live_rows} rows, {seeded.tombstoned_files} re-ingested files, {seeded.orphan_files} orphans"
    )
    fleet_root = os.path.join(demo_dir, "fleet")
    build_fleet(fleet_root)
    rows_before, _ = deltalake_rows(table)

    home = tempfile.mkdtemp(prefix="deltalog-demo-airflow-")
    env = airflow_env(home, table, venv_bin)
    try:
        print(f"[2/6] airflow db migrate (AIRFLOW_HOME={home}, SQLite)")
        run_airflow(["db", "migrate"], env, os.path.join(logs, "db_migrate.log"), "airflow db migrate")

        today = dt.datetime.now(dt.UTC).date().isoformat()
        print(f"[3/6] airflow dags test deltalog_ingest {today}  (Spark local[2] + DeltaCommitOperator)")
        secs = dags_test("deltalog_ingest", today, env, logs)
        check_ingest(home)
        before = table_report(DeltaTable(table))
        log_before = set(os.listdir(os.path.join(table, "_delta_log")))
        rows_ingested, _ = deltalake_rows(table)
        print(f"      ingest: all 3 tasks succeeded in {secs:.0f} s, {rows_ingested - rows_before} rows committed")

        print(f"[4/6] airflow dags test deltalog_maintenance {today}")
        secs = dags_test("deltalog_maintenance", today, env, logs)
        engine, states = check_maintenance(home)
        ran = sum(1 for s in states.values() if s == "success")
        print(f"      maintenance: {ran} tasks succeeded ({engine} compaction path) in {secs:.0f} s")

        print("[5/6] checking the result with deltalake")
        after = table_report(DeltaTable(table))
        rows_after, distinct_after = deltalake_rows(table)
        if rows_after != rows_ingested or distinct_after != rows_after:
            raise DemoError(
                f"rows changed by maintenance: {rows_ingested} before, {rows_after} after ({distinct_after} distinct ids)"
            )
        log_removed = len(log_before - set(os.listdir(os.path.join(table, "_delta_log"))))
        print_report(table, before, after, rows_after, log_removed)

        print(f"\n[6/6] fleet mode: four tables with different needs under {fleet_root}")
        run_fleet_demo(home, env, fleet_root, demo_dir, logs, demo_started)
    finally:
        if keep_home:
            print(f"Airflow home kept at {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    print(f"\ndone in {time.perf_counter() - started:.0f} s; task logs in {logs}")
    return 0


def run_fleet_demo(home: str, env: dict[str, str], root: str, report_dir: str, logs: str, since: dt.datetime) -> None:
    """Run the fleet DAG on the demo fleet (:func:`build_fleet`), check it and print its summary."""
    _tests_on_path()
    from deltalog.fleet.report import format_summary

    print("      objectives before the run (deltalog objectives):")
    breached = objectives_with_since(root)
    fleet_env = dict(
        env,
        AIRFLOW_VAR_DELTALOG_FLEET_ROOT=root,
        AIRFLOW_VAR_DELTALOG_FLEET_REPORT_DIR=report_dir,
        AIRFLOW_VAR_DELTALOG_FLEET_DEADLINE_MINUTES="0",  # apache/airflow#73428, as for deltalog_maintenance
        AIRFLOW_VAR_DELTALOG_FLEET_TABLE_SETTINGS=json.dumps(OBJECTIVES),
    )
    secs = run_airflow(
        ["dags", "test", "deltalog_fleet_maintenance"], fleet_env, os.path.join(logs, "fleet.log"), "fleet DAG"
    )
    with sqlite3.connect(os.path.join(home, "airflow.db")) as db:
        tis = db.execute(
            "SELECT rendered_map_index, task_id, state FROM task_instance WHERE dag_id = 'deltalog_fleet_maintenance'"
        ).fetchall()
        row = db.execute(
            "SELECT value FROM xcom WHERE dag_id = 'deltalog_fleet_maintenance' AND task_id = 'summary' "
            "AND key = 'return_value' ORDER BY dag_run_id DESC LIMIT 1"
        ).fetchone()
    failed = sorted(m or t for m, t, state in tis if state != "success")
    if failed != ["refused_protocol"] or row is None:
        raise DemoError(f"deltalog_fleet_maintenance: unexpected task states {tis} (summary found: {row is not None})")
    doc = json.loads(row[0]) if isinstance(row[0], str | bytes) else row[0]
    if isinstance(doc, str):
        doc = json.loads(doc)
    print(
        f"      fleet run in {secs:.0f} s: the refused table failed its own mapped task, every other task succeeded\n"
    )
    print(format_summary(doc))
    print(f"\nHTML report: {doc.get('report')}")
    show_objectives_after(root, breached, home)
    print_history(doc, since)


#: The demo fleet's objectives: few small files, a weekly vacuum; the history table keeps a file a day.
OBJECTIVES = {
    "defaults": {"max_small_files": 3, "max_days_since_vacuum": 7},
    "tables": {"history": {"max_small_files": 1000}},
}


#: The demo's maintenance history: where the example DAGs record by default (beside the demo tables).
HISTORY = os.path.join(REPO, ".demo", "_deltalog", "history")


def _objectives(root: str) -> list[Any]:
    from deltalog import check_objectives

    tables = sorted(os.path.join(root, n) for n in os.listdir(root) if not n.startswith((".", "_")))
    return check_objectives(tables, settings=OBJECTIVES, history=HISTORY)


def build_fleet(root: str) -> None:
    """The demo fleet (four tables) and the maintenance history a team already has, written before objectives
    existed (schema version 1: the table's state in each row, no objective columns): daily measurements of
    the small-file table whose last three show it over its objective (3 files), and a vacuum of the
    expired-log table ten days ago (objective: weekly). Written first, before any DAG records into the
    history (which upgrades it in place); the fleet runs in step 6. Prints the breaches ``deltalog
    objectives`` finds on that history and since when (72 hours and 3 days ago)."""
    _tests_on_path()
    from deltalog.journal import SCHEMA_VERSION_PROPERTY, RunContext
    from deltalog.log import snapshot_at
    from deltalog.storage import Storage
    from fleet_helpers import FLEET
    from objectives_helpers import version_1_rows, write_version_1_history

    shutil.rmtree(root, ignore_errors=True)
    for name, build in FLEET.items():
        build(os.path.join(root, name))
    small, expired = (os.path.join(root, n) for n in ("small_files", "expired_log"))
    now = dt.datetime.now(dt.UTC)
    context = RunContext(run_id="seeded-history")
    measured = [(5, 2), (4, 3), (3, 5), (2, 6), (1, 6)]  # (days ago, small files)
    write_version_1_history(
        HISTORY, version_1_rows(context, small, now, measured, None) + version_1_rows(context, expired, now, [], 10)
    )
    version = snapshot_at(Storage(HISTORY)).metadata.configuration.get(SCHEMA_VERSION_PROPERTY)
    print(f"      the fleet for step 6 under {root}, and its maintenance history {HISTORY}")
    print(f"      as a deltalog from before objectives wrote it (schema version {version}, no objective columns):")
    print(f"        small_files measured daily: {', '.join(f'{n} small files {d} days ago' for d, n in measured)}")
    print("        expired_log vacuumed 10 days ago")
    print("      objectives on that history (deltalog objectives):")
    objectives_with_since(root)


def objectives_with_since(root: str) -> list[str]:
    """Print every breach of the fleet's objectives and since when; fail unless the small-file table is breached
    since 72 hours ago and the expired-log table since 3 days ago (the seeded history). The breached tables."""
    now = dt.datetime.now(dt.UTC)
    breached = []
    since: dict[tuple[str, str], dt.datetime | None] = {}
    for t in _objectives(root):
        for o in t.breached:
            ago = f" ({(now - o.breached_since).total_seconds() / 3600:.0f} hours ago)" if o.breached_since else ""
            print(f"        {os.path.basename(t.table_uri)}: {o.describe()}{ago}")
            since[(os.path.basename(t.table_uri), o.name)] = o.breached_since
        if t.breached:
            breached.append(t.table_uri)
    for key in (("small_files", "max_small_files"), ("expired_log", "max_days_since_vacuum")):
        when = since.get(key)
        if when is None or abs((now - when).total_seconds() / 3600 - 72) > 1:
            raise DemoError(f"{key[0]}: {key[1]} should be breached since 72 hours ago, by the history; got {when}")
    return breached


def show_objectives_after(root: str, breached: list[str], home: str) -> None:
    """The tables breached before the run, judged again: met after maintenance; and the run's alert."""
    judged = {t.table_uri: t for t in _objectives(root)}
    print("\nobjectives after the run:")
    for uri in breached:
        t = judged[uri]
        print(f"  {os.path.basename(uri)}: " + ("met" if t.met else "; ".join(o.describe() for o in t.breached)))
        if not t.met:
            raise DemoError(f"{uri} still breaches its objectives after the fleet run")
    with sqlite3.connect(os.path.join(home, "airflow.db")) as db:
        row = db.execute(
            "SELECT value FROM xcom WHERE dag_id = 'deltalog_fleet_maintenance' AND task_id = 'objectives_alert' "
            "AND key = 'return_value' ORDER BY dag_run_id DESC LIMIT 1"
        ).fetchone()
    if row is None:
        raise DemoError("the fleet run's objectives_alert task returned nothing")
    alert = json.loads(row[0]) if isinstance(row[0], str | bytes) else row[0]
    if isinstance(alert, str):
        alert = json.loads(alert)
    print(f"  the run's alert (deltalog_alert_email empty: logged, not mailed): {alert['message']['subject']}")


def print_history(doc: dict[str, Any], since: dt.datetime) -> None:
    """What this demo's DAG runs appended to the maintenance history, read back with deltalake."""
    history = doc.get("history")
    if not history:
        print("maintenance history: off (the deltalog_history_uri Variable is empty)")
        return
    rows = deltalake_read(history).to_pylist()
    mine = [r for r in rows if r["started_at"] >= since]
    if not any(r["operation"] == "measure" for r in mine) or not any(
        r["airflow_dag_id"] == "deltalog_maintenance" for r in mine
    ):
        raise DemoError(f"the DAG runs did not record their operations in the maintenance history {history}")
    print(f"\nmaintenance history {history} (read with deltalake): {len(rows)} rows, {len(mine)} from this demo:")
    by_dag: dict[str, dict[str, int]] = {}
    for r in mine:
        counts = by_dag.setdefault(r["airflow_dag_id"] or "-", {})
        key = f"{r['operation']} {r['status']}"
        counts[key] = counts.get(key, 0) + 1
    for dag, counts in sorted(by_dag.items()):
        print(f"  {dag}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    print(
        "  the Airflow page (plugin 'deltalog', [deltalog] history_uri) reads it; docs/history.md says how to query it"
    )


def print_report(table: str, before: TableReport, after: TableReport, rows: int, log_removed: int) -> None:
    ops = operations_since(DeltaTable(table), before.version)
    optimize = ops.get("OPTIMIZE", {})
    vacuum = ops.get("VACUUM END", {})
    vacuum_start = ops.get("VACUUM START", {})
    print(f"\n{table}: before = after ingest, after = after deltalog_maintenance\n")
    print(render_before_after(before, after))
    extra: list[tuple[str, Any]] = [
        ("rows (read with deltalake)", f"{rows} before and after"),
        ("files compacted", f"{optimize.get('numRemovedFiles', 0)} -> {optimize.get('numAddedFiles', 0)}"),
        (
            "files reclaimed by vacuum",
            f"{vacuum.get('numDeletedFiles', 0)} ({vacuum_start.get('sizeOfDataToDelete', 0)} bytes)",
        ),
        ("_delta_log files removed", f"{log_removed} (log cleanup, 30-day log retention)"),
        ("checkpoint version", f"{before.checkpoint_version} -> {after.checkpoint_version}"),
    ]
    print()
    for label, value in extra:
        print(f"{label:<30}{value}")
    print(
        "\nFiles removed by today's compaction stay on storage until the table's 7-day vacuum retention has"
        "\npassed (readers of older versions may still need them); vacuum deleted only files past retention."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep-airflow-home", action="store_true", help="keep the temporary AIRFLOW_HOME")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return run(keep_home=args.keep_airflow_home)
    except DemoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
