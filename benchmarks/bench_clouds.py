"""Commit and snapshot-load cost on S3, Azure and GCS, measured the same way on each (issue 28).

Each store is its emulator in a process of its own, as the cloud would be (moto for S3,
Azurite for Azure, fake-gcs-server for GCS), so this process's CPU time is the client's
alone; requests are counted by the server (S3) or from its access log (Azure, GCS).

Cases, per store:

- snapshot load of a ``--commits``-commit table (no checkpoint): deltalog and deltalake in
  turns, median wall and client CPU of ``--repeat`` x 5 loads, requests per load;
- a commit on a loaded snapshot (a one-file blind append, post-commit hooks off so the
  primitive is what is measured): median wall and client CPU of 40 commits, requests per commit.

Stores: ``s3`` (conditional PUT through s3fs), ``azure`` (obstore's ``If-None-Match: *``),
``azure-adlfs`` (``{"obstore": "false"}``: adlfs for everything), ``gcs`` (gcsfs's
``ifGenerationMatch=0``; reads through obstore). deltalake loads the same tables; it cannot
write to fake-gcs-server (object_store's XML-API upload), so the tables are written by deltalog.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import statistics
import time
from typing import Any

from bench_fleet import _fmt_requests, _load, _median, _rotate

log = logging.getLogger("benchmarks.clouds")

STORES = ("s3", "azure", "azure-adlfs", "gcs")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--commits", type=int, default=40, help="commits in the table loaded (default 40)")
    parser.add_argument("--stores", default=",".join(STORES), help=f"comma-separated, of {', '.join(STORES)}")


def _append(table: Any, snapshot: Any, n: int, hooks: bool) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from deltalog.commit import Transaction

    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array([n], pa.int64())}), buf)
    rel = f"f-{n:05d}.parquet"
    table.storage.fs.pipe_file(table.storage.join(rel), buf.getvalue())
    txn = Transaction(table.storage, snapshot, operation="WRITE", run_hooks=hooks)
    entry = {"path": rel, "size": len(buf.getvalue()), "partitionValues": {}, "stats": json.dumps({"numRecords": 1})}
    txn.add([entry])
    return txn


class _Store:
    """One emulator with a fresh bucket: ``uri``, deltalog and deltalake options, ``counter``; ``stop()``."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "s3":
            from s3_server import create_bucket, deltalake_options_for, start_s3_server_process
            from s3_server import storage_options_for as s3_options

            endpoint, self.counter, self._proc = start_s3_server_process()
            create_bucket(endpoint, "clouds-bench")
            self.uri = "s3://clouds-bench/t"
            self.options, self.deltalake_options = s3_options(endpoint), deltalake_options_for(endpoint)
            self._server = None
        elif name.startswith("azure"):
            import azure_server

            self._server = azure_server.start_azurite()
            self.counter = self._server.counter
            container = azure_server.create_container(self._server.endpoint, "clouds-bench")
            self.uri = f"abfs://{container}/t"
            self.options = azure_server.storage_options_for(self._server.endpoint)
            if name == "azure-adlfs":
                self.options["obstore"] = "false"
            self.deltalake_options = azure_server.deltalake_options_for(self._server.endpoint)
        else:
            import gcs_server

            self._server = gcs_server.start_fake_gcs_server()
            self.counter = self._server.counter
            bucket = gcs_server.create_bucket(self._server.endpoint, "clouds-bench")
            self.uri = f"gs://{bucket}/t"
            self.options = gcs_server.storage_options_for(self._server.endpoint)
            self.deltalake_options = gcs_server.deltalake_options_for(self._server.endpoint)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        else:
            self._proc.terminate()
            self._proc.wait()


def _one_store(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    import deltalake
    import pyarrow as pa

    from deltalog import DeltaTable
    from deltalog.create import create_table

    store = _Store(name)
    try:
        create_table(store.uri, pa.schema([("id", pa.int64())]), storage_options=store.options)
        table = DeltaTable(store.uri, store.options)
        for n in range(1, args.commits + 1):
            _append(table, table.snapshot(), n, hooks=False).commit()

        def ours_load() -> int:
            return DeltaTable(store.uri, store.options).snapshot().files.num_rows

        def theirs_load() -> int:
            dl = deltalake.DeltaTable(store.uri, storage_options=store.deltalake_options)
            return dl.get_add_actions(flatten=False).num_rows

        requests = []
        for side in (ours_load, theirs_load):
            side()  # warm the clients
            before = store.counter.snapshot()
            side()
            requests.append(store.counter.since(before))
        load_before = _load()
        (ot, tt), found = _rotate([ours_load, theirs_load], max(5, args.repeat * 5))
        if found[0] != found[1] or found[0] != args.commits:
            raise RuntimeError(f"{name}: deltalog found {found[0]} files, deltalake {found[1]}")
        rows = [
            {
                "case": f"{name}: snapshot load, {args.commits}-commit table (median, in turns)",
                "ours_s": _median(ot, 0),
                "deltalake_s": _median(tt, 0),
                "ours_cpu_s": _median(ot, 1),
                "deltalake_cpu_s": _median(tt, 1),
                "ours_requests": requests[0],
                "deltalake_requests": requests[1],
                "note": f"requests per load: ours {_fmt_requests(requests[0])}; deltalake "
                f"{_fmt_requests(requests[1])}; load average {load_before} before, {_load()} after",
            }
        ]

        walls, cpus, per_commit = [], [], []
        for n in range(args.commits + 1, args.commits + 41):
            snapshot = table.snapshot()
            txn = _append(table, snapshot, n, hooks=False)
            before = store.counter.snapshot() if n == args.commits + 1 else None
            t0, c0 = time.perf_counter(), time.process_time()
            result = txn.commit()
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            if before is not None:
                per_commit.append(store.counter.since(before))
            if result.version != n:
                raise RuntimeError(f"{name}: commit landed at {result.version}, expected {n}")
        rows.append(
            {
                "case": f"{name}: commit on a loaded snapshot, one-file append, hooks off (median of 40)",
                "ours_s": statistics.median(walls),
                "ours_cpu_s": statistics.median(cpus),
                "ours_requests": per_commit[0],
                "note": f"requests per commit: {_fmt_requests(per_commit[0])}; CPU median "
                f"{statistics.median(cpus) * 1000:.2f} ms, wall median {statistics.median(walls) * 1000:.2f} ms",
            }
        )
        for row in rows:
            log.info("%s: %s", row["case"], row["note"])
        return rows
    finally:
        store.stop()


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in [s.strip() for s in args.stores.split(",") if s.strip()]:
        if name not in STORES:
            raise SystemExit(f"unknown store {name!r}: choose from {', '.join(STORES)}")
        rows += _one_store(name, args)
    return rows
