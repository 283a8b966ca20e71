"""Airflow homes for tests: the metadata database ``airflow db migrate`` makes, made once per run and copied.

``airflow db migrate`` costs about 7 CPU seconds whether there is anything to migrate or not
(it imports every model and checks the whole schema), and a run of the suite needs a SQLite
home in many places: the provider tests' session, the API servers of the browser and metrics
tests, the example and fleet DAG runs. The database it writes holds no path of its home (its
rows: the migration's log line, the log templates, the default pool, the schema revision), so
one migrated database, copied into each home before its first ``airflow`` command, is what each
home's own ``db migrate`` would have written. :func:`migrated_db` migrates once per run and
``airflow`` command (the lock's venv, or a release venv's), whichever worker comes first
(``run_once``); :func:`prepare_home` copies it. The release matrix's stock homes still run
``airflow db migrate`` themselves: that is the user's step they check.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from run_once import once_per_run

__all__ = ["migrated_db", "prepare_home"]

#: The ``airflow`` command of this interpreter's venv.
AIRFLOW = Path(sys.executable).parent / "airflow"


def migrated_db(tmp_path_factory: pytest.TempPathFactory, airflow: Path = AIRFLOW) -> Path:
    """The SQLite database ``<airflow> db migrate`` writes into an empty home, made once per run."""

    def migrate(directory: Path) -> str:
        home = directory / "home"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.update(
            AIRFLOW_HOME=str(home),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            PATH=f"{airflow.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        proc = subprocess.run(
            [str(airflow), "db", "migrate"], env=env, capture_output=True, text=True, timeout=600, cwd=home
        )
        assert proc.returncode == 0, f"airflow db migrate failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        return str(home / "airflow.db")

    key = hashlib.sha256(str(airflow.resolve()).encode()).hexdigest()[:12]
    return Path(once_per_run(tmp_path_factory, f"airflow-db-{key}", migrate))


def prepare_home(tmp_path_factory: pytest.TempPathFactory, home: str | Path, airflow: Path = AIRFLOW) -> Path:
    """``home`` with a migrated SQLite database (``home/airflow.db``, where the default configuration puts
    it), as ``airflow db migrate`` leaves it; returns ``home``."""
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(migrated_db(tmp_path_factory, airflow), home / "airflow.db")
    return home
