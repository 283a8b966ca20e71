"""What each test module costs, in CPU seconds and in projected wall seconds on a quiet 2-core machine.

On a shared, loaded machine wall time says more about the neighbours than about the tests.
This measures what does not depend on them:

* **CPU**: the CPU seconds of everything the run started (pytest, its subprocesses, JVMs,
  servers, the daemons they leave behind), from a cgroup of its own (cgroup v1 ``cpuacct`` or
  v2 ``cpu.stat``); without a writable cgroup, ``getrusage`` of this process and its children
  (which misses daemons that are never waited for).
* **quiet**: a projection of the wall time on a quiet machine with ``--cores`` cores. Every
  half second the run's threads are sampled (``/proc/<tid>/schedstat``: time on a CPU and time
  waiting for one); an interval of ``dt`` seconds that used ``c`` CPU seconds, in which no
  thread waited for a CPU longer than ``q``, would have taken ``max(c / cores, dt - q)``: the
  waiting for a CPU goes, the sleeping (I/O, timers, the network) stays, and the work cannot
  take less than the cores give.

Usage (from the repo, with the venv)::

    python scripts/ci_cost.py [--out cost.json] [--cores 2] [pytest arguments ...]

runs ``python -m pytest <arguments>`` once in its own cgroup, with this module as a pytest
plugin that books each interval to the test module running then (set-up of a session fixture
goes to the module that first needs it, as in CI), and prints a table per module: tests,
wall, CPU, quiet projection. ``--out`` keeps the samples' totals as JSON.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["Cost", "main"]

#: The cgroup the wrapper makes for one run (its path, in the environment of the run).
CGROUP_ENV = "DELTALOG_CI_COST_CGROUP"
OUT_ENV = "DELTALOG_CI_COST_OUT"
CORES_ENV = "DELTALOG_CI_COST_CORES"
SAMPLE_SECONDS = 0.5
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Cost:
    """What one module (or the time between modules) cost."""

    module: str
    tests: int = 0
    failed: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    quiet: float = 0.0


def _cgroup_root() -> tuple[str, Path] | None:
    """A writable cgroup hierarchy that counts CPU: ("v1", .../cpuacct) or ("v2", the unified root)."""
    for kind, root in (("v1", Path("/sys/fs/cgroup/cpuacct")), ("v2", Path("/sys/fs/cgroup/unified"))):
        probe = root / f"deltalog-ci-cost-probe-{uuid.uuid4().hex[:8]}"
        try:
            probe.mkdir()
        except OSError:
            continue
        probe.rmdir()
        return kind, root
    return None


def cgroup_cpu_seconds(cgroup: Path) -> float:
    if (cgroup / "cpuacct.usage").exists():
        return int((cgroup / "cpuacct.usage").read_text()) / 1e9
    stat = dict(line.split() for line in (cgroup / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6


def _own_cpu_seconds() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class Sampler:
    """Books CPU and projected quiet time, every ``SAMPLE_SECONDS``, to whatever ``current`` names."""

    def __init__(self, cgroup: Path | None, cores: int) -> None:
        self.cgroup, self.cores = cgroup, cores
        self.current = "(collection and session start)"
        self.costs: dict[str, Cost] = {}
        self.waits: dict[int, int] = {}  # tid -> nanoseconds waited for a CPU, at the last sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ci-cost-sampler", daemon=True)
        self._last_t = time.monotonic()
        self._last_cpu = self._cpu()
        self._wait_of_threads()

    def _cpu(self) -> float:
        return cgroup_cpu_seconds(self.cgroup) if self.cgroup else _own_cpu_seconds()

    def _tids(self) -> list[int]:
        if self.cgroup:
            return [
                int(t)
                for t in (self.cgroup / ("tasks" if (self.cgroup / "tasks").exists() else "cgroup.threads"))
                .read_text()
                .split()
            ]
        return [int(t) for t in os.listdir(f"/proc/{os.getpid()}/task")]

    def _wait_of_threads(self) -> int:
        """The longest time any thread of the run waited for a CPU since the last sample (ns)."""
        longest = 0
        seen: dict[int, int] = {}
        for tid in self._tids():
            try:
                _, waited, _ = (int(x) for x in Path(f"/proc/{tid}/schedstat").read_text().split())
            except (OSError, ValueError):
                continue
            seen[tid] = waited
            longest = max(longest, waited - self.waits.get(tid, waited))
        self.waits = seen
        return longest

    def sample(self) -> None:
        now, cpu = time.monotonic(), self._cpu()
        waited = self._wait_of_threads() / 1e9
        dt, dc = now - self._last_t, max(0.0, cpu - self._last_cpu)
        self._last_t, self._last_cpu = now, cpu
        cost = self.costs.setdefault(self.current, Cost(self.current))
        cost.wall += dt
        cost.cpu += dc
        cost.quiet += max(dc / self.cores, dt - min(waited, dt))

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.sample()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def switch(self, name: str) -> None:
        if name != self.current:
            self.sample()  # book the interval so far to the module that ran it
            self.current = name


# --- the pytest plugin (loaded in the run with -p ci_cost) -----------------------------------

_SAMPLER: Sampler | None = None


def pytest_configure(config: Any) -> None:
    global _SAMPLER
    if os.environ.get(OUT_ENV) and _SAMPLER is None:
        cgroup = os.environ.get(CGROUP_ENV)
        _SAMPLER = Sampler(Path(cgroup) if cgroup else None, int(os.environ.get(CORES_ENV, "2")))
        _SAMPLER.start()


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    if _SAMPLER is not None:
        _SAMPLER.switch(nodeid.split("::")[0])


def pytest_runtest_logreport(report: Any) -> None:
    if _SAMPLER is None:
        return
    cost = _SAMPLER.costs.setdefault(report.nodeid.split("::")[0], Cost(report.nodeid.split("::")[0]))
    if report.when == "call" or (report.when == "setup" and not report.passed):
        cost.tests += 1
    if report.failed:
        cost.failed += 1


def pytest_sessionfinish(session: Any) -> None:
    if _SAMPLER is not None:
        _SAMPLER.switch("(session teardown)")


def pytest_unconfigure(config: Any) -> None:
    global _SAMPLER
    if _SAMPLER is not None:
        _SAMPLER.stop()
        Path(os.environ[OUT_ENV]).write_text(json.dumps([asdict(c) for c in _SAMPLER.costs.values()], indent=1))
        _SAMPLER = None


# --- the wrapper -----------------------------------------------------------------------------


def table(costs: list[Cost], cores: int) -> str:
    lines = [
        f"| module | tests | failed | wall s (here) | CPU s | quiet {cores}-core s (projected) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for c in sorted(costs, key=lambda c: -c.quiet):
        lines.append(f"| {c.module} | {c.tests} | {c.failed} | {c.wall:.0f} | {c.cpu:.0f} | {c.quiet:.0f} |")
    total = Cost("total", *(sum(getattr(c, f) for c in costs) for f in ("tests", "failed", "wall", "cpu", "quiet")))
    lines.append(
        f"| **total** | {total.tests} | {total.failed} | {total.wall:.0f} | {total.cpu:.0f} | {total.quiet:.0f} |"
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    out, cores = Path("ci-cost.json"), 2
    while argv and argv[0] in ("--out", "--cores"):
        flag, value, argv = argv[0], argv[1], argv[2:]
        if flag == "--out":
            out = Path(value)
        else:
            cores = int(value)
    env = {
        **os.environ,
        OUT_ENV: str(out.resolve()),
        CORES_ENV: str(cores),
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep),
    }
    found = _cgroup_root()
    cgroup = found[1] / f"deltalog-ci-cost-{os.getpid()}" if found else None
    if cgroup:
        cgroup.mkdir()
        env[CGROUP_ENV] = str(cgroup)
    else:
        print("[ci_cost] no writable cgroup: CPU from getrusage (daemons never waited for are missed)", file=sys.stderr)

    def enter() -> None:
        if cgroup:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "ci_cost", *argv], env=env, preexec_fn=enter)
    rc = proc.wait()
    wall = time.monotonic() - started
    if cgroup:
        total_cpu = cgroup_cpu_seconds(cgroup)
        left = (cgroup / "cgroup.procs").read_text().split()
        if left:  # daemons the run left behind: report them, end them (they are this run's)
            print(f"[ci_cost] processes left behind by the run, ended now: {left}", file=sys.stderr)
            for pid in left:
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
            time.sleep(1)
        try:
            cgroup.rmdir()
        except OSError:
            pass
    costs = [Cost(**c) for c in json.loads(out.read_text())] if out.exists() else []
    # Before the plugin loads (interpreter, pytest, conftest imports) and after it stops.
    booked = Cost("(pytest start-up and exit)")
    booked.wall = max(0.0, wall - sum(c.wall for c in costs))
    if cgroup:
        booked.cpu = max(0.0, total_cpu - sum(c.cpu for c in costs))
        booked.quiet = max(booked.cpu / cores, min(booked.wall, booked.cpu))
    costs.append(booked)
    print(table(costs, cores))
    cpu_note = f", CPU of the whole cgroup {total_cpu:.0f} s" if cgroup else ""
    print(f"pytest exited {rc}; wall here {wall:.0f} s{cpu_note}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
