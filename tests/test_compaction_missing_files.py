"""Compaction of a table whose data files are missing (issue 30, item 3).

It used to try every bin (2,400 bins, about 150 s on a large table) and then say "the
rest committed" when nothing was. Now it stops at the first bin whose input is missing:
bins committed before stay, nothing more is committed or started, the files rewritten
for the stopped batch are deleted, and the result or the one-line error says exactly
which bins committed, which file was missing and how many bins were left.
"""

from __future__ import annotations

import json
import os

import pytest

from deltalog import DeltaTable
from deltalog.compaction import LocalOptions, compact, plan_compaction
from deltalog.compaction.bin_writer import BinWriter
from deltalog.errors import MissingDataFileError
from helpers import append, make_table, rows

PARTS = ["a", "b", "c", "d", "e", "f"]


def table_of_bins(path: str) -> DeltaTable:
    """Six partitions of two small files each: six bins, in partition order."""
    table = make_table(path, partition_by=["part"])
    for k in range(2):
        for p in PARTS:
            append(table, rows(4, start=10 * k, part=p), partition={"part": p})
    return DeltaTable(path)


def remove_input_of(path: str, part: str) -> str:
    snap = DeltaTable(path).snapshot()
    victim = sorted(p for p in snap.file_paths() if p.startswith(f"part={part}/"))[0]
    os.remove(os.path.join(path, victim))
    return victim


def data_files(path: str) -> set[str]:
    out = set()
    for dirpath, _dirs, files in os.walk(path):
        if "_delta_log" in dirpath:
            continue
        out |= {os.path.relpath(os.path.join(dirpath, f), path) for f in files}
    return out


@pytest.fixture
def rewrites(monkeypatch):
    """The bins the local engine started to rewrite, in order."""
    started: list[int] = []
    original = BinWriter.rewrite

    def spy(self, b):
        started.append(b.id)
        return original(self, b)

    monkeypatch.setattr(BinWriter, "rewrite", spy)
    return started


def test_one_batch_stops_at_the_missing_input_and_commits_nothing(tmp_path, rewrites):
    path = str(tmp_path / "t")
    table = table_of_bins(path)
    plan = plan_compaction(path)
    assert [b.partition_values["part"] for b in plan.bins] == PARTS
    victim = remove_input_of(path, "c")
    version, files_before = table.snapshot().version, data_files(path)
    with pytest.raises(MissingDataFileError) as info:
        compact(path, plan=plan, local_options=LocalOptions(max_workers=1))
    message = str(info.value)
    assert f"stopped at bin {plan.bins[2].id} and committed nothing" in message, message
    assert victim in message and "the table is missing a file" in message
    assert "5 other bin(s) not committed" in message
    assert rewrites == [b.id for b in plan.bins[:3]]  # nothing started after the missing bin
    assert DeltaTable(path).snapshot().version == version  # nothing committed
    assert data_files(path) == files_before  # the two bins rewritten before it left no file behind


def test_batches_committed_before_stay_and_the_result_says_exactly_what_happened(tmp_path, rewrites):
    path = str(tmp_path / "t")
    table_of_bins(path)
    plan = plan_compaction(path)
    victim = remove_input_of(path, "c")
    version = DeltaTable(path).snapshot().version
    result = compact(path, plan=plan, bins_per_commit=1, local_options=LocalOptions(max_workers=1), run_hooks=False)
    ids = [b.id for b in plan.bins]
    assert result.committed_bins == ids[:2]
    assert [c.version for c in result.commits] == [version + 1, version + 2]
    assert DeltaTable(path).snapshot().version == version + 2
    assert rewrites == ids[:3]
    kinds = {s.bin_id: (s.kind, s.reason) for s in result.skipped}
    assert kinds[ids[2]][0] == "missing" and victim in kinds[ids[2]][1]
    assert {b: kinds[b][0] for b in ids[3:]} == dict.fromkeys(ids[3:], "aborted")
    assert all(kinds[b][1] == f"not attempted: bin {ids[2]}'s input is missing" for b in ids[3:])
    assert result.error == (
        f"bin {ids[2]}: data file {victim} does not exist; the table is missing a file; 2 bin(s) committed before "
        f"it in version(s) [{version + 1}, {version + 2}]; 3 other bin(s) not committed"
    )
    assert not result.ok


def test_the_cli_names_what_committed_and_never_says_the_rest_committed(tmp_path, capsys):
    from deltalog.cli import main

    path = str(tmp_path / "t")
    table_of_bins(path)
    victim = remove_input_of(path, "a")
    version = DeltaTable(path).snapshot().version
    assert main(["compact", path, "--max-workers", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "committed nothing" in err[0] and victim in err[0], err
    assert "the rest committed" not in err[0]
    assert DeltaTable(path).snapshot().version == version

    path = str(tmp_path / "t2")
    table_of_bins(path)
    victim = remove_input_of(path, "d")
    assert main(["compact", path, "--max-workers", "1", "--bins-per-commit", "1", "--json"]) == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    (line,) = captured.err.strip().splitlines()
    assert victim in line and f"in version(s) {doc['versions']}" in line and "the rest committed" not in line
    assert doc["num_bins_committed"] == 3  # a, b and c, before d


def test_a_missing_deletion_vector_file_stops_alike(tmp_path):
    """A deletion vector file is an input too."""
    from test_compaction_support import add_deletion_vector

    path = str(tmp_path / "t")
    table_of_bins(path)
    snap = DeltaTable(path).snapshot()
    target = sorted(p for p in snap.file_paths() if p.startswith("part=a/"))[0]
    add_deletion_vector(path, target, [0, 1])
    dv_files = [f for f in data_files(path) if f.startswith("deletion_vector_")]
    assert len(dv_files) == 1
    os.remove(os.path.join(path, dv_files[0]))
    with pytest.raises(MissingDataFileError, match="committed nothing: deletion vector file .* does not exist"):
        compact(path, local_options=LocalOptions(max_workers=1))


def test_a_failing_bin_that_is_not_a_missing_file_still_lets_the_others_commit(tmp_path):
    """Only a missing input stops the run; a file that does not read as Parquet fails its bin alone."""
    path = str(tmp_path / "t")
    table_of_bins(path)
    snap = DeltaTable(path).snapshot()
    victim = sorted(p for p in snap.file_paths() if p.startswith("part=b/"))[0]
    with open(os.path.join(path, victim), "wb") as fh:
        fh.write(b"not parquet")
    result = compact(path, run_hooks=False)
    assert [s.kind for s in result.skipped] == ["error"]
    assert len(result.committed_bins) == 5
