"""Plans and requests belong to their table (issue 36, item 4): another table's hand-off is refused first.

A compaction plan, a commit request, the Spark compaction job's request and the Spark vacuum
job's report carry the table id (``metaData.id``) and the version they were made at. Run
against another table (same paths or not), from a version the table never reached, or naming
files that were not the table's own, they are refused in one line before anything is read or
written; a truncated or malformed one is bad input. Inputs that commits since the plan removed
are the normal race: their bins are skipped, the rest runs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest

from deltalog import DeltaTable
from deltalog.cli import main
from deltalog.commit.transaction import Transaction
from deltalog.compaction import compact, plan_compaction
from deltalog.compaction.bin_writer import BinWriter
from deltalog.compaction.plan import CompactionPlan
from deltalog.compaction.spark import commit_spark_result, compact_with_spark_job, write_compaction_plan
from deltalog.errors import ForeignHandoffError, InvalidArgumentError
from deltalog.ingest import commit_request
from helpers import append, make_table, rows, write_data_file
from vacuum_helpers import files_on_disk, log_files

DELTALOG = os.path.join(os.path.dirname(sys.executable), "deltalog")


def small_files(path: str, files: int = 4, part: str | None = None) -> DeltaTable:
    table = make_table(path, partition_by=["part"] if part else None)
    for i in range(files):
        append(table, rows(2, i * 2, part or "a"), {"part": part} if part else None)
    return table


def untouched(path: str):
    before = (files_on_disk(path), log_files(path))
    return lambda: (files_on_disk(path), log_files(path)) == before


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([DELTALOG, *args], capture_output=True, text=True, timeout=300)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def same_paths_other_id(source: str, dest: str) -> str:
    """A copy of ``source`` whose log names another table id: same files, same paths, another table."""
    shutil.copytree(source, dest)
    first = os.path.join(dest, "_delta_log", f"{0:020d}.json")
    lines = [json.loads(line) for line in open(first)]
    for action in lines:
        if "metaData" in action:
            action["metaData"]["id"] = "00000000-0000-0000-0000-000000000000"
    with open(first, "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in lines) + "\n")
    return dest


# --- compaction plans --------------------------------------------------------------------------


def test_the_cli_refuses_another_tables_plan_in_one_line_and_touches_nothing(tmp_path):
    """The Done-means line: ``deltalog compact T --plan PLAN_OF_ANOTHER_TABLE``."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    small_files(a)
    small_files(b)
    planned = cli("compact", a, "--plan-only", "--json")
    assert planned.returncode == 0, planned.stderr
    plan_file = tmp_path / "plan-of-a.json"
    plan_file.write_text(planned.stdout)
    unchanged = untouched(b)
    proc = cli("compact", b, "--plan", str(plan_file))
    assert proc.returncode == 1
    line = one_error_line(proc)
    assert f"was made for table {DeltaTable(a).snapshot().metadata.id}, not for file://{b}" in line
    assert unchanged()


def test_a_plan_from_another_table_with_the_same_paths_is_refused(tmp_path):
    a = str(tmp_path / "a")
    small_files(a)
    b = same_paths_other_id(a, str(tmp_path / "b"))
    plan = plan_compaction(a)
    assert {f.path for bin_ in plan.bins for f in bin_.files} <= set(DeltaTable(b).snapshot().file_paths())
    unchanged = untouched(b)
    with pytest.raises(ForeignHandoffError, match="was made for table"):
        compact(b, plan=plan)
    with pytest.raises(ForeignHandoffError, match="was made for table"):
        write_compaction_plan(b, plan, "_compaction/p.json")
    submitted = []
    with pytest.raises(ForeignHandoffError, match="was made for table"):
        compact_with_spark_job(b, plan, submitted.append)
    assert submitted == [] and unchanged()


def test_a_copy_with_the_same_id_runs_the_plan_on_its_own_files(tmp_path):
    """The id names the table wherever it lives: a copy (same id, same files) may run the original's plan."""
    a = str(tmp_path / "a")
    small_files(a)
    plan = plan_compaction(a)
    copy = str(tmp_path / "copy")
    shutil.copytree(a, copy)
    result = compact(copy, plan=plan)
    assert result.ok and len(DeltaTable(copy).snapshot().file_paths()) == 1
    assert len(DeltaTable(a).snapshot().file_paths()) == 4  # the original is untouched


