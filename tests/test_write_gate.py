"""Refuse before working: every operation checks the protocol and the storage before it touches data.

Each operation runs on a table opened through a filesystem with no atomic create (the
``faulty`` wrapper's local directory under another protocol, without its
``deltalog_atomic_create``), which counts every call with its path. An operation that
commits must be refused (NonAtomicStorageError) having read no data file and written
nothing at all: only ``_delta_log`` may have been read. The same for a table whose
protocol deltalog refuses. Before the gate, ``compact`` rewrote and uploaded every bin on
such a store and deleted the files again when its commit was refused.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import fsspec
import pyarrow.parquet as pq
import pytest

import faults
from deltalog import DeltaTable
from deltalog.errors import NonAtomicStorageError, OperationRefusedError, UnsupportedProtocolError
from deltalog.storage import Storage
from fleet_helpers import refused_protocol_table
from helpers import append, make_table, rows, write_data_file

PROTOCOL = "nonatomic-counting"


class NonAtomicFileSystem(faults.FaultyFileSystem):
    """A local directory behind deltalog's remote code paths, with no atomic create-if-absent."""

    protocol = (PROTOCOL,)
    deltalog_atomic_create = False


class Recorder(faults.FaultPlan):
    """A fault plan with no faults that keeps every call as (kind, path)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def hit(self, kind: str, path: str) -> faults.Fault | None:
        self.calls.append((kind, path))
        return super().hit(kind, path)

    def data_calls(self, root: str) -> list[tuple[str, str]]:
        """Every write or delete, and every read, list or stat outside ``_delta_log``."""
        log = os.path.join(root, "_delta_log")
        return [(k, p) for k, p in self.calls if k in ("write", "delete") or not p.startswith(log)]


fsspec.register_implementation(PROTOCOL, NonAtomicFileSystem, clobber=True)


def uri(path: str) -> str:
    return f"{PROTOCOL}://{os.path.abspath(path)}"


def small_files(path: str, n: int = 4) -> DeltaTable:
    table = make_table(path, configuration={"delta.checkpointInterval": "1000"})
    for i in range(n):
        append(table, rows(3, i * 3))
    return table


def parquet_dir(path: str) -> None:
    os.makedirs(path)
    for i in range(3):
        write_data_file(path, rows(2, i * 2))


#: An operation, as a setup that prepares what it needs (untraced) and returns the call to trace.
Setup = Callable[[str], Callable[[], Any]]


def _compact(**kw: Any) -> Setup:
    from deltalog import compact

    return lambda u: lambda: compact(u, **kw)


def _vacuum(u: str) -> Callable[[], Any]:
    from deltalog import vacuum

    return lambda: vacuum(u, retention_hours=0, allow_short_retention=True)


def _execute_vacuum(u: str) -> Callable[[], Any]:
    from deltalog import execute_vacuum, plan_vacuum

    plan = plan_vacuum(u, retention_hours=0, allow_short_retention=True)  # the dry run lists the table
    return lambda: execute_vacuum(u, plan)


def _commit_request(u: str) -> Callable[[], Any]:
    from deltalog import commit_request

    pq.write_table(rows(2, 100), os.path.join(u.split("://", 1)[1], "new-1.parquet"))
    return lambda: commit_request(u, {"operation": "WRITE", "add": ["new-1.parquet"]})


def _create(u: str) -> Callable[[], Any]:
    from deltalog import create_table

    schema = DeltaTable(u).snapshot().schema
    return lambda: create_table(u + "-new", schema)


def _lease(u: str) -> Callable[[], Any]:
    from deltalog import acquire_lease

    return lambda: acquire_lease(u, "test", 60)


def _call(name: str) -> Setup:
    import deltalog

    fn = getattr(deltalog, name)
    return lambda u: lambda: fn(u)


#: Every operation that commits (or, for the lease, takes a create-if-absent).
COMMITTING: dict[str, Setup] = {
    "compact": _compact(),
    "compact zorder": _compact(zorder_by=["id"]),
    "compact purge": _compact(purge_deletion_vectors=True),
    "compact spark": _compact(engine="spark"),
    "vacuum": _vacuum,
    "execute_vacuum": _execute_vacuum,
    "commit_request": _commit_request,
    "create_table": _create,
    "acquire_lease": _lease,
}


@pytest.mark.parametrize("name", sorted(COMMITTING))
def test_an_operation_that_commits_is_refused_before_it_reads_or_writes_data(name: str, tmp_path) -> None:
    path = str(tmp_path / "t")
    small_files(path)
    run = COMMITTING[name](uri(path))
    before = sorted(os.listdir(path)), sorted(os.listdir(os.path.join(path, "_delta_log")))
    recorder = Recorder()
    with faults.injecting(recorder), pytest.raises(NonAtomicStorageError) as caught:
        run()
    assert recorder.data_calls(path) == [], f"{name} touched data before the refusal"
    assert (sorted(os.listdir(path)), sorted(os.listdir(os.path.join(path, "_delta_log")))) == before
    message = str(caught.value)
    assert "no atomic create-if-absent" in message and "Nothing was read or written" in message
    assert "single" not in message and "--" not in message, "the refusal suggests no option"


def test_convert_is_refused_before_it_reads_a_footer(tmp_path) -> None:
    from deltalog import convert_to_delta

    path = str(tmp_path / "p")
    parquet_dir(path)
    recorder = Recorder()
    with faults.injecting(recorder), pytest.raises(NonAtomicStorageError):
        convert_to_delta(uri(path))
    assert [c for c in recorder.calls if c[0] in ("read", "write", "delete")] == []
    assert not os.path.exists(os.path.join(path, "_delta_log"))


def test_what_does_not_commit_still_runs_there(tmp_path) -> None:
    """Reads, health, dry runs, checkpoints, log cleanup and manifests need no atomic create."""
    from deltalog import cleanup_log, compact, create_checkpoint, generate_manifest, vacuum

    path = str(tmp_path / "t")
    small_files(path)
    table = DeltaTable(uri(path))
    assert table.snapshot().version == 4 and table.health().num_files == 4
    assert len(compact(uri(path), plan_only=True).plan.bins) == 1
    assert vacuum(uri(path), dry_run=True).num_deleted_files == 0
    assert create_checkpoint(uri(path)).version == 4
    assert cleanup_log(uri(path), dry_run=True).num_deleted == 0
    assert generate_manifest(uri(path)).num_files == 4


#: Operations on a table whose protocol they refuse (a catalog-managed table), dry runs included.
PROTOCOL_REFUSED: dict[str, Setup] = {
    **{k: v for k, v in COMMITTING.items() if k not in ("create_table", "acquire_lease", "execute_vacuum")},
    "compact plan_only": _compact(plan_only=True),
    "vacuum dry_run": lambda u: lambda: __import__("deltalog").vacuum(u, dry_run=True),
    "plan_vacuum": _call("plan_vacuum"),
    "generate_manifest": _call("generate_manifest"),
    "create_checkpoint": _call("create_checkpoint"),
    "cleanup_log": _call("cleanup_log"),
}


@pytest.mark.parametrize("name", sorted(PROTOCOL_REFUSED))
def test_a_protocol_refusal_comes_before_any_data_is_touched(name: str, tmp_path) -> None:
    path = str(tmp_path / "t")
    refused_protocol_table(path)
    run = PROTOCOL_REFUSED[name](faults.uri(path))  # an atomic store: only the protocol refuses
    recorder = Recorder()
    with faults.injecting(recorder), pytest.raises(UnsupportedProtocolError):
        run()
    assert recorder.data_calls(path) == [], f"{name} touched data before the refusal"


def test_a_local_filesystem_without_hard_links_is_refused_before_work(tmp_path, monkeypatch) -> None:
    """FUSE mounts of buckets, SMB and FAT refuse hard links: compaction is refused before it rewrites."""
    from deltalog import compact

    path = str(tmp_path / "t")
    small_files(path)
    files_before = sorted(os.listdir(path))
    writes: list[str] = []
    real_write_table = pq.write_table
    monkeypatch.setattr(pq, "write_table", lambda *a, **k: writes.append("x") or real_write_table(*a, **k))

    def no_link(src: Any, dst: Any, *a: Any, **k: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    with pytest.raises(NonAtomicStorageError, match="refused a hard link .*Operation not permitted"):
        compact(path)
    assert writes == [] and sorted(os.listdir(path)) == files_before
    assert [n for n in os.listdir(os.path.join(path, "_delta_log")) if n.startswith(".")] == [], "probe removed"


def test_the_fleet_reports_such_a_table_refused_and_writes_no_lease(tmp_path) -> None:
    from deltalog import maintain_table

    path = str(tmp_path / "t")
    small_files(path, n=6)
    outcome = maintain_table(uri(path))
    assert outcome.status == "refused" and "NonAtomicStorageError" in (outcome.error or "")
    assert not [n for n in os.listdir(path) if "lease" in n]


def test_the_cli_refuses_with_exit_code_1_and_suggests_no_option(tmp_path) -> None:
    path = str(tmp_path / "t")
    small_files(path)
    code = (
        f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import test_write_gate; "
        "from deltalog.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "compact", uri(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("error: cannot compact on") and "--" not in proc.stderr, proc.stderr
    on_disk = sorted(n for n in os.listdir(path) if n.endswith(".parquet"))
    assert on_disk == sorted(DeltaTable(path).snapshot().file_paths()), "no file was written"


def test_storage_check_names_every_store_that_commits(tmp_path) -> None:
    """Which stores commit: the ones with a tested atomic create, nothing through fsspec's generic fallback."""
    assert Storage(str(tmp_path)).supports_atomic_create
    assert Storage("memory://gate/t").supports_atomic_create
    assert Storage(faults.uri(str(tmp_path))).supports_atomic_create
    assert not Storage(uri(str(tmp_path))).supports_atomic_create
    Storage(str(tmp_path)).check_atomic_create("commit")  # a local disk with hard links passes


