"""The actors of the race tests: writers, deleters and maintenance, each in its own child process.

Why processes: the races must be real (separate interpreters hitting the same log
through the commit primitive), as Airflow tasks and Spark jobs would. Actors
coordinate through signal files in a shared directory when a test needs a
precise interleaving ("plan, then let the delete land, then commit"); otherwise
they run freely. Each writes its result (or its error) to ``<sigdir>/<name>.json``.
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
import traceback
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import faults
from deltalog import DeltaTable
from deltalog.commit.conflicts import ConflictError
from deltalog.commit.transaction import Transaction
from deltalog.compaction import compact, plan_compaction
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.storage.filesystem import Storage
from deltalog.vacuuming import vacuum


class Signals:
    """Named flags shared by the actors of one test (files in one directory)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def set(self, name: str) -> None:
        open(os.path.join(self.directory, f"{name}.signal"), "w").close()

    def wait(self, name: str, timeout: float = 90) -> None:
        path = os.path.join(self.directory, f"{name}.signal")
        deadline = time.time() + timeout
        while not os.path.exists(path):
            if time.time() > deadline:
                raise TimeoutError(f"no {name!r} signal after {timeout} s")
            time.sleep(0.002)


# --- data --------------------------------------------------------------------------------------------


def data_rows(ids: list[int], part: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "value": pa.array([f"v{i}" for i in ids]),
            "part": pa.array([part] * len(ids)),
        }
    )


def put_data_file(storage: Storage, part: str, name: str, ids: list[int]) -> dict[str, Any]:
    """Write one Parquet file into ``part=<part>/`` (local or remote) and return its add action."""
    data = data_rows(ids, part).drop_columns(["part"])
    buf = io.BytesIO()
    pq.write_table(data, buf)
    body = buf.getvalue()
    rel = f"part={part}/{name}"
    full = storage.join(*rel.split("/"))
    if storage.is_local:
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as fh:
            fh.write(body)
    else:
        storage.fs.pipe_file(full, body)
    return {
        "path": rel,
        "partitionValues": {"part": part},
        "size": len(body),
        "modificationTime": int(time.time() * 1000),
        "dataChange": True,
        "stats": json.dumps({"numRecords": len(ids)}),
    }


def append_once(table: DeltaTable, part: str, name: str, ids: list[int]) -> dict[str, Any]:
    """A blind append of one new file, as an ingest job would commit it."""
    add = put_data_file(table.storage, part, name, ids)
    txn = Transaction(table.storage, table.snapshot(), operation="WRITE", operation_parameters={"mode": "Append"})
    txn.add([add])
    result = txn.commit()
    return {"version": result.version, "attempts": result.attempts}


# --- roles ---------------------------------------------------------------------------------------------


def role_append(uri: str, options: dict | None, p: dict[str, Any], sig: Signals) -> dict[str, Any]:
    """``count`` blind appends of small files into ``parts`` (in turn); the rows go back to the test.

    ``landed``: a signal set once the first append has committed (another actor may hold its
    commit until then, to have this append land between its read and its write for sure).
    """
    table = DeltaTable(uri, options)
    if p.get("wait"):
        sig.wait(p["wait"])
    commits, rows = [], []
    for i in range(p["count"]):
        part = p["parts"][i % len(p["parts"])]
        ids = [p["worker"] * 1_000_000 + i * 10 + k for k in range(3)]
        commits.append(append_once(table, part, f"w{p['worker']}-{i}.parquet", ids))
        rows.extend([x, f"v{x}"] for x in ids)
        if i == 0 and p.get("landed"):
            sig.set(p["landed"])
        time.sleep(p.get("pause", 0.0))
    if p.get("done"):
        sig.set(p["done"])
    return {"commits": commits, "rows": rows}


def role_delete_partition(uri: str, options: dict | None, p: dict[str, Any], sig: Signals) -> dict[str, Any]:
    """DELETE WHERE part = X (every file of the partition removed), retried on conflicts as a job would.

    ``read_signal``/``commit_after``: announce that the snapshot was read, then hold the commit
    until another actor says so (to put a commit between this read and this write).
    """
    table = DeltaTable(uri, options)
    if p.get("wait"):
        sig.wait(p["wait"])
    conflicts = []
    for attempt in range(10):
        snap = table.snapshot()
        doomed = [r for r in snap.files.to_pylist() if dict(r["partitionValues"]).get("part") == p["part"]]
        txn = Transaction(
            table.storage, snap, operation="DELETE", operation_parameters={"predicate": f"part = '{p['part']}'"}
        )
        txn.read_partitions({"part": p["part"]})
        txn.remove(
            [{"path": r["path"], "partitionValues": dict(r["partitionValues"]), "size": r["size"]} for r in doomed]
        )
        if attempt == 0 and p.get("read_signal"):
            sig.set(p["read_signal"])
            sig.wait(p["commit_after"])
        try:
            result = txn.commit()
        except ConflictError as exc:
            conflicts.append(type(exc).__name__)
            continue
        if p.get("done"):
            sig.set(p["done"])
        return {"version": result.version, "conflicts": conflicts, "removed": [r["path"] for r in doomed]}
    raise RuntimeError(f"the delete gave up after conflicts {conflicts}")


