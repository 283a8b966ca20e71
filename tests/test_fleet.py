"""Fleet mode: the due verdict shared with the planners, discovery, ranked multi-table health."""

from __future__ import annotations

import json
import os

import pytest

from deltalog import DeltaTable
from deltalog.cli import main
from deltalog.compaction import compact, plan_compaction
from deltalog.fleet.discover import discover_tables, tables_from_list
from deltalog.fleet.ranking import fleet_health
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.maintenance.due import maintenance_due
from deltalog.vacuuming import vacuum
from fleet_helpers import (
    expired_log_table,
    healthy_table,
    long_log_table,
    one_small_file_per_partition,
    reclaimable_table,
    refused_protocol_table,
    small_files_table,
)

# --- the due verdict --------------------------------------------------------------------


def test_one_small_file_per_partition_is_not_due(tmp_path):
    """Issue 15 fault 7: a high small-file share without a bin is not compaction work."""
    t = one_small_file_per_partition(str(tmp_path / "t"))
    health = t.health()
    assert health.small_file_share == 1.0 and health.num_small_files == 4
    due = maintenance_due(t)
    assert not plan_compaction(t).bins
    assert due.flags() == {"compaction": False, "checkpoint": False, "vacuum": False, "log_cleanup": False}
    assert due.reasons == ()


def test_small_files_due_until_compacted(tmp_path):
    t = small_files_table(str(tmp_path / "t"), n=4)
    due = maintenance_due(t)
    assert due.compaction and due.compaction_bins == 1 and due.compaction_input_files == 4
    assert any(r.startswith("compaction: 4 small files") for r in due.reasons)
    compact(t)
    assert not maintenance_due(DeltaTable(t.uri)).compaction


def test_checkpoint_due_after_the_interval_and_not_after_a_checkpoint(tmp_path):
    t = long_log_table(str(tmp_path / "t"), commits=9)  # versions 0..9: 10 commits, interval 10
    due = maintenance_due(t)
    assert due.checkpoint and due.commits_since_checkpoint == 10 and not due.compaction
    create_checkpoint(t)
    assert not maintenance_due(DeltaTable(t.uri)).checkpoint
    short = long_log_table(str(tmp_path / "short"), commits=5)
    assert not maintenance_due(short).checkpoint


def test_checkpoint_interval_property_is_honoured(tmp_path):
    from helpers import append, make_table, rows

    t = make_table(str(tmp_path / "t"), configuration={"delta.checkpointInterval": "3"})
    for i in range(3):
        append(t, rows(1, start=i), run_hooks=False)  # the post-commit hook would checkpoint version 3
    due = maintenance_due(t)
    assert due.checkpoint and due.checkpoint_interval == 3


def test_vacuum_due_for_expired_tombstones_then_not_after_vacuum(tmp_path):
    t = reclaimable_table(str(tmp_path / "t"))
    due = maintenance_due(t)
    assert due.vacuum and due.reclaimable_files == 1 and due.reclaimable_bytes > 0
    result = vacuum(t)
    assert result.num_deleted_files == 1
    assert not maintenance_due(DeltaTable(t.uri)).vacuum


def test_recent_tombstone_is_not_due(tmp_path):
    t = reclaimable_table(str(tmp_path / "t"), days=2)
    assert not maintenance_due(t).vacuum


def test_log_cleanup_due_when_the_planner_finds_expired_files(tmp_path):
    t = expired_log_table(str(tmp_path / "t"))
    due = maintenance_due(t)
    assert due.log_cleanup and due.expired_log_files == cleanup_log(t, dry_run=True).num_files > 0
    cleanup_log(t)
    assert not maintenance_due(DeltaTable(t.uri)).log_cleanup


def test_refused_protocol_is_never_due(tmp_path):
    t = refused_protocol_table(str(tmp_path / "t"))
    due = maintenance_due(t)
    assert (
        not due.any
        and due.refused
        and "catalogManaged" in due.refused
        and "Unity Catalog (table id t-123)" in due.refused
    )


# --- discovery ----------------------------------------------------------------------------


