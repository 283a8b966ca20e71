"""Helpers for the provider tests: DAG files in the session dags folder, runs, XComs, asset events.

The environment (AIRFLOW_HOME, dags folder) is set by ``conftest.py`` before this
module imports anything from Airflow. These tests run on every Airflow release of
``airflow-releases.toml``: DAGs are written with ``airflow.sdk`` and our version-compat
seam, runs go through ``DAG.test()`` and the ``airflow`` CLI; only the read-back of a
finished run's XComs and asset events uses the metadata database's models (Airflow 3
has no other Python read path outside a task or the REST server), all of it here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DAGS_FOLDER = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
AIRFLOW_HOME = Path(os.environ["AIRFLOW_HOME"])


def write_dag_file(name: str, source: str) -> Path:
    """Write a DAG file into the session dags folder (dedented)."""
    path = DAGS_FOLDER / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


def load_dag(path: Path, dag_id: str) -> Any:
    """Import a DAG file as a fresh module and return its DAG object."""
    spec = importlib.util.spec_from_file_location(f"deltalog_test_dag_{uuid.uuid4().hex}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for value in vars(module).values():
        if getattr(value, "dag_id", None) == dag_id and hasattr(value, "test"):
            return value
    raise AssertionError(f"no DAG {dag_id!r} in {path}")


def run_dag(path: Path, dag_id: str, **kwargs: Any) -> Any:
    """``dag.test()`` on a DAG file in the dags folder; returns the DagRun (it never raises on failure).

    On Airflow 3.0 the file is serialized first (``airflow dags reserialize``, what the DAG
    processor does): 3.0's ``dag.test()`` refuses outlets on assets the processor has not
    activated yet, and every deltalog operator has its table as an outlet.
    """
    from deltalog_provider.version_compat import AIRFLOW_V_3_1_PLUS

    if not AIRFLOW_V_3_1_PLUS:
        airflow_cli("dags", "reserialize")
    else:
        store_dag_version(path)
    dag = load_dag(path, dag_id)
    with one_execution_api_per_run():
        return dag.test(**kwargs)


@contextlib.contextmanager
def one_execution_api_per_run() -> Iterator[None]:
    """Inside: every task of a ``dag.test()`` run talks to one in-process execution API, as a deployment's
    tasks talk to one API server.

    ``dag.test()`` builds a new in-process execution API app for each task (every release 3.0-3.3:
    ``supervisor.in_process_api_server``), and building it (Cadwyn's versioned routers) took 34 of the 50 CPU s
    of a six-task run on 3.2.2. The app is the same each time; each task still gets its own client and, as
    before, its own ``DBDagBag`` (``_api_client`` sets that override per task). A new run gets a new app.
    """
    from airflow.sdk.execution_time import supervisor

    build = supervisor.in_process_api_server
    shared: list[Any] = []

    def the_runs_api() -> Any:
        if not shared:
            shared.append(build())
        return shared[0]

    supervisor.in_process_api_server = the_runs_api
    try:
        yield
    finally:
        supervisor.in_process_api_server = build


def store_dag_version(path: Path) -> None:
    """Parse a DAG file and store a new version of its DAGs where they changed, as the DAG processor does.

    From 3.1, ``dag.test()`` stores a version only for a DAG that has none. Two tests of one DAG id whose
    shape differs (the fleet DAG has an ``objectives_alert`` task only when a history is set) would run
    the second against the first's version: the execution API then does not know the new task and
    answers 500 when it starts (seen on 3.1.8). A deployment's DAG processor stores the new version (the
    session's ``min_serialized_dag_update_interval`` is 0: conftest.py).
    """
    from airflow.dag_processing.bundles.manager import DagBundlesManager

    try:
        from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db  # 3.2+
    except ImportError:  # 3.1
        from airflow.models.dagbag import BundleDagBag, sync_bag_to_db  # type: ignore[no-redef,attr-defined]

    DagBundlesManager().sync_bundles_to_db()
    bag = BundleDagBag(dag_folder=str(path), bundle_path=DAGS_FOLDER)
    assert not bag.import_errors, bag.import_errors
    sync_bag_to_db(bag, "dags-folder", None)


def airflow_cli(*args: str, timeout: float = 300) -> str:
    """``airflow <args>`` in this session's AIRFLOW_HOME; its stdout (fails the test on a non-zero exit)."""
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "airflow"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"airflow {' '.join(args)}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def airflow_cli_json(*args: str) -> Any:
    """``airflow <args> -o json``, parsed (some releases log lines around the JSON document)."""
    from airflow_matrix import json_from

    return json_from(airflow_cli(*args, "-o", "json"))


def run_output(dag_run: Any, capfd: Any, caplog: Any) -> str:
    """Everything a run's tasks printed or logged: captured output, log records and the task log files.

    Where it lands differs by release (stdout on 3.1+, the logging tree or log files on 3.0).
    """
    captured = capfd.readouterr()
    files = [
        p.read_text(errors="replace")
        for p in (AIRFLOW_HOME / "logs").rglob("*.log")
        if f"dag_id={dag_run.dag_id}" in str(p) and f"run_id={dag_run.run_id}" in str(p)
    ]
    return "\n".join([captured.out, captured.err, caplog.text, *files])


def task_states(dag_run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}


def task_instance(dag_run: Any, task_id: str) -> Any:
    return next(ti for ti in dag_run.get_task_instances() if ti.task_id == task_id)


def xcom_value(dag_run: Any, task_id: str, key: str = "return_value") -> Any:
    """The deserialised XCom a task of ``dag_run`` pushed."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalar(
            select(XComModel).where(
                XComModel.dag_id == dag_run.dag_id,
                XComModel.run_id == dag_run.run_id,
                XComModel.task_id == task_id,
                XComModel.key == key,
            )
        )
        assert row is not None, f"no XCom {key!r} from {task_id}"
        return XComModel.deserialize_value(row)


def asset_events(dag_run: Any, uri: str) -> list[dict[str, Any]]:
    """Asset events on ``uri`` emitted by ``dag_run`` (each: task_id, extra)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetEvent.source_task_id, AssetEvent.extra)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetModel.uri == uri, AssetEvent.source_run_id == dag_run.run_id)
            .order_by(AssetEvent.id)
        ).all()
    return [{"task_id": task_id, "extra": extra} for task_id, extra in rows]


def forget_asset_events(uri: str) -> int:
    """Delete every asset event on ``uri`` from this worker's metadata database; returns how many.

    A test's events outlive it in the worker's database: the fleet DAG reads every event on its
    table-list asset since its last successful run, so a malformed list one test left behind would
    fail the next test's run in the same worker (whichever order xdist hands them out in).
    """
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import delete, select

    with create_session() as session:
        # Ids first, then a plain IN list: the SQLAlchemy of Airflow 3.0 cannot evaluate a
        # subquery in the session's default synchronisation, and nothing here needs it.
        ids = list(session.scalars(select(AssetModel.id).where(AssetModel.uri == uri)))
        if not ids:
            return 0
        result = session.execute(
            delete(AssetEvent).where(AssetEvent.asset_id.in_(ids)),
            execution_options={"synchronize_session": False},
        )
        return int(getattr(result, "rowcount", 0) or 0)
