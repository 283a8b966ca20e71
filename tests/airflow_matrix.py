"""The Airflow release matrix of ``airflow-releases.toml``: our dists and one venv per release.

``build_dists`` builds the sdist and, from it, the wheel (``python -m build``), so a file
missing from the sdist breaks the wheel the matrix installs. ``ensure_venv`` makes the
venv of a release the way the README tells a user to add us to an existing Airflow:
first that Airflow (``apache-airflow==<release>`` with the release's pins, the part of its
constraints file a free resolution gets wrong, and in one venv our oldest pyarrow and
numpy), then our wheel with its ``airflow``, ``amazon``, ``azure`` and ``gcs`` extras next to
``apache-airflow==<release>``, pip keeping what is installed unless we need it newer;
``pip check``; then the test tools at the lock's versions, constrained to leave every
package of the user's set as it is. The installer is uv (the one ``scripts/bootstrap.sh`` pins
into the session's venv; pip when there is none): the same requests, resolved the same way
(what is installed stays unless a requirement needs it changed), in a fraction of pip's time;
the venv is seeded with pip, which ``pip check`` runs. A venv is cached under ``~/.cache/deltalog/airflow-venvs``
(``DELTALOG_CACHE`` moves it), keyed by the release's entry, the interpreter's version,
the wheel's dependency metadata and the test tools; our own code is not in the key: each
run reinstalls the fresh wheel (``--no-deps``) into the cached venv, which is what keeps
a warm run cheap.
"""

from __future__ import annotations

import contextlib
import email
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MATRIX_FILE = REPO / "airflow-releases.toml"
LOCK_FILE = REPO / "requirements.lock"
CACHE = Path(os.environ.get("DELTALOG_CACHE") or Path.home() / ".cache" / "deltalog") / "airflow-venvs"
DIST_NAME = "airflow-provider-deltalog"
#: Extras a user installs with Airflow: ours, as the README says.
EXTRAS = "airflow,amazon,azure,gcs"
#: What the provider tests need besides the user's set, at the lock's versions.
TEST_TOOLS = ("pytest", "pytest-timeout", "hypothesis", "moto[server]", "deltalake", "aiosmtpd")
#: Bump when the way a venv is made changes: every cached venv is then rebuilt.
RECIPE = 2


@dataclass(frozen=True)
class Pin:
    requirement: str
    reason: str


@dataclass(frozen=True)
class Release:
    airflow: str
    python: str
    oldest: tuple[str, ...] = ()
    pins: tuple[Pin, ...] = ()

    @property
    def id(self) -> str:
        return f"airflow-{self.airflow}-py{self.python}"

    @property
    def minor(self) -> str:
        return ".".join(self.airflow.split(".")[:2])


@dataclass(frozen=True)
class Matrix:
    lock_airflow: str
    lock_python: str
    releases: tuple[Release, ...]

    @property
    def pythons(self) -> set[str]:
        return {self.lock_python} | {r.python for r in self.releases}

    @property
    def airflows(self) -> list[str]:
        return sorted({self.lock_airflow} | {r.airflow for r in self.releases}, key=version_tuple)


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def load_matrix(path: Path = MATRIX_FILE) -> Matrix:
    data = tomllib.loads(path.read_text())
    releases = tuple(
        Release(
            airflow=r["airflow"],
            python=r["python"],
            oldest=tuple(r.get("oldest", ())),
            pins=tuple(Pin(p["requirement"], " ".join(p["reason"].split())) for p in r.get("pin", ())),
        )
        for r in data["release"]
    )
    return Matrix(data["lock"]["airflow"], data["lock"]["python"], releases)


def lock_pins(names: tuple[str, ...] = TEST_TOOLS) -> list[str]:
    """``name==version`` from requirements.lock for each name (extras kept, e.g. ``moto[server]``)."""
    locked: dict[str, str] = {}
    for line in LOCK_FILE.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, _, version = line.strip().partition("==")
            locked[_canonical(name)] = version
    out = []
    for name in names:
        bare = name.split("[")[0]
        if _canonical(bare) not in locked:
            raise RuntimeError(f"{bare} is not in requirements.lock")
        out.append(f"{name}=={locked[_canonical(bare)]}")
    return out


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_name(requirement: str) -> str:
    """The canonical distribution name a requirement string names (``moto[server]>=5`` -> ``moto``)."""
    return _canonical(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0))  # type: ignore[union-attr]


def find_python(minor: str) -> str:
    """An interpreter of Python ``minor`` (``3.12``): the newest pyenv build of it, else one on PATH.

    Each candidate is run once: a pyenv shim on PATH exists for every installed version but
    fails for one that is not selected.
    """
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    builds = sorted(glob.glob(os.path.join(root, "versions", f"{minor}.*", "bin", f"python{minor}")), key=version_tuple)
    on_path = shutil.which(f"python{minor}")
    for candidate in [*reversed(builds), *([on_path] if on_path else [])]:
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if probe.returncode == 0 and probe.stdout.strip() == minor:
            return candidate
    raise RuntimeError(
        f"no Python {minor} on this machine (a pyenv build or python{minor} on PATH): airflow-releases.toml "
        f"runs a release on it, and pyproject.toml declares it"
    )


