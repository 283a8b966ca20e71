"""Every operation deltalog runs appends its row to the maintenance history: the CLI's commands, the fleet.

The rows are read back with deltalake (an independent reader) as well as our own reader.
The fleet's history joins the fleet: it is compacted, checkpointed and its log cleaned
by the same run that records into it, and no row is lost on the way.
"""

from __future__ import annotations

import html
import json
import os
import time

import deltalake
import pytest

from deltalog import DeltaTable, read_history
from deltalog.cli import main
from deltalog.errors import HistoryWriteError
from deltalog.journal import HistoryRecorder, RunContext
from deltalog.journal import record as record_module
from deltalog.vacuuming.plan import LAST_VACUUM_INFO
from fleet_helpers import (
    DAY_MS,
    expired_log_table,
    healthy_table,
    now_ms,
    reclaimable_table,
    refused_protocol_table,
    small_files_table,
)
from helpers import append, make_table, rows, write_data_file


def _rows(history: str) -> list[dict]:
    return read_history(history).to_pylist()


def _by_deltalake(history: str) -> list[dict]:
    return deltalake.DeltaTable(history).to_pyarrow_table().to_pylist()


@pytest.fixture(autouse=True)
def _no_ambient_history(monkeypatch):
    for name in ("DELTALOG_HISTORY", "AIRFLOW_CTX_DAG_ID", "AIRFLOW_CTX_DAG_RUN_ID", "AIRFLOW_CTX_TASK_ID"):
        monkeypatch.delenv(name, raising=False)


# --- the CLI's single-table commands ----------------------------------------------------


def test_every_single_table_command_appends_its_row(tmp_path, capsys):
    history = str(tmp_path / "_deltalog" / "history")
    path = str(tmp_path / "t")
    table = make_table(path)
    for i in range(5):
        append(table, rows(3, start=i * 3), run_hooks=False)
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"add": [write_data_file(path, rows(3, start=100))["path"]]}))
    plain = tmp_path / "plain"
    plain.mkdir()
    import pyarrow.parquet as pq

    pq.write_table(rows(4), str(plain / "a.parquet"))
    commands = [
        (["compact", path], "compaction", "done"),
        (["commit", path, "--request", str(request)], "commit", "done"),
        (["checkpoint", path], "checkpoint", "done"),
        (["vacuum", path, "--retention-hours", "0", "--allow-short-retention"], "vacuum", "done"),
        (["cleanup-log", path], "log_cleanup", "nothing_due"),
        (["manifest", path], "manifest", "done"),
        (["convert", str(plain)], "convert", "done"),
    ]
    for argv, operation, status in commands:
        assert main([*argv, "--history", history]) == 0, argv
        capsys.readouterr()
        last = _rows(history)[-1]
        assert (last["operation"], last["status"]) == (operation, status), argv
    recorded = _rows(history)
    assert len(recorded) == len(commands)
    compaction, commit = recorded[0], recorded[1]
    assert compaction["files_read"] == 5 and compaction["files_written"] == 1 and compaction["engine"] == "local"
    assert compaction["live_files_before"] == 5 and compaction["live_files_after"] == 1
    assert commit["files_written"] == 1 and commit["version_after"] == commit["version_before"] + 1
    assert recorded[3]["files_removed"] == 5 and recorded[3]["bytes_reclaimed"] > 0  # the compacted-away files
    assert recorded[-1]["table_uri"] == "file://" + str(plain) and recorded[-1]["live_files_after"] == 1
    assert all(r["airflow_dag_id"] is None for r in recorded)
    assert len({r["run_id"] for r in recorded}) == len(commands)  # one run per command
    # deltalake reads the same rows.
    assert sorted(r["row_id"] for r in _by_deltalake(history)) == sorted(r["row_id"] for r in recorded)


def test_dry_runs_and_plans_record_nothing(tmp_path, capsys):
    history = str(tmp_path / "history")
    path = str(tmp_path / "t")
    table = make_table(path)
    for i in range(3):
        append(table, rows(3, start=i * 3), run_hooks=False)
    for argv in (
        ["compact", path, "--plan-only"],
        ["vacuum", path, "--dry-run"],
        ["cleanup-log", path, "--dry-run"],
        ["manifest", path, "--dry-run"],
        ["maintain", path, "--dry-run"],
    ):
        assert main([*argv, "--history", history]) == 0, argv
    capsys.readouterr()
    assert not os.path.exists(history)


