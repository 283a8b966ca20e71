"""Benchmark dispatcher: ``python benchmarks/run.py <area> [--scale small|full] [--repeat N]``.

Imports ``benchmarks/bench_<area>.py`` and calls its ``run(args) -> list[dict]``. A
module may also define ``add_arguments(parser)`` for options of its own (parsed
together with the common ones, so ``run.py vacuum --help`` lists them).

Each row is a dict; the keys run.py knows (any may be missing, extra keys are kept
in ``--json`` output and shown in the markdown table only with ``--all-columns``):

- ``case``: what was measured (include the table shape, e.g. "snapshot 90k files, JSON log")
- ``ours_s`` / ``deltalake_s``: seconds (deltalog / deltalake, same run, same machine)
- ``ours_cpu_s`` / ``deltalake_cpu_s``: CPU seconds (user + system, all threads) of those runs
- ``ours_peak_mb`` / ``deltalake_peak_mb``: peak RSS in MiB (fresh process each)
- ``time_ratio`` / ``mem_ratio``: ours/theirs (computed here when missing)
- ``spark_s`` / ``spark_start_s`` / ``spark_peak_mb``: Delta Spark ``local[2]`` (``--spark``): the
  operation's seconds, its session (JVM) start apart, the JVM's peak RSS; ``spark_time_ratio`` /
  ``spark_mem_ratio`` ours/Delta Spark
- ``target``: the issue's target as text, e.g. "time ≤ 0.5x"; ``time_target`` /
  ``mem_target`` as numbers make run.py print whether it is met
- ``note``: anything the reader needs to interpret the row

``benchmarks/common.py`` has the helpers (fresh-process measurement, synthetic tables,
``compare_row``). Run with the project venv: ``.venv/bin/python benchmarks/run.py snapshot``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import platform
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

COLUMNS = [
    ("case", "case"),
    ("ours_s", "ours (s)"),
    ("deltalake_s", "deltalake (s)"),
    ("time_ratio", "time ours/theirs"),
    ("ours_cpu_s", "ours CPU (s)"),
    ("deltalake_cpu_s", "deltalake CPU (s)"),
    ("ours_peak_mb", "ours peak (MiB)"),
    ("deltalake_peak_mb", "deltalake peak (MiB)"),
    ("mem_ratio", "mem ours/theirs"),
    ("spark_s", "Delta Spark (s)"),
    ("spark_start_s", "Spark session start (s)"),
    ("spark_time_ratio", "time ours/Spark"),
    ("spark_peak_mb", "Delta Spark peak (MiB)"),
    ("spark_mem_ratio", "mem ours/Spark"),
    ("target", "target"),
    ("met", "met"),
    ("note", "note"),
]


def available_areas() -> list[str]:
    return sorted(p.stem.removeprefix("bench_") for p in BENCH_DIR.glob("bench_*.py"))


def _fmt(value: Any, key: str) -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        if key.endswith("_ratio"):
            return f"{value:.3f}x" if value < 0.1 else f"{value:.2f}x"
        if key.endswith("_mb"):
            return f"{value:.0f}"
        if key.endswith("_cpu_s"):
            return f"{value:.2f}"
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    return str(value).replace("|", "\\|")


def complete_row(row: dict[str, Any]) -> dict[str, Any]:
    """Fill in ratios and whether the targets are met, from the raw numbers."""
    row = dict(row)
    for ratio_key, ours, theirs in (
        ("time_ratio", "ours_s", "deltalake_s"),
        ("mem_ratio", "ours_peak_mb", "deltalake_peak_mb"),
    ):
        if row.get(ratio_key) is None and row.get(ours) is not None and row.get(theirs):
            row[ratio_key] = row[ours] / row[theirs]
    checks = []
    for ratio_key, target_key in (("time_ratio", "time_target"), ("mem_ratio", "mem_target")):
        if row.get(target_key) is not None and row.get(ratio_key) is not None:
            checks.append(row[ratio_key] <= row[target_key])
    if checks and "met" not in row:
        row["met"] = all(checks)
    return row


def markdown(rows: list[dict[str, Any]], all_columns: bool = False) -> str:
    cols = [(k, title) for k, title in COLUMNS if any(r.get(k) not in (None, "") for r in rows)]
    if all_columns:
        known = {k for k, _ in cols}
        cols += [(k, k) for r in rows for k in r if k not in known and not known.add(k)]
    lines = ["| " + " | ".join(t for _, t in cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(k), k) for k, _ in cols) + " |")
    return "\n".join(lines)


def build_parser(area_module: Any | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="deltalog benchmarks, side by side with deltalake")
    p.add_argument("area", help=f"one of: {', '.join(available_areas())}")
    p.add_argument("--scale", choices=["small", "full"], default="full", help="small: quick development run")
    p.add_argument("--repeat", type=int, default=3, help="fresh processes per measurement; the fastest counts")
    p.add_argument("--json", action="store_true", help="also print the rows as one JSON object")
    p.add_argument("--all-columns", action="store_true", help="show every key of the rows in the table")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress logging")
    p.add_argument(
        "--spark",
        action="store_true",
        help="add the Delta Spark column (local[2], session start shown apart) where the area has one",
    )
    if area_module is not None and hasattr(area_module, "add_arguments"):
        area_module.add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("area", nargs="?")
    known, _ = pre.parse_known_args(argv)
    module = None
    if known.area and not known.area.startswith("-"):
        if known.area not in available_areas():
            print(
                f"error: no benchmark area {known.area!r}; available: {', '.join(available_areas())}", file=sys.stderr
            )
            return 2
        module = importlib.import_module(f"bench_{known.area}")
    args = build_parser(module).parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    t0 = time.perf_counter()
    rows = [complete_row(r) for r in module.run(args)]
    elapsed = time.perf_counter() - t0
    print(f"## {args.area} (scale {args.scale}, best of {args.repeat} fresh processes)\n")
    print(markdown(rows, args.all_columns))
    print(
        f"\n{platform.python_implementation()} {platform.python_version()}, {platform.machine()}, "
        f"{_cpu_count()} CPUs, {_versions()}; total {elapsed:.0f} s"
    )
    if args.json:
        print(json.dumps({"area": args.area, "scale": args.scale, "rows": rows}, default=str))
    return 0


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for dist in ("airflow-provider-deltalog", "deltalake", "pyarrow"):
        try:
            out.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            continue
    return ", ".join(out)


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


if __name__ == "__main__":
    sys.exit(main())
