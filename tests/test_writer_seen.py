"""What deltalog shows of the writers beside it (issue 43, item 4), and the switches that govern minding them.

``deltalog health --json`` and the fleet's measurements carry what the table's recent log shows
(writer commits that overlapped a deltalog rewrite, bins dropped for conflicts); the history
records the files compaction left to the writers and why (schema version 3); the settings file
turns writer-awareness off; a breached objective overrides the deferral and the ranking says so.
"""

from __future__ import annotations

import json
import time

import pytest

from deltalog.cli import main
from deltalog.commit.transaction import Transaction
from deltalog.compaction import compact
from deltalog.errors import InvalidArgumentError
from deltalog.fleet.run import run_fleet
from deltalog.journal import HistoryRecorder, RunContext, read_history
from deltalog.log.load import snapshot_at
from deltalog.maintenance.policy import FleetPolicy
from deltalog.storage.filesystem import Storage
from handmade_logs import set_commit_time
from helpers import append, make_table, rows, write_data_file
from writer_helpers import partitioned

#: A table whose part=b writers run back to back (no quiet moment): its small files there are left to them.
BUSY = {"cycle_ms": 3_000, "ran_ms": 3_000, "last_ago_ms": 500}


def _overlapping_writer(path: str) -> int:
    """A writer transaction that read the table before a deltalog rewrite and committed after it
    (its partition untouched by the rewrite, so its conflict check passes); its version."""
    storage = Storage(path)
    before = snapshot_at(storage)
    result = compact(path, writer_aware=False)  # rewrites part=a (and b): the deltalog commit in between
    assert result.commits
    txn = Transaction(storage, before, operation="DELETE", operation_parameters={"predicate": '["(part#1 = c)"]'})
    txn.add([write_data_file(path, rows(1, start=999, part="c"), {"part": "c"})])
    return txn.commit({"executionTimeMs": 10}).version