def clean_env(venv: Path | Venv | None = None, **extra: str) -> dict[str, str]:
    """The environment of a matrix command: nothing of this session's Airflow, venv or PYTHONPATH."""
    if isinstance(venv, Venv):
        venv = venv.path
    env = {
        k: v
        for k, v in os.environ.items()
        # Nor this session's pytest (its options, its xdist worker's name).
        if not k.startswith(("AIRFLOW", "PYTEST_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    if venv is not None:
        env["PATH"] = str(venv / "bin") + os.pathsep + env.get("PATH", "")
        env["VIRTUAL_ENV"] = str(venv)
        # Compiled bytecode kept with the venv, which outlives this checkout (the cache): its imports are
        # compiled once, not once per process (see pycache_prefix).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache_prefix(venv))
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    env.update(extra)
    return env


def pycache_prefix(venv: Path) -> Path:
    """Where a release venv's processes keep compiled bytecode (``PYTHONPYCACHEPREFIX``): beside the venv.

    It mirrors the source paths: the venv's own and the interpreter's files, which stay, and this
    checkout's tests and DAGs, whose paths change with each clone (:func:`prune_pycache` drops those).
    """
    return venv / ".pycache"


def prune_pycache(venv: Path) -> None:
    """Drop the compiled files of sources that are gone (earlier clones, temporary DAG folders)."""
    prefix = pycache_prefix(venv)
    if not prefix.is_dir():
        return
    for here, dirs, _ in os.walk(prefix):
        source = Path("/", os.path.relpath(here, prefix))
        for name in list(dirs):
            if not (source / name).exists():
                shutil.rmtree(Path(here) / name, ignore_errors=True)
                dirs.remove(name)


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 1800,
    cwd: Path | None = None,
) -> str:
    """Run a command; its output, or an AssertionError with the output's tail."""
    proc = subprocess.run(
        [str(c) for c in cmd],
        env=env or clean_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc.stdout


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path
    #: The wheel's METADATA (headers: Requires-Dist, Classifier, Project-URL, License-File, ...).
    metadata: email.message.Message

    @property
    def requires(self) -> list[str]:
        return sorted(self.metadata.get_all("Requires-Dist") or [])


def build_dists(out: Path) -> Dists:
    """``python -m build``: the sdist, then the wheel built from the unpacked sdist."""
    out.mkdir(parents=True, exist_ok=True)
    uv = installer()  # build's isolated environments made by uv when the session has it: a second, not five
    args = ["--installer", "uv"] if uv else []
    env = clean_env(PATH=f"{uv.parent}{os.pathsep}{os.environ.get('PATH', '')}") if uv else clean_env()
    run([sys.executable, "-m", "build", *args, "--outdir", out, REPO], env=env, timeout=900)
    return read_dists(out)


def read_dists(out: Path) -> Dists:
    """The sdist and wheel :func:`build_dists` left in ``out``."""
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(zf.read(name))
    return Dists(sdist, wheel, metadata)


def python_version(python: str) -> str:
    return run([python, "-c", "import platform; print(platform.python_version())"]).strip()


def venv_key(release: Release, full_python: str, dists: Dists) -> str:
    """The cache key: everything that decides what the venv holds, but not our code."""
    inputs = {
        "recipe": RECIPE,
        "airflow": release.airflow,
        "python": full_python,
        "oldest": list(release.oldest),
        "pins": [p.requirement for p in release.pins],
        "extras": EXTRAS,
        "requires": dists.requires,
        "test_tools": lock_pins(),
    }
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]
    return f"{release.id}-{digest}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder of a venv at a time (two sessions on one machine share the cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file is closed
        yield


@dataclass(frozen=True)
class Venv:
    path: Path
    #: Seconds spent making it in this session (0.0: reused from the cache).
    built_seconds: float

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    def pip(self, *args: str, timeout: float = 1800) -> str:
        return run([self.python, "-m", "pip", *args], env=clean_env(self.path), timeout=timeout)

    def install(self, *args: str, timeout: float = 1800) -> str:
        """``pip install <args>``, by uv when the session has it (same requests, same resolution rules)."""
        uv = installer()
        if uv is None:
            return self.pip("install", "-q", *args, timeout=timeout)
        # The releases' venvs are made side by side (bootstrap, the matrix): on an empty uv cache one of them
        # builds a shared sdist (pyspark: minutes on a loaded machine) while the others wait for its lock,
        # longer than uv's default 300 s (seen: two of three venvs failed on a cold, loaded machine).
        env = clean_env(self.path, UV_LOCK_TIMEOUT=os.environ.get("UV_LOCK_TIMEOUT", "1800"))
        return run([uv, "pip", "install", "-q", "--python", self.python, *args], env=env, timeout=timeout)


def installer() -> Path | None:
    """The uv next to this session's interpreter (``scripts/bootstrap.sh`` installs it, pinned), or None: pip."""
    uv = Path(sys.executable).parent / "uv"
    return uv if uv.exists() else None


def ensure_venv(release: Release, dists: Dists) -> Venv:
    """The release's venv from the cache, or made now (see the module docstring)."""
    python = find_python(release.python)
    key = venv_key(release, python_version(python), dists)
    path = CACHE / key
    done = path / ".deltalog-venv.json"
    with _locked(CACHE / f".{key}.lock"):
        if done.exists():
            prune_pycache(path)
            return Venv(path, 0.0)
        started = time.monotonic()
        shutil.rmtree(path, ignore_errors=True)  # a build that died half way
        uv = installer()
        if uv is None:
            run([python, "-m", "venv", path], timeout=300)
        else:  # seeded with pip: `pip check` and `pip freeze` below are pip's
            run([uv, "venv", "-q", "--seed", "--python", python, path], env=clean_env(), timeout=300)
        venv = Venv(path, 0.0)
        venv.install("pip>=24")
        airflow = f"apache-airflow=={release.airflow}"
        venv.install(airflow, *(p.requirement for p in release.pins), *release.oldest)
        venv.install(f"{dists.wheel}[{EXTRAS}]", airflow)
        venv.pip("check")
        frozen = [
            line
            for line in venv.pip("freeze", "--all").splitlines()
            if line and not _canonical(line.split("==")[0].split(" @ ")[0]).startswith(DIST_NAME)
        ]
        constraints = path / "user-set.txt"
        constraints.write_text("\n".join(frozen) + "\n")
        # The test tools must not move any package of the user's set: the constraints pin all of it.
        venv.install(*lock_pins(), "-c", str(constraints))
        venv.pip("check")
        seconds = time.monotonic() - started
        done.write_text(json.dumps({"key": key, "seconds": round(seconds, 1), "user_set": frozen}, indent=1))
    _prune(release, keep=path)
    return Venv(path, seconds)


def _prune(release: Release, keep: Path) -> None:
    """Drop the cached venvs of this release made with other inputs (older pins, older wheels' deps)."""
    for other in CACHE.glob(f"{release.id}-*"):
        if other != keep and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)


def install_wheel(venv: Venv, dists: Dists) -> None:
    """This session's wheel into the venv (its dependencies are the venv's already: they are in the key)."""
    if installer() is None:
        venv.pip("install", "-q", "--no-deps", "--force-reinstall", str(dists.wheel))
    else:
        venv.install("--no-deps", "--reinstall", "--refresh-package", DIST_NAME, str(dists.wheel))


def json_from(output: str) -> object:
    """The JSON document in an Airflow CLI's ``-o json`` output (some releases log lines around it)."""
    for line in reversed(output.splitlines()):
        line = line.strip()
        if line.startswith(("[", "{")):
            try:
                return json.loads(line)
            except ValueError:
                continue
    if "No data found" in output:
        return []
    raise AssertionError(f"no JSON in the output:\n{output[-3000:]}")


def _how(venv: Venv) -> str:
    return f"built in {venv.built_seconds:.0f} s" if venv.built_seconds else "cached"


def prepare(argv: list[str]) -> int:
    """``python tests/airflow_matrix.py prepare``: every release's venv made or found in the cache, side by
    side (scripts/bootstrap.sh runs it; the release matrix then finds them). One line per release; exit 1
    when one could not be made."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    matrix = load_matrix()
    with tempfile.TemporaryDirectory(prefix="deltalog-dists-") as out:
        started = time.monotonic()
        dists = build_dists(Path(out))
        print(f"our sdist and wheel built in {time.monotonic() - started:.0f} s", flush=True)

        def ready(release: Release) -> tuple[Release, Venv | None, str]:
            try:
                return release, ensure_venv(release, dists), ""
            except (AssertionError, RuntimeError, OSError, subprocess.SubprocessError) as exc:
                return release, None, str(exc)

        with ThreadPoolExecutor(len(matrix.releases)) as pool:
            done = list(pool.map(ready, matrix.releases))
    failed = [(r, why) for r, v, why in done if v is None]
    for release, why in failed:
        print(f"{release.id}: could not be made:\n{why[-3000:]}", flush=True)
    parts = [f"{r.airflow} {_how(v)}" for r, v, _ in done if v is not None]
    print(f"Airflow {', '.join(parts)}{'; ' + str(len(failed)) + ' failed' if failed else ''} ({CACHE})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["prepare"]:
        sys.exit("usage: python tests/airflow_matrix.py prepare")
    sys.exit(prepare(sys.argv[2:]))
