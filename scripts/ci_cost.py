"""What each test module and each part of the suite costs, in CPU seconds and in projected wall seconds on a
quiet 2-core machine; with parallel workers (pytest-xdist), what the whole parallel run would take there.

On a shared, loaded machine wall time says more about the neighbours than about the tests.
This measures what does not depend on them:

* **CPU**: the CPU seconds of everything the run started (pytest, its workers, their subprocesses,
  JVMs, servers, the daemons they leave behind), from a cgroup of its own (cgroup v1 ``cpuacct`` or
  v2 ``cpu.stat``), with one child cgroup per xdist worker so that each worker's CPU (its children
  included) is booked to the module it runs; without a writable cgroup, ``getrusage`` of each
  process and its children (which misses daemons that are never waited for).
* **quiet**: a projection of the wall time on a quiet machine with ``--cores`` cores. Every half
  second the threads are sampled (``/proc/<tid>/schedstat``: time on a CPU and time waiting for
  one) and so is the whole machine (``/proc/stat``). An interval of ``dt`` seconds in which the
  measured processes used ``c`` CPU seconds, the rest of the machine ``o``, and no thread waited for
  a CPU longer than ``q``, would have taken ``max(c / cores, dt - min(q, o / cores))`` on a quiet
  machine: the waiting caused by the neighbours goes (never more than they took from the cores),
  the sleeping (I/O, timers, the network) and the waiting the run causes itself stay, and the work
  cannot take less than the cores give.

Per module, the projection is what that module would take alone on the quiet machine (each xdist
worker is measured apart: the other worker counts as a neighbour). For the whole run, the
projection is over all the run's processes at once: the parallel run's wall time on the quiet
machine (``run (parallel)`` in the summary).

Usage (from the repo, with the venv)::

    python scripts/ci_cost.py [--out cost.json] [--cores 2] [--by-test] [pytest arguments ...]

runs ``python -m pytest <arguments>`` once in its own cgroup (add ``-n 2 --dist loadgroup``, as
``scripts/test.sh`` does, for the parallel run), with this module as a pytest plugin that books each
interval to the test module running then (set-up of a session fixture goes to the module that first
needs it on that worker, as in CI), and prints a table per module, a table per part of the suite
(:data:`PARTS`) and the whole run. ``--out`` keeps the numbers as JSON. ``--by-test`` books each test
(its node id) instead of each module: what one test costs, before and after a change to it (a session
fixture's set-up goes to the first test that needs it).
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PARTS", "Cost", "main", "part_of"]

#: The cgroup the wrapper makes for one run (its path, in the environment of the run).
CGROUP_ENV = "DELTALOG_CI_COST_CGROUP"
OUT_ENV = "DELTALOG_CI_COST_OUT"
CORES_ENV = "DELTALOG_CI_COST_CORES"
BY_TEST_ENV = "DELTALOG_CI_COST_BY_TEST"
SAMPLE_SECONDS = 0.5
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: What the whole run's sampler books to (the controller's view of all workers at once).
RUN = "(run)"

#: The parts of the suite the cost tables name, first match wins: (part, module path prefixes).
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("release matrix", ("tests/test_airflow_releases.py",)),
    (
        "Delta Spark oracle",
        (
            "tests/test_delta_spark",
            "tests/test_features_delta_spark.py",
            "tests/test_newer_features_delta_spark.py",
            "tests/test_compaction_clustering_delta_spark.py",
            "tests/test_writer_aware_delta_spark.py",
            "tests/test_conformance",
        ),
    ),
    ("deployment (Postgres, 4 Airflow components, Spark cluster)", ("tests/test_system.py",)),
    ("reliability (faults, crashes, races, clouds)", ("tests/reliability/",)),
    (
        "clouds (Azurite, fake-gcs-server, S3 server)",
        (
            "tests/test_azure_gcs",
            "tests/test_fleet_dag_clouds.py",
            "tests/test_compaction_cloud_spark.py",
            "tests/test_fleet_s3.py",
            "tests/test_compaction_s3.py",
            "tests/test_vacuum_paths_s3.py",
            "tests/test_s3_reads.py",
            "tests/test_dynamodb_commits.py",
        ),
    ),
    (
        "Spark engines and jobs",
        (
            "tests/test_compaction_spark.py",
            "tests/test_compaction_layout_spark.py",
            "tests/test_vacuum_spark.py",
            "tests/test_spark_ingest.py",
            "tests/test_streaming_exactly_once.py",
        ),
    ),
    (
        "fleet view and metrics (Chromium, API server, StatsD, OTLP)",
        ("tests/provider/test_fleet_view", "tests/provider/test_metrics_backends.py"),
    ),
    ("provider (Airflow on the lock)", ("tests/provider/",)),
    ("example DAGs and fleet DAG runs", ("tests/test_example_dags.py", "tests/test_fleet_dag.py")),
    ("core, CLI and the rest", ("tests/",)),
)


def part_of(module: str) -> str:
    """The part of the suite a module (``tests/...py``) belongs to; set-up rows keep their own name."""
    for part, prefixes in PARTS:
        if module.startswith(prefixes):
            return part
    return module


@dataclass
class Cost:
    """What one module (or the time between modules, or a part, or the whole run) cost."""

    module: str
    tests: int = 0
    failed: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    quiet: float = 0.0
    workers: list[str] = field(default_factory=list)

    def add(self, other: Cost) -> None:
        self.tests += other.tests
        self.failed += other.failed
        self.wall += other.wall
        self.cpu += other.cpu
        self.quiet += other.quiet
        self.workers = sorted(set(self.workers) | set(other.workers))


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
    """The CPU of the cgroup and every cgroup below it (both versions count hierarchically)."""
    if (cgroup / "cpuacct.usage").exists():
        return int((cgroup / "cpuacct.usage").read_text()) / 1e9
    stat = dict(line.split() for line in (cgroup / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6


def _cgroup_tids(cgroup: Path) -> list[int]:
    """The threads in the cgroup and in every cgroup below it."""
    tids: list[int] = []
    for here, _dirs, _ in os.walk(cgroup):
        listing = Path(here) / ("tasks" if (Path(here) / "tasks").exists() else "cgroup.threads")
        try:
            tids += [int(t) for t in listing.read_text().split()]
        except OSError:
            continue
    return tids


def _own_cpu_seconds() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def machine_cpu_seconds() -> float:
    """CPU seconds the whole machine spent busy (``/proc/stat``: all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]  # user nice system idle iowait irq softirq steal
    return busy / CLOCK_TICKS


