"""Set-up a test run does once however many parallel workers it has (pytest-xdist).

A session fixture runs once per worker: right for a server or a JVM each worker talks to
(cheap to start, and sharing one across processes would couple the workers), wrong for work
whose result is files every worker can read: building our wheel, preparing a venv, migrating
an Airflow metadata database. :func:`once_per_run` does such work once, under a lock in the
directory all workers of one run share (the parent of each worker's ``basetemp``), and hands
every caller the same JSON-able result; a second worker waits for the first instead of
repeating it. Without workers it is a plain call.

A failure is not remembered: the next caller tries again (and fails the same way, with its own
traceback in its own test).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["once_per_run", "run_dir"]


def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory every worker of this run shares (the run's ``basetemp`` itself without workers)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Any]) -> Any:
    """``make(directory)`` once in this run (``directory`` is new and empty); its result for every caller.

    The result must be JSON-able (paths as strings): it is kept beside ``directory`` for the
    other workers.
    """
    root = run_dir(tmp_path_factory)
    directory, result = root / f"once-{name}", root / f"once-{name}.json"
    with open(root / f".once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if result.exists():
            return json.loads(result.read_text())
        directory.mkdir(parents=True, exist_ok=True)
        value = make(directory)
        staging = result.with_name(f".{result.name}.{os.getpid()}")
        staging.write_text(json.dumps(value))
        os.replace(staging, result)
        return value
