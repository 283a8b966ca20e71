"""Processes SIGKILLed at random points of commit, checkpoint, log cleanup, vacuum, compaction and convert.

Each seed runs the operation in a child process on its own copy of the table:

- *step kills*: through ``faulty://``, the child kills itself at a random storage
  call (a random one of all the calls a clean run makes), before it, half-way
  through it (a write leaves a partial temp or data file) or right after it;
- *wall-clock kills*: on the plain local path (deltalog's own local code:
  ``os.link`` commits, ``os.replace`` checkpoints, thread-pool deletes) the
  parent kills the child after a random delay within a clean run's duration.

Convert to Delta gets step kills only (it is one commit after reading footers).
After every crash the guarantees of the fault suite hold (both readers read the
table and every retained version, no referenced file is missing, rows
unchanged) and a rerun in this process completes the operation. Children come
from a forkserver with deltalog preloaded and run a few at a time.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
import reliability_recorder as recorder
from reliability_support import SCALE, TemplateCache, child_context, crash_child, verify_after, wait_for_file

from faults import KINDS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SUITE = "crashes"
OPS = ("commit", "checkpoint", "log_cleanup", "vacuum", "compaction")
STEP_SEEDS = 3 if SCALE == "small" else 10
WALL_SEEDS = 2 if SCALE == "small" else 6
CONVERT_SEEDS = 3 if SCALE == "small" else 6
PARALLEL = 4


@dataclass
class CrashJob:
    """One child: the table copy, the fault plan it runs under, or when the parent kills it."""

    label: str
    path: str
    info: dict[str, Any]
    spec: list[dict[str, Any]] = field(default_factory=list)
    faulty: bool = True
    kill_after: float | None = None
    warmup: str | None = None
    exitcode: int | None = None
    finished: bool = False
    duration: float | None = None


def run_child(ctx: Any, job: CrashJob) -> CrashJob:
    """Start the child, kill it at ``kill_after`` seconds into the operation (if set), wait for it."""
    name = job.label.split(":", 1)[0]
    proc = ctx.Process(target=crash_child, args=(name, job.path, job.info, job.spec, job.faulty, job.warmup))
    proc.start()
    started = wait_for_file(job.path + ".started", 60)
    t0 = time.perf_counter()
    if job.kill_after is not None:
        if started:
            time.sleep(job.kill_after)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
    elif started:
        deadline = t0 + 120
        while proc.is_alive() and not os.path.exists(job.path + ".finished") and time.perf_counter() < deadline:
            time.sleep(0.0005)
        job.duration = time.perf_counter() - t0
    proc.join(120)
    if proc.is_alive():
        proc.kill()
        proc.join()
        raise AssertionError(f"{job.label}: the child hung")
    job.exitcode = proc.exitcode
    job.finished = os.path.exists(job.path + ".finished")
    return job


def remove(job: CrashJob) -> None:
    """Delete the job's table copy, its signal files and its warm-up copy."""
    for p in (job.path, job.warmup):
        if p:
            shutil.rmtree(p, ignore_errors=True)
    for suffix in (".started", ".finished"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(job.path + suffix)


def step_jobs(templates: TemplateCache, name: str, seeds: int = STEP_SEEDS) -> list[CrashJob]:
    """Kill points drawn uniformly from every storage call of a clean run."""
    counts = templates.counts(name, SUITE)
    calls = [(kind, n) for kind, total in sorted(counts.items()) for n in range(1, total + 1)]
    jobs = []
    for seed in range(seeds):
        rng = random.Random(f"{name}-{seed}")
        kind, nth = rng.choice(calls)
        action = rng.choice(["kill", "kill_after", "kill_during"] if kind == "write" else ["kill", "kill_after"])
        path, info = templates.copy(name, f"crash-{name}-{seed}")
        spec = [{"kind": kind, "nth": nth, "action": action}]
        jobs.append(CrashJob(f"{name}: {action} at {kind} #{nth}", path, info, spec))
    return jobs


#: Object-store-like latency on every storage call, so random kill times spread over the I/O steps.
LATENCY = [{"kind": k, "nth": 1, "action": "slow", "every": True, "delay": 0.01} for k in KINDS]


def child_duration(ctx: Any, templates: TemplateCache, name: str, spec: list[dict[str, Any]], faulty: bool) -> float:
    """How long a warmed-up clean run takes in a child, from its start signal to its return."""
    path, info = templates.copy(name, f"timing-{name}")
    scratch, _ = templates.copy(name, f"warmup-{name}")
    job = run_child(ctx, CrashJob(f"{name}: timing", path, info, spec, faulty, warmup=scratch))
    assert job.exitcode == 0 and job.finished, f"a clean {name} run failed in a child (exit code {job.exitcode})"
    remove(job)
    assert job.duration is not None
    return job.duration


def wall_clock_jobs(ctx: Any, templates: TemplateCache, name: str) -> list[CrashJob]:
    """Kill times drawn within a clean run's duration: local runs, and runs with storage latency.

    Run one at a time, so the clean run's timing holds for them.
    """
    jobs = []
    for faulty, spec in ((False, []), (True, LATENCY)):
        kind = "with storage latency" if faulty else "local"
        duration = child_duration(ctx, templates, name, spec, faulty)
        for seed in range(WALL_SEEDS // 2):
            delay = random.Random(f"wall-{name}-{kind}-{seed}").uniform(0, duration)
            path, info = templates.copy(name, f"wall-{name}-{seed}")
            scratch, _ = templates.copy(name, f"warmup-{name}-{seed}")
            label = f"{name}: {kind}, killed after {delay * 1000:.0f} of {duration * 1000:.0f} ms"
            jobs.append(CrashJob(label, path, info, spec, faulty, kill_after=delay, warmup=scratch))
    return jobs


@pytest.mark.parametrize("name", OPS)
def test_killed_at_random_points_loses_nothing_and_a_rerun_finishes(name: str, templates: TemplateCache) -> None:
    ctx = child_context()
    with ThreadPoolExecutor(PARALLEL) as pool:
        done = list(pool.map(lambda j: run_child(ctx, j), step_jobs(templates, name)))
    done += [run_child(ctx, j) for j in wall_clock_jobs(ctx, templates, name)]
    check_crashes(name, done)


def test_convert_killed_at_random_storage_calls_leaves_parquet_or_the_whole_table(templates: TemplateCache) -> None:
    """A killed convert leaves plain Parquet both readers refuse, or the full table; a rerun converts."""
    ctx = child_context()
    jobs = step_jobs(templates, "convert", CONVERT_SEEDS)
    # Always also half-way through writing commit 0 (a partial temp file in _delta_log, no commit).
    path, info = templates.copy("convert", "crash-convert-commit")
    spec = [{"kind": "write", "nth": 1, "action": "kill_during", "match": "_delta_log/"}]
    jobs.append(CrashJob("convert: kill_during at the commit 0 write", path, info, spec))
    with ThreadPoolExecutor(PARALLEL) as pool:
        done = list(pool.map(lambda j: run_child(ctx, j), jobs))
    check_crashes("convert", done)


def check_crashes(name: str, done: list[CrashJob]) -> None:
    """Count every child, check its table (then rerun and check again); most must have died mid-operation."""
    crashed = 0
    for job in done:
        # multiprocessing's forkserver gives 255 when it cannot read a child's exit status back
        # (CPython's popen_forkserver: "perhaps the forkserver process itself got killed"); seen once
        # in a full CI run, for a child that died at its planned fault. It did not finish, and its
        # table is checked below like any other.
        status_lost = job.exitcode == 255 and not job.finished
        # A crash is a kill before the operation returned (a kill during interpreter exit is not one).
        killed = (job.exitcode == -signal.SIGKILL or status_lost) and not job.finished
        if job.kill_after is None:
            assert job.exitcode == -signal.SIGKILL or status_lost, (
                f"{job.label}: the child was not killed (exit code {job.exitcode})"
            )
        else:
            assert job.exitcode in (0, -signal.SIGKILL) or status_lost, (
                f"{job.label}: the child failed (exit code {job.exitcode})"
            )
        crashed += killed
        recorder.add("scenarios", 1, SUITE)
        recorder.add("crashes", int(killed), SUITE)
        recorder.add("faults_injected", int(job.kill_after is None), SUITE)
        verify_after(name, job.path, job.info, SUITE, job.label + ("" if killed else " (finished first)"), job.faulty)
        remove(job)
    print(f"{name}: {crashed} of {len(done)} children killed mid-operation")
    assert crashed >= len(done) // 2, "most children must actually be killed mid-operation"