def _descendant_tids(pid: int) -> list[int]:
    """This process's threads and those of its descendants (the fallback without a cgroup)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    tids, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tids += [int(t) for t in os.listdir(f"/proc/{p}/task")]
        except OSError:
            continue
        todo += children.get(p, [])
    return tids


class Sampler:
    """Books CPU and projected quiet time, every ``SAMPLE_SECONDS``, to whatever ``current`` names."""

    def __init__(
        self, cgroup: Path | None, cores: int, worker: str = "", current: str = "(collection and session start)"
    ) -> None:
        self.cgroup, self.cores, self.worker = cgroup, cores, worker
        self.current = current
        self.costs: dict[str, Cost] = {}
        self.waits: dict[int, int] = {}  # tid -> nanoseconds waited for a CPU, at the last sample
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ci-cost-sampler", daemon=True)
        self._last_t = time.monotonic()
        self._last_cpu = self._cpu()
        self._last_machine = machine_cpu_seconds()
        self._wait_of_threads()

    def _cpu(self) -> float:
        return cgroup_cpu_seconds(self.cgroup) if self.cgroup else _own_cpu_seconds()

    def _tids(self) -> list[int]:
        return _cgroup_tids(self.cgroup) if self.cgroup else _descendant_tids(os.getpid())

    def _wait_of_threads(self) -> int:
        """The longest time any thread waited for a CPU since the last sample (ns)."""
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
        with self._lock:
            now, cpu, machine = time.monotonic(), self._cpu(), machine_cpu_seconds()
            waited = self._wait_of_threads() / 1e9
            dt, dc = now - self._last_t, max(0.0, cpu - self._last_cpu)
            others = max(0.0, machine - self._last_machine - dc)
            self._last_t, self._last_cpu, self._last_machine = now, cpu, machine
            cost = self.costs.setdefault(self.current, Cost(self.current, workers=[self.worker] if self.worker else []))
            cost.wall += dt
            cost.cpu += dc
            lost = min(waited, others / self.cores, dt)
            cost.quiet += max(dc / self.cores, dt - lost)

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


# --- the pytest plugin (loaded in the run with -p ci_cost; in the controller and in each worker) --------

_SAMPLER: Sampler | None = None
_RUN_SAMPLER: Sampler | None = None
_TESTS: dict[str, Cost] = {}


def _booked_as(nodeid: str) -> str:
    """What an interval of a test is booked to: its module, or with ``--by-test`` the test itself."""
    return nodeid if os.environ.get(BY_TEST_ENV) else nodeid.split("::")[0]


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "")


def _out(worker: str) -> Path:
    out = Path(os.environ[OUT_ENV])
    return out.with_name(f"{out.name}.{worker or 'main'}.part")


def _worker_cgroup(worker: str) -> Path | None:
    """The run's cgroup, or for an xdist worker a child of it that this process (and its children) moves into."""
    cgroup = os.environ.get(CGROUP_ENV)
    if not cgroup:
        return None
    if not worker:
        return Path(cgroup)
    child = Path(cgroup) / worker
    child.mkdir(exist_ok=True)
    (child / "cgroup.procs").write_text(str(os.getpid()))
    return child


