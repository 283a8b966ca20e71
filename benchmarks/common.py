"""Shared benchmark helpers: fresh-process measurement, synthetic tables, result rows.

Every measurement runs in a fresh interpreter (``python common.py child ...``) so that
one case's caches, imports and freed-but-not-returned memory never flatter the next,
and so the peak resident set size (``VmHWM``) belongs to that one case alone. Imports
the measured code needs are done before the clock starts: we compare table loading,
not ``import pyarrow``.

Synthetic tables are generated once by ``make_synthetic_table.py`` (beside this file) and
cached under ``.bench/tables/`` (git-ignored); a ``.complete`` marker holding the
generation parameters tells a finished table from an interrupted one.

Standard-library imports only at module level: the child process imports this file.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("benchmarks")

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
CACHE = Path(os.environ.get("DELTALOG_BENCH_CACHE", REPO / ".bench"))
GENERATOR = Path(os.environ.get("DELTALOG_BENCH_GENERATOR", BENCH_DIR / "make_synthetic_table.py"))
MB = 1024 * 1024


# --- measuring in a fresh process ------------------------------------------------------


@dataclass
class Measurement:
    """One case measured over ``repeat`` fresh processes.

    ``seconds`` is the fastest run (the least disturbed by other work on a shared
    machine); ``peak_mb`` the highest peak RSS seen (conservative); ``base_mb`` the
    RSS after the imports, before the measured call (the interpreter's share of the peak).
    """

    seconds: float
    peak_mb: float
    base_mb: float
    runs: list[float] = field(default_factory=list)
    result: Any = None
    #: CPU time (user + system, all threads) of the fastest run: less disturbed than
    #: wall time when other work shares the machine.
    cpu_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _status_kb(key: str) -> int:
    """A ``/proc/self/status`` field in KiB (Linux); falls back to ru_maxrss for VmHWM."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _cpu_seconds() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _resolve(module: str, func: str) -> Callable[..., Any]:
    if str(BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(BENCH_DIR))
    return getattr(importlib.import_module(module), func)


def _child(module: str, func: str, args_json: str, preload: str) -> None:
    """Body of the measuring subprocess: import, settle, time one call, report as JSON."""
    for name in filter(None, preload.split(",")):
        importlib.import_module(name)
    fn = _resolve(module, func)
    args = json.loads(args_json)
    gc.collect()
    base = _status_kb("VmRSS")
    c0 = _cpu_seconds()
    t0 = time.perf_counter()
    result = fn(*args)
    seconds = time.perf_counter() - t0
    cpu = _cpu_seconds() - c0
    peak = _status_kb("VmHWM")
    report = {"seconds": seconds, "cpu_seconds": cpu, "peak_kb": peak, "base_kb": base, "result": result}
    sys.stdout.write("\n@@RESULT@@" + json.dumps(report) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    # The report is whole: leave without interpreter teardown, where Arrow's I/O threads (a peer's dataset
    # scan through a Python filesystem) can abort a process that did its work (apache/arrow#34314).
    os._exit(0)


def _run_group(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in a process group of its own; on timeout kill the whole group.

    A measured Spark case starts a JVM as a grandchild: killing only the child would
    leave it running (and holding its heap) after the timeout.
    """
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO), start_new_session=True
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def measure(
    module: str,
    func: str,
    args: list[Any],
    *,
    preload: list[str] | None = None,
    repeat: int = 1,
    timeout: float = 1800,
) -> Measurement:
    """Run ``module.func(*args)`` in ``repeat`` fresh interpreters; time and peak RSS each.

    ``func`` must return something JSON-able (e.g. the number of files it loaded) so
    the caller can check both sides did the same work.
    """
    runs: list[float] = []
    cpus: list[float | None] = []
    peaks: list[float] = []
    bases: list[float] = []
    result: Any = None
    for _ in range(max(1, repeat)):
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "child",
            module,
            func,
            json.dumps(args),
            ",".join(preload or []),
        ]
        proc = _run_group(cmd, timeout)
        marker = proc.stdout.rfind("@@RESULT@@")
        if proc.returncode != 0 or marker < 0:
            raise RuntimeError(
                f"{module}.{func}{tuple(args)} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
            )
        data = json.loads(proc.stdout[marker + len("@@RESULT@@") :])
        runs.append(data["seconds"])
        cpus.append(data.get("cpu_seconds"))
        peaks.append(data["peak_kb"] / 1024)
        bases.append(data["base_kb"] / 1024)
        result = data["result"]
    return Measurement(
        seconds=min(runs),
        peak_mb=max(peaks),
        base_mb=statistics.median(bases),
        runs=runs,
        result=result,
        cpu_seconds=cpus[runs.index(min(runs))],
    )


def merge(measurements: list[Measurement]) -> Measurement:
    """Several single-run measurements of one case as one (fastest time, highest peak)."""
    best = min(measurements, key=lambda m: m.seconds)
    return Measurement(
        seconds=best.seconds,
        peak_mb=max(m.peak_mb for m in measurements),
        base_mb=statistics.median(m.base_mb for m in measurements),
        runs=[r for m in measurements for r in m.runs],
        result=best.result,
        cpu_seconds=best.cpu_seconds,
    )


def measure_pair(
    module: str,
    ours: str,
    theirs: str,
    args: list[Any],
    *,
    ours_preload: list[str] | None = None,
    theirs_preload: list[str] | None = None,
    repeat: int = 1,
) -> tuple[Measurement, Measurement]:
    """Measure deltalog's and deltalake's function alternately, ``repeat`` fresh processes each.

    Alternating (ours, theirs, ours, ...) exposes both sides to the same background
    load on a shared machine, which measuring all of one side first does not.
    """
    ours_runs: list[Measurement] = []
    theirs_runs: list[Measurement] = []
    for _ in range(max(1, repeat)):
        ours_runs.append(measure(module, ours, args, preload=ours_preload))
        theirs_runs.append(measure(module, theirs, args, preload=theirs_preload))
    return merge(ours_runs), merge(theirs_runs)


# --- result rows -----------------------------------------------------------------------


def optimize_counts(metrics: Any) -> dict[str, Any]:
    """Files removed and added by a peer's OPTIMIZE, from its metrics as deltalake and Delta Spark name
    them (their camelCase keys, not our results' snake_case)."""
    return {"removed": metrics["numFilesRemoved"], "added": metrics["numFilesAdded"]}


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or not theirs:
        return None
    return ours / theirs


def compare_row(
    case: str,
    ours: Measurement,
    theirs: Measurement | None,
    *,
    time_target: float | None = None,
    mem_target: float | None = None,
    note: str = "",
) -> dict[str, Any]:
    """One result row in the shape ``run.py`` prints (see its docstring)."""
    row: dict[str, Any] = {
        "case": case,
        "ours_s": ours.seconds,
        "deltalake_s": theirs.seconds if theirs else None,
        "ours_peak_mb": ours.peak_mb,
        "deltalake_peak_mb": theirs.peak_mb if theirs else None,
        "ours_cpu_s": ours.cpu_seconds,
        "deltalake_cpu_s": theirs.cpu_seconds if theirs else None,
        "time_ratio": ratio(ours.seconds, theirs.seconds if theirs else None),
        "mem_ratio": ratio(ours.peak_mb, theirs.peak_mb if theirs else None),
        "note": note,
    }
    targets = []
    if time_target is not None:
        row["time_target"] = time_target
        targets.append(f"time ≤ {time_target:g}x")
    if mem_target is not None:
        row["mem_target"] = mem_target
        targets.append(f"mem ≤ {mem_target:g}x")
    row["target"] = ", ".join(targets)
    return row


# --- synthetic tables ------------------------------------------------------------------


def _complete(path: Path, params: dict[str, Any]) -> bool:
    marker = path / ".complete"
    try:
        return json.loads(marker.read_text()) == params
    except (OSError, ValueError):
        return False


def _mark_complete(path: Path, params: dict[str, Any]) -> None:
    (path / ".complete").write_text(json.dumps(params))


def synthetic_table(commits: int, adds_per_commit: int = 10, partitions: int = 16) -> Path:
    """A JSON-only synthetic table (cached): the shape of make_synthetic_table.py."""
    params = {"kind": "json", "commits": commits, "adds_per_commit": adds_per_commit, "partitions": partitions}
    path = CACHE / "tables" / f"json-c{commits}-a{adds_per_commit}-p{partitions}"
    if _complete(path, params):
        return path
    if not GENERATOR.exists():
        raise FileNotFoundError(f"the table generator {GENERATOR} is missing (set DELTALOG_BENCH_GENERATOR)")
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    log.info("generating %s (%d commits x %d adds)", path.name, commits, adds_per_commit)
    t0 = time.perf_counter()
    cmd = [
        sys.executable,
        str(GENERATOR),
        str(path),
        "--commits",
        str(commits),
        "--adds-per-commit",
        str(adds_per_commit),
        "--partitions",
        str(partitions),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    info = json.loads(out.strip().splitlines()[-1])
    params_done = dict(params, live_files=info["live_files"])
    _mark_complete(path, params)
    (path / ".info").write_text(json.dumps(params_done))
    log.info("generated %s in %.1f s: %d live files", path.name, time.perf_counter() - t0, info["live_files"])
    return path


def table_info(path: Path) -> dict[str, Any]:
    """What the generator reported about a cached table (commits, live files, ...)."""
    return json.loads((path / ".info").read_text())


def checkpointed_table(
    commits: int, adds_per_commit: int = 10, partitions: int = 16, tail_commits: int = 50, remove_every: int = 5
) -> Path:
    """A synthetic table with a deltalake-written checkpoint at its last version plus ``tail_commits`` JSON commits.

    The tail continues the generator's pattern exactly (same file names, sizes, stats,
    and every ``remove_every``-th commit removing the oldest live files), so its removes
    hit files that live in the checkpoint: the superseded-row filter is exercised.
    """
    params = {
        "kind": "checkpoint",
        "commits": commits,
        "adds_per_commit": adds_per_commit,
        "partitions": partitions,
        "tail_commits": tail_commits,
    }
    path = CACHE / "tables" / f"cp-c{commits}-a{adds_per_commit}-p{partitions}-t{tail_commits}"
    if _complete(path, params):
        return path
    base = synthetic_table(commits, adds_per_commit, partitions)
    shutil.rmtree(path, ignore_errors=True)
    log.info("copying %s and writing a checkpoint at version %d with deltalake", base.name, commits - 1)
    shutil.copytree(base, path, ignore=shutil.ignore_patterns(".complete"))
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, deltalake; deltalake.DeltaTable(sys.argv[1]).create_checkpoint()",
            str(path),
        ],
        check=True,
    )
    log.info("checkpoint written in %.1f s", time.perf_counter() - t0)
    live = _append_tail(path, commits, adds_per_commit, partitions, tail_commits, remove_every)
    info = dict(params, live_files=live, checkpoint_version=commits - 1, version=commits - 1 + tail_commits)
    (path / ".info").write_text(json.dumps(info))
    _mark_complete(path, params)
    return path


def _append_tail(path: Path, commits: int, adds: int, partitions: int, tail: int, remove_every: int) -> int:
    """Write ``tail`` more commits in make_synthetic_table.py's pattern; return the live file count.

    The generator removes the oldest live files first, so the live files are exactly the
    files added at global positions ``removed .. added-1``: no log replay is needed to
    know which ones the next removes must name.
    """

    def name_of(k: int) -> tuple[str, dict[str, str], int]:
        v, i = divmod(k, adds)
        part = f"p{k % partitions}" if partitions else None
        fname = f"part-{v:07d}-{i:04d}-{uuid.UUID(int=v * 100000 + i)}.c000.snappy.parquet"
        return (f"part={part}/{fname}" if part else fname), ({"part": part} if part else {}), 1024 + i

    removed = sum(adds // 2 for v in range(1, commits) if v % remove_every == 0)
    added = commits * adds
    ts = 1_700_000_000_000 + commits * 1000
    log_dir = path / "_delta_log"
    for v in range(commits, commits + tail):
        ts += 1000
        actions: list[dict[str, Any]] = [
            {"commitInfo": {"timestamp": ts, "operation": "WRITE", "operationParameters": {"mode": "Append"}}}
        ]
        for i in range(adds):
            p, pv, size = name_of(v * adds + i)
            stats = {"numRecords": 100, "minValues": {"id": v}, "maxValues": {"id": v + 99}, "nullCount": {"id": 0}}
            actions.append(
                {
                    "add": {
                        "path": p,
                        "partitionValues": pv,
                        "size": size,
                        "modificationTime": ts,
                        "dataChange": True,
                        "stats": json.dumps(stats),
                    }
                }
            )
        added += adds
        if v % remove_every == 0:
            for k in range(removed, removed + adds // 2):
                p, pv, size = name_of(k)
                actions.append(
                    {
                        "remove": {
                            "path": p,
                            "deletionTimestamp": ts,
                            "dataChange": True,
                            "partitionValues": pv,
                            "size": size,
                            "extendedFileMetadata": True,
                        }
                    }
                )
            removed += adds // 2
        target = log_dir / f"{v:020d}.json"
        target.write_text("\n".join(json.dumps(a, separators=(",", ":")) for a in actions) + "\n")
        os.utime(target, (ts / 1000, ts / 1000))
    return added - removed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("child", help="internal: measure one call in this process")
    c.add_argument("module")
    c.add_argument("func")
    c.add_argument("args_json")
    c.add_argument("preload", nargs="?", default="")
    a = ap.parse_args()
    if a.cmd == "child":
        _child(a.module, a.func, a.args_json, a.preload)


if __name__ == "__main__":
    main()
