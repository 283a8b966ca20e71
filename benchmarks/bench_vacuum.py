"""Vacuum planning, deltalog vs deltalake (issue #5, section 5).

Case (``--scale full``; ``small`` uses a tenth of the commits for development):

- Full-mode dry run on the synthetic 10,000-commit table with its data files on
  disk (``make_synthetic_table.py --data-files``: ~90,000 live files, ~10,000
  removed, 16 partitions, JSON log only). Both sides use a zero retention with the
  safety check overridden, so that every removed file is a candidate (the
  generator dates the log in 2023 but the empty data files are written now):
  ``vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True)``
  against deltalake's ``vacuum(retention_hours=0, dry_run=True,
  enforce_retention_duration=False, full=True)``. Target: time at most 0.5x
  deltalake's; peak memory reported. Both must name the same files.
- Lite-mode dry run on the same table (informational): ours reads the remove
  actions of the log since the last vacuum; deltalake's lite mode lists the
  snapshot's expired tombstones.
- UniForm (issue 36, ``--case iceberg``): the same table (hard-linked copy) with Iceberg
  metadata written by pyiceberg whose current snapshot references every data file on disk
  (~100,000: the live files and the removed ones), so every removed file is kept for Iceberg
  readers. Ours reads the metadata, the manifest list and the manifest and keeps them;
  deltalake knows no Iceberg and would delete the removed ones (the ratio is shown, the file
  lists differ by design). The row also gives what the Iceberg side costs: ours on the plain
  table measured beside it, the difference per referenced file in time and peak memory, and
  the Iceberg reading alone (``IcebergGuard.load``) per file.

Dry runs only, so the cached table is reused unchanged across runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import CACHE, GENERATOR, compare_row, measure

log = logging.getLogger("benchmarks.vacuum")

SCALES = {"full": 10_000, "small": 1_000}
#: Imports are done before the clock starts (common.measure). pandas is on both lists because
#: pyarrow imports it lazily the first time the snapshot replay builds certain scalars
#: (``pa.scalar`` in arrow_replay), a one-off ~0.5 s in a fresh process that is import time,
#: not vacuum work; reported to the snapshot owner.
OURS_PRELOAD = ["pyarrow", "pyarrow.compute", "pyarrow.parquet", "pandas", "deltalog.table", "deltalog.vacuuming"]
THEIRS_PRELOAD = ["pyarrow", "pandas", "deltalake"]
#: pyiceberg's import (pydantic models, about a second, once per process) is measured on its own.
ICEBERG_PRELOAD = [
    *OURS_PRELOAD,
    "pyiceberg.table.metadata",
    "pyiceberg.manifest",
    "pyiceberg.avro.file",
    "pyiceberg.avro.resolver",
]


def _digest(paths: list[str]) -> dict[str, Any]:
    """What both sides must agree on: how many files, and which."""
    return {"files": len(paths), "sha1": hashlib.sha1("\n".join(sorted(paths)).encode()).hexdigest()}


# --- measured in a fresh process (see common.measure) ----------------------------------


def ours_full_dry_run(path: str) -> dict[str, Any]:
    from deltalog.vacuuming import vacuum

    result = vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True)
    return _digest(result.plan.files.column("path").to_pylist())


def deltalake_full_dry_run(path: str) -> dict[str, Any]:
    import deltalake

    dt = deltalake.DeltaTable(path)
    return _digest(dt.vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False, full=True))


def ours_lite_dry_run(path: str) -> dict[str, Any]:
    from deltalog.vacuuming import vacuum

    result = vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True, mode="lite")
    return _digest(result.plan.files.column("path").to_pylist())


def deltalake_lite_dry_run(path: str) -> dict[str, Any]:
    import deltalake

    dt = deltalake.DeltaTable(path)
    return _digest(dt.vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False, full=False))


def ours_iceberg_dry_run(path: str) -> dict[str, Any]:
    from deltalog.vacuuming import vacuum

    result = vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True)
    assert result.plan is not None
    return {**_digest(result.plan.files.column("path").to_pylist()), "kept": result.num_kept_for_iceberg}


def import_pyiceberg() -> dict[str, Any]:
    """What vacuum imports of pyiceberg on a table with Iceberg metadata (once per process)."""
    for name in ICEBERG_PRELOAD[len(OURS_PRELOAD) :]:
        __import__(name)
    return {}


def ours_iceberg_read(path: str) -> dict[str, Any]:
    """Only the Iceberg side: the metadata JSON, the manifest list, the manifests, the labelled path set."""
    from deltalog.storage.filesystem import Storage
    from deltalog.vacuuming.iceberg_guard import IcebergGuard

    guard = IcebergGuard.load(Storage(path), 0)
    assert guard is not None
    return {"referenced": len(guard.protected), "entries": guard.references.entries_read}


# --- the table ---------------------------------------------------------------------------


def uniform_table(base: Path, info: dict[str, Any]) -> tuple[Path, int]:
    """``base`` hard-linked into a sibling folder, plus Iceberg metadata (pyiceberg's writer) whose current
    snapshot references every data file on disk; cached. Returns the folder and the files referenced."""
    path = base.parent / f"{base.name}-iceberg"
    marker = path / ".complete"
    try:
        done = json.loads(marker.read_text())
        if done.get("base") == info:
            return path, int(done["referenced"])
    except (OSError, ValueError):
        pass
    shutil.rmtree(path, ignore_errors=True)
    catalog_dir = base.parent / f"{base.name}-iceberg-catalog"
    shutil.rmtree(catalog_dir, ignore_errors=True)
    t0 = time.perf_counter()
    shutil.copytree(base, path, copy_function=os.link, ignore=shutil.ignore_patterns(".complete"))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from iceberg_helpers import append_iceberg, data_file, iceberg_catalog, register_iceberg_table

    files = sorted(
        str(Path(d) / n)
        for d, _, names in os.walk(path)
        if "_delta_log" not in d
        for n in names
        if n.endswith(".parquet")
    )
    table = register_iceberg_table(iceberg_catalog(str(catalog_dir)), "file://" + str(path))
    append_iceberg(table, [data_file("file://" + f, footer=False, size=1, records=1) for f in files])
    marker.write_text(json.dumps({"base": info, "referenced": len(files)}))
    log.info("UniForm copy with %d Iceberg-referenced files written in %.1f s", len(files), time.perf_counter() - t0)
    return path, len(files)


def synthetic_table_with_files(commits: int, adds: int = 10, partitions: int = 16) -> tuple[Path, dict[str, Any]]:
    """The generator's table with (empty) data files on disk, cached under ``.bench/tables``."""
    params = {"kind": "json+data", "commits": commits, "adds_per_commit": adds, "partitions": partitions}
    path = CACHE / "tables" / f"data-c{commits}-a{adds}-p{partitions}"
    marker = path / ".complete"
    try:
        info = json.loads(marker.read_text())
        if {k: info.get(k) for k in params} == params:
            return path, info
    except (OSError, ValueError):
        pass
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    log.info("generating %s (%d commits x %d adds, data files)", path.name, commits, adds)
    t0 = time.perf_counter()
    cmd = [sys.executable, str(GENERATOR), str(path), "--commits", str(commits), "--adds-per-commit", str(adds)]
    cmd += ["--partitions", str(partitions), "--data-files"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    info = dict(params, live_files=json.loads(out.strip().splitlines()[-1])["live_files"])
    marker.write_text(json.dumps(info))
    log.info("generated %s in %.1f s", path.name, time.perf_counter() - t0)
    return path, info


# --- the benchmark ---------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--case", choices=["full", "lite", "iceberg"], action="append", help="only these cases (repeatable)"
    )


def _compare(case: str, path: str, ours_fn: str, theirs_fn: str, repeat: int, **kw: Any) -> dict[str, Any]:
    log.info("%s: deltalog", case)
    ours = measure("bench_vacuum", ours_fn, [path], preload=OURS_PRELOAD, repeat=repeat)
    log.info("%s: deltalog %.2f s, %.0f MiB; now deltalake", case, ours.seconds, ours.peak_mb)
    theirs = measure("bench_vacuum", theirs_fn, [path], preload=THEIRS_PRELOAD, repeat=repeat)
    log.info("%s: deltalake %.2f s, %.0f MiB", case, theirs.seconds, theirs.peak_mb)
    same = ours.result == theirs.result
    row = compare_row(case, ours, theirs, **kw)
    row["files"] = f"{ours.result['files']:,} vs {theirs.result['files']:,}"
    row["note"] = (row.get("note") or "") + ("same files" if same else "DIFFERENT file lists")
    return row


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    cases = set(getattr(args, "case", None) or ["full", "lite", "iceberg"])
    path, info = synthetic_table_with_files(SCALES[args.scale])
    shape = f"{info['commits']:,} JSON commits, {info['live_files']:,} live files + removed ones on disk"
    rows = []
    if "full" in cases:
        row = _compare(
            f"vacuum full dry run: {shape}",
            str(path),
            "ours_full_dry_run",
            "deltalake_full_dry_run",
            args.repeat,
            time_target=0.5,
        )
        if "DIFFERENT" in row["note"]:
            raise RuntimeError(f"full dry run: deltalog and deltalake disagree on the files to delete ({row['files']})")
        if args.spark:
            import spark_side

            log.info("full dry run: Delta Spark")
            got = spark_side.add_column(row, "vacuum_dry_run", [str(path), None, 0])
            if got is not None:
                row["files"] += f" vs Delta Spark {got:,}"
        rows.append(row)
    if "lite" in cases:
        row = _compare(
            f"vacuum lite dry run: {shape}", str(path), "ours_lite_dry_run", "deltalake_lite_dry_run", args.repeat
        )
        row["note"] = (
            "ours: removes in the log since the last vacuum; deltalake: the snapshot's expired tombstones; "
            + row["note"]
        )
        rows.append(row)
    if "iceberg" in cases:
        rows.append(_iceberg_row(path, info, shape, args.repeat))
    return rows


def _iceberg_row(path: Path, info: dict[str, Any], shape: str, repeat: int) -> dict[str, Any]:
    uniform, referenced = uniform_table(path, info)
    log.info("iceberg: deltalog on the plain table")
    plain = measure("bench_vacuum", "ours_full_dry_run", [str(path)], preload=OURS_PRELOAD, repeat=repeat)
    log.info("iceberg: deltalog on the UniForm copy")
    ours = measure("bench_vacuum", "ours_iceberg_dry_run", [str(uniform)], preload=ICEBERG_PRELOAD, repeat=repeat)
    alone = measure("bench_vacuum", "ours_iceberg_read", [str(uniform)], preload=ICEBERG_PRELOAD, repeat=repeat)
    imported = measure("bench_vacuum", "import_pyiceberg", [], preload=OURS_PRELOAD, repeat=repeat)
    log.info("iceberg: deltalake on the UniForm copy")
    theirs = measure("bench_vacuum", "deltalake_full_dry_run", [str(uniform)], preload=THEIRS_PRELOAD, repeat=repeat)
    row = compare_row(
        f"vacuum full dry run, UniForm: {shape}, {referenced:,} files in Iceberg's snapshot", ours, theirs
    )
    per_file_us = (ours.seconds - plain.seconds) / referenced * 1e6
    per_file_cpu_us = ((ours.cpu_seconds or 0.0) - (plain.cpu_seconds or 0.0)) / referenced * 1e6
    alone_cpu_us = (alone.cpu_seconds or 0.0) / referenced * 1e6
    per_file_bytes = (ours.peak_mb - plain.peak_mb) * 1024 * 1024 / referenced
    alone_us = alone.seconds / referenced * 1e6
    alone_bytes = (alone.peak_mb - alone.base_mb) * 1024 * 1024 / referenced
    row["files"] = (
        f"{ours.result['files']:,} deleted, {ours.result['kept']:,} kept for Iceberg vs {theirs.result['files']:,}"
    )
    row["note"] = (
        f"ours on the plain table {plain.seconds:.2f} s (CPU {plain.cpu_seconds or 0:.2f} s) / {plain.peak_mb:.0f} MiB; "
        f"the Iceberg side adds {per_file_us:.1f} us ({per_file_cpu_us:.1f} us of CPU) and {per_file_bytes:.0f} bytes "
        f"of peak per referenced file (reading it alone: {alone.seconds:.2f} s, {alone_us:.1f} us ({alone_cpu_us:.1f} "
        f"us of CPU) and {alone_bytes:.0f} bytes a file); importing pyiceberg once "
        f"costs {imported.seconds:.2f} s and {imported.peak_mb - imported.base_mb:.0f} MiB (not in the figures above); "
        "deltalake does not know Iceberg (its list names the files Iceberg readers need)"
    )
    row["iceberg_us_per_file"] = round(per_file_us, 2)
    row["iceberg_cpu_us_per_file"] = round(per_file_cpu_us, 2)
    row["iceberg_bytes_per_file"] = round(per_file_bytes, 1)
    return row
