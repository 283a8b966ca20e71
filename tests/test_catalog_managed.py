"""Catalog-managed tables read from storage alone (issue 30, item 3).

A catalog-managed table keeps its ratified commits in the catalog until they are
published to ``_delta_log``; some lie as staged commits under
``_delta_log/_staged_commits``. ``snapshot`` silently answered the last published
version, and ``--version 2`` said the version does not exist. Now the snapshot and
health results carry a warning (also on stderr) naming the catalog and the staged
commits, a version past the published ones is refused naming the catalog, writes and
maintenance (checkpoints included) are refused as the feature table says, nothing
written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corrupt_log_helpers import fingerprint
from deltalog import DeltaTable
from deltalog.cli import main
from deltalog.errors import UnsupportedProtocolError, VersionNotFoundError
from deltalog.log_maintenance import create_checkpoint
from handmade_logs import add_action, field, metadata_action, write_commit

CONFIG = {"io.unitycatalog.tableId": "t-123", "delta.enableInCommitTimestamps": "true"}


def _add(path: str, i: int) -> dict:
    pq.write_table(pa.table({"id": pa.array([i], pa.int64())}), os.path.join(path, f"part-{i}.parquet"))
    return add_action(path, f"part-{i}.parquet")


def catalog_table(path: str) -> None:
    """Published v0 (create) and v1 (append); v2 staged (ratified, say), v3 staged twice (attempts)."""
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["catalogManaged"],
        "writerFeatures": ["catalogManaged", "inCommitTimestamp"],
    }

    def info(v: int) -> dict:
        stamp = 1_700_000_000_000 + v
        return {"commitInfo": {"inCommitTimestamp": stamp, "operation": "WRITE", "txnId": str(uuid.uuid4())}}

    write_commit(
        path, 0, [info(0), {"protocol": protocol}, metadata_action([field("id", "long")], configuration=CONFIG)]
    )
    write_commit(path, 1, [info(1), _add(path, 1)])
    write_commit(path, f"_staged_commits/{2:020d}.{uuid.uuid4()}.json", [info(2), _add(path, 2)])
    for _ in range(2):
        write_commit(path, f"_staged_commits/{3:020d}.{uuid.uuid4()}.json", [info(3), _add(path, 3)])


def test_the_snapshot_says_it_was_read_without_the_catalog(tmp_path, caplog):
    path = str(tmp_path / "t")
    catalog_table(path)
    snap = DeltaTable(path).snapshot()
    assert snap.version == 1 and snap.file_paths() == ["part-1.parquet"]
    (warning,) = snap.warnings
    assert "catalog-managed (catalogManaged)" in warning and "Unity Catalog (table id t-123)" in warning
    assert "published in _delta_log (up to version 1)" in warning
    assert "2 staged commit file(s) for versions 2..3" in warning
    assert snap.to_dict()["warnings"] == [warning]
    assert DeltaTable(path).health().warnings == [warning]
    assert any(warning in r.getMessage() for r in caplog.records)


def deltalog_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deltalog", *args], capture_output=True, text=True, timeout=120)


def test_the_cli_warns_on_stderr_and_names_the_catalog_for_an_unpublished_version(tmp_path, capsys):
    path = str(tmp_path / "t")
    catalog_table(path)
    proc = deltalog_cli("snapshot", path, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["warnings"] and "catalog-managed" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = deltalog_cli("health", path, "--json")
    assert proc.returncode == 0 and "catalog-managed" in json.loads(proc.stdout)["warnings"][0]
    assert "catalog-managed" in proc.stderr
    assert main(["snapshot", path, "--version", "2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith("error: version 2 is not published in _delta_log")
    assert "a staged commit file for it exists" in line and "Unity Catalog (table id t-123)" in line
    with pytest.raises(VersionNotFoundError, match="version 7 is not published"):
        DeltaTable(path).snapshot(version=7)


def test_a_table_that_is_not_catalog_managed_has_no_warning(tmp_path):
    from helpers import make_table

    path = str(tmp_path / "t")
    make_table(path)
    assert DeltaTable(path).snapshot().warnings == ()
    with pytest.raises(VersionNotFoundError) as info:
        DeltaTable(path).snapshot(version=3)
    assert "catalog" not in str(info.value)


def test_writes_and_maintenance_are_refused_naming_the_catalog(tmp_path):
    from deltalog.compaction import compact
    from deltalog.ingest import commit_request
    from deltalog.log_maintenance.log_cleanup import cleanup_log
    from deltalog.log_maintenance.manifest import generate_manifest
    from deltalog.vacuuming import vacuum

    path = str(tmp_path / "t")
    catalog_table(path)
    before = fingerprint(path)
    refused = {
        "vacuum": lambda: vacuum(path, dry_run=True),
        "compact": lambda: compact(path),
        "commit": lambda: commit_request(path, {"add": [{"path": "part-2.parquet"}]}),
        "cleanup-log": lambda: cleanup_log(path),
        "manifest": lambda: generate_manifest(path),
        "checkpoint": lambda: create_checkpoint(DeltaTable(path)),
    }
    for run in refused.values():
        with pytest.raises(UnsupportedProtocolError, match=r"catalog-managed .*Unity Catalog \(table id t-123\)"):
            run()
    assert fingerprint(path) == before
