"""Fleet cost on object storage, deltalog vs deltalake, on the S3 test server (issue 17).

Cases:

- per-table fixed cost: snapshot load of a 40-commit table over the S3 test server,
  deltalog and deltalake alternately in one process (median of ``--repeat`` x 5 loads
  each), with the requests each load sends (counted by the server). Target: time
  at most deltalake's. A reference row loads through s3fs alone (``{"s3_reads": "s3fs"}``,
  deltalog's reads before obstore), in the same rotation.
- a fleet of small tables (200; ``--scale small``: 40): deltalog's discovery of the
  bucket plus ranked fleet health, against a loop of deltalake loads over the same
  tables (given the list: deltalake has no discovery).

The tables are written once per run with deltalake (commits) into a fresh bucket; the
server runs in a process of its own (``tests/s3_server.py``), as S3 would.
Requests per operation come from the server's counter, so both sides are counted alike.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

log = logging.getLogger("benchmarks.fleet")

SCALES = {"full": {"tables": 200, "commits": 40}, "small": {"tables": 40, "commits": 40}}


def _fmt_requests(counts: dict[str, int]) -> str:
    return " ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def _rotate(sides: list[Callable[[], Any]], repeat: int) -> tuple[list[list[tuple[float, float]]], list[Any]]:
    """(wall, client CPU) seconds per call of each side, taking turns; the server is another process,
    so this process's CPU time is the client's alone. Also the last result of each side."""
    times: list[list[tuple[float, float]]] = [[] for _ in sides]
    results: list[Any] = [None] * len(sides)
    for _ in range(repeat):
        for i, side in enumerate(sides):
            t0, c0 = time.perf_counter(), time.process_time()
            results[i] = side()
            times[i].append((time.perf_counter() - t0, time.process_time() - c0))
    return times, results


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _median(runs: list[tuple[float, float]], i: int) -> float:
    return statistics.median(r[i] for r in runs)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import boto3
    import deltalake
    import pyarrow as pa

    from deltalog import DeltaTable
    from deltalog.fleet.discover import discover_tables
    from deltalog.fleet.ranking import fleet_health
    from s3_server import ACCESS_KEY, REGION, SECRET_KEY, deltalake_options_for, start_s3_server_process
    from s3_server import storage_options_for as s3_options

    scale = SCALES[args.scale]
    # The server runs in its own process, as S3 does: in this one, its Python threads would
    # take the interpreter from deltalog's client (not from deltalake's, which runs in Rust).
    endpoint, counter, server = start_s3_server_process()
    rows: list[dict[str, Any]] = []
    try:
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        ).create_bucket(Bucket="fleet-bench")
        ours_opts, theirs_opts = s3_options(endpoint), deltalake_options_for(endpoint)

        # --- per-table fixed cost ---------------------------------------------------------
        uri = "s3://fleet-bench/one/t"
        for i in range(scale["commits"]):
            deltalake.write_deltalake(uri, pa.table({"id": [i]}), mode="append", storage_options=theirs_opts)

        s3fs_opts = {**ours_opts, "s3_reads": "s3fs"}

        def ours_load() -> int:
            return DeltaTable(uri, ours_opts).snapshot().files.num_rows

        def s3fs_load() -> int:
            return DeltaTable(uri, s3fs_opts).snapshot().files.num_rows

        def theirs_load() -> int:
            return deltalake.DeltaTable(uri, storage_options=theirs_opts).get_add_actions(flatten=False).num_rows

        sides = [ours_load, s3fs_load, theirs_load]
        requests = []
        for side in sides:
            side()  # warm every client (connections, imports)
            before = counter.snapshot()
            side()
            requests.append(counter.since(before))
        ours_req, s3fs_req, theirs_req = requests
        load_before = _load()
        (ot, st, tt), found = _rotate(sides, max(5, args.repeat * 5))
        if len(set(found)) != 1:
            raise RuntimeError(f"deltalog found {found[0]} files (through s3fs {found[1]}), deltalake {found[2]}")
        loads = f"load average {load_before} before, {_load()} after"
        case = f"S3 snapshot load, {scale['commits']}-commit table (median, in turns)"
        rows.append(
            {
                "case": case,
                "ours_s": _median(ot, 0),
                "deltalake_s": _median(tt, 0),
                "ours_cpu_s": _median(ot, 1),
                "deltalake_cpu_s": _median(tt, 1),
                "time_target": 1.0,
                "target": "time ≤ 1x",
                "ours_requests": ours_req,
                "deltalake_requests": theirs_req,
                "note": f"requests per load: ours {_fmt_requests(ours_req)}; deltalake {_fmt_requests(theirs_req)}; "
                f"{loads}",
            }
        )
        rows.append(
            {
                "case": case + ", deltalog reading through s3fs (reference)",
                "ours_s": _median(st, 0),
                "deltalake_s": _median(tt, 0),
                "ours_cpu_s": _median(st, 1),
                "deltalake_cpu_s": _median(tt, 1),
                "ours_requests": s3fs_req,
                "deltalake_requests": theirs_req,
                "note": f'storage option {{"s3_reads": "s3fs"}}: requests per load {_fmt_requests(s3fs_req)}',
            }
        )
        log.info("per-table: %s", rows[-2]["note"])

        # --- a fleet of small tables --------------------------------------------------------
        n = scale["tables"]
        uris = []
        log.info("writing %d small tables", n)
        for i in range(n):
            t_uri = f"s3://fleet-bench/lake/team{i % 10}/t{i:03d}"
            for j in range(1 + i % 4):
                deltalake.write_deltalake(t_uri, pa.table({"id": [j]}), mode="append", storage_options=theirs_opts)
            uris.append(t_uri)

        def ours_fleet() -> int:
            found = discover_tables("s3://fleet-bench/lake", storage_options=ours_opts)
            reports = fleet_health(found.tables, storage_options=ours_opts)
            return sum(1 for r in reports if r.error is None)

        def theirs_fleet() -> int:
            done = 0
            for t_uri in uris:
                deltalake.DeltaTable(t_uri, storage_options=theirs_opts).get_add_actions(flatten=False)
                done += 1
            return done

        before = counter.snapshot()
        ours_fleet()
        ours_req = counter.since(before)
        before = counter.snapshot()
        theirs_fleet()
        theirs_req = counter.since(before)
        load_before = _load()
        (ot, tt), (a, b) = _rotate([ours_fleet, theirs_fleet], max(1, args.repeat))
        if a != b or a != n:
            raise RuntimeError(f"deltalog measured {a} tables, deltalake loaded {b}, expected {n}")
        rows.append(
            {
                "case": f"{n} small tables on S3: discovery + fleet health vs a loop of deltalake loads",
                "ours_s": min(r[0] for r in ot),
                "deltalake_s": min(r[0] for r in tt),
                "ours_cpu_s": min(r[1] for r in ot),
                "deltalake_cpu_s": min(r[1] for r in tt),
                "ours_requests": ours_req,
                "deltalake_requests": theirs_req,
                "note": f"ours discovers, loads, computes health + due verdicts (8 threads); deltalake is given "
                f"the list and only loads. Requests: ours {_fmt_requests(ours_req)}; deltalake "
                f"{_fmt_requests(theirs_req)}; load average {load_before} before, {_load()} after",
            }
        )
        log.info("fleet: %s", rows[-1]["note"])
    finally:
        server.terminate()
        server.wait()
    return rows
