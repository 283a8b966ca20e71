"""Fleet maintenance: the due work of each table, best gain per second first, within a time budget."""

from __future__ import annotations

import json
import os
import time

import deltalake
import pytest

import deltalog.compaction.batches as compaction_module
from deltalog import DeltaTable, settings_for
from deltalog.cli import main
from deltalog.compaction import compact
from deltalog.errors import InvalidArgumentError
from deltalog.fleet.lease import LEASE_NAME, acquire_lease
from deltalog.fleet.maintain import maintain_table
from deltalog.fleet.report import format_summary, render_html
from deltalog.fleet.run import run_fleet
from deltalog.maintenance.due import maintenance_due
from fleet_helpers import (
    FLEET,
    expired_log_table,
    healthy_table,
    reclaimable_table,
    refused_protocol_table,
    small_files_table,
)
from helpers import append, make_table, rows


def _slow_bins(monkeypatch, seconds: float) -> None:
    """Every bin rewrite takes ``seconds`` longer (a deterministic stand-in for big files)."""
    real = compaction_module.run_local

    def slow(storage, plan, batch, options, **kwargs):
        time.sleep(seconds * len(batch))
        return real(storage, plan, batch, options, **kwargs)

    monkeypatch.setattr(compaction_module, "run_local", slow)


def _two_partition_table(path: str) -> DeltaTable:
    """Two partitions of three small files: compaction plans two bins."""
    t = make_table(path, partition_by=["part"])
    for part in ("a", "b"):
        for i in range(3):
            append(t, rows(2, start=i * 2, part=part), {"part": part}, run_hooks=False)
    return t


def test_demo_fleet_gets_what_each_table_needs(tmp_path):
    for name, build in FLEET.items():
        build(str(tmp_path / name))
    reclaimable_table(str(tmp_path / "removed_files"))
    uris = sorted(str(tmp_path / n) for n in (*FLEET, "removed_files"))
    before_rows = {u: deltalake.DeltaTable(u).to_pyarrow_table().num_rows for u in uris if "refused" not in u}

    result = run_fleet(uris)
    by_name = {os.path.basename(o.uri): o for o in result.outcomes}
    assert result.healthy == [str(tmp_path / "healthy")]
    assert by_name["refused_protocol"].status == "refused" and "catalogManaged" in by_name["refused_protocol"].error
    small = by_name["small_files"]
    assert small.status == "done" and small.ran == ["compaction: 1 bins"]
    assert (small.small_files_before, small.small_files_after) == (6, 1)
    expired = by_name["expired_log"]
    assert expired.status == "done" and expired.log_files_deleted > 0 and expired.ran[0].startswith("log_cleanup")
    removed = by_name["removed_files"]
    assert removed.ran == ["vacuum: 1 files"] and removed.bytes_reclaimed > 0
    for u, n in before_rows.items():  # every row is still there, for another reader
        assert deltalake.DeltaTable(u).to_pyarrow_table().num_rows == n
    assert not any(os.path.exists(os.path.join(u, LEASE_NAME)) for u in uris)
    for u in uris:  # maintenance leaves nothing due (the refused table was never touched)
        if "refused" not in u:
            assert not maintenance_due(DeltaTable(u)).any, u

    doc = result.to_dict()
    text = format_summary(doc)
    assert "small_files" in text and "6 -> 1" in text and "refused" in text and "nothing due" in text
    page = render_html(doc)
    assert page.startswith("<!doctype html>") and "<svg" in page and "small_files" in page
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # self-contained


def test_compaction_stops_between_bins_at_the_deadline(tmp_path, monkeypatch):
    t = _two_partition_table(str(tmp_path / "t"))
    _slow_bins(monkeypatch, 0.4)
    result = compact(t, deadline=time.monotonic() + 0.2, run_hooks=False)
    assert len(result.commits) == 1 and len(result.committed_bins) == 1
    assert [s.kind for s in result.skipped] == ["deferred"] and result.ok
    assert maintenance_due(DeltaTable(t.uri)).compaction_bins == 1  # the next run picks the rest up