@pytest.fixture()
def tree(tmp_path):
    root = tmp_path / "lake"
    small_files_table(str(root / "sales" / "orders"), n=3)
    healthy_table(str(root / "sales" / "customers"))
    healthy_table(str(root / "deep" / "a" / "b" / "c"))
    (root / "empty" / "x").mkdir(parents=True)
    (root / "no_commits" / "_delta_log").mkdir(parents=True)  # a _delta_log without commits is no table
    return root


def test_discover_finds_tables_and_does_not_descend_into_them(tree):
    # A folder inside a table that looks like a table must not be reported.
    healthy_table(str(tree / "sales" / "orders" / "nested"))
    result = discover_tables(str(tree))
    uris = [os.path.relpath(t.uri, tree) for t in result.tables]
    assert uris == ["deep/a/b/c", "sales/customers", "sales/orders"]
    assert {t.version for t in result.tables} == {1, 3}
    assert result.errors == ()
    shallow = discover_tables(str(tree), max_depth=2)
    assert [os.path.relpath(t.uri, tree) for t in shallow.tables] == ["sales/customers", "sales/orders"]


def test_discover_reports_unreadable_folders_and_goes_on(tree, monkeypatch):
    locked = tree / "locked"
    healthy_table(str(locked / "t"))
    real_scandir = os.scandir

    def scandir(path):  # a folder this user may not list (chmod 0 does not stop root)
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(locked))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    result = discover_tables(str(tree))
    assert len(result.tables) == 3
    assert [e["uri"] for e in result.errors] == [str(locked)]
    assert "PermissionError" in result.errors[0]["error"]


def test_list_file_input(tree, tmp_path):
    lst = tmp_path / "tables.txt"
    lst.write_text(f"# fleet\n{tree / 'sales' / 'orders'}\n\n{tree / 'empty'}\n")
    result = tables_from_list(str(lst))
    assert [t.uri for t in result.tables] == [str(tree / "sales" / "orders")]
    assert [e["uri"] for e in result.errors] == [str(tree / "empty")]


def test_cli_discover_json(tree, capsys):
    assert main(["discover", str(tree), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(os.path.relpath(t["uri"], tree) for t in out["tables"]) == [
        "deep/a/b/c",
        "sales/customers",
        "sales/orders",
    ]
    assert out["errors"] == [] and all(set(t) == {"uri", "version"} for t in out["tables"])


def test_cli_discover_needs_one_source(tree, capsys):
    assert main(["discover", "--json"]) == 2
    assert "exactly one" in capsys.readouterr().err


# --- fleet health ---------------------------------------------------------------------------


def test_fleet_health_ranks_by_gain_and_reports_broken_tables(tmp_path):
    big = small_files_table(str(tmp_path / "big"), n=8)
    small = small_files_table(str(tmp_path / "small"), n=3)
    ok = healthy_table(str(tmp_path / "ok"))
    reports = fleet_health([ok.uri, str(tmp_path / "missing"), small.uri, big.uri])
    assert [r.uri for r in reports[:3]] == [big.uri, small.uri, ok.uri]
    assert reports[0].gain == 7 and reports[1].gain == 2 and reports[2].gain == 0
    assert reports[3].error and "does not exist" in reports[3].error


def test_cli_health_json_carries_due_and_reasons(tmp_path, capsys):
    t = one_small_file_per_partition(str(tmp_path / "t"))
    assert main(["health", str(tmp_path / "t"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["due"] == {"compaction": False, "checkpoint": False, "vacuum": False, "log_cleanup": False}
    assert out["reasons"] == [] and out["num_small_files"] == 4
    small_files_table(str(tmp_path / "s"))
    assert main(["health", str(tmp_path / "s"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["due"]["compaction"] is True and out["reasons"][0].startswith("compaction:")
    assert t.version() == 4


def test_cli_health_root_ranks_tables(tree, capsys):
    assert main(["health", "--root", str(tree), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_tables"] == 3 and out["num_due"] == 1
    first = out["tables"][0]
    assert first["uri"].endswith("sales/orders") and first["due"]["compaction"] and first["reasons"]
    assert main(["health", str(tree / "sales" / "orders"), str(tree / "deep" / "a" / "b" / "c")]) == 0
    text = capsys.readouterr().out
    assert "1. " in text and "sales/orders" in text.splitlines()[0] and "2 tables, 1 due" in text
