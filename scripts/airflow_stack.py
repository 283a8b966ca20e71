"""The docker-compose stack without Docker: Postgres, a Spark standalone cluster, Airflow 3.

Used by ``tests/test_system.py`` (and usable from a Python shell) to run the example
DAGs the way production does: Postgres as the metadata database (Debian's
``postgresql`` package, installed by ``scripts/bootstrap.sh``; started here with its own
data directory, as the ``postgres`` user when running as root, since Postgres refuses
root), a Spark master and worker started with pyspark's ``spark-class``, and the four
Airflow components (api-server, scheduler with LocalExecutor, dag-processor,
triggerer). The Airflow settings come from ``docker/airflow.env``, the file
docker-compose.yml gives every Airflow container, plus the host names and ports that
differ between the two.

Every process is started in its own session and stopped by its process group, so task
processes and the Spark drivers they started go with it; nothing else is touched.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("airflow_stack")

REPO = Path(__file__).resolve().parent.parent
SHARED_ENV = REPO / "docker" / "airflow.env"
AIRFLOW_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


class StackError(RuntimeError):
    """A component did not start or answer in time (the message names it and its log)."""


def read_env_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """``KEY=VALUE`` lines as docker compose's ``env_file`` reads them (comments and blanks skipped)."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise ValueError(f"{path}:{number}: not a KEY=VALUE line: {line!r}")
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, check: Any, timeout: float, log_path: str | None = None, interval: float = 0.5) -> Any:
    """Poll ``check()`` until it returns a truthy value; StackError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except StackError:
            raise
        except Exception as exc:  # noqa: BLE001 - not up yet; keep the last reason for the message
            last = exc
        time.sleep(interval)
    tail = ""
    if log_path and os.path.exists(log_path):
        with open(log_path, encoding="utf-8", errors="replace") as f:
            tail = "".join(f.readlines()[-30:])
    raise StackError(f"{what} not ready after {timeout:.0f} s (last error: {last}); log {log_path}:\n{tail}")


@dataclass
class Process:
    """A started component: its Popen (leader of its own process group) and its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: str

    def cpu_seconds(self) -> float:
        """CPU seconds of the process group so far: each live member's own and its waited-for children's
        (a LocalExecutor's task processes, a dag-processor's parsers); what the suite's cost tables split."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.popen.pid:  # the process group (field 5 of stat)
                total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
        return total / tick

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM the process group, SIGKILL what is left after ``timeout`` seconds."""
        if self.popen.poll() is not None:
            return
        log.info("stopping %s after %.0f CPU s", self.name, self.cpu_seconds())
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)  # children that outlived their leader too
        except ProcessLookupError:
            pass
        self.popen.wait(timeout=10)


def start_process(name: str, cmd: list[str], env: dict[str, str], log_dir: str, **kwargs: Any) -> Process:
    log_path = os.path.join(log_dir, f"{name}.log")
    out = open(log_path, "ab")  # noqa: SIM115 - the child keeps it; closed with the process
    # cwd: Spark drivers started by tasks leave a spark-warehouse folder in theirs.
    kwargs.setdefault("cwd", log_dir)
    popen = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **kwargs)
    out.close()
    log.info("started %s (pid %d), log %s", name, popen.pid, log_path)
    return Process(name, popen, log_path)


# --- Postgres ---------------------------------------------------------------------------