def test_the_environment_names_the_history_and_an_airflow_task(tmp_path, monkeypatch, capsys):
    """DELTALOG_HISTORY stands for --history; a BashOperator's AIRFLOW_CTX_* name the task in the row."""
    history = str(tmp_path / "history")
    path = str(tmp_path / "t")
    append(make_table(path), rows(3))
    monkeypatch.setenv("DELTALOG_HISTORY", history)
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "nightly")
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "scheduled__2026-05-01")
    monkeypatch.setenv("AIRFLOW_CTX_TASK_ID", "checkpoint_t")
    monkeypatch.setenv("AIRFLOW_CTX_TRY_NUMBER", "2")
    assert main(["checkpoint", path]) == 0
    assert main(["checkpoint", path]) == 0  # a second process of the same task (a mapped instance, say)
    capsys.readouterr()
    first, second = _rows(history)
    assert (first["airflow_dag_id"], first["airflow_run_id"], first["airflow_task_id"]) == (
        "nightly",
        "scheduled__2026-05-01",
        "checkpoint_t",
    )
    assert first["airflow_try_number"] == 2 and first["airflow_map_index"] is None  # unknown to a shell command
    assert first["run_id"] == "airflow/nightly/scheduled__2026-05-01"
    assert (first["status"], second["status"]) == ("done", "nothing_due")  # both recorded: neither taken for a repeat


def test_a_refused_operation_is_recorded_and_the_exit_code_kept(tmp_path, capsys):
    history = str(tmp_path / "history")
    path = str(tmp_path / "t")
    append(make_table(path), rows(3))
    assert main(["vacuum", path, "--retention-hours", "1", "--history", history]) == 1
    assert "refusing to vacuum" in capsys.readouterr().err
    (row,) = _rows(history)
    assert row["operation"] == "vacuum" and row["status"] == "refused" and "refusing to vacuum" in row["reason"]


def test_a_history_location_holding_another_table_is_refused_before_any_work(tmp_path, capsys):
    path = str(tmp_path / "t")
    table = make_table(path)
    for i in range(3):
        append(table, rows(3, start=i * 3), run_hooks=False)
    other = str(tmp_path / "other")
    append(make_table(other), rows(1))
    version = DeltaTable(path).snapshot().version
    assert main(["compact", path, "--history", other]) == 1
    assert "refusing to use" in capsys.readouterr().err
    assert DeltaTable(path).snapshot().version == version  # nothing compacted
    assert DeltaTable(other).snapshot().version == 1  # nothing appended


def test_a_failed_append_is_retried_under_the_same_app_transaction(tmp_path, monkeypatch):
    """An append whose commit landed but whose caller saw an error is not repeated by the next flush."""
    history = str(tmp_path / "history")
    path = str(tmp_path / "t")
    append(make_table(path), rows(3))
    recorder = HistoryRecorder(history, context=RunContext(run_id="r"), auto_flush=False)
    real = record_module.append_rows
    calls = []

    def lands_then_fails(*args, **kwargs):
        calls.append(kwargs["app_id"])
        result = real(*args, **kwargs)
        if len(calls) == 1:
            raise OSError("connection reset after the commit")
        return result

    monkeypatch.setattr(record_module, "append_rows", lands_then_fails)
    from deltalog import create_checkpoint

    with recorder.operation(path, "checkpoint") as op:
        op.result = create_checkpoint(path)
    with pytest.raises(HistoryWriteError, match="kept for the next attempt"):
        recorder.flush()
    assert recorder.unsent == 1
    with recorder.operation(path, "checkpoint") as op:
        op.result = create_checkpoint(path)
    recorder.flush()
    assert recorder.unsent == 0
    assert calls == [calls[0], calls[0], "deltalog-history/run/r/2"]  # the failed append kept its id
    assert [r["status"] for r in _rows(history)] == ["done", "nothing_due"]  # each row once


# --- the fleet ------------------------------------------------------------------------


def _fleet(root: str) -> dict[str, str]:
    paths = {name: os.path.join(root, name) for name in ("small", "healthy", "expired", "reclaim", "managed")}
    small_files_table(paths["small"])
    healthy_table(paths["healthy"])
    expired_log_table(paths["expired"])
    reclaimable_table(paths["reclaim"])
    refused_protocol_table(paths["managed"])
    return {name: "file://" + p for name, p in paths.items()}