def role_compact(uri: str, options: dict | None, p: dict[str, Any], sig: Signals) -> dict[str, Any]:
    """Plan, optionally announce it and wait, then compact that plan (local engine)."""
    if p.get("wait"):
        sig.wait(p["wait"])
    table = DeltaTable(uri, options)
    plan = plan_compaction(table)
    if p.get("planned"):
        sig.set(p["planned"])
    if p.get("commit_after"):
        for name in p["commit_after"]:
            sig.wait(name)
    if p.get("faults"):
        faults.activate(faults.FaultPlan([faults.Fault(**f) for f in p["faults"]]))
        table = DeltaTable(faults.uri(table.storage.root))
    result = compact(table, plan=plan, max_workers=1)
    faults.activate(None)
    if p.get("done"):
        sig.set(p["done"])
    return {
        "bins": {b.id: dict(b.partition_values) for b in plan.bins},
        "commits": [{"version": c.version, "bins": c.bins, "attempts": c.attempts} for c in result.commits],
        "skipped": [s.to_dict() for s in result.skipped],
    }


def role_vacuum(uri: str, options: dict | None, p: dict[str, Any], sig: Signals) -> dict[str, Any]:
    """``runs`` vacuums (default retention), the first one after the ``wait`` signal."""
    if p.get("wait"):
        sig.wait(p["wait"])
    runs = []
    for _ in range(p.get("runs", 1)):
        result = vacuum(uri, storage_options=options, max_workers=2)
        runs.append(
            {
                "status": result.status,
                "planned": result.plan.files.column("path").to_pylist() if result.plan is not None else [],
                "deleted": result.num_deleted_files,
                "start": result.start_commit_version,
                "end": result.end_commit_version,
            }
        )
        time.sleep(p.get("pause", 0.0))
    if p.get("done"):
        sig.set(p["done"])
    return {"runs": runs}


def role_checkpoint_cleanup(uri: str, options: dict | None, p: dict[str, Any], sig: Signals) -> dict[str, Any]:
    """``runs`` rounds of checkpoint + log cleanup while others write."""
    table = DeltaTable(uri, options)
    if p.get("wait"):
        sig.wait(p["wait"])
    rounds = []
    for _ in range(p.get("runs", 1)):
        cp = create_checkpoint(table)
        cleaned = cleanup_log(table)
        rounds.append(
            {"checkpoint": cp.version, "deleted": cleaned.num_deleted, "kept_from": cleaned.oldest_version_kept}
        )
        time.sleep(p.get("pause", 0.0))
    return {"rounds": rounds}


def role_stage_then_commit(uri: str, options: dict | None, p: dict[str, Any], sig: Signals) -> dict[str, Any]:
    """A slow writer: data files written, then (after ``commit_after``) committed in one append."""
    table = DeltaTable(uri, options)
    adds, rows = [], []
    for i in range(p["files"]):
        ids = [9_000_000 + i * 10 + k for k in range(4)]
        adds.append(put_data_file(table.storage, p["part"], f"staged-{i}.parquet", ids))
        rows.extend([x, f"v{x}"] for x in ids)
    sig.set(p["staged"])
    sig.wait(p["commit_after"])
    txn = Transaction(table.storage, table.snapshot(), operation="WRITE", operation_parameters={"mode": "Append"})
    txn.add(adds)
    result = txn.commit()
    return {"version": result.version, "paths": [a["path"] for a in adds], "rows": rows}


ROLES: dict[str, Callable[[str, dict | None, dict[str, Any], Signals], dict[str, Any]]] = {
    "append": role_append,
    "delete_partition": role_delete_partition,
    "compact": role_compact,
    "vacuum": role_vacuum,
    "checkpoint_cleanup": role_checkpoint_cleanup,
    "stage_then_commit": role_stage_then_commit,
}


def run(role: str, name: str, uri: str, options: dict | None, params: dict[str, Any], sigdir: str) -> None:
    """Child entry point: run ``role`` and write ``{"ok": ..., "result" | "error": ...}`` to ``<name>.json``."""
    logging.disable(logging.CRITICAL)
    out_path = os.path.join(sigdir, f"{name}.json")
    try:
        doc = {"ok": True, "result": ROLES[role](uri, options, params, Signals(sigdir))}
    except BaseException as exc:  # noqa: BLE001 - reported to the test, which fails with it
        doc = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    with open(out_path + ".tmp", "w") as fh:
        json.dump(doc, fh)
    os.replace(out_path + ".tmp", out_path)
