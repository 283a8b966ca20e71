"""The reliability suite's operations on Azure and GCS emulators: tables, runs and "finished" checks.

Each scenario builds its table locally with the suite's own builders (reliability_support),
uploads it to a fresh container or bucket, and runs the operation there with the storage
options it is given (through the fault proxy, or straight to the emulator). Object stores
stamp every object with its upload time, so the operations that decide by age run with a
clock or a retention that makes the uploaded history old: log cleanup with ``now_ms`` 40 days
ahead, vacuum with zero retention (``allow_short_retention``), whose only version that must
stay readable is the latest.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reliability_support import APP_ID, build_commit, build_compaction, check_table, row_multiset

from deltalog import DeltaTable
from deltalog.storage import Storage
from helpers import append, make_table, rows, write_data_file

DAY_MS = 86_400_000


@dataclass(frozen=True)
class CloudTable:
    """One table on an emulator: its URI, deltalog's options straight to the emulator, deltalake's."""

    uri: str
    options: dict[str, Any]
    dl_options: dict[str, str]

    def ref(self) -> Any:
        from reliability_support import TableRef

        return TableRef(self.uri, self.options, self.dl_options)

    def upload(self, local: str) -> None:
        storage = Storage(self.uri, self.options)
        storage.fs.put(local.rstrip("/") + "/", storage.root + "/", recursive=True)

    def deltalake(self) -> Any:
        import deltalake

        return deltalake.DeltaTable(self.uri, storage_options=self.dl_options)


@dataclass(frozen=True)
class Scenario:
    name: str
    build: Callable[[str], dict[str, Any]]
    run: Callable[[str, dict[str, Any], dict[str, Any]], Any]  # (uri, options, info)
    done: Callable[[CloudTable, dict[str, Any]], None]
    retained: Callable[[dict[str, Any], int], list[int]]
    rows_after: Callable[[dict[str, Any]], list[Counter]] = lambda info: [info["rows"]]
    rows_final: Callable[[dict[str, Any]], Counter] = lambda info: info["rows"]


def _later(info: dict[str, Any]) -> int:
    return int(info["now_ms"]) + 40 * DAY_MS


def run_commit(uri: str, options: dict[str, Any], info: dict[str, Any]) -> Any:
    from deltalog import commit_request

    return commit_request(uri, dict(info["request"]), storage_options=options)


def done_commit(table: CloudTable, info: dict[str, Any]) -> None:
    theirs = table.deltalake()
    assert theirs.transaction_version(APP_ID) == 7
    assert theirs.version() == info["version"], "the request landed exactly once, at the next version"


def run_compaction(uri: str, options: dict[str, Any], info: dict[str, Any]) -> Any:
    from deltalog import compact

    return compact(uri, bins_per_commit=1, max_workers=1, storage_options=options)


def done_compaction(table: CloudTable, info: dict[str, Any]) -> None:
    from deltalog import plan_compaction

    assert not plan_compaction(table.uri, storage_options=table.options).bins, "a second compaction plans nothing"


def build_cloud_cleanup(path: str) -> dict[str, Any]:
    """Commits 0..12 with in-commit timestamps (an upload stamps every object alike, and equal file
    times keep every commit a later one's timestamp leans on), checkpoints at 4 and 8."""
    from deltalog import create_checkpoint
    from deltalog.protocol import Protocol

    conf = {"delta.checkpointInterval": "1000", "delta.enableInCommitTimestamps": "true"}
    protocol = Protocol(1, 7, None, ("inCommitTimestamp",))
    table = make_table(path, partition_by=["part"], configuration=conf, protocol=protocol)
    for i in range(12):
        append(table, rows(2, i * 2, part=f"p{i % 3}"), partition={"part": f"p{i % 3}"})
    for v in (4, 8):
        create_checkpoint(table, version=v)
    return {"rows": row_multiset(path), "keep_from": 8, "now_ms": int(time.time() * 1000)}


def run_cleanup(uri: str, options: dict[str, Any], info: dict[str, Any]) -> Any:
    from deltalog import cleanup_log

    return cleanup_log(uri, now_ms=_later(info), storage_options=options)


def done_cleanup(table: CloudTable, info: dict[str, Any]) -> None:
    from deltalog import cleanup_log

    assert cleanup_log(table.uri, dry_run=True, now_ms=_later(info), storage_options=table.options).num_files == 0
    assert min(DeltaTable(table.uri, table.options).list_log().commits) == info["keep_from"], "0..7 are gone"


def build_cloud_vacuum(path: str) -> dict[str, Any]:
    """Six appends, three of their files removed, two untracked files: five files to delete."""
    from deltalog.commit import Transaction

    table = make_table(path, partition_by=["part"], configuration={"delta.checkpointInterval": "1000"})
    for i in range(6):
        append(table, rows(3, i * 3, part="ab"[i % 2]), partition={"part": "ab"[i % 2]})
    snap = table.snapshot()
    doomed = snap.files.to_pylist()[:3]
    txn = Transaction(table.storage, snap, operation="DELETE", run_hooks=False)
    txn.remove([{"path": r["path"], "partitionValues": dict(r["partitionValues"]), "size": r["size"]} for r in doomed])
    txn.commit()
    for i, part in enumerate(("a", "gone")):
        write_data_file(path, rows(2, 70 + i * 10, part=part), {"part": part})
    return {"rows": row_multiset(path), "kept": DeltaTable(path).snapshot().file_paths()}


def run_vacuum(uri: str, options: dict[str, Any], info: dict[str, Any]) -> Any:
    from deltalog import vacuum

    return vacuum(uri, retention_hours=0, allow_short_retention=True, max_workers=1, storage_options=options)


def done_vacuum(table: CloudTable, info: dict[str, Any]) -> None:
    from deltalog import plan_vacuum

    plan = plan_vacuum(table.uri, retention_hours=0, allow_short_retention=True, storage_options=table.options)
    assert plan.files.num_rows == 0, "a second vacuum finds nothing to delete"
    storage = Storage(table.uri, table.options)
    data = {storage.relative(f.path) for f in storage.walk_files() if "/_delta_log/" not in f.path}
    assert data == set(info["kept"]), "exactly the live files are left"


SCENARIOS: dict[str, Scenario] = {
    "commit": Scenario(
        "commit",
        build_commit,
        run_commit,
        done_commit,
        lambda info, latest: list(range(latest + 1)),
        rows_after=lambda info: [info["rows"], info["after"]],
        rows_final=lambda info: info["after"],
    ),
    "compaction": Scenario(
        "compaction", build_compaction, run_compaction, done_compaction, lambda info, latest: list(range(latest + 1))
    ),
    "log_cleanup": Scenario(
        "log_cleanup",
        build_cloud_cleanup,
        run_cleanup,
        done_cleanup,
        lambda info, latest: list(range(info["keep_from"], latest + 1)),
    ),
    "vacuum": Scenario("vacuum", build_cloud_vacuum, run_vacuum, done_vacuum, lambda info, latest: [latest]),
}


def verify(table: CloudTable, scenario: Scenario, info: dict[str, Any], what: str, suite: str) -> None:
    """After a fault or a crash: both readers read every version that must stay readable, rows unchanged;
    then a clean rerun (straight to the emulator) finishes the operation and the guarantees hold again."""
    check_table(table.ref(), lambda latest: scenario.retained(info, latest), scenario.rows_after(info), suite, what)
    scenario.run(table.uri, table.options, info)
    scenario.done(table, info)
    final = scenario.rows_final(info)
    check_table(table.ref(), lambda latest: scenario.retained(info, latest), final, suite, f"rerun after {what}")


def child_run(name: str, uri: str, options: dict[str, Any], info: dict[str, Any], go: str) -> None:
    """A crash child: wait for the parent's signal (the proxy knows our pid by then), run, report finishing."""
    import logging

    logging.disable(logging.CRITICAL)
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.005)
    SCENARIOS[name].run(uri, options, info)
    open(go + ".finished", "w").close()
