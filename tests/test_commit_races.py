"""Commits under contention and crashes, with real processes.

- Races: 8 processes x 50 blind appends, on a local table and on the local S3
  server: every append lands, versions are contiguous, no version has two
  writers, and deltalake reads back exactly the rows written.
- Idempotency: the same commit request with the same appId/version from two
  processes at once lands exactly once.
- Crash: a process killed while committing leaves the old or the new version,
  never a partial version file.

The workers are this file run as a script (``python test_commit_races.py ...``).
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS, APPENDS = 8, 50


# --- workers (run in subprocesses) --------------------------------------------------------


def _wait_for(go_file: str) -> None:
    """Start together: imports done, every worker hits the log at the same moment."""
    deadline = time.time() + 120
    while not os.path.exists(go_file) and time.time() < deadline:
        time.sleep(0.005)


def worker_append(uri: str, options: dict[str, Any], worker: int, count: int, go_file: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from deltalog import DeltaTable
    from deltalog.commit.transaction import Transaction

    table = DeltaTable(uri, options)
    storage = table.storage
    _wait_for(go_file)
    out = []
    for i in range(count):
        n = 1 + (worker + i) % 3
        data = pa.table({"id": pa.array([worker * 100_000 + i * 10 + k for k in range(n)], pa.int64())})
        rel = f"w{worker}-{i}.parquet"
        buf = io.BytesIO()
        pq.write_table(data, buf)
        storage.fs.pipe_file(storage.join(rel), buf.getvalue())
        size = len(buf.getvalue())
        txn = Transaction(storage, table.snapshot(), operation="WRITE", operation_parameters={"mode": "Append"})
        txn.add([{"path": rel, "size": size, "partitionValues": {}, "stats": json.dumps({"numRecords": n})}])
        result = txn.commit()
        out.append({"version": result.version, "attempts": result.attempts, "rows": n, "txn_id": result.txn_id})
    print(json.dumps(out))


def worker_request(uri: str, request: str, app_id: str, version: int, go_file: str) -> None:
    from deltalog.ingest import commit_request

    _wait_for(go_file)
    result = commit_request(uri, request, app_id=app_id, txn_version=version)
    print(json.dumps(result.to_dict()))


def worker_crash(uri: str, mode: str) -> None:
    """Commit in a loop (big commits) until killed; ``mode`` kills itself at a chosen point instead."""
    import deltalog.storage.filesystem as storage_mod
    from deltalog import DeltaTable
    from deltalog.commit.transaction import Transaction

    if mode == "mid-write":
        real_write = storage_mod.Storage._write_temp

        def half_then_die(self, path, data):  # write half the commit, then die
            tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.crash.tmp")
            with open(tmp, "wb") as fh:
                fh.write(data[: len(data) // 2])
                fh.flush()
            os.kill(os.getpid(), signal.SIGKILL)
            return real_write(self, path, data)

        storage_mod.Storage._write_temp = half_then_die
    elif mode == "after-link":
        real_unlink = os.unlink

        def die_before_cleanup(path, *a, **kw):
            # a commit's temp file (``.<version>.json.<hex>.tmp``), not the storage's hard-link probe
            if path.endswith(".tmp") and ".json." in os.path.basename(path):
                os.kill(os.getpid(), signal.SIGKILL)
            return real_unlink(path, *a, **kw)

        os.unlink = die_before_cleanup
    table = DeltaTable(uri)
    i = 0
    while True:
        txn = Transaction(table.storage, table.snapshot(), operation="WRITE", run_hooks=False)
        txn.add([{"path": f"f{i}-{k}-{'x' * 200}.parquet", "size": 1, "partitionValues": {}} for k in range(2000)])
        txn.commit()
        print(i, flush=True)
        i += 1


# --- helpers ---------------------------------------------------------------------------------


def spawn(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def finish(procs: list[subprocess.Popen], timeout: float = 560) -> list[Any]:
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


def run_race(tmp_path, uri: str, options: dict[str, Any]) -> tuple[list[dict], int]:
    go = str(tmp_path / "go")
    procs = [spawn("append", uri, json.dumps(options), str(w), str(APPENDS), go) for w in range(WORKERS)]
    time.sleep(1.0)
    open(go, "w").close()
    results = [r for out in finish(procs) for r in out]
    return results, sum(r["rows"] for r in results)


def check_race(results: list[dict], uri: str, options: dict[str, Any]) -> None:
    from deltalog import DeltaTable
    from deltalog.log.snapshot import parse_commit

    total = WORKERS * APPENDS
    assert len(results) == total, "every append returned"
    assert sorted(r["version"] for r in results) == list(range(1, total + 1)), "no version has two writers, no gaps"
    table = DeltaTable(uri, options)
    listing = table.list_log()
    assert sorted(listing.commits) == list(range(0, total + 1)), "versions are contiguous"
    by_version = {r["version"]: r["txn_id"] for r in results}
    for v in random.Random(7).sample(range(1, total + 1), 40):
        f = listing.commits[v]
        actions = parse_commit(table.storage.read_bytes(f.path), f.name)
        assert actions[0]["commitInfo"]["txnId"] == by_version[v], f"version {v} holds its writer's commit"
        assert sum("add" in a for a in actions) == 1
    assert table.snapshot().num_files == total


# --- races ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_race_local_8x50_blind_appends(tmp_path) -> None:
    import deltalake

    from helpers import make_table

    uri = str(tmp_path / "table")
    make_table(uri)
    started = time.perf_counter()
    results, rows = run_race(tmp_path, uri, {})
    elapsed = time.perf_counter() - started
    check_race(results, uri, {})
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == rows
    mean = sum(r["attempts"] for r in results) / len(results)
    print(f"local race: {len(results)} appends in {elapsed:.1f}s, {mean:.2f} attempts on average")


@pytest.mark.slow
@pytest.mark.s3
def test_race_s3_8x50_blind_appends(tmp_path, s3_table_uri, s3_storage_options, s3_deltalake_options) -> None:
    import deltalake
    import pyarrow as pa

    from deltalog.create import create_table

    create_table(s3_table_uri, pa.schema([("id", pa.int64())]), storage_options=s3_storage_options)
    started = time.perf_counter()
    results, rows = run_race(tmp_path, s3_table_uri, s3_storage_options)
    elapsed = time.perf_counter() - started
    check_race(results, s3_table_uri, s3_storage_options)
    dl = deltalake.DeltaTable(s3_table_uri, storage_options=s3_deltalake_options)
    assert dl.version() == WORKERS * APPENDS
    assert dl.to_pyarrow_table().num_rows == rows
    mean = sum(r["attempts"] for r in results) / len(results)
    print(f"s3 race: {len(results)} appends in {elapsed:.1f}s, {mean:.2f} attempts on average")


# --- idempotency across processes -------------------------------------------------------------


@pytest.mark.slow
def test_same_request_from_two_processes_lands_once(tmp_path) -> None:
    import deltalake
    import pyarrow as pa
    import pyarrow.parquet as pq

    from helpers import make_table

    uri = str(tmp_path / "table")
    make_table(uri)
    for round_ in range(3):
        rel = f"batch-{round_}.parquet"
        pq.write_table(pa.table({"id": pa.array(range(5), pa.int64())}), os.path.join(uri, rel))
        request = tmp_path / f"req{round_}.json"
        request.write_text(json.dumps({"add": [rel]}))
        go = str(tmp_path / f"go{round_}")
        procs = [spawn("request", uri, str(request), "airflow.dag.task", str(round_), go) for _ in range(2)]
        time.sleep(0.8)
        open(go, "w").close()
        outs = finish(procs)
        landed = [o for o in outs if not o["noop"]]
        assert len(landed) == 1 and len(outs) == 2, outs
        assert all(o["version"] == landed[0]["version"] for o in outs)
    dl = deltalake.DeltaTable(uri)
    assert dl.version() == 3 and dl.transaction_version("airflow.dag.task") == 2
    assert dl.to_pyarrow_table().num_rows == 15


# --- crashes -----------------------------------------------------------------------------------


def check_log_is_whole(uri: str) -> int:
    """Every version file parses completely; returns the latest version (readable by deltalake too)."""
    import deltalake

    from deltalog import DeltaTable
    from deltalog.log.snapshot import parse_commit

    table = DeltaTable(uri)
    listing = table.list_log()
    for v, f in listing.commits.items():
        data = table.storage.read_bytes(f.path)
        assert data.endswith(b"\n"), f"version {v} is partial"
        actions = parse_commit(data, f.name)
        assert "commitInfo" in actions[0]
        if v > 0:
            assert sum("add" in a for a in actions) == 2000, f"version {v} lost actions"
    latest = table.snapshot().version
    assert deltalake.DeltaTable(uri).version() == latest
    return latest


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["mid-write", "after-link"])
def test_killed_at_a_chosen_point_leaves_old_or_new_version(tmp_path, mode: str) -> None:
    from helpers import make_table

    uri = str(tmp_path / "table")
    make_table(uri)
    proc = spawn("crash", uri, mode)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    latest = check_log_is_whole(uri)
    assert latest == (0 if mode == "mid-write" else 1)


@pytest.mark.slow
def test_killed_at_random_moments_never_leaves_a_partial_version(tmp_path) -> None:
    from helpers import make_table

    uri = str(tmp_path / "table")
    make_table(uri)
    rng = random.Random(3)
    for _ in range(8):
        proc = spawn("crash", uri, "loop")
        assert proc.stdout is not None
        proc.stdout.readline()  # at least one commit landed: the loop is hot
        time.sleep(rng.uniform(0.0, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        check_log_is_whole(uri)
    assert check_log_is_whole(uri) >= 8


if __name__ == "__main__":
    kind, rest = sys.argv[1], sys.argv[2:]
    if kind == "append":
        worker_append(rest[0], json.loads(rest[1]), int(rest[2]), int(rest[3]), rest[4])
    elif kind == "request":
        worker_request(rest[0], rest[1], rest[2], int(rest[3]), rest[4])
    elif kind == "crash":
        worker_crash(rest[0], rest[1])
    else:
        raise SystemExit(f"unknown worker {kind}")
