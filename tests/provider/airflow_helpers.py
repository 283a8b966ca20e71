"""Helpers for the provider tests: DAG files in the session dags folder, runs, XComs, asset events.

The environment (AIRFLOW_HOME, dags folder) is set by ``conftest.py`` before this
module imports anything from Airflow.
"""

from __future__ import annotations

import importlib.util
import os
import textwrap
import uuid
from pathlib import Path
from typing import Any

DAGS_FOLDER = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])


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
    """``dag.test()`` on a DAG file in the dags folder; returns the DagRun (it never raises on failure)."""
    return load_dag(path, dag_id).test(**kwargs)


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