def pytest_configure(config: Any) -> None:
    global _SAMPLER, _RUN_SAMPLER
    if not os.environ.get(OUT_ENV) or _SAMPLER is not None:
        return
    cores = int(os.environ.get(CORES_ENV, "2"))
    worker = _worker()
    parallel = bool(getattr(config.option, "numprocesses", None)) and not worker
    if parallel:  # the controller: the whole run at once, all workers included
        cgroup = os.environ.get(CGROUP_ENV)
        _RUN_SAMPLER = Sampler(Path(cgroup) if cgroup else None, cores, current=RUN)
        _RUN_SAMPLER.start()
        return
    _SAMPLER = Sampler(_worker_cgroup(worker), cores, worker)
    _SAMPLER.start()


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    if _SAMPLER is not None:
        _SAMPLER.switch(_booked_as(nodeid))


def pytest_runtest_logreport(report: Any) -> None:
    # Counted where the reports end up: the controller in a parallel run, else this process.
    if _SAMPLER is None and _RUN_SAMPLER is None:
        return
    if _SAMPLER is not None and _worker():
        return  # a worker: the controller counts its reports
    module = _booked_as(report.nodeid)
    cost = _TESTS.setdefault(module, Cost(module))
    if report.when == "call" or (report.when == "setup" and not report.passed):
        cost.tests += 1
    if report.failed:
        cost.failed += 1


def pytest_sessionfinish(session: Any) -> None:
    if _SAMPLER is not None:
        _SAMPLER.switch("(session teardown)")


def pytest_unconfigure(config: Any) -> None:
    global _SAMPLER, _RUN_SAMPLER
    for sampler in (_SAMPLER, _RUN_SAMPLER):
        if sampler is not None:
            sampler.stop()
    data = {
        "costs": [asdict(c) for c in (_SAMPLER.costs.values() if _SAMPLER else [])],
        "run": [asdict(c) for c in (_RUN_SAMPLER.costs.values() if _RUN_SAMPLER else [])],
        "tests": [asdict(c) for c in _TESTS.values()],
    }
    if _SAMPLER is not None or _RUN_SAMPLER is not None:
        _out(_worker()).write_text(json.dumps(data, indent=1))
    _SAMPLER = _RUN_SAMPLER = None


# --- the wrapper -----------------------------------------------------------------------------


def _row(c: Cost) -> str:
    workers = f" ({', '.join(c.workers)})" if c.workers else ""
    return f"| {c.module}{workers} | {c.tests} | {c.failed} | {c.wall:.0f} | {c.cpu:.0f} | {c.quiet:.0f} |"


