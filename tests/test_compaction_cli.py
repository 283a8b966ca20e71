"""``deltalog compact`` and ``deltalog convert`` as a user runs them: JSON out, one-line errors, right exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog import DeltaTable
from deltalog.cli import main
from test_compaction_support import make_rich_table, read_multiset

DELTALOG = os.path.join(os.path.dirname(sys.executable), "deltalog")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([DELTALOG, *args], capture_output=True, text=True, timeout=300)


def test_compact_json_plan_only_then_run_the_plan(tmp_path, capsys):
    path = make_rich_table(str(tmp_path / "t"), True, appends=3, rows_per_append=10)
    before = read_multiset(path)
    version = DeltaTable(path).version()

    assert main(["compact", path, "--plan-only", "--json", "--where", "part = 'b'"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["plan_only"] and planned["num_bins"] == 1 and not planned["versions"]
    assert [b["partition_values"] for b in planned["plan"]["bins"]] == [{"part": "b"}]
    assert DeltaTable(path).version() == version  # the dry run wrote nothing

    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(planned))
    assert main(["compact", path, "--plan", str(plan_file), "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["ok"] and done["versions"] == [version + 1] and done["num_files_removed"] == 3
    assert read_multiset(path) == before

    assert main(["compact", path, "--target-size", "64m"]) == 0
    assert "compacted" in capsys.readouterr().out
    assert main(["compact", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["noop"] is True


def test_compact_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path):
    path = make_rich_table(str(tmp_path / "t"), True, appends=2, rows_per_append=5)
    version = DeltaTable(path).version()
    for args, needle in [
        (["--where", "name = 'x'"], "only filter on partition columns"),
        (["--target-size", "huge"], "not a size"),
        (["--engine", "dask"], "invalid choice"),
        (["--plan", str(tmp_path / "nope.json")], "cannot read plan"),
    ]:
        proc = run("compact", path, "--json", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("error: ") and needle in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert proc.stdout == ""
    proc = run("compact", str(tmp_path / "missing"), "--json")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert DeltaTable(path).version() == version


def test_compact_reports_failed_bins_with_exit_1(tmp_path):
    path = make_rich_table(str(tmp_path / "t"), True, appends=2, rows_per_append=5)
    victim = next(p for p in DeltaTable(path).snapshot().file_paths() if p.startswith("part=a/"))
    with open(os.path.join(path, victim), "wb") as fh:  # unreadable; a missing file stops the run instead
        fh.write(b"not parquet")
    proc = run("compact", path, "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["num_bins_committed"] == 1
    assert doc["skipped"][0]["kind"] == "error"
    assert proc.stderr.startswith("error: 1 bin(s) could not be rewritten") and "Traceback" not in proc.stderr
    assert f"; 1 other bin(s) committed in version(s) {doc['versions']}" in proc.stderr


def test_convert_cli(tmp_path):
    path = tmp_path / "p"
    (path / "d=2024-01-01").mkdir(parents=True)
    pq.write_table(pa.table({"x": [1, 2, 3]}), path / "d=2024-01-01" / "f.parquet")
    proc = run("convert", str(path), "--json")
    assert proc.returncode == 2 and "--partition-by" in proc.stderr and not (path / "_delta_log").exists()
    proc = run("convert", str(path), "--partition-by", "d date", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (
        doc["version"] == 0 and doc["num_files"] == 1 and doc["num_records"] == 3 and doc["partition_columns"] == ["d"]
    )
    proc = run("convert", str(path), "--partition-by", "d date")
    assert proc.returncode == 1 and "already a Delta table" in proc.stderr
    proc = run("convert", str(tmp_path / "q"), "--partition-by", "d colour")
    assert proc.returncode == 2 and "unknown type 'colour'" in proc.stderr
