"""The log watcher in a real ``airflow triggerer`` of this release, its asset events in the metadata database.

One SQLite home (a copy of the run's migrated database), one DAG scheduled on every table found under
a root (``watched_tables_under``), registered as the DAG processor does (``airflow dags reserialize``),
then one triggerer: commits written by deltalake (no deltalog code on the writer side) become asset
events whose extra carries the watcher's range, each table's versions exactly once. Before 3.3 each
watcher is its own loop and keeps its position in a Variable: one table's is seeded, as a previous
triggerer would have left it, and the watcher resumes from it (nothing lost, nothing repeated); from 3.3
the root's watchers run in one shared loop and keep their positions in the asset state store.

Run on the matrix's oldest release (3.0: a watcher per table, its position in a Variable, its asset active
only after a second parse) and on the lock (3.3: the shared loop, the asset state store); tests/provider
runs in each release's venv (tests/test_airflow_releases.py). 3.1 and 3.2 run the event triggers through
the same triggerer path as 3.0 (no shared streams, Variables over the same supervisor messages), and
the watcher's run loop, restarts and Variable store are tested on them too, under asyncio with their
own Airflow (test_log_watch_units.py): a real triggerer there cost another 30-35 CPU s each and
proved nothing those do not. The restart of a triggerer mid-burst is the real deployment's
(tests/test_system.py).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_homes import prepare_home
from deltalog import LogPosition, read_tail
from deltalog.storage import Storage
from deltalog_provider.assets import log_asset_uri
from deltalog_provider.triggers.watch_state import STATE_FORMAT, STATE_KEY, variable_key
from deltalog_provider.utils.results import table_asset_uri
from deltalog_provider.version_compat import AIRFLOW_VERSION, AIRFLOW_VERSION_STRING, HAS_SHARED_STREAMS

#: The releases a real triggerer runs the watchers on (module doc): the oldest and the lock.
REAL_TRIGGERER_RELEASES = ((3, 0), (3, 3))

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        AIRFLOW_VERSION[:2] not in REAL_TRIGGERER_RELEASES,
        reason="3.1 and 3.2 share 3.0's triggerer path; test_log_watch_units.py runs the watcher on them",
    ),
]

deltalake = pytest.importorskip("deltalake")

AIRFLOW = Path(sys.executable).parent / "airflow"
DAG = """
import datetime as dt

from airflow.sdk import DAG
from deltalog_provider.assets import watched_tables_under

with DAG(
    "watched_lake",
    schedule=watched_tables_under(ROOT, cache_dir=CACHE, poll_interval=0.5, quiet_seconds=1.0),
    start_date=dt.datetime(2025, 1, 1),
    catchup=False,
):
    pass
