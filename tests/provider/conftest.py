"""A real Airflow 3 for the provider tests: one temporary AIRFLOW_HOME per session.

Airflow reads its configuration when first imported, so the environment is set
here, at conftest import, before any test module imports ``airflow``. Only what
the default configuration derives from AIRFLOW_HOME is changed (the SQLite URL
follows AIRFLOW_HOME), so other suites' ``airflow`` subprocesses that set their
own AIRFLOW_HOME are not pointed at this session's database. The
metadata database (SQLite) is a copy of the one ``airflow db migrate`` made once for
the run (``tests/airflow_homes.py``); DAG files are written into the session's dags folder, because in
Airflow 3.1+ ``dag.test()`` only runs DAGs it finds by parsing the bundles.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_homes import prepare_home

#: A fixed home can be given (to inspect logs afterwards); otherwise a temporary one is made and removed.
_GIVEN_HOME = os.environ.get("DELTALOG_TEST_AIRFLOW_HOME")
AIRFLOW_HOME = Path(_GIVEN_HOME or tempfile.mkdtemp(prefix="deltalog-airflow-"))
if "airflow" in sys.modules and os.environ.get("AIRFLOW_HOME") != str(AIRFLOW_HOME):
    raise RuntimeError("airflow was imported before tests/provider/conftest.py could set AIRFLOW_HOME")
DAGS_FOLDER = AIRFLOW_HOME / "dags"
DAGS_FOLDER.mkdir(parents=True, exist_ok=True)
VENV_BIN = Path(sys.executable).parent
os.environ.update(
    {
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # A DAG file a test changes is stored as a new DAG version at once (tests/provider/airflow_helpers.py
        # run_dag), not after the 30 s Airflow waits by default between two stores of one DAG.
        "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "0",
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/provider/ runs a real Airflow: mark it so it can be deselected."""
    for item in items:
        if "tests/provider/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.airflow)


def _cleanup() -> None:
    if not _GIVEN_HOME:
        shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's home with a migrated metadata database (``airflow db migrate``'s, made once per run
    and copied: tests/airflow_homes.py); returns AIRFLOW_HOME."""
    if not (AIRFLOW_HOME / "airflow.db").exists():
        started = time.monotonic()
        prepare_home(tmp_path_factory, AIRFLOW_HOME, VENV_BIN / "airflow")
        print(f"airflow metadata database ready: {time.monotonic() - started:.1f}s")
    yield AIRFLOW_HOME
    _cleanup()
