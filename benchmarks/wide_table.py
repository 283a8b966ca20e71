"""A wide Delta table of the shape users compact (issue 19): many small files, many column types.

Columns: ``id`` (long), ``user`` (high-cardinality string), ``category`` (low-cardinality
string), ``amount`` (decimal(18,2)), ``price`` (decimal(38,10)), ``event_ts`` (timestamp,
UTC), ``event_date`` (date), ``active`` (boolean), ``score`` (double), ``payload``
(struct<code: int, label: string, weight: double>), ``tags`` (list<string>) and
``region`` (string, 8 values; the partition column of the partitioned variant).

Written by ``deltalake.write_deltalake`` in appends of about 1 MB per file: the
partitioned variant gets 8 files per append (one per region), the unpartitioned one 1
file per append. The number of appends is chosen from the first append's size so the
table reaches ``size_mb`` on disk. Data is random but seeded, so a rebuild is the same.

Cached under ``~/.cache/deltalog/bench-wide-v{GENERATOR_VERSION}-{size}mb-{p8|flat}``
(``DELTALOG_BENCH_WIDE_CACHE`` overrides the parent folder); a ``.complete`` marker with the
parameters tells a finished table from an interrupted one. Bump ``GENERATOR_VERSION``
whenever the data changes.

Run alone: ``python benchmarks/wide_table.py --size-mb 200 [--unpartitioned]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("benchmarks.wide_table")

GENERATOR_VERSION = 1
PARTITIONS = 8
FILE_MB = 1.0
CACHE_ROOT = Path(os.environ.get("DELTALOG_BENCH_WIDE_CACHE", Path.home() / ".cache" / "deltalog"))
REGIONS = [f"region-{i}" for i in range(PARTITIONS)]
CATEGORIES = ["books", "games", "music", "garden", "tools", "food", "toys", "sport", "home", "auto"]


def table_path(size_mb: int, partitioned: bool) -> Path:
    return CACHE_ROOT / f"bench-wide-v{GENERATOR_VERSION}-{size_mb}mb-{'p8' if partitioned else 'flat'}"


def make_batch(rng: Any, start: int, rows: int) -> Any:
    """``rows`` random rows with ids from ``start`` (every region present)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = np.arange(start, start + rows, dtype=np.int64)
    user = pc.binary_join_element_wise("user-", pc.cast(pa.array(rng.integers(0, 50_000_000, rows)), pa.string()), "")
    category = pa.array(np.array(CATEGORIES, dtype=object)[rng.integers(0, len(CATEGORIES), rows)], pa.string())
    amount = pa.array(rng.integers(0, 10_000_000, rows) / 100.0).cast(pa.decimal128(18, 2))
    price_units = pa.array(rng.integers(0, 10**12, rows), pa.int64()).cast(pa.decimal128(38, 10))
    ts = pa.array(1_700_000_000_000_000 + rng.integers(0, 86_400 * 365 * 10**6, rows), pa.int64()).cast(
        pa.timestamp("us", tz="UTC")
    )
    date = pa.array((ts.cast(pa.int64()).to_numpy() // (86_400 * 10**6)).astype(np.int32), pa.int32()).cast(pa.date32())
    active = pa.array(rng.random(rows) < 0.7)
    score = rng.normal(50.0, 15.0, rows)
    score_arr = pa.array(score, mask=rng.random(rows) < 0.05)
    codes = pa.array(rng.integers(0, 1000, rows).astype(np.int32))
    labels = pc.binary_join_element_wise("label-", pc.cast(codes, pa.string()), "")
    payload = pa.StructArray.from_arrays([codes, labels, pa.array(rng.random(rows))], ["code", "label", "weight"])
    counts = rng.integers(0, 4, rows)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    tag_values = pa.array(np.array(CATEGORIES, dtype=object)[rng.integers(0, len(CATEGORIES), int(offsets[-1]))])
    tags = pa.ListArray.from_arrays(pa.array(offsets), tag_values)
    region = pa.array(np.array(REGIONS, dtype=object)[rng.integers(0, PARTITIONS, rows)], pa.string())
    return pa.table(
        {
            "id": ids,
            "user": user,
            "category": category,
            "amount": amount,
            "price": price_units,
            "event_ts": ts,
            "event_date": date,
            "active": active,
            "score": score_arr,
            "payload": payload,
            "tags": tags,
            "region": region,
        }
    )


def _complete(path: Path, params: dict[str, Any]) -> dict[str, Any] | None:
    try:
        info = json.loads((path / ".complete").read_text())
    except (OSError, ValueError):
        return None
    return info if info.get("params") == params else None


def build(size_mb: int, partitioned: bool) -> tuple[Path, dict[str, Any]]:
    """The cached table (built on first use) and its info: files, bytes, rows, appends."""
    import numpy as np
    from deltalake import write_deltalake

    path = table_path(size_mb, partitioned)
    params = {"version": GENERATOR_VERSION, "size_mb": size_mb, "partitioned": partitioned}
    done = _complete(path, params)
    if done is not None:
        return path, done
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(19)
    files_per_append = PARTITIONS if partitioned else 1
    partition_by = ["region"] if partitioned else None
    t0 = time.perf_counter()
    # A probe append sizes the rest: rows per append so each file is about FILE_MB.
    probe_rows = 20_000 * files_per_append
    write_deltalake(str(path), make_batch(rng, 0, probe_rows), mode="append", partition_by=partition_by)
    probe_bytes = _data_bytes(path)
    rows = max(1000, int(probe_rows * FILE_MB * 1e6 * files_per_append / probe_bytes))
    appends = max(1, round((size_mb * 1e6 - probe_bytes) / (files_per_append * FILE_MB * 1e6)))
    start = probe_rows
    for i in range(appends):
        write_deltalake(str(path), make_batch(rng, start, rows), mode="append", partition_by=partition_by)
        start += rows
        if i % 50 == 49:
            log.info("%s: %d of %d appends", path.name, i + 1, appends)
    files = [os.path.join(d, f) for d, _, fs in os.walk(path) if "_delta_log" not in d for f in fs]
    files = [f for f in files if f.endswith(".parquet")]
    info = {
        "params": params,
        "files": len(files),
        "bytes": sum(os.path.getsize(f) for f in files),
        "rows": start,
        "partitions": PARTITIONS if partitioned else 0,
    }
    (path / ".complete").write_text(json.dumps(info))
    log.info(
        "built %s: %d files, %.0f MB, %d rows in %.0f s",
        path.name,
        info["files"],
        info["bytes"] / 1e6,
        info["rows"],
        time.perf_counter() - t0,
    )
    return path, info


def _data_bytes(path: Path) -> int:
    return sum(
        os.path.getsize(os.path.join(d, f))
        for d, _, fs in os.walk(path)
        if "_delta_log" not in d
        for f in fs
        if f.endswith(".parquet")
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=200)
    ap.add_argument("--unpartitioned", action="store_true")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    path, info = build(a.size_mb, not a.unpartitioned)
    print(json.dumps({"path": str(path), **info}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
