"""Commits, deltalog vs deltalake (issue #3, section 5).

Cases (``--scale full``; ``small`` is a quick development run):

- Commit latency with a warm snapshot on local disk: a 10-file append committed
  200 times (small: 40). The snapshot is loaded before the clock starts; the
  clock covers building the transaction and committing it (post-commit hooks
  included, as a user gets them). deltalake: ``DeltaTable.create_write_transaction``
  with 10 ``AddAction`` on a loaded table. Target: our median at most 5 ms.
- Contention: 8 writer processes x 40 appends each (small: 4 x 10) to one local
  table, each append writing a one-row Parquet file and committing it.
  deltalake: ``write_deltalake(mode="append")`` (15 commit retries by default);
  ours: a fresh snapshot plus a blind-append transaction. Target: ours lands all
  appends, in at most 1.0x deltalake's total time.

Both sides run in fresh processes (``common.measure``); the contention case times
from the moment every writer has started and imported until the last one ends.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import CACHE, measure

log = logging.getLogger("benchmarks.commit")

SCALES = {
    "full": {"commits": 200, "files": 10, "writers": 8, "appends": 40},
    "small": {"commits": 40, "files": 10, "writers": 4, "appends": 10},
}
OURS_PRELOAD = [
    "pyarrow",
    "pyarrow.parquet",
    "deltalog.table",
    "deltalog.commit.transaction",
    "deltalog.commit.post_commit",
]
THEIRS_PRELOAD = ["pyarrow", "deltalake"]
HERE = Path(__file__).resolve()


def _adds(i: int, files: int) -> list[dict[str, Any]]:
    return [
        {
            "path": f"part-{i:05d}-{k:02d}.parquet",
            "size": 1000 + k,
            "partitionValues": {},
            "modificationTime": 1_700_000_000_000 + i,
            "dataChange": True,
            "stats": '{"numRecords":10}',
        }
        for k in range(files)
    ]


# --- commit latency (each function runs in a fresh process) ------------------------------


def ours_latency(path: str, commits: int, files: int) -> dict[str, Any]:
    import pyarrow as pa

    from deltalog.commit.standard_post_commit import standard_hooks
    from deltalog.commit.transaction import Transaction
    from deltalog.create import create_table
    from deltalog.table import DeltaTable

    create_table(path, pa.schema([("id", pa.int64())]))
    table = DeltaTable(path)
    standard_hooks()  # the hook modules are imported once, not inside the first commit
    latencies = []
    for i in range(commits):
        snapshot = table.snapshot()  # warm: loaded before the clock starts
        t0 = time.perf_counter()
        txn = Transaction(table.storage, snapshot, operation="WRITE", operation_parameters={"mode": "Append"})
        txn.add(_adds(i, files))
        txn.commit()
        latencies.append(time.perf_counter() - t0)
    return {"latencies": latencies, "version": table.version()}


def theirs_latency(path: str, commits: int, files: int) -> dict[str, Any]:
    import deltalake
    import pyarrow as pa
    from deltalake.transaction import AddAction

    schema = pa.schema([("id", pa.int64())])
    deltalake.write_deltalake(path, schema.empty_table())
    table = deltalake.DeltaTable(path)
    latencies = []
    for i in range(commits):
        table.update_incremental()  # warm: brought up to date before the clock starts
        actions = [
            AddAction(a["path"], a["size"], {}, a["modificationTime"], True, a["stats"]) for a in _adds(i, files)
        ]
        t0 = time.perf_counter()
        table.create_write_transaction(actions, mode="append", schema=schema)
        latencies.append(time.perf_counter() - t0)
    return {"latencies": latencies, "version": table.version()}


# --- contention ------------------------------------------------------------------------


def _writer_ours(path: str, worker: int, appends: int, go: str) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from deltalog.commit.transaction import Transaction
    from deltalog.table import DeltaTable

    table = DeltaTable(path)
    _wait(go)
    landed = failed = attempts = 0
    for i in range(appends):
        rel = f"ours-{worker}-{i}.parquet"
        full = os.path.join(path, rel)
        pq.write_table(pa.table({"id": pa.array([worker * 1000 + i], pa.int64())}), full)
        try:
            txn = Transaction(
                table.storage, table.snapshot(), operation="WRITE", operation_parameters={"mode": "Append"}
            )
            txn.add([{"path": rel, "size": os.path.getsize(full), "partitionValues": {}, "stats": '{"numRecords":1}'}])
            attempts += txn.commit().attempts
            landed += 1
        except Exception:  # noqa: BLE001 - count failures like the deltalake side does
            failed += 1
    return {"landed": landed, "failed": failed, "attempts": attempts, "end": time.time()}


def _writer_theirs(path: str, worker: int, appends: int, go: str) -> dict[str, Any]:
    import deltalake
    import pyarrow as pa

    _wait(go)
    landed = failed = 0
    for i in range(appends):
        try:
            deltalake.write_deltalake(path, pa.table({"id": pa.array([worker * 1000 + i], pa.int64())}), mode="append")
            landed += 1
        except Exception:  # noqa: BLE001 - deltalake raises CommitFailedError after its retries
            failed += 1
    return {"landed": landed, "failed": failed, "end": time.time()}


def _wait(go: str) -> None:
    while not os.path.exists(go):
        time.sleep(0.002)


def contention(side: str, path: str, writers: int, appends: int) -> dict[str, Any]:
    """Start ``writers`` processes, release them together, wait for all; report what landed and when."""
    import pyarrow as pa

    schema = pa.schema([("id", pa.int64())])
    if side == "ours":
        from deltalog.create import create_table

        create_table(path, schema)
    else:
        import deltalake

        deltalake.write_deltalake(path, schema.empty_table())
    go = path + ".go"
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE), "writer", side, path, str(w), str(appends), go],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]
    time.sleep(3.0)  # every writer has imported and is polling for the go file
    start = time.time()
    Path(go).touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"writer failed: {err[-2000:]}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    elapsed = max(o["end"] for o in outs) - start
    result = {
        "landed": sum(o["landed"] for o in outs),
        "failed": sum(o["failed"] for o in outs),
        "seconds": elapsed,
    }
    if side == "ours":
        result["mean_attempts"] = sum(o["attempts"] for o in outs) / max(1, result["landed"])
    return result


# --- the benchmark -------------------------------------------------------------------------


def run(args: Any) -> list[dict[str, Any]]:
    scale = SCALES[args.scale]
    work = Path(tempfile.mkdtemp(prefix="bench-commit-", dir=CACHE if CACHE.exists() else None))
    rows = []
    try:
        n, files = scale["commits"], scale["files"]
        log.info("commit latency: %d commits of %d adds each side", n, files)
        ours = measure(__name__, "ours_latency", [str(work / "lat-ours"), n, files], preload=OURS_PRELOAD).result
        theirs = measure(
            __name__, "theirs_latency", [str(work / "lat-theirs"), n, files], preload=THEIRS_PRELOAD
        ).result
        ours_med, theirs_med = statistics.median(ours["latencies"]), statistics.median(theirs["latencies"])
        ours_p90 = statistics.quantiles(ours["latencies"], n=10)[-1]
        rows.append(
            {
                "case": f"commit latency, warm snapshot, {files}-file append (median of {n})",
                "ours_s": ours_med,
                "deltalake_s": theirs_med,
                "target": "median ≤ 5 ms",
                "met": ours_med <= 0.005 and ours["version"] == n,
                "note": f"ours p90 {ours_p90 * 1000:.1f} ms; medians {ours_med * 1000:.2f} ms vs "
                f"{theirs_med * 1000:.2f} ms; hooks on",
            }
        )
        w, a = scale["writers"], scale["appends"]
        log.info("contention: %d writers x %d appends each side", w, a)
        ours_c = measure(__name__, "contention", ["ours", str(work / "c-ours"), w, a], preload=OURS_PRELOAD).result
        theirs_c = measure(
            __name__, "contention", ["theirs", str(work / "c-theirs"), w, a], preload=THEIRS_PRELOAD
        ).result
        total = w * a
        rows.append(
            {
                "case": f"contention: {w} writers x {a} appends (local)",
                "ours_s": ours_c["seconds"],
                "deltalake_s": theirs_c["seconds"],
                "time_target": 1.0,
                "target": f"{total}/{total} landed, time ≤ 1x",
                "met": ours_c["landed"] == total and ours_c["seconds"] <= theirs_c["seconds"],
                "note": f"landed: ours {ours_c['landed']}/{total}, deltalake {theirs_c['landed']}/{total} "
                f"({theirs_c['failed']} failed); ours {ours_c['mean_attempts']:.2f} attempts per append",
            }
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


if __name__ == "__main__":
    if sys.argv[1] == "writer":
        side, path, worker, appends, go = sys.argv[2:7]
        fn = _writer_ours if side == "ours" else _writer_theirs
        print(json.dumps(fn(path, int(worker), int(appends), go)))
