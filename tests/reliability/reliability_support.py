"""Shared parts of the reliability suite: the tables each operation runs on, and the checks.

Why one module: fault, crash and race tests must hold every operation to the
same guarantees, so they share the builders (small real tables with history
dated where the operation decides by time) and one checker:

- deltalog and deltalake both read the table (the latest version and every
  version that must still be readable),
- no file a retained version references is missing,
- the rows deltalake reads equal the expected multiset.

Every check adds to :mod:`reliability_recorder` before asserting, so the report
counts files lost and tables left unreadable even when a test fails.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import reliability_recorder as recorder
from deltalake import QueryBuilder
from deltalake.exceptions import DeltaProtocolError, TableNotFoundError

import faults
from deltalog import DeltaTable
from deltalog.compaction import compact, plan_compaction
from deltalog.errors import DeltaLogError, NotADeltaTableError
from deltalog.ingest import commit_request
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.log_maintenance.manifest import generate_manifest
from deltalog.protocol.table_protocol import Protocol
from deltalog.vacuuming import plan_vacuum, vacuum
from helpers import append, make_table, rows, write_data_file

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
#: "small" trims seeds and sampled steps for quick development runs; anything else is the full suite.
SCALE = os.environ.get("DELTALOG_RELIABILITY_SCALE", "default")
APP_ID = "reliability.ingest"


def now_ms() -> int:
    return int(time.time() * 1000)


def set_mtime(path: str, ms: int) -> None:
    os.utime(path, (ms / 1000, ms / 1000))


def commit_file(path: str, version: int) -> str:
    return os.path.join(path, "_delta_log", f"{version:020d}.json")


def copy_table(src: str, dst: str) -> str:
    """A copy keeping modification times (vacuum and log cleanup decide by them)."""
    shutil.copytree(src, dst, copy_function=shutil.copy2)
    return dst


# --- reading and checking ---------------------------------------------------------------------


@dataclass(frozen=True)
class TableRef:
    """Where a table lives, for both readers: a local path, or a URI with fsspec and deltalake options."""

    uri: str
    options: dict[str, Any] | None = None
    dl_options: dict[str, str] | None = None

    def deltalog(self) -> DeltaTable:
        return DeltaTable(self.uri, self.options)

    def deltalake(self, version: int | None = None) -> deltalake.DeltaTable:
        return deltalake.DeltaTable(self.uri, version=version, storage_options=self.dl_options)

    def exists(self, rel: str) -> bool:
        storage = self.deltalog().storage
        full = storage.join(*unquote(rel).split("/"))
        if not storage.is_local:
            storage.fs.invalidate_cache(os.path.dirname(full))  # this process may have listed it earlier
        return storage.exists(full)


def as_ref(target: str | TableRef) -> TableRef:
    return target if isinstance(target, TableRef) else TableRef(target)


def row_multiset(target: str | TableRef, version: int | None = None) -> Counter:
    """(id, value) pairs as deltalake reads them: a lost or duplicated row changes the multiset."""
    ref = as_ref(target)
    theirs = ref.deltalake(version)
    try:
        table = theirs.to_pyarrow_table(columns=["id", "value"])
    except DeltaProtocolError:  # features its pyarrow reader lacks (v2 checkpoints): its SQL reader has them
        if ref.dl_options is not None:
            # Not on the S3 test server: the SQL engine holds the GIL while it waits on the server,
            # which runs on a thread of this process, so it would block for ever.
            raise
        table = pa.table(QueryBuilder().register("t", theirs).execute("SELECT id, value FROM t").read_all())
    return Counter(zip(table.column("id").to_pylist(), table.column("value").to_pylist()))


def rows_of(data: pa.Table) -> Counter:
    return Counter(zip(data.column("id").to_pylist(), data.column("value").to_pylist()))


@dataclass
class CheckResult:
    """What one check found; empty lists mean the guarantees hold."""

    version: int | None = None
    unreadable: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    rows: Counter | None = None

    def problems(self) -> str:
        return "; ".join(self.unreadable + [f"missing file {p}" for p in self.lost])


def check_table(
    target: str | TableRef,
    versions: list[int] | Callable[[int], list[int]] | None = None,
    expected_rows: Counter | list[Counter] | None = None,
    suite: str | None = None,
    context: str = "",
) -> CheckResult:
    """Both readers read the table; every version in ``versions`` (or ``versions(latest)``) has all its files.

    ``expected_rows``: the multiset deltalake must read at the latest version (or one of several).
    Counts into the recorder, then asserts.
    """
    ref = as_ref(target)
    out = CheckResult()
    try:
        snap = ref.deltalog().snapshot()
        out.version = snap.version
    except DeltaLogError as exc:
        out.unreadable.append(f"deltalog cannot read the latest version: {exc}")
        snap = None
    try:
        theirs = ref.deltalake()
        if snap is not None and theirs.version() != snap.version:
            out.unreadable.append(f"deltalake reads version {theirs.version()}, deltalog {snap.version}")
        out.rows = row_multiset(ref)
    except Exception as exc:  # noqa: BLE001 - any reader failure is what this check reports
        out.unreadable.append(f"deltalake cannot read the latest version: {type(exc).__name__}: {exc}")
    if snap is not None:
        wanted = versions(snap.version) if callable(versions) else (versions or [])
        for v in sorted(set(wanted) | {snap.version}):
            _check_version(ref, v, out)
    recorder.add("checks", 1, suite)
    recorder.add("files_lost", len(out.lost), suite)
    recorder.add("tables_unreadable", 1 if out.unreadable else 0, suite)
    where = f" ({context})" if context else ""
    assert not out.unreadable and not out.lost, f"after {context or 'the operation'}: {out.problems()}"
    if expected_rows is not None:
        allowed = expected_rows if isinstance(expected_rows, list) else [expected_rows]
        assert out.rows in allowed, f"rows changed{where}: {_diff(out.rows, allowed[0])}"
    return out


def _check_version(ref: TableRef, version: int, out: CheckResult) -> None:
    try:
        mine = ref.deltalog().snapshot(version).file_paths()
    except DeltaLogError as exc:
        out.unreadable.append(f"deltalog cannot read version {version}: {exc}")
        return
    out.lost.extend(f"{p} (version {version})" for p in mine if not ref.exists(p))
    try:
        listed = set(ref.deltalake(version).get_add_actions(flatten=True).column("path").to_pylist())
    except Exception as exc:  # noqa: BLE001
        out.unreadable.append(f"deltalake cannot read version {version}: {type(exc).__name__}: {exc}")
        return
    if {unquote(p) for p in listed} != {unquote(p) for p in mine}:
        out.unreadable.append(f"deltalake and deltalog disagree on the files of version {version}")


def _diff(got: Counter | None, want: Counter) -> str:
    if got is None:
        return "unreadable"
    missing, extra = want - got, got - want
    return f"{sum(missing.values())} rows missing, {sum(extra.values())} extra (e.g. {list(missing or extra)[:3]})"


# --- operations under test ----------------------------------------------------------------------


@dataclass
class Operation:
    """One operation the suite exercises: how to build its table, run it, and tell it finished.

    ``retained(path, latest)`` names the versions that must stay readable;
    ``rows_after(template_rows)`` the multisets a faulted run may leave;
    ``done(path, info)`` asserts that a fault-free rerun completed the work.
    """

    name: str
    build: Callable[[str], dict[str, Any]]
    run: Callable[[str, dict[str, Any]], Any]
    done: Callable[[str, dict[str, Any]], None]
    retained: Callable[[str, dict[str, Any], int], list[int]]
    rows_after: Callable[[dict[str, Any]], list[Counter]] = lambda info: [info["rows"]]
    rows_final: Callable[[dict[str, Any]], Counter] = lambda info: info["rows"]
    #: Replaces ``check_table`` right after the fault (convert: the directory may still be plain Parquet).
    check_after: Callable[[str, dict[str, Any], str, str], None] | None = None
    #: The fault-free rerun, when it differs from ``run`` (convert: refused if the faulted run converted).
    rerun: Callable[[str, dict[str, Any]], Any] | None = None


def all_versions(path: str, info: dict[str, Any], latest: int) -> list[int]:
    return list(range(0, latest + 1))


# commit: a commit request with an app transaction, landing on a version whose hooks
# write a checkpoint, clean the log and refresh manifests.


def build_commit(path: str) -> dict[str, Any]:
    conf = {"delta.checkpointInterval": "4", "delta.compatibility.symlinkFormatManifest.enabled": "true"}
    table = make_table(path, partition_by=["part"], configuration=conf)
    for i in range(3):
        append(table, rows(4, i * 4, part="ab"[i % 2]), partition={"part": "ab"[i % 2]})
    before = row_multiset(path)
    new_a, new_b = rows(3, 100, part="a"), rows(2, 200, part="c")
    adds = [write_data_file(path, new_a, {"part": "a"}), write_data_file(path, new_b, {"part": "c"})]
    snap = DeltaTable(path).snapshot()
    victim = sorted(snap.file_paths())[0]
    victim_rows = row_multiset_of_file(path, victim)
    request = {
        "operation": "WRITE",
        "add": [a["path"] for a in adds],
        "remove": [victim],
        "appId": APP_ID,
        "txnVersion": 7,
    }
    after = before - victim_rows + rows_of(new_a) + rows_of(new_b)
    return {"rows": before, "after": after, "request": request, "version": snap.version + 1}


def row_multiset_of_file(path: str, rel: str) -> Counter:
    import pyarrow.parquet as pq

    return rows_of(pq.read_table(os.path.join(path, unquote(rel)), columns=["id", "value"]))


def run_commit(uri: str, info: dict[str, Any]) -> Any:
    return commit_request(uri, dict(info["request"]))


def done_commit(path: str, info: dict[str, Any]) -> None:
    theirs = deltalake.DeltaTable(path)
    assert theirs.transaction_version(APP_ID) == 7
    assert theirs.version() == info["version"], "the request landed exactly once, at the next version"


# checkpoint: a partitioned table with removes, an app transaction and an older checkpoint.


def build_checkpoint(path: str) -> dict[str, Any]:
    table = make_table(path, partition_by=["part"], configuration={"delta.checkpointInterval": "1000"})
    for i in range(4):
        append(table, rows(4, i * 4, part="ab"[i % 2]), partition={"part": "ab"[i % 2]})
    create_checkpoint(table)
    from deltalog.commit.transaction import Transaction

    snap = table.snapshot()
    first = snap.files.to_pylist()[0]
    txn = Transaction(table.storage, snap, operation="DELETE", run_hooks=False)
    txn.remove([{"path": first["path"], "partitionValues": dict(first["partitionValues"]), "size": first["size"]}])
    txn.set_app_transaction(APP_ID, 3)
    txn.commit()
    for i in range(2):
        append(table, rows(4, 60 + i * 4, part="c"), partition={"part": "c"})
    return {"rows": row_multiset(path)}


def run_checkpoint(uri: str, info: dict[str, Any]) -> Any:
    return create_checkpoint(uri)


def done_checkpoint(path: str, info: dict[str, Any]) -> None:
    import json

    table = DeltaTable(path)
    latest = table.version()
    with open(os.path.join(path, "_delta_log", "_last_checkpoint")) as fh:
        assert json.load(fh)["version"] == latest, "_last_checkpoint names the new checkpoint"
    snap = table.snapshot()
    assert snap.segment.checkpoint is not None and snap.segment.checkpoint.version == latest, "the checkpoint is used"
    assert deltalake.DeltaTable(path).transaction_version(APP_ID) == 3


# V2 checkpoint: the same kind of table with the v2Checkpoint feature; file actions go to sidecars.

V2_PROTOCOL = Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint",))


def build_checkpoint_v2(path: str) -> dict[str, Any]:
    conf = {"delta.checkpointInterval": "1000", "delta.checkpointPolicy": "v2"}
    table = make_table(path, partition_by=["part"], configuration=conf, protocol=V2_PROTOCOL)
    for i in range(7):
        append(table, rows(3, i * 3, part="abc"[i % 3]), partition={"part": "abc"[i % 3]})
    create_checkpoint(table, version=4, sidecar_max_actions=2)
    return {"rows": row_multiset(path)}


def run_checkpoint_v2(uri: str, info: dict[str, Any]) -> Any:
    return create_checkpoint(uri, sidecar_max_actions=2)


def done_checkpoint_v2(path: str, info: dict[str, Any]) -> None:
    import json

    table = DeltaTable(path)
    latest = table.version()
    with open(os.path.join(path, "_delta_log", "_last_checkpoint")) as fh:
        assert json.load(fh)["version"] == latest, "_last_checkpoint names the new checkpoint"
    checkpoint = table.snapshot().segment.checkpoint
    assert checkpoint is not None and checkpoint.version == latest and checkpoint.kind == "v2"


# log cleanup: commits 0..9 dated 40 days ago, checkpoints at 4 and 8, commits 10..12 recent.


def build_cleanup(path: str) -> dict[str, Any]:
    table = make_table(path, partition_by=["part"], configuration={"delta.checkpointInterval": "1000"})
    for i in range(12):
        append(table, rows(2, i * 2, part=f"p{i % 3}"), partition={"part": f"p{i % 3}"})
    for v in (4, 8):
        create_checkpoint(table, version=v)
    base = now_ms() - 40 * DAY_MS
    for v in range(10):
        set_mtime(commit_file(path, v), base + v * 1000)
    plan = cleanup_log(path, dry_run=True)
    assert plan.num_files > 0 and plan.oldest_version_kept == 8
    return {"rows": row_multiset(path), "keep_from": plan.oldest_version_kept}


def run_cleanup(uri: str, info: dict[str, Any]) -> Any:
    return cleanup_log(uri)


def done_cleanup(path: str, info: dict[str, Any]) -> None:
    assert cleanup_log(path, dry_run=True).num_files == 0, "nothing left to clean up"
    assert min(DeltaTable(path).list_log().commits) >= info["keep_from"] - 1


def retained_cleanup(path: str, info: dict[str, Any], latest: int) -> list[int]:
    return list(range(info["keep_from"], latest + 1))


# vacuum: a history dated 10 days back, files removed 9 and 8 days ago (deletable), one an hour
# ago (kept), untracked old files (deletable), a fresh untracked file of an in-flight writer (kept).


def build_vacuum(path: str) -> dict[str, Any]:
    from vacuum_helpers import commit_at, new_file, remove_of

    t0 = now_ms() - 10 * DAY_MS
    table = make_table(path, partition_by=["part"], configuration={"delta.checkpointInterval": "1000"})
    set_mtime(commit_file(path, 0), t0)
    f = [new_file(table, rows(3, i * 3, part="ab"[i % 2]), {"part": "ab"[i % 2]}) for i in range(4)]
    commit_at(table, t0 + 1000, adds=f[:3])
    commit_at(table, t0 + DAY_MS, adds=[f[3]], removes=[remove_of(f[0])])
    commit_at(table, t0 + 2 * DAY_MS, removes=[remove_of(f[1])])
    f5 = new_file(table, rows(3, 40, part="a"), {"part": "a"})
    commit_at(table, now_ms() - HOUR_MS, adds=[f5], removes=[remove_of(f[2])])
    untracked = [
        write_data_file(path, rows(2, 70, part="a"), {"part": "a"}),
        write_data_file(path, rows(2, 80, part="gone"), {"part": "gone"}),
    ]
    for u in untracked:
        set_mtime(os.path.join(path, u["path"]), t0 + DAY_MS)
    inflight = write_data_file(path, rows(2, 90, part="b"), {"part": "b"})
    plan = plan_vacuum(path)
    doomed = set(plan.files.column("path").to_pylist())
    assert doomed == {f[0]["path"], f[1]["path"], *(u["path"] for u in untracked)}, doomed
    return {
        "rows": row_multiset(path),
        "inflight": inflight["path"],
        "kept": [f[2]["path"], f[3]["path"], f5["path"]],
        "first_retained": 3,
    }


def run_vacuum(uri: str, info: dict[str, Any]) -> Any:
    return vacuum(uri, max_workers=1)


def done_vacuum(path: str, info: dict[str, Any]) -> None:
    assert plan_vacuum(path).files.num_rows == 0, "a second vacuum finds nothing to delete"
    for rel in [info["inflight"], *info["kept"]]:
        assert os.path.exists(os.path.join(path, rel)), f"{rel} must survive the vacuum"


def run_vacuum_lite(uri: str, info: dict[str, Any]) -> Any:
    return vacuum(uri, mode="lite", max_workers=1)


def done_vacuum_lite(path: str, info: dict[str, Any]) -> None:
    assert plan_vacuum(path, mode="lite").files.num_rows == 0, "a second lite vacuum finds nothing to delete"
    for rel in [info["inflight"], *info["kept"]]:
        assert os.path.exists(os.path.join(path, rel)), f"{rel} must survive the vacuum"


def retained_vacuum(path: str, info: dict[str, Any], latest: int) -> list[int]:
    return list(range(info["first_retained"], latest + 1))


# compaction: two partitions of four small files each (plus a removed one), one commit per bin.


def build_compaction(path: str) -> dict[str, Any]:
    table = make_table(path, partition_by=["part"], configuration={"delta.checkpointInterval": "1000"})
    for i in range(9):
        append(table, rows(5, i * 5, part="ab"[i % 2]), partition={"part": "ab"[i % 2]})
    from deltalog.commit.transaction import Transaction

    snap = table.snapshot()
    first = snap.files.to_pylist()[0]
    txn = Transaction(table.storage, snap, operation="DELETE", run_hooks=False)
    txn.remove([{"path": first["path"], "partitionValues": dict(first["partitionValues"]), "size": first["size"]}])
    txn.commit()
    assert len(plan_compaction(path).bins) == 2
    return {"rows": row_multiset(path)}


def run_compaction(uri: str, info: dict[str, Any]) -> Any:
    return compact(uri, bins_per_commit=1, max_workers=1)


def done_compaction(path: str, info: dict[str, Any]) -> None:
    assert not plan_compaction(path).bins, "a second compaction plans nothing"


# manifests: generated once, then commits touch one partition, empty another and add a third.


def build_manifest(path: str) -> dict[str, Any]:
    table = make_table(path, partition_by=["part"], configuration={"delta.checkpointInterval": "1000"})
    for i in range(4):
        append(table, rows(3, i * 3, part="abc"[i % 3]), partition={"part": "abc"[i % 3]})
    generate_manifest(table)
    from deltalog.commit.transaction import Transaction

    snap = table.snapshot()
    doomed = [r for r in snap.files.to_pylist() if dict(r["partitionValues"])["part"] == "b"]
    txn = Transaction(table.storage, snap, operation="DELETE", run_hooks=False)
    txn.remove([{"path": r["path"], "partitionValues": dict(r["partitionValues"]), "size": r["size"]} for r in doomed])
    txn.commit()
    append(table, rows(3, 50, part="a"), partition={"part": "a"})
    append(table, rows(3, 60, part="d"), partition={"part": "d"})
    return {"rows": row_multiset(path)}


def run_manifest(uri: str, info: dict[str, Any]) -> Any:
    return generate_manifest(uri)


def manifest_contents(path: str) -> dict[str, set[str]]:
    """partition directory -> table-relative files its manifest lists."""
    root = os.path.join(path, "_symlink_format_manifest")
    out: dict[str, set[str]] = {}
    for dirpath, _dirs, files in os.walk(root):
        if "manifest" in files:
            with open(os.path.join(dirpath, "manifest")) as fh:
                lines = [ln for ln in fh.read().splitlines() if ln]
            rel_dir = os.path.relpath(dirpath, root)
            # Manifests hold absolute URIs and the table may be a copy: compare "part=x/name".
            out[rel_dir] = {"/".join(ln.rsplit("/", 2)[-2:]) for ln in lines}
    return out


def done_manifest(path: str, info: dict[str, Any]) -> None:
    expected: dict[str, set[str]] = {}
    for r in DeltaTable(path).snapshot().files.to_pylist():
        expected.setdefault(f"part={dict(r['partitionValues'])['part']}", set()).add(unquote(r["path"]))
    assert manifest_contents(path) == expected, "the manifests list exactly the snapshot's files"


# convert: a hive-partitioned Parquet directory (a null partition, a _SUCCESS marker) made a Delta table.


def build_convert(path: str) -> dict[str, Any]:
    write_parquet_dir(path)
    return {"rows": _parquet_rows(path), "files": parquet_files(path)}


def write_parquet_dir(path: str) -> None:
    """Four data files in three hive partitions (one of them null) and a hidden ``_SUCCESS``."""
    os.makedirs(path)
    for i, part in enumerate(["a", "a", "b", "__HIVE_DEFAULT_PARTITION__"]):
        write_data_file(path, rows(3, i * 3, part=part), {"part": part})
    open(os.path.join(path, "_SUCCESS"), "w").close()


def parquet_files(path: str) -> dict[str, tuple[int, int]]:
    """Data files (relative path -> size, mtime in ns) outside ``_delta_log``: convert must not touch them."""
    out = {}
    for dirpath, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        for name in files:
            full = os.path.join(dirpath, name)
            st = os.stat(full)
            out[os.path.relpath(full, path).replace(os.sep, "/")] = (st.st_size, st.st_mtime_ns)
    return out


def _parquet_rows(path: str) -> Counter:
    import pyarrow.parquet as pq

    out: Counter = Counter()
    for rel in parquet_files(path):
        if not rel.startswith("_"):
            out += rows_of(pq.read_table(os.path.join(path, rel), columns=["id", "value"]))
    return out


def converted(path: str) -> bool:
    """Commit 0 exists with content: the table readers must see in full (absent or empty: plain Parquet)."""
    commit0 = commit_file(path, 0)
    return os.path.exists(commit0) and os.path.getsize(commit0) > 0


def run_convert(uri: str, info: dict[str, Any]) -> Any:
    from deltalog.convert import convert_to_delta

    return convert_to_delta(uri, partition_by="part string", max_workers=1)


def rerun_convert(uri: str, info: dict[str, Any]) -> Any:
    """Convert again; if the faulted run converted already, a rerun must refuse (and change nothing)."""
    from deltalog.errors import TableAlreadyExistsError

    local = uri.split("://", 1)[-1] if uri.startswith("faulty://") else uri
    if not converted(local):
        return run_convert(uri, info)
    log_before = sorted(os.listdir(os.path.join(local, "_delta_log")))
    try:
        run_convert(uri, info)
    except TableAlreadyExistsError:
        assert sorted(os.listdir(os.path.join(local, "_delta_log"))) == log_before, "a refused convert wrote nothing"
        return None
    raise AssertionError("converting a converted table again must be refused")


def check_convert(path: str, info: dict[str, Any], suite: str, what: str) -> None:
    """Untouched Parquet that both readers refuse, or the full converted table that both read; never half."""
    assert parquet_files(path) == info["files"], f"after {what}: the data files changed"
    if converted(path):
        check_table(path, all_versions_of(path, info), info["rows"], suite, what)
        _assert_lists_every_file(path, info, what)
        return
    refusals = []
    try:
        DeltaTable(path).snapshot()
    except DeltaLogError as exc:
        refusals.append(isinstance(exc, NotADeltaTableError))
    try:
        deltalake.DeltaTable(path)
    except TableNotFoundError:
        refusals.append(True)
    except Exception:  # noqa: BLE001 - any other reaction is a half table
        refusals.append(False)
    recorder.add("checks", 1, suite)
    recorder.add("tables_unreadable", 0 if refusals == [True, True] else 1, suite)
    assert refusals == [True, True], f"after {what}: without commit 0 both readers must refuse ({refusals})"


def all_versions_of(path: str, info: dict[str, Any]) -> Callable[[int], list[int]]:
    return lambda latest: all_versions(path, info, latest)


def _assert_lists_every_file(path: str, info: dict[str, Any], what: str) -> None:
    theirs = deltalake.DeltaTable(path)
    listed = {unquote(p) for p in theirs.get_add_actions(flatten=True).column("path").to_pylist()}
    data = {rel for rel in info["files"] if not rel.startswith("_")}
    assert theirs.version() == 0 and listed == data, f"after {what}: commit 0 must list every data file once"


def done_convert(path: str, info: dict[str, Any]) -> None:
    assert converted(path), "the rerun converted the directory"
    _assert_lists_every_file(path, info, "the rerun")
    assert parquet_files(path) == info["files"], "converting leaves the data files as they were"


OPERATIONS: dict[str, Operation] = {
    "commit": Operation(
        "commit",
        build_commit,
        run_commit,
        done_commit,
        all_versions,
        rows_after=lambda info: [info["rows"], info["after"]],
        rows_final=lambda info: info["after"],
    ),
    "checkpoint": Operation("checkpoint", build_checkpoint, run_checkpoint, done_checkpoint, all_versions),
    "checkpoint_v2": Operation(
        "checkpoint_v2", build_checkpoint_v2, run_checkpoint_v2, done_checkpoint_v2, all_versions
    ),
    "log_cleanup": Operation("log_cleanup", build_cleanup, run_cleanup, done_cleanup, retained_cleanup),
    "vacuum": Operation("vacuum", build_vacuum, run_vacuum, done_vacuum, retained_vacuum),
    "vacuum_lite": Operation("vacuum_lite", build_vacuum, run_vacuum_lite, done_vacuum_lite, retained_vacuum),
    "compaction": Operation("compaction", build_compaction, run_compaction, done_compaction, all_versions),
    "manifest": Operation("manifest", build_manifest, run_manifest, done_manifest, all_versions),
    "convert": Operation(
        "convert",
        build_convert,
        run_convert,
        done_convert,
        all_versions,
        check_after=check_convert,
        rerun=rerun_convert,
    ),
}


def run_operation(name: str, path: str, info: dict[str, Any], *, faulty: bool = True) -> Any:
    """Run operation ``name`` on the table at ``path`` (through ``faulty://`` unless told otherwise)."""
    return OPERATIONS[name].run(faults.uri(path) if faulty else path, info)


# --- templates: each operation's table built once per session, copied for every case -----------------


class TemplateCache:
    """Each operation's table, built once; counts of its storage calls in a clean ``faulty://`` run."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._tables: dict[str, tuple[str, dict[str, Any]]] = {}
        self._counts: dict[str, Counter] = {}
        self._seq = 0

    def get(self, name: str) -> tuple[str, dict[str, Any]]:
        if name not in self._tables:
            path = os.path.join(self.base, f"template-{name}")
            try:
                self._tables[name] = (path, OPERATIONS[name].build(path))
            except BaseException:
                shutil.rmtree(path, ignore_errors=True)  # the next test builds it again from scratch
                raise
        return self._tables[name]

    def copy(self, name: str, label: str) -> tuple[str, dict[str, Any]]:
        """A fresh copy of the template under a unique directory name."""
        src, info = self.get(name)
        self._seq += 1
        return copy_table(src, os.path.join(self.base, f"{self._seq:05d}-{label}")), info

    def counts(self, name: str, suite: str) -> Counter:
        """Storage calls per kind in a fault-free run, which must itself complete the operation."""
        if name not in self._counts:
            path, info = self.copy(name, f"count-{name}")
            plan = faults.FaultPlan()
            with faults.injecting(plan):
                run_operation(name, path, info)
            op = OPERATIONS[name]
            op.done(path, info)
            check_table(path, lambda latest: op.retained(path, info, latest), op.rows_final(info), suite, "a clean run")
            self._counts[name] = Counter(plan.counts)
            shutil.rmtree(path)
        return self._counts[name]


def verify_after(name: str, path: str, info: dict[str, Any], suite: str, what: str, rerun_faulty: bool = True) -> None:
    """The guarantees after a fault, crash or race, then a clean rerun that must finish the operation."""
    op = OPERATIONS[name]
    if op.check_after is not None:
        op.check_after(path, info, suite, what)
    else:
        check_table(path, lambda latest: op.retained(path, info, latest), op.rows_after(info), suite, what)
    (op.rerun or op.run)(faults.uri(path) if rerun_faulty else path, info)
    op.done(path, info)
    check_table(path, lambda latest: op.retained(path, info, latest), op.rows_final(info), suite, f"rerun after {what}")


# --- child processes (crash and race tests) ---------------------------------------------------------


PRELOAD = (
    "deltalake",
    "fsspec",
    "pyarrow.parquet",
    "pyarrow.compute",
    "deltalog",
    "deltalog.log_maintenance",
    "deltalog.ingest",
    "deltalog.compaction",
    "deltalog.commit.conflicts",
    "deltalog.convert",
    "deltalog.commit.post_commit",
    "deltalog.log_maintenance.log_cleanup",
    "deltalog.log_maintenance.manifest",
    "deltalog.commit.transaction",
    "deltalog.vacuuming",
)


def child_context() -> Any:
    """A forkserver context with deltalog preloaded: children start in milliseconds, from a clean process."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    # Installed modules only: Python 3.11's forkserver ignores the parent's sys.path when preloading.
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def crash_child(
    name: str,
    path: str,
    info: dict[str, Any],
    spec: list[dict[str, Any]],
    faulty: bool,
    warmup: str | None = None,
) -> None:
    """Run one operation in a child process under the fault plan ``spec`` (which may kill it).

    The files ``<path>.started`` and ``<path>.finished`` tell the parent when the operation
    began and whether it returned (files, not multiprocessing events: a child killed while
    holding an event's lock would block the parent forever). ``warmup``: a scratch copy to
    run the operation on first, so that a kill time measured from the start falls into the
    operation's own work rather than into first-use imports.
    """
    import logging

    logging.disable(logging.CRITICAL)
    if warmup is not None:
        run_operation(name, warmup, info, faulty=faulty)
    faults.activate(faults.FaultPlan([faults.Fault(**f) for f in spec]) if spec else None)
    open(path + ".started", "w").close()
    run_operation(name, path, info, faulty=faulty)
    open(path + ".finished", "w").close()


def wait_for_file(path: str, timeout: float) -> bool:
    """Poll for ``path`` (a child's signal file); False on timeout."""
    deadline = time.perf_counter() + timeout
    while not os.path.exists(path):
        if time.perf_counter() > deadline:
            return False
        time.sleep(0.0005)
    return True