def test_health_json_shows_the_writer_commits_that_overlapped_our_rewrites(tmp_path, capsys):
    path = partitioned(tmp_path, cycle_ms=10_000, ran_ms=6_000, last_ago_ms=6_000)
    landed = _overlapping_writer(path)
    assert main(["health", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    writers = doc["writers"]
    assert writers["dml_commits"] == 6 and writers["deltalog_commits"] == 1
    assert writers["writer_overlaps"] == {"dml": 1, "append": 0}
    assert [o["version"] for o in writers["overlapping_commits"]] == [landed]
    assert writers["bins_dropped_for_conflicts"] == 0


def test_the_history_records_the_files_left_to_the_writers_and_what_the_log_showed(tmp_path):
    path = partitioned(tmp_path / "lake", **BUSY)
    history = str(tmp_path / "history")
    recorder = HistoryRecorder(history, context=RunContext())
    result = run_fleet([path], history=recorder, fleet_name="lake")
    assert result.outcomes and result.outcomes[0].status in ("done", "partial")
    data = read_history(history)
    by_op = {
        op: [r for r in data.to_pylist() if r["operation"] == op and r["table_uri"].endswith("/t")]
        for op in ("measure", "compaction")
    }
    measured = by_op["measure"][0]
    assert measured["writer_dml_commits"] == 5 and measured["writer_overlaps"] == 0
    compaction = by_op["compaction"][0]
    assert compaction["files_deferred_for_writers"] == 8  # part=b: 3 small files and the 5 the writers wrote
    assert len(compaction["deferred_files"]) == compaction["files_deferred_for_writers"]
    assert all(p.startswith("part=b/") for p in compaction["deferred_files"])
    assert compaction["bins_lost_to_writers"] == 0 and compaction["writer_wait_s"] == 0.0
    assert "left to the writers: " in compaction["reason"] and "leave no quiet moment" in compaction["reason"]
    # The fleet view's figures over the day: what was left, the newest measurement's view of the log.
    from deltalog.journal import RollupStore, table_summaries

    today = measured["run_date"]
    store, snap = RollupStore(None), snapshot_at(Storage(history))
    by_table = store.merged(store.window(snap, today, today), snap, by=("table_uri", "operation"))
    summary = {r["table_uri"]: r for r in table_summaries(by_table).to_pylist()}[measured["table_uri"]]
    assert summary["files_deferred_for_writers"] == compaction["files_deferred_for_writers"]
    assert summary["writers"]["dml_commits"] == 5 and summary["writers"]["dml_overlaps"] == 0


def test_a_breached_compaction_objective_wins_over_the_writers_and_the_ranking_says_so(tmp_path, capsys):
    path = partitioned(tmp_path / "lake", **BUSY)
    settings = {"defaults": {"max_small_files": 2}}
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps(settings))
    assert main(["maintain", path, "--dry-run", "--settings", str(settings_file)]) == 0
    assert "writers: compaction defers nothing for the writers: breached objective max_small_files" in (
        capsys.readouterr().out
    )
    dry = run_fleet([path], settings=settings, dry_run=True)
    planned = dry.planned[0]
    assert planned.service == "breached" and planned.writer_override is not None
    assert planned.writer_override.startswith("breached objective max_small_files")
    assert planned.writers is not None and "defers nothing for the writers" in planned.writers
    assert "would defer" in planned.writers
    assert planned.to_dict()["writer_override"] == planned.writer_override
    done = run_fleet([path], settings=settings)
    assert done.outcomes[0].status == "done"
    # Nothing was left to the writers: part=b was compacted too (its commit waited for a quiet moment first).
    assert snapshot_at(Storage(path)).files.num_rows <= 3


def test_the_settings_file_turns_writer_awareness_off(tmp_path):
    path = partitioned(tmp_path / "lake", **BUSY)
    policy = FleetPolicy.parse({"tables": {"t": {"writer_aware": False}}})
    settings = policy.resolve(path)
    assert settings.writer_aware is False and settings.to_dict()["writer_aware"] is False
    assert {e.name: e.source for e in settings.explained}["writer_aware"] == "per-table override"
    assert FleetPolicy.parse(None).resolve(path).writer_aware is None  # the default: minded
    run = run_fleet([path], settings={"tables": {"t": {"writer_aware": False}}})
    assert run.outcomes[0].status == "done"
    assert snapshot_at(Storage(path)).files.num_rows == 2  # part=b compacted at once: no writer minded
    with pytest.raises(InvalidArgumentError, match="writer_aware in defaults must be true or false"):
        FleetPolicy.parse({"defaults": {"writer_aware": "no"}})


def test_cli_compact_switches_writer_awareness_off_and_checks_the_wait(tmp_path, capsys):
    path = partitioned(tmp_path, **BUSY)
    assert main(["compact", path, "--plan-only", "--json"]) == 0
    aware = json.loads(capsys.readouterr().out)["plan"]
    assert aware["writers"]["aware"] is True and aware["writers"]["num_files_deferred"] > 0
    assert main(["compact", path, "--plan-only", "--no-writer-aware", "--json"]) == 0
    off = json.loads(capsys.readouterr().out)["plan"]
    assert off["writers"]["aware"] is False and len(off["bins"]) == 2
    assert main(["compact", path, "--plan-only"]) == 0
    assert "files deferred for the writers" in capsys.readouterr().out
    assert main(["compact", path, "--writer-wait", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: writer_wait_seconds must be a non-negative number")


def test_a_table_without_writers_shows_none(tmp_path, capsys):
    path = str(tmp_path / "t")
    table = make_table(path)
    for i in range(3):
        append(table, rows(2, start=i))
    now = int(time.time() * 1000)
    for v in range(4):
        set_commit_time(path, v, now - 1000 + v)
    assert main(["health", path, "--json"]) == 0
    writers = json.loads(capsys.readouterr().out)["writers"]
    assert writers["dml_commits"] == 0 and writers["writer_overlaps"] == {"dml": 0, "append": 0}