@pytest.mark.parametrize(
    "edit, error, match",
    [
        (lambda d: d.pop("table_id"), InvalidArgumentError, "names no table: 'table_id' must be"),
        (lambda d: d.update(table_id=7), InvalidArgumentError, "names no table: 'table_id' must be .* got 7"),
        (lambda d: d.update(table_id=""), InvalidArgumentError, "names no table"),
        (lambda d: d.update(snapshot_version="4"), InvalidArgumentError, "'snapshot_version' must be"),
        (lambda d: d.update(snapshot_version=True), InvalidArgumentError, "'snapshot_version' must be"),
        (lambda d: d.update(snapshot_version=99), ForeignHandoffError, "made at version 99, but .* is at version 4"),
    ],
    ids=["no-id", "id-not-a-string", "empty-id", "version-a-string", "version-a-bool", "version-ahead"],
)
def test_a_plan_whose_id_or_version_is_wrong_is_refused(tmp_path, edit, error, match):
    path = str(tmp_path / "t")
    small_files(path)
    doc = plan_compaction(path).to_dict()
    edit(doc)
    unchanged = untouched(path)
    with pytest.raises(error, match=match):
        compact(path, plan=CompactionPlan.from_dict(doc))
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(doc))
    proc = cli("compact", path, "--plan", str(plan_file))
    assert proc.returncode == error.exit_code
    one_error_line(proc)
    assert unchanged()