@pytest.mark.airflow
def test_the_compact_operator_refuses_before_it_submits_the_spark_job(tmp_path, monkeypatch) -> None:
    """The operator's Spark path plans, then submits through SparkSubmitHook: the gate comes before the job."""
    from deltalog_provider.operators import DeltaCompactOperator
    from deltalog_provider.version_compat import AirflowFailException

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "spark-submit-ran"
    script = bin_dir / "spark-submit"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_GATE", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    path = str(tmp_path / "t")
    small_files(path)
    before = sorted(os.listdir(path))
    op = DeltaCompactOperator(task_id="c", table=uri(path), engine="spark", spark_conn_id="spark_gate")
    with pytest.raises(AirflowFailException, match="no atomic create-if-absent"):
        op.execute({})
    assert not marker.exists() and sorted(os.listdir(path)) == before


def test_the_spark_engine_is_refused_where_no_hadoop_connector_reaches(tmp_path) -> None:
    """An in-memory table commits atomically, but no Spark job can reach it: refused before any work."""
    from deltalog import compact

    small_files(str(tmp_path / "t"))
    storage = Storage("memory://gate-spark/t")
    storage.fs.put(str(tmp_path / "t") + "/", storage.root + "/", recursive=True)
    with pytest.raises(OperationRefusedError, match="Spark engine: it runs on local, S3, GCS and Azure tables only"):
        compact("memory://gate-spark/t", engine="spark", spark_options={"spark_submit": "/bin/false"})
    assert len(compact("memory://gate-spark/t", engine="spark", plan_only=True).plan.bins) == 1
