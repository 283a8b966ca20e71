"""Every Airflow release we declare, as a user installs us: the matrix of ``airflow-releases.toml``.

The whole suite runs on the lock (Airflow 3.3). Here, for each other release of the
matrix, the wheel built from the sdist is installed into a venv with that Airflow
(``airflow_matrix.ensure_venv``: cached, pins explained in the TOML file) and:

* the provider tests (``tests/provider``) run there, against the installed wheel (but the
  Spark-marked ones: a Spark job submitted through the same apache-spark provider on every
  release runs on the lock only; and the ``lock_only`` ones: the fleet view in a real
  browser, its pages rendered through a test client (no Airflow code runs there;
  ``test_fleet_view_plugin.py`` serves them on every release) and metrics sent to a StatsD
  listener by a LocalExecutor run);
* a stock ``AIRFLOW_HOME`` gets our ``dags/`` copied into its default DAGs folder, as a
  user would: ``airflow providers hooks`` lists our hook without an import error, every
  example DAG parses (``dags reserialize``, ``dags list-import-errors``), and
  ``airflow dags test`` runs the example maintenance DAG on a seeded table and a DAG
  we did not ship (the README's operators and a deferrable sensor on a table of many
  small files), every task state asserted and the rows read back with deltalake.

The built dists are checked for what a provider package must carry; that pyproject.toml, the
README and the matrix name the same releases is ``tests/test_support_matrix.py``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_matrix import (
    REPO,
    Dists,
    Release,
    Venv,
    build_dists,
    clean_env,
    dist_name,
    ensure_venv,
    install_wheel,
    json_from,
    load_matrix,
    read_dists,
    run,
)
from run_once import once_per_run

sys.path.insert(0, str(REPO / "dags"))  # deltalog_example (the example DAGs' seeding), as test_example_dags does

from deltalog_example.seed import seed_history  # noqa: E402
from helpers import append, make_table, rows  # noqa: E402

MATRIX = load_matrix()
ONE_API_AIRFLOW = Path(__file__).with_name("airflow_one_api.py")
pytestmark = [pytest.mark.slow, pytest.mark.airflow, pytest.mark.releases, pytest.mark.timeout(2400)]
EXAMPLE_DAGS = {
    "deltalog_ingest",
    "deltalog_maintenance",
    "deltalog_maintenance_on_change",
    "deltalog_fleet_maintenance",
}


# --- the dists -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """The sdist and the wheel, built once per run (parallel workers share them: run_once)."""

    def build(out: Path) -> str:
        started = time.monotonic()
        build_dists(out)
        print(f"\n[releases] sdist + wheel built in {time.monotonic() - started:.0f} s")
        return str(out)

    return read_dists(Path(once_per_run(tmp_path_factory, "dists", build)))


def test_dists_carry_what_a_provider_package_must(dists: Dists):
    meta = dists.metadata
    assert meta["Name"] == "airflow-provider-deltalog" and meta["License-Expression"] == "Apache-2.0"
    assert set(meta.get_all("License-File") or []) == {"LICENSE", "NOTICE"}
    assert "Framework :: Apache Airflow :: Provider" in (meta.get_all("Classifier") or [])
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Source", "Documentation", "Changelog"} <= set(urls)
    from deltalog_provider.get_provider_info import DOCUMENTATION_URL, SOURCE_URL

    assert urls["Documentation"] == DOCUMENTATION_URL and urls["Source"] == SOURCE_URL
    assert set(meta.get_all("Provides-Extra") or []) >= {"airflow", "amazon", "spark", "test", "lint"}
    requires = meta.get_all("Requires-Dist") or []
    tools = {"pytest", "pytest-timeout", "hypothesis", "moto", "deltalake", "delta-spark", "ruff", "mypy", "build"}
    for extra in (None, "airflow", "amazon", "spark"):  # what users install never pulls a test or lint tool
        group = [r for r in requires if (f'extra == "{extra}"' in r if extra else "extra ==" not in r)]
        assert group and not {dist_name(r) for r in group} & tools, (extra, group)
    test_group = {dist_name(r) for r in requires if 'extra == "test"' in r}
    assert {"pytest", "deltalake", "delta-spark"} <= test_group and "ruff" not in test_group

    with zipfile.ZipFile(dists.wheel) as zf:
        names = zf.namelist()
    assert any(n.endswith("entry_points.txt") for n in names)
    assert "deltalog_provider/version_compat.py" in names and "deltalog_provider/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "dags/", "benchmarks/"))]
    with tarfile.open(dists.sdist) as tf:
        members = {m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name}
    assert {"LICENSE", "NOTICE", "README.md", "CHANGELOG.md", "pyproject.toml"} <= members
    assert "provider/deltalog_provider/version_compat.py" in members


# --- one venv per release --------------------------------------------------------------------


@pytest.fixture(scope="module", params=MATRIX.releases, ids=lambda r: r.id)
def release_venv(
    request: pytest.FixtureRequest, dists: Dists, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Release, Venv]:
    """The release's venv (from the cache, or made now) with this run's wheel installed: once per run and
    release, whichever worker gets there first (each release's tests are one group of the parallel run)."""
    release: Release = request.param

    def ready(_: Path) -> dict[str, Any]:
        venv = ensure_venv(release, dists)
        install_wheel(venv, dists)
        how = f"built in {venv.built_seconds:.0f} s" if venv.built_seconds else "reused from the cache"
        print(f"\n[releases] {release.id}: venv {how} ({venv.path})")
        return {"path": str(venv.path), "built_seconds": venv.built_seconds}

    made = once_per_run(tmp_path_factory, f"venv-{release.id}", ready)
    return release, Venv(Path(made["path"]), made["built_seconds"])


def _installed(venv: Venv) -> dict[str, Any]:
    probe = (
        "import importlib.metadata as m, json, platform, deltalog_provider, deltalog_provider.version_compat as c\n"
        "def v(d):\n"
        "    try: return m.version(d)\n"
        "    except m.PackageNotFoundError: return None\n"
        "print(json.dumps({'file': deltalog_provider.__file__, 'python': platform.python_version(), "
        "'airflow': c.AIRFLOW_VERSION_STRING, **{d: v(d) for d in "
        "('airflow-provider-deltalog', 'pyarrow', 'numpy', 'pyspark', 'fastapi', 'cadwyn', 'svcs')}}))"
    )
    return json.loads(run([venv.python, "-c", probe], env=clean_env(venv)).strip().splitlines()[-1])


def test_the_wheel_is_installed_as_users_get_it(release_venv: tuple[Release, Venv]):
    release, venv = release_venv
    got = _installed(venv)
    print(f"[releases] {release.id}: {got}")
    assert "site-packages" in got["file"], "the wheel, not this checkout, is imported"
    assert got["airflow"] == release.airflow and got["python"].startswith(release.python + ".")
    assert got["airflow-provider-deltalog"] == __import__("deltalog").__version__
    for requirement in release.oldest:
        name, _, version = requirement.partition("==")
        assert got[name] == version
    for pin in release.pins:
        name = re.split(r"[<>=!~]", pin.requirement)[0]
        assert got[name], pin
    run([venv.bin / "deltalog", "--help"], env=clean_env(venv))  # the CLI runs with only declared dependencies


def test_provider_tests_pass_on_the_release(release_venv: tuple[Release, Venv]):
    release, venv = release_venv
    started = time.monotonic()
    proc = subprocess.run(
        # The Spark-marked ones submit our Spark job, which no Airflow release changes, and the lock_only
        # ones need a browser or a LocalExecutor run, or run no Airflow code: on the lock only.
        [
            venv.python,
            "-m",
            "pytest",
            "tests/provider",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore",
            "-m",
            "not spark and not lock_only",
        ],
        cwd=REPO,
        env=clean_env(venv),
        capture_output=True,
        text=True,
        timeout=2100,
    )
    tail = proc.stdout[-6000:]
    print(f"[releases] {release.id}: provider tests in {time.monotonic() - started:.0f} s: {tail.splitlines()[-1:]}")
    assert proc.returncode == 0, f"provider tests on {release.id}:\n{tail}\n{proc.stderr[-3000:]}"
    summary = tail.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary) and "failed" not in summary and "error" not in summary, summary