def test_two_fleet_runs_record_a_row_per_table_and_operation_each(tmp_path, capsys):
    root = str(tmp_path / "lake")
    tables = _fleet(root)
    history = str(tmp_path / "lake" / "_deltalog" / "history")  # a hidden folder: discovery skips it
    for _ in range(2):
        # exit 1: the catalog-managed table is refused (docs/cli.md), every other table maintained
        assert main(["maintain", "--root", root, "--history", history, "--json"]) == 1
        assert "error: not every table was maintained: 1 refused (see the summary)" in capsys.readouterr().err
    recorded = _by_deltalake(history)  # an independent reader
    runs = sorted({r["run_id"] for r in recorded})
    assert len(runs) == 2
    history_uri = "file://" + history
    by_run = {run: [r for r in recorded if r["run_id"] == run] for run in runs}
    first, second = (sorted(by_run[run], key=lambda r: r["started_at"]) for run in runs)
    if first[0]["started_at"] > second[0]["started_at"]:
        first, second = second, first
    for rows_of_run in (first, second):
        measured = {r["table_uri"] for r in rows_of_run if r["operation"] == "measure"}
        assert measured == {*tables.values(), history_uri}  # every table, and the history itself
    ops = {(r["table_uri"], r["operation"], r["status"]) for r in first}
    assert (tables["small"], "compaction", "done") in ops
    assert (tables["expired"], "log_cleanup", "done") in ops
    assert (tables["reclaim"], "vacuum", "done") in ops
    assert (tables["managed"], "measure", "refused") in ops
    assert not [r for r in first if r["table_uri"] == tables["healthy"] and r["operation"] != "measure"]
    compaction = next(r for r in first if r["table_uri"] == tables["small"] and r["operation"] == "compaction")
    assert compaction["reason"].startswith("due: 6 small files")  # why it ran
    assert compaction["small_files_before"] == 6 and compaction["small_files_after"] == 1
    measure = next(r for r in first if r["table_uri"] == tables["small"] and r["operation"] == "measure")
    assert "compaction" in measure["due_operations"] and "6 of 6 live files are under" in measure["reason"]
    assert json.loads(measure["policy"])["target_file_size"]["source"] == "default"
    # The second run finds the work done: measured, nothing more to run on those tables.
    assert {r["operation"] for r in second if r["table_uri"] == tables["small"]} == {"measure"}
    assert all(r["deltalog_version"] for r in recorded)


def _age_log(path: str, days: int) -> None:
    base = now_ms() - days * DAY_MS
    log_dir = os.path.join(path, "_delta_log")
    for i, name in enumerate(sorted(os.listdir(log_dir))):
        if name != LAST_VACUUM_INFO:
            os.utime(os.path.join(log_dir, name), ((base + i * 1000) / 1000,) * 2)