def test_a_truncated_plan_file_is_bad_input(tmp_path):
    path = str(tmp_path / "t")
    small_files(path)
    text = plan_compaction(path).to_json()
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(text[: len(text) // 2])
    unchanged = untouched(path)
    proc = cli("compact", path, "--plan", str(plan_file))
    assert proc.returncode == 2 and "not valid JSON" in one_error_line(proc)
    assert unchanged()


def test_a_plan_naming_files_the_table_did_not_hold_is_refused(tmp_path):
    path = str(tmp_path / "t")
    table = small_files(path)
    stray = write_data_file(path, rows(2, 100))["path"]  # in the folder, never committed
    plan = plan_compaction(path)
    bins = [
        dataclasses.replace(
            plan.bins[0], files=[*plan.bins[0].files[:-1], dataclasses.replace(plan.bins[0].files[-1], path=stray)]
        )
    ]
    edited = dataclasses.replace(plan, bins=bins)
    unchanged = untouched(path)
    with pytest.raises(
        ForeignHandoffError, match=rf"1 input file\(s\) that were not live files of .* at version 4, .*{stray}"
    ):
        compact(table, plan=edited)
    assert unchanged()


def test_a_plan_whose_inputs_were_removed_since_skips_those_bins_and_reads_nothing_of_them(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    table = make_table(path, partition_by=["part"])
    for part in ("a", "b"):
        for i in range(3):
            append(table, rows(2, i * 2, part), {"part": part})
    plan = plan_compaction(path)
    assert len(plan.bins) == 2
    gone = next(b for b in plan.bins if b.partition_values == {"part": "a"})
    victim = gone.files[0].path
    txn = Transaction(table.storage, table.snapshot(), operation="DELETE")
    txn.remove([{"path": victim, "dataChange": True}])
    txn.commit()
    rewritten = []
    original = BinWriter.rewrite
    monkeypatch.setattr(BinWriter, "rewrite", lambda self, b: rewritten.append(b.id) or original(self, b))
    result = compact(path, plan=plan)
    assert rewritten == [b.id for b in plan.bins if b is not gone]
    (skipped,) = result.skipped
    assert skipped.bin_id == gone.id and skipped.kind == "conflict" and skipped.paths == [victim]
    assert "removed by a commit after the plan was made at version 6" in skipped.reason
    assert result.ok and [c.bins for c in result.commits] == [[b.id for b in plan.bins if b is not gone]]


def test_a_plan_whose_version_the_log_no_longer_holds_and_whose_inputs_are_gone_is_refused(tmp_path):
    from deltalog.log_maintenance import create_checkpoint

    path = str(tmp_path / "t")
    small_files(path)
    plan = plan_compaction(path)  # at version 4
    compact(path)  # version 5: every input removed since
    create_checkpoint(path)
    for v in range(5):  # as log cleanup leaves it: version 4 can no longer be rebuilt
        os.remove(os.path.join(path, "_delta_log", f"{v:020d}.json"))
    unchanged = untouched(path)
    with pytest.raises(ForeignHandoffError, match="made at version 4, which the log of .* no longer holds"):
        compact(path, plan=plan)
    assert unchanged()


# --- the Spark compaction job's request ---------------------------------------------------------


def _request_for(plan: CompactionPlan) -> dict:
    return {"add": [], "remove": [], "tableId": plan.table_id, "readVersion": plan.snapshot_version}


@pytest.mark.parametrize(
    "edit, error, match",
    [
        (lambda r: r.pop("tableId"), InvalidArgumentError, "request names no table \\('tableId' is missing\\)"),
        (lambda r: r.update(tableId="another"), ForeignHandoffError, "was made for table another"),
        (lambda r: r.update(readVersion=1), ForeignHandoffError, "made for the plan at version 1, not this plan"),
        (lambda r: r.pop("readVersion"), InvalidArgumentError, "'readVersion' must be the plan's version"),
    ],
    ids=["no-id", "other-id", "other-plan", "no-version"],
)
def test_the_spark_jobs_request_must_answer_this_plan(tmp_path, edit, error, match):
    path = str(tmp_path / "t")
    small_files(path)
    plan = plan_compaction(path)
    request = _request_for(plan)
    edit(request)
    unchanged = untouched(path)
    with pytest.raises(error, match=match):
        commit_spark_result(path, plan, request)
    assert unchanged()


# --- commit requests ------------------------------------------------------------------------------


def _request(path: str) -> dict:
    rel = write_data_file(path, rows(2, 50))["path"]
    return {"operation": "WRITE", "add": [{"path": rel}]}


def test_a_commit_request_naming_its_table_commits(tmp_path):
    path = str(tmp_path / "t")
    table = small_files(path, files=1)
    request = {**_request(path), "tableId": table.snapshot().metadata.id, "readVersion": 1}
    assert commit_request(path, request).version == 2


def test_a_commit_request_for_another_table_is_refused_in_one_line_even_when_its_transaction_is_done(tmp_path, capsys):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    small_files(a, files=1)
    small_files(b, files=1)
    request = {**_request(b), "tableId": DeltaTable(a).snapshot().metadata.id}
    commit_request(b, {**_request(b), "appId": "ingest", "txnVersion": 1})  # b has done transaction ingest/1
    unchanged = untouched(b)
    with pytest.raises(ForeignHandoffError, match="was made for table"):
        commit_request(b, {**request, "appId": "ingest", "txnVersion": 1})  # never a silent no-op
    request_file = tmp_path / "request.json"
    request_file.write_text(json.dumps(request))
    proc = cli("commit", b, "--request", str(request_file))
    assert proc.returncode == 1 and "the commit request was made for table" in one_error_line(proc)
    assert unchanged()


@pytest.mark.parametrize(
    "extra, code, match",
    [
        ({"tableId": 5}, 2, "'tableId' must be the id of the table"),
        ({"readVersion": -1}, 2, "'readVersion' must be the table version"),
        ({"readVersion": 50}, 1, "made at version 50, but .* is at version 1"),
    ],
    ids=["id-not-a-string", "negative-version", "version-ahead"],
)
def test_a_commit_request_with_a_wrong_field_writes_nothing(tmp_path, extra, code, match):
    import re

    path = str(tmp_path / "t")
    small_files(path, files=1)
    request = {**_request(path), **extra}
    unchanged = untouched(path)
    request_file = tmp_path / "request.json"
    request_file.write_text(json.dumps(request))
    proc = cli("commit", path, "--request", str(request_file))
    assert proc.returncode == code and re.search(match, one_error_line(proc)), proc.stderr
    assert unchanged()


def test_a_commit_request_without_a_table_id_is_accepted_because_its_files_are_checked(tmp_path, caplog):
    """Older writers name no table: their requests still commit, each file checked against this table (a file
    not in its folder, or not live for a remove, is refused as before)."""
    import logging

    path = str(tmp_path / "t")
    small_files(path, files=1)
    with caplog.at_level(logging.INFO, logger="deltalog.ingest"):
        assert commit_request(path, _request(path)).version == 2
    assert "names no table ('tableId')" in caplog.text
    other = str(tmp_path / "other")
    small_files(other, files=1)
    foreign = _request(other)  # its file is in the other table's folder
    unchanged = untouched(path)
    with pytest.raises(InvalidArgumentError, match="does not exist in the table folder"):
        commit_request(path, foreign)
    assert unchanged()


# --- vacuum plans and the Spark vacuum job's report ---------------------------------------------


def test_a_vacuum_plan_for_a_table_re_created_since_is_refused(tmp_path):
    from deltalog.vacuuming import execute_vacuum, plan_vacuum
    from test_vacuum import build_history

    path = str(tmp_path / "t")
    build_history(path)
    plan = plan_vacuum(path)
    assert plan.num_files > 0
    version = plan.version
    shutil.rmtree(os.path.join(path, "_delta_log"))
    table = make_table(path)  # re-created at the same location: another id, its own history
    while table.version() < version:
        append(table, rows(1))
    unchanged = untouched(path)
    with pytest.raises(ForeignHandoffError, match="re-created"):
        execute_vacuum(path, plan)
    assert unchanged()


def test_the_vacuum_jobs_report_must_answer_its_spec(tmp_path, monkeypatch):
    from deltalog.vacuuming import plan_vacuum
    from deltalog.vacuuming.spark import driver
    from deltalog.vacuuming.spark.spec import JobReport

    path = str(tmp_path / "t")
    small_files(path, files=1)
    seen = []

    def stale(spec, options, spec_path, cancel):  # a report left by another table's run
        seen.append(spec)
        return JobReport(plan=str(tmp_path / "nothing"), table_id="another", version=spec.version)

    monkeypatch.setattr(driver, "_run", stale)
    with pytest.raises(ForeignHandoffError, match="answers table another at version 1, not the plan of"):
        plan_vacuum(path, engine="spark", spark_options={"master": "local[1]"})
    (spec,) = seen
    assert spec.table_id == DeltaTable(path).snapshot().metadata.id and spec.version == 1


def test_the_spark_ingest_request_names_its_table():
    from deltalog.engines.spark.ingest import WrittenFile, build_commit_request
    from deltalog.ingest import load_commit_request

    f = WrittenFile(path="d=1/part-0.parquet", size=10, partition_values={"d": "1"}, modification_time=5)
    req = load_commit_request(build_commit_request([f], table_id="abc", read_version=3))
    assert (req.tableId, req.readVersion) == ("abc", 3)


@pytest.mark.slow
@pytest.mark.spark
def test_a_spark_job_reads_its_tables_identity_from_commits_and_checkpoints(delta_spark, tmp_path):
    from deltalog.engines.spark.table_identity import table_identity
    from deltalog.log_maintenance import create_checkpoint

    path = str(tmp_path / "t")
    table = small_files(path, files=3)
    identity = table_identity(delta_spark, path)
    assert (identity.table_id, identity.version) == (table.snapshot().metadata.id, 3)
    create_checkpoint(path)
    append(table, rows(1, 90))
    for v in range(0, 4):  # only the checkpoint holds the metaData now
        os.remove(os.path.join(path, "_delta_log", f"{v:020d}.json"))
    identity = table_identity(delta_spark, path)
    assert (identity.table_id, identity.version) == (table.snapshot().metadata.id, 4)


def test_main_compact_plan_exit_codes_match_the_table(tmp_path, capsys):
    """In process too (the CLI's one-line error path): another table's plan exits 1."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    small_files(a)
    small_files(b)
    plan_file = tmp_path / "p.json"
    plan_file.write_text(plan_compaction(a).to_json())
    assert main(["compact", b, "--plan", str(plan_file)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: the compaction plan was made for table") and len(err.strip().splitlines()) == 1
