"""The CLI contract of DESIGN.md: JSON shapes, one-line errors, exit codes, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import fsspec
import pytest

from deltalog import DeltaTable
from deltalog.cli import main
from helpers import append, make_table, rows

DELTALOG = [sys.executable, "-m", "deltalog"]


@pytest.fixture
def table(tmp_path):
    path = str(tmp_path / "t")
    t = make_table(path, partition_by=["part"], configuration={"delta.targetFileSize": "4096"})
    for i in range(4):
        append(t, rows(10, start=i * 10, part=f"p{i % 2}"), partition={"part": f"p{i % 2}"})
    return path


def run(args, cwd=None):
    return subprocess.run(DELTALOG + args, capture_output=True, text=True, cwd=cwd)


def test_snapshot_json_contract(table, capsys):
    assert main(["snapshot", table, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["version"] == 4
    assert set(out["protocol"]) == {"minReaderVersion", "minWriterVersion", "readerFeatures", "writerFeatures"}
    assert out["metadata"]["partitionColumns"] == ["part"]
    assert out["metadata"]["configuration"] == {"delta.targetFileSize": "4096"}
    assert json.loads(out["metadata"]["schemaString"])["type"] == "struct"
    assert len(out["files"]) == 4
    f = out["files"][0]
    assert f["path"].startswith("part=p") and f["size"] > 0 and f["partitionValues"]["part"] in ("p0", "p1")


def test_snapshot_time_travel_flags(table, capsys):
    assert main(["snapshot", table, "--version", "2", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["files"]) == 2
    assert main(["snapshot", table, "--timestamp", "2999-01-01T00:00:00Z", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 4


def test_history_and_health_json(table, capsys):
    assert main(["history", table, "--limit", "2", "--json"]) == 0
    commits = json.loads(capsys.readouterr().out)["commits"]
    assert [c["version"] for c in commits] == [4, 3]
    assert commits[0]["operation"] == "WRITE" and commits[0]["operationParameters"] == {"mode": "Append"}
    assert main(["health", table, "--json"]) == 0
    h = json.loads(capsys.readouterr().out)
    assert h["num_files"] == 4 and h["target_file_size"] == 4096
    assert h["num_partitions"] == 2 and h["files_per_partition_max"] == 2
    assert h["commits_since_checkpoint"] == 5 and h["oldest_readable_version"] == 0
    assert main(["health", table, "--target-file-size", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_small_files"] == 0


def test_human_output_without_json(table, capsys):
    assert main(["snapshot", table]) == 0
    assert "version 4: 4 files" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args,needle",
    [
        (["snapshot", "/nonexistent/table/xyz"], "does not exist"),
        (["snapshot", "{table}", "--version", "99"], "latest version is 4"),
        (["snapshot", "{table}", "--timestamp", "not-a-time"], "invalid timestamp"),
        (["snapshot", "{table}", "--storage-option", "novalue"], "KEY=VALUE"),
        (["history", "{table}", "--limit", "0"], "positive"),
        (["health", "{table}", "--target-file-size", "-5"], "positive"),
        (["snapshot"], "required"),
        (["frobnicate", "{table}"], "invalid choice"),
    ],
)
def test_errors_are_one_line_exit_2(table, args, needle):
    p = run([a.replace("{table}", table) for a in args])
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert p.stdout == ""


def test_corrupt_table_error(table):
    with open(os.path.join(table, "_delta_log", f"{5:020d}.json"), "w") as fh:
        fh.write("{truncated")
    p = run(["snapshot", table, "--json"])
    assert p.returncode == 2 and "00000000000000000005.json: line 1" in p.stderr and "Traceback" not in p.stderr


def test_relative_and_file_uri_paths_agree(table):
    parent, name = os.path.split(table)
    by_rel = run(["snapshot", name, "--json"], cwd=parent)
    by_uri = run(["snapshot", "file://" + table, "--json"])
    assert by_rel.returncode == 0 and by_uri.returncode == 0
    assert json.loads(by_rel.stdout)["files"] == json.loads(by_uri.stdout)["files"]


def test_console_script_and_module_entry_points(table):
    exe = os.path.join(os.path.dirname(sys.executable), "deltalog")
    p = subprocess.run([exe, "snapshot", table, "--json"], capture_output=True, text=True)
    assert p.returncode == 0 and json.loads(p.stdout)["version"] == 4


def test_memory_filesystem_table(table):
    """Any fsspec protocol works: copy the table into memory:// and read it back."""
    mem = fsspec.filesystem("memory")
    local = fsspec.filesystem("file")
    for f in local.find(table):
        mem.pipe_file("/memtable/" + os.path.relpath(f, table), local.cat_file(f))
    snap = DeltaTable("memory://memtable").snapshot()
    assert snap.version == 4 and snap.num_files == 4


def test_health_and_compaction_agree_on_a_size_string_target(tmp_path, capsys):
    """delta.targetFileSize='1k' means 1024 bytes for both the small-file count and the plan."""
    from deltalog.compaction import plan_compaction

    path = str(tmp_path / "sized")
    t = make_table(path, configuration={"delta.targetFileSize": "1k"})
    for i in range(3):
        append(t, rows(2, start=i * 2))
    health = DeltaTable(path).health()
    assert health.target_file_size == 1024 and health.small_file_threshold == 512
    assert plan_compaction(DeltaTable(path)).to_dict()["target_size"] == 1024
