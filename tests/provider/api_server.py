"""A real ``airflow api-server`` in a temporary AIRFLOW_HOME, for tests that need one.

The fleet view's browser test reads pages from it; the metrics test's tasks run through its
execution API (``airflow dags test --use-executor``: LocalExecutor, each task in a supervised
process, as in a deployment). The home gets its own SQLite database (a copy of the run's migrated one,
``tests/airflow_homes.py``, or ``airflow db migrate``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

VENV_BIN = Path(sys.executable).parent


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port nothing listens on now (TCP by default, ``socket.SOCK_DGRAM`` for UDP)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def airflow_env(home: Path, port: int, **settings: str) -> dict[str, str]:
    """The environment of every ``airflow`` command of the home: its own SQLite, DAGs folder, base URL."""
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **settings,
    }
    env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)  # SQLite under this AIRFLOW_HOME
    return env


def signed_in_env(home: Path, port: int, users: dict[str, str], **settings: str) -> dict[str, str]:
    """:func:`airflow_env` with the simple auth manager: ``users`` (name -> role, "" for none), each with the
    password ``<name>-password`` (written to the home's passwords file), no one an admin by default."""
    import json

    home.mkdir(parents=True, exist_ok=True)
    (home / "passwords.json").write_text(json.dumps({u: f"{u}-password" for u in users}))
    return airflow_env(
        home,
        port,
        AIRFLOW__CORE__AUTH_MANAGER="airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=",".join(f"{u}:{r}" for u, r in users.items()),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(home / "passwords.json"),
        AIRFLOW__API_AUTH__JWT_SECRET="deltalog-test-api-server-jwt-secret-0123456789",
        AIRFLOW__API__SECRET_KEY="deltalog-test-api-server-secret",
        **settings,
    )


def bearer_token(base: str, user: str) -> str:
    """A JWT for ``user`` (password ``<user>-password``) from the API server's ``/auth/token``."""
    import json

    body = json.dumps({"username": user, "password": f"{user}-password"}).encode()
    req = urllib.request.Request(
        base + "/auth/token", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())["access_token"]


def server_pid(port: int) -> int:
    """The pid of the ``airflow api-server`` listening on ``port`` (the top of its process tree)."""
    import psutil

    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            process = psutil.Process(conn.pid)
            while process.parent() is not None and "api-server" in " ".join(process.parent().cmdline()):
                process = process.parent()
            return process.pid
    raise RuntimeError(f"no process listens on port {port}")


def tree_rss_mb(pid: int) -> float:
    """The resident memory of a process and all its children, in MiB."""
    import psutil

    total = 0
    process = psutil.Process(pid)
    for p in [process, *process.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total / (1 << 20)


@contextmanager
def api_server(home: Path, env: dict[str, str], port: int) -> Iterator[str]:
    """Migrate the home's database (unless it has one: ``airflow_homes.prepare_home``), start ``airflow
    api-server`` on ``port``, yield its base URL, stop it."""
    (home / "dags").mkdir(parents=True, exist_ok=True)
    if not (home / "airflow.db").exists():
        migrate = subprocess.run(
            [str(VENV_BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
        )
        assert migrate.returncode == 0, migrate.stderr[-3000:]
    log_path = home / "api-server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(VENV_BIN / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(home),
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"airflow api-server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(base + "/api/v2/version", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"airflow api-server did not answer in 180 s:\n{log_path.read_text()[-3000:]}")
                time.sleep(1)
        yield base
    finally:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
