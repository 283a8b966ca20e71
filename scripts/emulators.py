"""Install and locate the storage emulators the Azure and GCS tests start: Azurite and fake-gcs-server.

Both come from their package registries by name, never from a download URL, and are
cached outside the clone, keyed by version, so every clone on the machine shares one
build:

- Azurite (Azure Storage's emulator, the npm package ``azurite``): ``npm ci`` of the
  pinned tree in ``scripts/emulators/azurite/package-lock.json`` into
  ``~/.cache/deltalog/azurite-<version>``;
- fake-gcs-server (the Go module ``github.com/fsouza/fake-gcs-server``): ``go install
  <module>@<version>`` into ``~/.cache/deltalog/fake-gcs-server-<version>/bin``.

Run by ``scripts/bootstrap.sh`` (``python scripts/emulators.py``) and lazily by the test
fixtures (``tests/azure_server.py``, ``tests/gcs_server.py``) when the cache is empty.
Safe to re-run and to run from two clones at once (a file lock per emulator; a build
lands in its final place by one rename). Exit 0 when both are installed, 1 otherwise.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
AZURITE_DIR = HERE / "emulators" / "azurite"
#: The Go module and version of fake-gcs-server (its go.mod asks for Go 1.26).
FAKE_GCS_MODULE = "github.com/fsouza/fake-gcs-server"
FAKE_GCS_VERSION = "v1.56.1"
#: Where Go is when it is not on PATH (the machine image installs it there).
GO_FALLBACK = Path("/usr/local/go/bin/go")
MARKER = ".deltalog-installed"


class EmulatorUnavailable(RuntimeError):
    """An emulator is not installed and cannot be installed here (no npm, no Go, no registry)."""


def cache_root() -> Path:
    return Path(os.environ.get("DELTALOG_CACHE") or Path.home() / ".cache" / "deltalog")


def azurite_version() -> str:
    """The pinned Azurite version, as ``package.json`` names it."""
    return str(json.loads((AZURITE_DIR / "package.json").read_text())["dependencies"]["azurite"])


def _lock_digest() -> str:
    digest = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        digest.update((AZURITE_DIR / name).read_bytes())
    return digest.hexdigest()


def azurite_dir() -> Path:
    return cache_root() / f"azurite-{azurite_version()}"


def fake_gcs_binary() -> Path:
    return cache_root() / f"fake-gcs-server-{FAKE_GCS_VERSION}" / "bin" / "fake-gcs-server"


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1500)
    if proc.returncode != 0:
        raise EmulatorUnavailable(f"{' '.join(cmd[:3])} ... failed ({proc.returncode}): {proc.stderr[-2000:]}")


def azurite_installed() -> bool:
    marker = azurite_dir() / MARKER
    return marker.exists() and marker.read_text() == _lock_digest()


def ensure_azurite() -> list[str]:
    """The command that starts Azurite's Blob service (``node .../azurite-blob``), installing it first if needed."""
    target = azurite_dir()
    if not azurite_installed():
        with _locked("azurite"):
            if not azurite_installed():
                npm = shutil.which("npm")
                if npm is None:
                    raise EmulatorUnavailable("npm is not installed: Azurite (npm package azurite) needs Node.js")
                staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=cache_root()))
                try:
                    for name in ("package.json", "package-lock.json"):
                        shutil.copy(AZURITE_DIR / name, staging / name)
                    # The pinned tree, no install scripts (Azurite needs none), no audit or funding chatter.
                    _run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], cwd=staging)
                    (staging / MARKER).write_text(_lock_digest())
                    if target.exists():
                        shutil.rmtree(target)
                    staging.rename(target)
                finally:
                    shutil.rmtree(staging, ignore_errors=True)
    node = shutil.which("node")
    if node is None:
        raise EmulatorUnavailable("node is not installed: Azurite needs Node.js")
    return [node, str(target / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js")]


def _go() -> str:
    go = shutil.which("go") or (str(GO_FALLBACK) if GO_FALLBACK.exists() else None)
    if go is None:
        raise EmulatorUnavailable(f"go is not installed: fake-gcs-server ({FAKE_GCS_MODULE}) is built with go install")
    return go


def ensure_fake_gcs_server() -> str:
    """The fake-gcs-server binary, built with ``go install`` first if it is not cached."""
    binary = fake_gcs_binary()
    if binary.exists():
        return str(binary)
    with _locked("fake-gcs-server"):
        if not binary.exists():
            staging = Path(tempfile.mkdtemp(prefix="fake-gcs-server.", dir=cache_root()))
            try:
                env = dict(os.environ, GOBIN=str(staging), CGO_ENABLED="0")
                _run([_go(), "install", f"{FAKE_GCS_MODULE}@{FAKE_GCS_VERSION}"], env=env)
                binary.parent.mkdir(parents=True, exist_ok=True)
                (staging / "fake-gcs-server").rename(binary)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return str(binary)


def main(argv: list[str]) -> int:
    wanted = argv or ["azurite", "fake-gcs-server"]
    ok = True
    for name in wanted:
        try:
            if name == "azurite":
                cached, version, where = azurite_installed(), azurite_version(), azurite_dir()
                ensure_azurite()
            else:
                cached, version, where = fake_gcs_binary().exists(), FAKE_GCS_VERSION, fake_gcs_binary()
                ensure_fake_gcs_server()
            how = "cached" if cached else ("npm ci" if name == "azurite" else "go install") + ", done"
            print(f"[emulators] {name} {version}: {how} ({where})", file=sys.stderr)
        except (EmulatorUnavailable, OSError, subprocess.TimeoutExpired) as exc:
            print(f"[emulators] {name} unavailable: {exc}", file=sys.stderr)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