def test_the_fleet_maintains_its_own_history_and_keeps_every_row(tmp_path, capsys):
    """Compacted, checkpointed (a policy's interval for it), its expired log cleaned: all rows still read."""
    root = str(tmp_path / "lake")
    small_files_table(os.path.join(root, "small"))
    history = str(tmp_path / "lake" / "_deltalog" / "history")
    recorder = HistoryRecorder(history, context=RunContext(run_id="old"))
    for _ in range(13):  # 13 one-row appends: small files in one day, a checkpoint at version 10 by the hooks
        with recorder.operation(os.path.join(root, "small"), "checkpoint") as op:
            from deltalog import create_checkpoint

            op.result = create_checkpoint(os.path.join(root, "small"))
    _age_log(history, 40)
    before = {r["row_id"] for r in _rows(history)}
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"tables": {"history": {"checkpoint_interval": 2}}}))
    assert main(["maintain", "--root", root, "--history", history, "--settings", str(settings), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    mine = next(t for t in doc["tables"] if t["uri"] == history)
    assert mine["status"] == "done", mine
    assert mine["ran"][0].startswith("compaction") and "checkpoint" in mine["ran"]
    assert any(r.startswith("log_cleanup") for r in mine["ran"])
    after = _rows(history)
    assert before <= {r["row_id"] for r in after}  # compaction and log cleanup lost no row
    own = {r["operation"]: r for r in after if r["table_uri"] == "file://" + history}
    assert own["compaction"]["status"] == "done" and own["compaction"]["files_read"] >= 13
    assert own["checkpoint"]["status"] == "done" and own["log_cleanup"]["log_files_removed"] > 0
    policy = json.loads(own["measure"]["policy"])
    assert policy["checkpoint_interval"] == {"value": 2, "source": "per-table override", "detail": "tables['history']"}
    assert {r["row_id"] for r in _by_deltalake(history)} == {r["row_id"] for r in after}


def test_deferred_and_busy_tables_are_recorded(tmp_path, capsys, monkeypatch):
    from deltalog.fleet.lease import acquire_lease
    from deltalog.storage import Storage

    root = str(tmp_path / "lake")
    for name in ("a", "b", "c"):
        small_files_table(os.path.join(root, name))
    history = str(tmp_path / "history")
    lease = acquire_lease(Storage(os.path.join(root, "b")), "someone else", 600)
    import deltalog.fleet.run as run_module

    real = run_module.maintain_table
    seen = []

    def out_of_time_after_one(uri, **kwargs):
        seen.append(uri)
        if len(seen) > 1 and "/b" not in uri:
            kwargs["deadline"] = time.monotonic() - 1
        return real(uri, **kwargs)

    monkeypatch.setattr(run_module, "maintain_table", out_of_time_after_one)
    assert main(["maintain", "--root", root, "--history", history]) == 0
    capsys.readouterr()
    lease.release()
    rows_ = [r for r in _rows(history) if r["operation"] != "measure"]
    b = [r for r in rows_ if r["table_uri"].endswith("/b")]
    assert [(r["operation"], r["status"]) for r in b] == [("compaction", "deferred")]
    assert "another maintainer holds the table's lease" in b[0]["reason"]
    c = [r for r in rows_ if r["table_uri"].endswith("/c")]
    assert [(r["operation"], r["status"]) for r in c] == [("compaction", "deferred")]
    assert c[0]["reason"] == "the time budget was spent before this table started"
    assert [(r["operation"], r["status"]) for r in rows_ if r["table_uri"].endswith("/a")] == [("compaction", "done")]


def test_fleet_report_links_each_table_to_its_history(tmp_path, capsys):
    root = str(tmp_path / "lake")
    small_files_table(os.path.join(root, "a b"))
    history = str(tmp_path / "history")
    page = str(tmp_path / "fleet.html")
    assert main(["maintain", "--root", root, "--history", history, "--html", page]) == 0
    text = html.unescape(open(page).read())
    assert "SELECT * FROM delta.`" + history + "` WHERE table_uri = 'file://" in text
    view = "https://airflow.example.com/deltalog/"
    assert main(["maintain", "--root", root, "--history", history, "--html", page, "--history-view-url", view]) == 0
    capsys.readouterr()
    text = open(page).read()
    assert 'href="https://airflow.example.com/deltalog/table?uri=file%3A%2F%2F' in text and "a%20b" in text


def test_a_compaction_row_counts_the_log_its_own_commit_cleaned(tmp_path):
    """Delta checkpoints and cleans the log after every delta.checkpointInterval-th commit: the row says so."""
    from deltalog import compact, create_checkpoint

    path = str(tmp_path / "t")
    table = make_table(path, configuration={"delta.checkpointInterval": "5"})
    for i in range(2):
        append(table, rows(2, start=i * 2), run_hooks=False)
    create_checkpoint(table, version=2)
    log_dir = os.path.join(path, "_delta_log")
    for i, name in enumerate(sorted(os.listdir(log_dir))):  # 40 days old, in commit order
        old = (now_ms() - 40 * DAY_MS + i * 1000) / 1000
        os.utime(os.path.join(log_dir, name), (old, old))
    for i in range(2):
        append(table, rows(2, start=10 + i * 2), run_hooks=False)  # versions 3, 4
    recorder = HistoryRecorder(str(tmp_path / "history"))
    with recorder.operation(table, "compaction") as op:
        op.result = compact(table)  # version 5: the hooks checkpoint it and clean up versions 0 and 1
    (row,) = _rows(str(tmp_path / "history"))
    assert row["version_after"] == 5 and row["log_files_removed"] == 2 and row["bytes_reclaimed"] > 0
    assert not os.path.exists(os.path.join(log_dir, f"{0:020d}.json"))
