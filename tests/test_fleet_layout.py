"""Fleet maintenance learns layout: per-table Z-order columns and a DV share that makes a purge due."""

from __future__ import annotations

import json
import os

import pytest

from deltalog import DeltaTable, settings_for
from deltalog.create import create_table
from deltalog.errors import InvalidArgumentError
from deltalog.fleet.maintain import maintain_table, order_work
from deltalog.fleet.ranking import fleet_health
from deltalog.log.listing import commit_name
from test_compaction_support import RICH_SCHEMA, add_deletion_vector, make_rich_table, read_multiset


def _operations(path: str) -> list[dict]:
    version = DeltaTable(path).snapshot().version
    out = []
    for v in range(version + 1):
        with open(os.path.join(path, "_delta_log", commit_name(v))) as fh:
            out.append(json.loads(fh.readline()).get("commitInfo", {}))
    return out


def _dv_table(path: str) -> list[str]:
    create_table(path, RICH_SCHEMA, partition_by=["part"], configuration={"delta.enableDeletionVectors": "true"})
    make_rich_table(path, True, appends=1, rows_per_append=100)
    paths = DeltaTable(path).snapshot().file_paths()
    add_deletion_vector(path, paths[0], list(range(30)))  # 30 rows hidden: 0.15 of the table's rows
    return paths


def test_settings_validate_layout_keys():
    s = settings_for("/x/events", {"events": {"zorder_by": ["a", "b"], "max_dv_hidden_share": 0.1}})
    assert s.zorder_by == ["a", "b"] and s.max_dv_hidden_share == 0.1
    for bad, message in (
        ({"zorder_by": "a"}, "zorder_by"),
        ({"zorder_by": []}, "zorder_by"),
        ({"max_dv_hidden_share": "0.1"}, "max_dv_hidden_share"),
        ({"max_dv_hidden_share": 1.0}, "max_dv_hidden_share"),
        ({"max_dv_hidden_share": True}, "max_dv_hidden_share"),
    ):
        with pytest.raises(InvalidArgumentError, match=message):
            settings_for("/x/events", {"events": bad})


def test_dv_share_makes_a_purge_due_and_maintenance_runs_it(tmp_path):
    path = str(tmp_path / "events")
    paths = _dv_table(path)
    before = read_multiset(path)
    reports = fleet_health([path])
    assert not reports[0].any_due and reports[0].due.dv_hidden_share == 0.15  # only the setting makes it due
    assert order_work(reports) == []
    mapping = {"events": {"max_dv_hidden_share": 0.1}}
    (planned,) = order_work(reports, settings=mapping)
    assert planned.due["purge"] is True
    assert order_work(reports, settings={"events": {"max_dv_hidden_share": 0.2}}) == []

    out = maintain_table(path, settings=settings_for(path, mapping))

    assert out.status == "done" and out.ran[0] == "purge: 1 bins", out.to_dict()
    assert read_multiset(path) == before
    live = {f["path"]: f for f in DeltaTable(path).snapshot().files.to_pylist()}
    assert paths[0] not in live and not any(f["deletionVector"] for f in live.values())
    assert [op["operationParameters"]["applyPurge"] for op in _operations(path) if op.get("operation") == "REORG"] == [
        "true"
    ]


def test_zorder_setting_turns_a_due_compaction_into_a_zorder(tmp_path):
    path = make_rich_table(str(tmp_path / "events"), False, appends=4, rows_per_append=40)
    before = read_multiset(path)
    out = maintain_table(path, settings=settings_for(path, {"events": {"zorder_by": ["id"]}}))
    assert out.status == "done" and out.ran[0].startswith("compaction"), out.to_dict()
    assert read_multiset(path) == before
    optimize = [op for op in _operations(path) if op.get("operation") == "OPTIMIZE"]
    assert json.loads(optimize[-1]["operationParameters"]["zOrderBy"]) == ["id"]