def test_budget_that_fits_half_the_work(tmp_path, monkeypatch):
    """Four tables of two slow bins each (~0.4 s a bin): a 1.3 s budget does about half, defers the rest."""
    uris = [_two_partition_table(str(tmp_path / f"t{i}")).uri for i in range(4)]
    _slow_bins(monkeypatch, 0.4)
    result = run_fleet(uris, time_budget_seconds=1.3)
    statuses = [o.status for o in result.outcomes]
    assert statuses[0] == "done" and "deferred" in statuses, statuses
    assert result.seconds < 2.5  # nothing new started after the budget (a bin in flight may finish)
    done_bins = sum(
        int(r.split(": ")[1].split()[0]) for o in result.outcomes for r in o.ran if r.startswith("compaction")
    )
    assert 2 <= done_bins <= 5, result.to_dict()
    deferred = [o for o in result.outcomes if o.status in ("deferred", "partial")]
    for o in deferred:
        assert any("time budget was spent" in r for r in o.reasons), o.reasons
    assert "deferred" in format_summary(result.to_dict())
    for u in uris:  # whatever was committed is complete; the rest is still due
        assert deltalake.DeltaTable(u).to_pyarrow_table().num_rows == 12

    monkeypatch.undo()
    rest = run_fleet(uris, previous_results=result.to_dict())
    assert {o.status for o in rest.outcomes} == {"done"} and len(rest.outcomes) == len(deferred)
    assert all(not maintenance_due(DeltaTable(u)).compaction for u in uris)


def test_busy_table_is_skipped_not_failed(tmp_path):
    t = small_files_table(str(tmp_path / "t"))
    lease = acquire_lease(t, "deltalog_maintenance run 7", ttl_seconds=60)
    out = maintain_table(t.uri)
    assert out.status == "busy" and "deltalog_maintenance run 7" in out.error
    assert maintenance_due(DeltaTable(t.uri)).compaction  # untouched
    lease.release()


def test_per_table_settings_precedence(tmp_path):
    t = make_table(str(tmp_path / "events"), configuration={"delta.targetFileSize": "1k"})
    for i in range(3):
        append(t, rows(40, start=i * 40), run_hooks=False)
    assert not maintenance_due(t).compaction  # the files are bigger than half of 1 KiB: not small
    s = settings_for(t.uri, {"events": {"target_file_size": "64m"}})
    assert s.target_file_size == 64 << 20 and s.sources()["target_file_size"] == "per-table override tables['events']"
    out = maintain_table(t.uri, settings=s)
    assert out.ran == ["compaction: 1 bins"]
    with pytest.raises(InvalidArgumentError, match="unknown setting"):
        settings_for(t.uri, {"events": {"zorder": ["id"]}})
    with pytest.raises(InvalidArgumentError, match="vacuum_retention_hours"):
        run_fleet([t.uri], settings={t.uri: {"vacuum_retention_hours": "soon"}})