def table(costs: list[Cost], cores: int, title: str = "module") -> str:
    lines = [
        f"| {title} | tests | failed | wall s (here) | CPU s | quiet {cores}-core s alone (projected) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    total = Cost("**total**")
    for c in sorted(costs, key=lambda c: -c.quiet):
        lines.append(_row(c))
        total.add(Cost(c.module, c.tests, c.failed, c.wall, c.cpu, c.quiet))
    lines.append(_row(total))
    return "\n".join(lines)


def merge(parts: list[dict[str, Any]]) -> tuple[list[Cost], Cost | None]:
    """Per-module costs over every worker (tests counted by the controller), and the whole run's row."""
    modules: dict[str, Cost] = {}
    for data in parts:
        for raw in data["costs"]:
            c = Cost(**raw)
            modules.setdefault(c.module, Cost(c.module)).add(Cost(c.module, 0, 0, c.wall, c.cpu, c.quiet, c.workers))
    for data in parts:
        for raw in data["tests"]:
            c = Cost(**raw)
            row = modules.setdefault(c.module, Cost(c.module))
            row.tests += c.tests
            row.failed += c.failed
    run = None
    for data in parts:
        for raw in data["run"]:
            run = Cost(**raw)
    return list(modules.values()), run


def by_part(costs: list[Cost]) -> list[Cost]:
    parts: dict[str, Cost] = {}
    for c in costs:
        name = part_of(c.module)
        parts.setdefault(name, Cost(name)).add(Cost(name, c.tests, c.failed, c.wall, c.cpu, c.quiet, c.workers))
    return list(parts.values())


def main(argv: list[str]) -> int:
    out, cores, by_test = Path("ci-cost.json"), 2, False
    while argv and argv[0] in ("--out", "--cores", "--by-test"):
        if argv[0] == "--by-test":
            by_test, argv = True, argv[1:]
            continue
        flag, value, argv = argv[0], argv[1], argv[2:]
        if flag == "--out":
            out = Path(value)
        else:
            cores = int(value)
    out = out.resolve()
    env = {
        **os.environ,
        OUT_ENV: str(out),
        CORES_ENV: str(cores),
        **({BY_TEST_ENV: "1"} if by_test else {}),
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep),
    }
    for stale in out.parent.glob(f"{out.name}.*.part"):
        stale.unlink()
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
    machine_before = machine_cpu_seconds()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "ci_cost", *argv], env=env, preexec_fn=enter)
    rc = proc.wait()
    wall = time.monotonic() - started
    machine = machine_cpu_seconds() - machine_before
    total_cpu = 0.0
    if cgroup:
        total_cpu = cgroup_cpu_seconds(cgroup)
        left = _cgroup_tids(cgroup)
        if left:  # daemons the run left behind: report them, end them (they are this run's)
            pids = sorted(
                {int(p) for here, _, _ in os.walk(cgroup) for p in (Path(here) / "cgroup.procs").read_text().split()}
            )
            print(f"[ci_cost] processes left behind by the run, ended now: {pids}", file=sys.stderr)
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            time.sleep(1)
        for here, _, _ in sorted(os.walk(cgroup), key=lambda w: -len(w[0])):
            try:
                Path(here).rmdir()
            except OSError:
                pass
    pieces = [json.loads(p.read_text()) for p in sorted(out.parent.glob(f"{out.name}.*.part"))]
    for p in out.parent.glob(f"{out.name}.*.part"):
        p.unlink()
    costs, run = merge(pieces)
    # Before the plugin loads (interpreter, pytest, conftest imports) and after it stops.
    booked = Cost("(pytest start-up and exit)")
    if run is None:  # one process: the modules' rows cover the run but its start and end
        booked.wall = max(0.0, wall - sum(c.wall for c in costs))
        if cgroup:
            booked.cpu = max(0.0, total_cpu - sum(c.cpu for c in costs))
            booked.quiet = max(booked.cpu / cores, min(booked.wall, booked.cpu))
        costs.append(booked)
    print(table(costs, cores))
    print()
    print(table(by_part(costs), cores, title="part"))
    summary = {
        "wall_here": round(wall, 1),
        "cpu": round(total_cpu if cgroup else sum(c.cpu for c in costs), 1),
        "machine_cpu": round(machine, 1),
        "serial_quiet": round(sum(c.quiet for c in costs), 1),
    }
    if run is not None:
        outside = max(0.0, wall - run.wall)  # controller start-up before the plugin and exit after it
        summary["parallel_quiet"] = round(run.quiet + outside, 1)
        print(
            f"\nrun (parallel): wall here {wall:.0f} s, CPU {summary['cpu']:.0f} s, projected on a quiet "
            f"{cores}-core machine {summary['parallel_quiet']:.0f} s (modules alone, one after another: "
            f"{summary['serial_quiet']:.0f} s)"
        )
    out.write_text(
        json.dumps(
            {"summary": summary, "modules": [asdict(c) for c in costs], "parts": [asdict(c) for c in by_part(costs)]},
            indent=1,
        )
    )
    print(f"pytest exited {rc}; wall here {wall:.0f} s, CPU of the whole run {summary['cpu']:.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
