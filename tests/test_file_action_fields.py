"""Fields of file actions that were trusted without a check (issue 30, item 3: the search).

Each case is one a command used to take as it came and fail on halfway, or carry
into what it writes: an add without a size in a checkpoint (commits already refused
it), a negative size, an empty path (the empty URI names the table root: a reader took
the whole table for one file, and compaction read it so) or one holding a NUL (no storage
opens it: compaction failed its bin late), and a partition value that files carrying their partition
columns cannot hold (compaction failed that bin after committing the others). Each is
now one clear error before anything is written.
"""

from __future__ import annotations

import json
import os

import pytest

from corrupt_log_helpers import (
    assert_checkpoint_refused,
    assert_replay_paths_agree,
    base_table,
    checkpointed,
    edit_action,
    fingerprint,
    refusals,
    rewrite_checkpoint_field,
)
from deltalog import DeltaTable
from deltalog.compaction import compact
from deltalog.errors import OperationRefusedError
from handmade_logs import write_commit
from test_newer_features import MATERIALIZE, partitioned


def test_an_add_without_a_size_in_the_only_checkpoint_stops_every_command(tmp_path):
    path = str(tmp_path / "t")
    cp_path = checkpointed(path, drop_commits=True)
    rewrite_checkpoint_field(cp_path, "add", "size", None)
    assert_checkpoint_refused(path, cp_path, "add", "no integer 'size'")


def test_a_negative_size_stops_every_command(tmp_path):
    path = str(tmp_path / "t")
    base_table(path)
    name, lineno = edit_action(path, "add", lambda b: b.update(size=-5))
    before = fingerprint(path)
    messages = refusals(path)
    assert set(messages.values()) == {
        next(iter(messages.values()))
    } and f"{name}: line {lineno}: the add action is invalid: 'size' must not be negative, not -5" in next(
        iter(messages.values())
    )
    assert fingerprint(path) == before


UNUSABLE_PATHS = [("", "an empty 'path' names no file"), ("x\x00.parquet", "a 'path' holding a NUL character")]


@pytest.mark.parametrize(("bad", "problem"), UNUSABLE_PATHS)
def test_an_add_with_an_unusable_path_stops_every_command(tmp_path, monkeypatch, bad, problem):
    path = str(tmp_path / "t")
    base_table(path)
    name, lineno = edit_action(path, "add", lambda b: b.update(path=bad))
    before = fingerprint(path)
    messages = refusals(path)
    expected = f"{name}: line {lineno}: the add action is invalid: {problem}"
    assert all(expected in m for m in messages.values()), messages
    assert assert_replay_paths_agree(path, monkeypatch).startswith(expected)
    assert fingerprint(path) == before


def test_a_remove_with_an_empty_path_stops_every_command(tmp_path):
    path = str(tmp_path / "t")
    base_table(path)
    write_commit(path, 4, [{"commitInfo": {}}, {"remove": {"path": "", "deletionTimestamp": 1, "dataChange": True}}])
    before = fingerprint(path)
    messages = refusals(path)
    expected = f"{4:020d}.json: line 2: the remove action is invalid: an empty 'path' names no file"
    assert all(expected in m for m in messages.values()), messages
    assert fingerprint(path) == before


@pytest.mark.parametrize(("bad", "problem"), UNUSABLE_PATHS)
def test_an_add_with_an_unusable_path_in_the_only_checkpoint_stops_every_command(tmp_path, bad, problem):
    path = str(tmp_path / "t")
    cp_path = checkpointed(path, drop_commits=True)
    rewrite_checkpoint_field(cp_path, "add", "path", bad)
    assert_checkpoint_refused(path, cp_path, "add", problem)


def test_a_partition_value_the_materialized_column_cannot_hold_refuses_compaction_before_writing(tmp_path):
    path = str(tmp_path / "t")
    partitioned(path, MATERIALIZE)
    # The schema says part is an int: "p0"/"p1" cannot be written into the files' part column.
    log = os.path.join(path, "_delta_log", f"{0:020d}.json")
    lines = open(log).read().splitlines()
    for i, line in enumerate(lines):
        if line.startswith('{"metaData"'):
            action = json.loads(line)
            schema = json.loads(action["metaData"]["schemaString"])
            schema["fields"][0]["type"] = "integer"
            action["metaData"]["schemaString"] = json.dumps(schema)
            lines[i] = json.dumps(action)
    open(log, "w").write("\n".join(lines) + "\n")
    before = fingerprint(path)
    version = DeltaTable(path).snapshot().version
    with pytest.raises(OperationRefusedError, match="must carry partition column 'part', and the partition value of"):
        compact(path, target_size=1 << 20)
    assert fingerprint(path) == before and DeltaTable(path).snapshot().version == version