def test_cli_maintain_dry_run_then_budgeted_run_with_results_and_html(tmp_path, capsys):
    small_files_table(str(tmp_path / "lake" / "a"))
    healthy_table(str(tmp_path / "lake" / "b"))
    expired_log_table(str(tmp_path / "lake" / "c"))
    refused_protocol_table(str(tmp_path / "lake" / "d"))
    lake = str(tmp_path / "lake")
    assert main(["maintain", "--root", lake, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dry run: nothing changed") and "/lake/a" in out
    assert maintenance_due(DeltaTable(str(tmp_path / "lake" / "a"))).compaction

    results, page = str(tmp_path / "results.json"), str(tmp_path / "fleet.html")
    # The catalog-managed table is refused (its catalog owns its maintenance): exit 1, named on stderr.
    assert main(["maintain", "--root", lake, "--results", results, "--html", page, "--time-budget", "60"]) == 1
    captured = capsys.readouterr()
    assert "fleet run:" in captured.out and "budget 60 s" in captured.out
    # (Other suites' logging handlers may also write to stderr here: the error line is looked for.)
    assert "error: not every table was maintained: 1 refused (see the summary)" in captured.err.splitlines()
    doc = json.loads(open(results).read())
    assert doc["counts"] == {"done": 2, "healthy": 1, "refused": 1, "unreadable": 0}
    assert doc["throughput_bytes_per_second"] > 0
    assert "<svg" in open(page).read()
    assert main(["maintain", "--root", lake, "--time-budget", "0"]) == 2
    assert "time budget" in capsys.readouterr().err


def test_cli_compact_time_budget(tmp_path, monkeypatch, capsys):
    """deltalog compact --time-budget: the first bin commits, the second is deferred (exit 0)."""
    path = str(tmp_path / "t")
    _two_partition_table(path)
    _slow_bins(monkeypatch, 0.4)
    assert main(["compact", path, "--time-budget", "0.2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_bins_committed"] == 1 and [s["kind"] for s in out["skipped"]] == ["deferred"]
    assert main(["compact", path, "--time-budget", "-1"]) == 2
    assert "positive" in capsys.readouterr().err
    with pytest.raises(InvalidArgumentError, match="local engine only"):
        compact(path, engine="spark", deadline=time.monotonic() + 5)


def test_compaction_engine_is_chosen_by_table_size(tmp_path):
    """As in deltalog_maintenance: below spark_min_bytes the local engine, from it on Spark (one spark-submit)."""
    small = str(tmp_path / "small")
    small_files_table(small, n=3)
    size = DeltaTable(small).snapshot().size_in_bytes
    local = maintain_table(small, spark_min_bytes=size + 1)
    assert local.ran == ["compaction: 1 bins"] and local.status == "done"
    with pytest.raises(InvalidArgumentError, match="spark_min_bytes must be a non-negative integer"):
        maintain_table(small, spark_min_bytes=True)


def test_vacuum_engine_is_chosen_by_live_files(tmp_path):
    """Below vacuum_spark_min_files the local engine plans the vacuum; a bad threshold is the caller's error."""
    path = str(tmp_path / "removed_files")
    reclaimable_table(path)
    files = DeltaTable(path).snapshot().num_files
    out = maintain_table(path, vacuum_spark_min_files=files + 1)
    assert "vacuum: 1 files" in out.ran and out.status == "done", out
    for bad in (True, -1, 1.5):
        with pytest.raises(InvalidArgumentError, match="vacuum_spark_min_files must be a non-negative integer"):
            maintain_table(path, vacuum_spark_min_files=bad)


@pytest.mark.slow
@pytest.mark.spark
def test_a_table_at_the_vacuum_threshold_vacuums_with_spark(tmp_path):
    """From vacuum_spark_min_files on, the plan is a Spark job; the core deletes what it planned, and the
    file is gone while the live table still reads."""
    path = str(tmp_path / "removed_files")
    reclaimable_table(path)
    before = set(_data_files(path))
    files = DeltaTable(path).snapshot().num_files
    out = maintain_table(path, vacuum_spark_min_files=files, spark_options={"master": "local[1]", "timeout": 420})
    assert out.status == "done" and "vacuum (spark): 1 files" in out.ran, out
    after = set(_data_files(path))
    assert len(before - after) == 1 and not after
    assert {"VACUUM START", "VACUUM END"} <= {h.operation for h in DeltaTable(path).history(limit=3)}
    assert deltalake.DeltaTable(path).to_pyarrow_table().num_rows == 0


def _data_files(path: str) -> list[str]:
    return [n for n in os.listdir(path) if n.endswith(".parquet")]


@pytest.mark.slow
@pytest.mark.spark
def test_a_table_at_the_spark_threshold_compacts_with_spark(tmp_path):
    path = str(tmp_path / "big")
    small_files_table(path, n=3)
    size = DeltaTable(path).snapshot().size_in_bytes
    out = maintain_table(path, spark_min_bytes=size, spark_options={"master": "local[1]", "timeout": 420})
    assert out.status == "done" and out.ran == ["compaction (spark): 1 bins"], out
    assert (out.small_files_before, out.small_files_after) == (3, 1)
    assert deltalake.DeltaTable(path).to_pyarrow_table().num_rows == 9
    info = DeltaTable(path).history(limit=1)[0]
    assert info.operation == "OPTIMIZE"