"""


def write(uri: str, n: int = 1, mode: str = "append") -> None:
    deltalake.write_deltalake(uri, pa.table({"id": pa.array(range(n), pa.int64())}), mode=mode)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST_"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        # Watchers run only for DAGs that are not paused (the DAG processor registers them then).
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
        AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC="1",
        AIRFLOW__LOGGING__LOGGING_LEVEL="INFO",
        PYTHONWARNINGS="ignore",
    )
    return env


def _rows(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db, timeout=30) as conn:
        return list(conn.execute(sql, params))


def _events(db: Path) -> dict[str, list[dict[str, Any]]]:
    """The watcher's events (extra ``from_trigger``) on each table's log Asset, by table, oldest first: payloads."""
    out: dict[str, list[dict[str, Any]]] = {}
    for uri, extra in _rows(
        db, "SELECT a.uri, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id ORDER BY e.id"
    ):
        doc = json.loads(extra) if isinstance(extra, str) else extra
        if doc.get("from_trigger"):
            assert uri == log_asset_uri(doc["payload"]["table"]), (uri, doc)
            out.setdefault(doc["payload"]["table"], []).append(doc["payload"])
    return out


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two tables under a root, watched by a real triggerer; the tables' commits while it runs."""
    base = tmp_path_factory.mktemp("watched")
    home = prepare_home(tmp_path_factory, base / "home", AIRFLOW)
    root = base / "lake"
    uris = {name: str(root / name) for name in ("a", "b")}
    for uri in uris.values():
        write(uri, 2, mode="overwrite")
        write(uri)  # versions 0 and 1
    (home / "dags").mkdir()
    (home / "dags" / "watched_lake.py").write_text(
        textwrap.dedent(DAG).replace("ROOT", repr(str(root))).replace("CACHE", repr(str(base / "cache")))
    )
    env = _env(home)
    db = home / "airflow.db"
    for _ in range(2):  # 3.0 registers a watcher only once its asset is active, which the first parse makes it
        proc = subprocess.run(
            [str(AIRFLOW), "dags", "reserialize"], env=env, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        if _rows(db, "SELECT classpath FROM trigger"):
            break
    triggers = _rows(db, "SELECT classpath FROM trigger")
    assert triggers == [("deltalog_provider.triggers.delta_log.DeltaLogEventTrigger",)] * 2, triggers
    seeded = None
    if not HAS_SHARED_STREAMS:  # what a previous triggerer left: table a announced through version 0 only
        storage = Storage(table_asset_uri(uris["a"]))
        seeded = read_tail(storage, LogPosition(-1)).commits[0].position  # version 0, as the watcher records it
        doc = {
            "format": STATE_FORMAT,
            "table": storage.uri,
            "fired": seeded.to_dict(),
            "saved_at": "2026-01-01T00:00:00+00:00",
        }
        with sqlite3.connect(db, timeout=30) as conn:
            conn.execute(
                "INSERT INTO variable (key, val, description, is_encrypted) VALUES (?, ?, ?, 0)",
                (variable_key(storage.uri), json.dumps(doc), "seeded by the test"),
            )
    log_path = base / "triggerer.log"
    with open(log_path, "wb") as log:
        triggerer = subprocess.Popen(
            [str(AIRFLOW), "triggerer"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 600
        while log_path.read_text(errors="replace").count("watching file://") < 2:
            assert triggerer.poll() is None, log_path.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-4000:]
            time.sleep(0.5)
        for _ in range(3):
            write(uris["b"])  # versions 2..4 of b
        write(uris["a"])  # version 2 of a
        deadline = time.monotonic() + 300
        wanted = {table_asset_uri(uris["a"]): 2, table_asset_uri(uris["b"]): 4}
        while True:
            events = _events(db)
            if all(events.get(u) and events[u][-1]["to_version"] == v for u, v in wanted.items()):
                break
            assert time.monotonic() < deadline, (events, log_path.read_text(errors="replace")[-4000:])
            time.sleep(0.5)
        time.sleep(1)  # a last poll: nothing more is announced
    finally:
        os.killpg(triggerer.pid, signal.SIGTERM)
        try:
            triggerer.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(triggerer.pid, signal.SIGKILL)
            triggerer.wait(timeout=30)
    yield {"db": db, "uris": uris, "events": _events(db), "log": log_path.read_text(errors="replace"), "seeded": seeded}


def _decrypted(home: Path, value: str) -> str:
    """A Variable's value as Airflow encrypted it, with the home's Fernet key (``airflow.cfg``)."""
    import configparser

    from cryptography.fernet import Fernet

    config = configparser.ConfigParser(interpolation=None)
    config.read(home / "airflow.cfg")
    return Fernet(config.get("core", "fernet_key").encode()).decrypt(value.encode()).decode()


def test_foreign_commits_become_asset_events_of_their_table(lake):
    a, b = (table_asset_uri(lake["uris"][n]) for n in ("a", "b"))
    events = lake["events"]
    assert set(events) == {a, b}, f"Airflow {AIRFLOW_VERSION_STRING}: {events}"
    b_ranges = [(e["from_version"], e["to_version"]) for e in events[b]]
    assert [v for x, y in b_ranges for v in range(x, y + 1)] == [2, 3, 4], b_ranges  # after the first start's
    for e in events[b]:
        assert e["table"] == b and e["watcher"] == "deltalog.log_watch"
        assert e["operations"] == {"WRITE": e["commits"]} and all(w.startswith("delta-rs") for w in e["writers"])
        assert e["blind_append_only"] is True and e["files_added"] == e["commits"]


def test_a_watcher_resumes_from_the_position_it_kept(lake):
    """Before 3.3 from the seeded Variable (announced through version 0: versions 1 and 2 follow, once); from
    3.3 the asset state store holds each watcher's last announced version."""
    a = table_asset_uri(lake["uris"]["a"])
    versions = [v for e in lake["events"][a] for v in range(e["from_version"], e["to_version"] + 1)]
    db = lake["db"]
    if HAS_SHARED_STREAMS:
        assert versions == [2]  # first start at version 1, the newest then
        stored = [json.loads(v) for (v,) in _rows(db, "SELECT value FROM asset_state_store WHERE key = ?", STATE_KEY)]
    else:
        assert lake["seeded"].version == 0 and versions == [1, 2]
        rows = _rows(db, "SELECT val, is_encrypted FROM variable WHERE key LIKE 'deltalog_log_watch__%'")
        stored = [json.loads(_decrypted(db.parent, v) if encrypted else v) for v, encrypted in rows]
    assert sorted((d["table"], d["fired"]["version"]) for d in stored) == [
        (a, 2),
        (table_asset_uri(lake["uris"]["b"]), 4),
    ]


def test_the_watchers_of_one_root_share_one_loop_from_airflow_3_3(lake):
    loops = lake["log"].count("one polling loop for the log watchers under")
    assert loops == (1 if HAS_SHARED_STREAMS else 0), f"Airflow {AIRFLOW_VERSION_STRING}"
    assert lake["log"].count("watching file://") == 2