def postgres_bindir() -> str:
    """Where Debian's ``postgresql`` package put initdb/pg_ctl (newest major), or PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if found:
        return os.path.dirname(found[-1])
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        return os.path.dirname(os.path.realpath(pg_ctl))
    raise StackError("Postgres is not installed: run scripts/bootstrap.sh (installs the Debian package postgresql)")


@dataclass
class Postgres:
    """A throw-away Postgres cluster in ``base/pgdata`` on a free port, user ``airflow`` (trust auth)."""

    base: str
    port: int = field(default_factory=free_port)
    user: str = "airflow"
    database: str = "airflow"

    @property
    def data_dir(self) -> str:
        return os.path.join(self.base, "pgdata")

    @property
    def log_path(self) -> str:
        return os.path.join(self.base, "postgres.log")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def _run(self, args: list[str]) -> None:
        """Run a Postgres server binary as a non-root user (``postgres`` when we are root)."""
        kwargs: dict[str, Any] = {}
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")

            def demote() -> None:
                os.setgid(account.pw_gid)
                os.setuid(account.pw_uid)

            kwargs["preexec_fn"] = demote
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120, **kwargs)
        if proc.returncode != 0:
            raise StackError(f"{' '.join(args[:2])} failed: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")

    def start(self) -> str:
        bindir = postgres_bindir()
        os.makedirs(self.base, exist_ok=True)
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chmod(self.base, 0o700)
            os.chown(self.base, account.pw_uid, account.pw_gid)
        self._run([f"{bindir}/initdb", "-D", self.data_dir, "-U", self.user, "-A", "trust", "-E", "UTF8", "--no-sync"])
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.data_dir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=32MB "
            "-c max_connections=100"
        )
        self._run(
            [f"{bindir}/pg_ctl", "-D", self.data_dir, "-l", self.log_path, "-w", "-t", "60", "-o", options, "start"]
        )
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{self.database}"')
        conn.close()
        log.info("postgres on 127.0.0.1:%d (data %s)", self.port, self.data_dir)
        return self.url

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, dbname=self.database)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return list(cur.fetchall())
        finally:
            conn.close()

    def stop(self) -> None:
        if os.path.exists(os.path.join(self.data_dir, "postmaster.pid")):
            self._run([f"{postgres_bindir()}/pg_ctl", "-D", self.data_dir, "-m", "fast", "-w", "stop"])


# --- Spark standalone -------------------------------------------------------------------


@dataclass
class SparkStandalone:
    """A master and one worker from pyspark's own ``spark-class`` (the compose file's Spark services)."""

    base: str
    env: dict[str, str]
    cores: int = 2
    memory: str = "1g"
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    processes: list[Process] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self) -> str:
        """Launch master and worker and wait until the worker has registered."""
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Start master and worker without waiting (do other set-up meanwhile, then ``wait_ready``)."""
        import pyspark

        # pip's pyspark is a Spark distribution: bin/spark-class and jars/ under the package.
        spark_home = os.path.dirname(os.path.abspath(pyspark.__file__))
        self.env = {**self.env, "SPARK_HOME": spark_home}
        spark_class = os.path.join(spark_home, "bin", "spark-class")
        master = start_process(
            "spark-master",
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
            + ["--port", str(self.port), "--webui-port", str(self.ui_port)],
            self.env,
            self.base,
        )
        self.processes.append(master)
        work_dir = os.path.join(self.base, "spark-work")
        os.makedirs(work_dir, exist_ok=True)
        worker = start_process(
            "spark-worker",
            [spark_class, "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1"]
            + ["--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(free_port())]
            + ["--work-dir", work_dir],
            self.env,
            self.base,
        )
        self.processes.append(worker)

    def wait_ready(self, timeout: float = 120) -> str:
        master, worker = self.processes[:2]
        status = f"http://127.0.0.1:{self.ui_port}/json/"

        def registered() -> bool:
            for proc in (master, worker):
                if proc.popen.poll() is not None:
                    raise StackError(f"{proc.name} exited with {proc.popen.returncode}; log {proc.log_path}")
            return json.loads(urllib.request.urlopen(status, timeout=5).read()).get("aliveworkers", 0) >= 1

        wait_for("Spark worker registration", registered, timeout, worker.log_path)
        log.info("spark master %s with one worker (%d cores, %s)", self.master_url, self.cores, self.memory)
        return self.master_url

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()


# --- Airflow ----------------------------------------------------------------------------


@dataclass
class AirflowStack:
    """The four Airflow 3 components on one AIRFLOW_HOME, plus a small REST client."""

    home: str
    env: dict[str, str]
    api_port: int
    processes: list[Process] = field(default_factory=list)
    _token: str | None = None

    @classmethod
    def environment(cls, home: str, sql_alchemy_conn: str, api_port: int, extra: dict[str, str]) -> dict[str, str]:
        """os.environ + docker/airflow.env + what is host-specific here (database, URLs, secrets) + ``extra``."""
        env = dict(os.environ)
        env.update(read_env_file(SHARED_ENV))
        venv_bin = os.path.dirname(sys.executable)
        env.update(
            {
                "AIRFLOW_HOME": home,
                "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql_alchemy_conn,
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
                "AIRFLOW__API_AUTH__JWT_SECRET": "deltalog-system-test-jwt-secret",
                "AIRFLOW__API__SECRET_KEY": "deltalog-system-test-api-secret",
                "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
                "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
                "PYTHONWARNINGS": "ignore",
            }
        )
        env.update(extra)
        return env

    def airflow(self, *args: str, timeout: float = 300) -> str:
        airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
        proc = subprocess.run([airflow, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise StackError(f"airflow {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        return proc.stdout

    def start(self) -> None:
        airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
        for component in AIRFLOW_COMPONENTS:
            args = [airflow, component] + (["--port", str(self.api_port)] if component == "api-server" else [])
            self.processes.append(start_process(f"airflow-{component}", args, self.env, self.home))
        api_log = self.processes[0].log_path

        def api_up() -> Any:
            for proc in self.processes:
                if proc.popen.poll() is not None:
                    raise StackError(f"{proc.name} exited with {proc.popen.returncode}; log {proc.log_path}")
            return self._get_json("/api/v2/version", auth=False)

        wait_for("Airflow api-server", api_up, 180, api_log, 1)
        log.info("airflow components up, REST API on port %d", self.api_port)

    def stop(self) -> None:
        # Scheduler first, so LocalExecutor workers do not start anything new while the rest stops.
        for proc in sorted(self.processes, key=lambda p: p.name != "airflow-scheduler"):
            proc.stop()

    def restart(self, component: str) -> None:
        """Stop one component (SIGTERM to its process group, as a deployment's rolling restart does) and start it
        again on the same home and settings; its log goes on in the same file."""
        name = f"airflow-{component}"
        (old,) = [p for p in self.processes if p.name == name]
        old.stop()
        airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
        args = [airflow, component] + (["--port", str(self.api_port)] if component == "api-server" else [])
        self.processes[self.processes.index(old)] = start_process(name, args, self.env, self.home)

    def logs(self, name: str) -> str:
        path = os.path.join(self.home, f"airflow-{name}.log")
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()

    # --- REST API (Airflow 3, SimpleAuthManager with every user admin) -------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def token(self) -> str:
        if self._token is None:
            body = json.loads(urllib.request.urlopen(self.base_url + "/auth/token", timeout=30).read())
            self._token = body["access_token"]
        return self._token

    def request(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise StackError(f"{method} {path}: HTTP {exc.code}: {exc.read()[:1000]!r}") from None
        return json.loads(raw) if raw else None

    def _get_json(self, path: str, auth: bool = True) -> Any:
        return self.request("GET", path, auth=auth)

    def unpause(self, dag_id: str) -> None:
        self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str, logical_date: str | None = None) -> str:
        """POST a DAG run (``logical_date`` None: Airflow 3's default trigger); returns its run id."""
        run = self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": logical_date})
        log.info("triggered %s: %s (logical date %s)", dag_id, run["dag_run_id"], logical_date)
        return run["dag_run_id"]

    def clear_tasks(self, dag_id: str, run_id: str, task_ids: list[str]) -> None:
        """Clear tasks of a run (the UI's Clear): they run again in the same run."""
        body = {
            "dry_run": False,
            "dag_run_id": run_id,
            "task_ids": task_ids,
            "only_failed": False,
            "reset_dag_runs": True,
        }
        self.request("POST", f"/api/v2/dags/{dag_id}/clearTaskInstances", body)

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self._get_json(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.request.quote(run_id, safe='')}")

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return self._get_json(f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.request.quote(run_id, safe='')}/taskInstances?limit=100"
        return {ti["task_id"]: ti["state"] for ti in self._get_json(path)["task_instances"]}

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return self._get_json(
            f"/api/v2/dags/{dag_id}/dagRuns/{urllib.request.quote(run_id, safe='')}/taskInstances/{task_id}"
        )

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> dict[str, Any]:
        """Poll the run until it is success or failed (StackError with the task states otherwise)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.run(dag_id, run_id)
            if run["state"] in ("success", "failed"):
                return run
            time.sleep(2)
        raise StackError(
            f"{dag_id} {run_id} still {run['state']} after {timeout:.0f} s: {self.task_states(dag_id, run_id)}"
        )
