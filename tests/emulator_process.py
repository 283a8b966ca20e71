"""What the Azure and GCS emulator fixtures share: the installer, a free port, a server process
that is started, waited for and stopped, and request counts read from its access log.

The emulators are separate processes (Node.js for Azurite, Go for fake-gcs-server), so the
test process's CPU figures hold only the client's work, as against real cloud storage.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def installer() -> Any:
    """scripts/emulators.py as a module (it installs and locates the emulators)."""
    spec = importlib.util.spec_from_file_location("deltalog_emulators", ROOT / "scripts" / "emulators.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("deltalog_emulators", module)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: An access-log line: method, path and query, status (Azurite's morgan and fake-gcs-server's Apache format).
_LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<target>\S+) HTTP/[\d.]+\\?" (?P<status>\d{3})')


class LogCounter:
    """Requests an emulator answered, by kind, read from its access log (``snapshot()`` / ``since(before)``).

    ``classify(method, path, query)`` names a request's kind (GET, HEAD, LIST, PUT, DELETE, ...),
    as the S3 test server's counter does, so the stores are compared on the same terms.
    """

    def __init__(self, log_path: Path, classify: Callable[[str, str, str], str]) -> None:
        self.log_path = log_path
        self.classify = classify

    def snapshot(self) -> dict[str, int]:
        """The counts once the log has stopped growing for 0.1 s (the emulator logs after it answers)."""
        deadline = time.monotonic() + 5
        last = self._read()
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = self._read()
            if now == last:
                return now
            last = now
        return last

    def _read(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = _LINE.search(line)
                if m is None:
                    continue
                path, _, query = m["target"].partition("?")
                kind = self.classify(m["method"], path, query)
                if kind:
                    counts[kind] = counts.get(kind, 0) + 1
        return counts

    def since(self, before: dict[str, int]) -> dict[str, int]:
        now = self.snapshot()
        return {k: now[k] - before.get(k, 0) for k in sorted(now) if now[k] - before.get(k, 0)}


class EmulatorProcess:
    """One emulator process on 127.0.0.1: ``endpoint``, ``counter``; ``stop()`` ends it."""

    def __init__(
        self,
        name: str,
        command: Callable[[int, Path], list[str]],
        ready_path: str,
        classify: Callable[[str, str, str], str],
        ready_status: tuple[int, ...] = (200,),
    ) -> None:
        self.name = name
        self.workdir = Path(tempfile.mkdtemp(prefix=f"deltalog-{name}-"))
        self.log_path = self.workdir / "access.log"
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            command(self.port, self.workdir),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
        )
        self.counter = LogCounter(self.log_path, classify)
        self._wait_ready(ready_path, ready_status)

    def _wait_ready(self, path: str, statuses: tuple[int, ...]) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.endpoint + path, timeout=2) as resp:
                    if resp.status in statuses:
                        return
            except urllib.error.HTTPError as exc:
                if exc.code in statuses:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer within 60 s: {self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def installed(what: str) -> Any:
    """Install the emulator ``what`` (a no-op once cached) and return what starts it.

    A failure fails the test with the installer's reason, never skips it: CI installs both
    emulators, so a missing one is a broken set-up to fix.
    """
    inst = installer()
    try:
        return inst.ensure_azurite() if what == "azurite" else inst.ensure_fake_gcs_server()
    except inst.EmulatorUnavailable as exc:
        pytest.fail(f"{what} is not installed and could not be installed: {exc}")


def session_server(start: Callable[[], EmulatorProcess], doc: str) -> Any:
    """A session-scoped fixture that starts an emulator with ``start()`` and stops it at the end."""

    def fixture() -> Iterator[EmulatorProcess]:
        server = start()
        try:
            yield server
        finally:
            server.stop()

    fixture.__doc__ = doc
    return pytest.fixture(scope="session")(fixture)


def store_fixtures(
    prefix: str,
    scheme: str,
    create: Callable[[str], str],
    options_for: Callable[[str], dict[str, Any]],
    deltalake_options_for: Callable[[str], dict[str, str]],
) -> tuple[Any, ...]:
    """The per-test fixtures of an emulated store, named ``<prefix>_server`` (session: the endpoint),
    ``<prefix>_<bucket>`` (a fresh one), ``_storage_options``, ``_deltalake_options`` and ``_table_uri``
    (``<scheme>://<fresh bucket>/table``); ``<prefix>_emulator`` must be the session's EmulatorProcess.

    Bind them to module attributes of the fixture plugin (pytest finds them by their ``name``).
    """
    bucket_name = {"azure": "container", "gcs": "bucket"}.get(prefix, "bucket")

    def server(request: pytest.FixtureRequest) -> str:
        return request.getfixturevalue(f"{prefix}_emulator").endpoint

    def bucket(request: pytest.FixtureRequest) -> str:
        return create(request.getfixturevalue(f"{prefix}_server"))

    def storage_options(request: pytest.FixtureRequest) -> dict[str, Any]:
        return options_for(request.getfixturevalue(f"{prefix}_server"))

    def deltalake_options(request: pytest.FixtureRequest) -> dict[str, str]:
        return deltalake_options_for(request.getfixturevalue(f"{prefix}_server"))

    def table_uri(request: pytest.FixtureRequest) -> str:
        return f"{scheme}://{request.getfixturevalue(f'{prefix}_{bucket_name}')}/table"

    return (
        pytest.fixture(scope="session", name=f"{prefix}_server")(server),
        pytest.fixture(name=f"{prefix}_{bucket_name}")(bucket),
        pytest.fixture(name=f"{prefix}_storage_options")(storage_options),
        pytest.fixture(name=f"{prefix}_deltalake_options")(deltalake_options),
        pytest.fixture(name=f"{prefix}_table_uri")(table_uri),
    )