# --- the DAGs in a stock DAGs folder -----------------------------------------------------------


class Airflow:
    """The ``airflow`` CLI of a release's venv on a stock AIRFLOW_HOME (DAGs folder: ``$AIRFLOW_HOME/dags``)."""

    def __init__(self, venv: Venv, home: Path, **env: str) -> None:
        self.venv, self.home = venv, home
        self.env = clean_env(venv, AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False", **env)

    def command(self, *args: str) -> list[str]:
        """``airflow <args>``; ``dags test`` with the execution API built once per run, as Airflow 3.3 ships
        it (tests/airflow_one_api.py; up to 3.2 it is built again for every task, 4 CPU s each)."""
        if args[:2] == ("dags", "test"):
            return [str(self.venv.python), "-P", str(ONE_API_AIRFLOW), *args]
        return [str(self.venv.bin / "airflow"), *args]

    def __call__(self, *args: str, **env: str) -> str:
        return run(self.command(*args), env={**self.env, **env}, timeout=900)

    def json(self, *args: str, **env: str) -> Any:
        return json_from(self(*args, "-o", "json", **env))

    def run_states(self, dag_id: str) -> tuple[str, dict[str, str]]:
        """The state of the DAG's only run and of each of its tasks (``dags list-runs``, ``tasks states-for-dag-run``)."""
        runs = self.json("dags", "list-runs", dag_id)
        assert len(runs) == 1, runs
        states = self.json("tasks", "states-for-dag-run", dag_id, runs[0]["run_id"])
        return runs[0]["state"], {s["task_id"]: s["state"] for s in states}

    def dags_test_streaming(self, dag_id: str, on_line: Any, **env: str) -> str:
        """``airflow dags test`` with its output read as it comes (``on_line`` sees every line)."""
        proc = subprocess.Popen(
            self.command("dags", "test", dag_id),
            env={**self.env, "PYTHONUNBUFFERED": "1", **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: list[str] = []
        deadline = time.monotonic() + 900
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            on_line(line)
            if time.monotonic() > deadline:
                proc.kill()
                break
        rc = proc.wait(timeout=60)
        out = "".join(lines)
        assert rc == 0, f"airflow dags test {dag_id} exited {rc}:\n{out[-5000:]}"
        return out


def _rows(path: str) -> list[tuple[Any, ...]]:
    """The table's rows, sorted, read by deltalake (the second oracle), not by us."""
    from deltalake import DeltaTable as RsTable

    table = RsTable(path).to_pyarrow_table()
    return sorted(zip(*(table.column(n).to_pylist() for n in table.column_names), strict=True), key=repr)


USER_DAG = '''
"""A user's DAG: the operators and sensors the README documents, on a table named under the connection's root."""
import datetime as dt

from airflow.sdk import DAG

from deltalog_provider.operators import (
    DeltaCheckpointOperator,
    DeltaCompactOperator,
    DeltaHealthCheckOperator,
    DeltaLogCleanupOperator,
    DeltaVacuumOperator,
)
from deltalog_provider.sensors import DeltaMaintenanceDueSensor, DeltaTableVersionSensor

with DAG("user_delta_maintenance", schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False):
    new_data = DeltaTableVersionSensor(
        task_id="new_data", table="events", after_version=AFTER_VERSION, operations=["WRITE"],
        deferrable=True, poke_interval=1, timeout=600,
    )
    due = DeltaMaintenanceDueSensor(
        task_id="due", table="events", max_small_file_share=0.5, deferrable=True, poke_interval=1, timeout=600
    )
    compact = DeltaCompactOperator(task_id="compact", table="events", target_size="128MB")
    checkpoint = DeltaCheckpointOperator(task_id="checkpoint", table="events")
    vacuum = DeltaVacuumOperator(task_id="vacuum", table="events", dry_run=True)
    log_cleanup = DeltaLogCleanupOperator(task_id="log_cleanup", table="events", dry_run=True)
    healthy = DeltaHealthCheckOperator(
        task_id="healthy", table="events", max_small_file_share=0.5, max_commits_since_checkpoint=5, fail_when_due=True
    )
    new_data >> due >> compact >> checkpoint >> vacuum >> log_cleanup >> healthy
'''

#: What ``airflow dags test`` prints, on every release of the matrix, when it runs a deferred task's trigger.
TRIGGER_RUNS = "[DAG TEST] running trigger in line"


@pytest.fixture(scope="module")
def stock_home(release_venv: tuple[Release, Venv], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    """A fresh AIRFLOW_HOME with our ``dags/`` copied into its default DAGs folder, as a user would."""
    release, venv = release_venv
    home = tmp_path_factory.mktemp(f"home-{release.airflow}")
    shutil.copytree(REPO / "dags", home / "dags", ignore=shutil.ignore_patterns("__pycache__"))
    airflow = Airflow(venv, home)
    airflow("db", "migrate")
    yield airflow


def test_example_dags_parse_and_the_hook_imports_in_a_stock_dags_folder(stock_home: Airflow):
    hooks = {h["connection_type"]: h for h in stock_home.json("providers", "hooks")}
    assert hooks["deltalog"]["class"] == "deltalog_provider.hooks.delta_table.DeltaTableHook", hooks.get("deltalog")
    # What the DAG processor does, in the CLI: parse every file of the bundle and store the DAGs.
    stock_home("dags", "reserialize")
    errors = stock_home.json("dags", "list-import-errors")
    assert errors == [], errors
    listed = {d["dag_id"] for d in stock_home.json("dags", "list")}
    assert listed >= EXAMPLE_DAGS, listed


def test_example_maintenance_dag_runs_green(stock_home: Airflow, tmp_path: Path):
    table = str(tmp_path / "events")
    seeded = seed_history(table, days=5, files_per_day=4, rows_per_file=40, reingested_days=(2,), orphans=1)
    before = _rows(table)
    settings = {
        "AIRFLOW_VAR_DELTALOG_TABLE_URI": table,
        "AIRFLOW_VAR_DELTALOG_MAINTENANCE_DEADLINE_MINUTES": "0",  # apache/airflow#73428 (`dags test` + deadline, 3.3)
        "AIRFLOW_CONN_DELTALOG_DEFAULT": json.dumps({"conn_type": "deltalog"}),
    }
    # 3.0's `dags test` needs the DAG's assets (the table, from the Variable) activated first.
    stock_home("dags", "reserialize", **settings)
    stock_home("dags", "test", "deltalog_maintenance", **settings)
    state, states = stock_home.run_states("deltalog_maintenance")
    ran = [
        "health_check",
        "choose_engine",
        "compact_local",
        "checkpoint",
        "vacuum",
        "log_cleanup",
        "manifest",
        "summary",
    ]
    assert states == {
        **dict.fromkeys(ran, "success"),
        **dict.fromkeys(["compact_spark", "purge_dvs", "no_rewrite"], "skipped"),
    }, states
    assert state == "success"
    assert _rows(table) == before, "maintenance changed the rows"
    from deltalog import DeltaTable

    snapshot = DeltaTable(table).snapshot()
    assert len(snapshot.file_paths()) < seeded.live_files  # the small files were compacted


def test_a_user_dag_with_a_deferrable_sensor_runs_green(stock_home: Airflow, tmp_path: Path):
    lake = tmp_path / "lake"
    table = make_table(str(lake / "events"))
    for i in range(40):  # many small files, one commit each
        append(table, rows(3, start=i * 3))
    after_version = table.version()
    (stock_home.home / "dags" / "user_delta_maintenance.py").write_text(
        USER_DAG.replace("AFTER_VERSION", str(after_version))
    )
    stock_home("dags", "reserialize")
    before = _rows(str(lake / "events"))

    ingested = threading.Event()

    def ingest_once_the_sensor_waits(line: str) -> None:
        # The upstream "ingest" lands only after the sensor deferred and its trigger runs, so the
        # sensor can only succeed through the trigger.
        if TRIGGER_RUNS in line and not ingested.is_set():
            append(table, rows(2, start=10_000))
            ingested.set()

    conn = json.dumps({"conn_type": "deltalog", "host": str(lake)})
    out = stock_home.dags_test_streaming(
        "user_delta_maintenance", ingest_once_the_sensor_waits, AIRFLOW_CONN_DELTALOG_DEFAULT=conn
    )
    assert ingested.is_set(), f"the sensor never deferred:\n{out[-3000:]}"
    state, states = stock_home.run_states("user_delta_maintenance")
    tasks = ["new_data", "due", "compact", "checkpoint", "vacuum", "log_cleanup", "healthy"]
    assert states == dict.fromkeys(tasks, "success"), states
    assert state == "success"
    after = _rows(str(lake / "events"))
    assert after == sorted(before + _rows_of(rows(2, start=10_000)), key=repr), "maintenance changed the rows"
    from deltalog import DeltaTable

    assert len(DeltaTable(str(lake / "events")).snapshot().file_paths()) == 1  # 41 small files compacted into one


def _rows_of(table: Any) -> list[tuple[Any, ...]]:
    return list(zip(*(table.column(n).to_pylist() for n in table.column_names), strict=True))
