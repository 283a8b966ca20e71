"""Compaction planning: bin packing, thresholds, --where, the JSON plan, refusals. Nothing is rewritten here."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from deltalog.compaction import CompactionPlan, compact, plan_compaction
from deltalog.compaction.plan import parse_size
from deltalog.compaction.predicate import parse_where
from deltalog.errors import InvalidArgumentError, UnsupportedProtocolError
from deltalog.protocol.table_protocol import Protocol
from helpers import append, make_table, rows


def _sized_table(path: str, sizes_by_part: dict[str, list[int]]) -> None:
    """A partitioned table whose add actions claim the given sizes (planning only reads the log)."""
    t = make_table(path, partition_by=["part"])
    start = 0
    for part, sizes in sizes_by_part.items():
        for _size in sizes:
            add = append(t, rows(2, start, part), {"part": part})
            start += 2
            assert add.version > 0
    # Rewrite the sizes in the log: planning trusts the log, which is what we are testing.
    log_dir = os.path.join(path, "_delta_log")
    wanted = [s for sizes in sizes_by_part.values() for s in sizes]
    for v, size in zip(range(1, len(wanted) + 1), wanted, strict=True):
        name = os.path.join(log_dir, f"{v:020d}.json")
        lines = []
        for line in open(name).read().splitlines():
            action = json.loads(line)
            if "add" in action:
                action["add"]["size"] = size
            lines.append(json.dumps(action))
        open(name, "w").write("\n".join(lines) + "\n")


def test_bins_smallest_first_up_to_target_and_single_file_bins_dropped(tmp_path):
    path = str(tmp_path / "t")
    _sized_table(path, {"a": [40, 10, 30, 20, 90], "b": [5, 200]})
    plan = plan_compaction(path, target_size=100)
    # threshold = 50: in "a" 10,20,30,40 are small (90 is not); "b" has one small file only.
    assert [sorted(f.size for f in b.files) for b in plan.bins] == [[10, 20, 30, 40]]
    assert plan.bins[0].partition_values == {"part": "a"}
    assert plan.num_candidate_files == 5 and plan.num_files == 7
    plan = plan_compaction(path, target_size=60)
    # threshold 30: 10, 20 small in a (30 is not < 30); b: 5 alone is dropped.
    assert [[f.size for f in b.files] for b in plan.bins] == [[10, 20]]


def test_greedy_packing_closes_bins_at_the_target(tmp_path):
    path = str(tmp_path / "t")
    _sized_table(path, {"a": [10, 20, 30, 40, 45, 46]})
    plan = plan_compaction(path, target_size=100)
    assert [[f.size for f in b.files] for b in plan.bins] == [[10, 20, 30, 40], [45, 46]]
    assert all(b.size <= 100 for b in plan.bins)


def test_min_files_max_bins_and_threshold(tmp_path):
    path = str(tmp_path / "t")
    _sized_table(path, {"a": [1, 2, 3], "b": [1, 2], "c": [4, 5, 6, 7]})
    assert len(plan_compaction(path, target_size=1000).bins) == 3
    assert [len(b.files) for b in plan_compaction(path, target_size=1000, min_files=3).bins] == [3, 4]
    plan = plan_compaction(path, target_size=1000, max_bins=1)
    assert [b.partition_values["part"] for b in plan.bins] == ["c"]  # the bin that removes most files
    assert plan.num_bins_deferred == 2
    plan = plan_compaction(path, target_size=1000, small_file_threshold=5)
    assert {b.partition_values["part"]: len(b.files) for b in plan.bins} == {"a": 3, "b": 2}
    with pytest.raises(InvalidArgumentError, match="min_files"):
        plan_compaction(path, min_files=1)
    with pytest.raises(InvalidArgumentError, match="max_bins"):
        plan_compaction(path, max_bins=0)
    with pytest.raises(InvalidArgumentError, match="not a size"):
        plan_compaction(path, target_size="lots")


def test_target_size_defaults_to_table_property(tmp_path):
    path = str(tmp_path / "t")
    t = make_table(path, configuration={"delta.targetFileSize": "64m"})
    append(t, rows(3))
    assert plan_compaction(path).target_size == 64 * 1024 * 1024
    assert plan_compaction(path).small_file_threshold == 32 * 1024 * 1024
    assert parse_size("128MiB", "x") == 128 * 1024**2 and parse_size(7, "x") == 7


def test_where_filters_partitions(tmp_path):
    path = str(tmp_path / "t")
    _sized_table(path, {"a": [1, 2], "b": [1, 2], "c": [1, 2]})
    parts = lambda expr: sorted(b.partition_values["part"] for b in plan_compaction(path, where=expr).bins)  # noqa: E731
    assert parts("part = 'a'") == ["a"]
    assert parts("part IN ('a', 'c')") == ["a", "c"]
    assert parts("PART in ('b') and part = 'b'") == ["b"]
    assert parts("part = 'zzz'") == []
    plan = plan_compaction(path, where="part IN ('a','c')")
    assert plan.predicate == ["part IN ('a', 'c')"]


@pytest.mark.parametrize(
    "expr, message",
    [
        ("value = 'x'", "only filter on partition columns"),
        ("nope = 1", "not a column of the table"),
        ("part = 'a' OR part = 'b'", "expected AND"),
        ("part > 'a'", "operator '>' is not supported"),
        ("part IN 'a'", "parenthesised list"),
        ("part =", "ends too early"),
        ("part = 'a' AND", "ends too early"),
        ("part IS NOT NULL", "only 'IS NULL'"),
        ("part = 'a'; drop", "cannot parse"),
    ],
)
def test_where_refuses_anything_else(tmp_path, expr, message):
    path = str(tmp_path / "t")
    make_table(path, partition_by=["part"])
    with pytest.raises(InvalidArgumentError, match=message):
        plan_compaction(path, where=expr)


def test_where_is_typed_and_handles_nulls():
    schema = pa.schema([("y", pa.int32()), ("d", pa.date32()), ("s", pa.string()), ("v", pa.int64())])
    f = parse_where("y = 2024 AND d IN ('2024-01-05') AND s IS NULL", ["y", "d", "s"], schema)
    assert f.matches({"y": "2024", "d": "2024-01-05", "s": None})
    assert f.matches({"y": "02024", "d": "2024-01-05", "s": ""})  # empty partition value is null
    assert not f.matches({"y": "2023", "d": "2024-01-05", "s": None})
    assert not f.matches({"y": "2024", "d": "2024-01-05", "s": "x"})
    with pytest.raises(InvalidArgumentError, match="not a valid int32"):
        parse_where("y = 'abc'", ["y"], schema)
    with pytest.raises(InvalidArgumentError, match="no partition columns"):
        parse_where("v = 1", [], schema)
    mask = parse_where("y IN (1, 3)", ["y"], schema).mask(
        pa.array([[("y", "1")], [("y", "2")], [("y", "3")], []], pa.map_(pa.string(), pa.string()))
    )
    assert mask.to_pylist() == [True, False, True, False]


def test_plan_json_round_trip_and_plan_only_writes_nothing(tmp_path):
    path = str(tmp_path / "t")
    t = make_table(path, partition_by=["part"])
    for i in range(3):
        append(t, rows(5, i * 5, "x"), {"part": "x"})
    before = sorted(os.listdir(os.path.join(path, "_delta_log"))), sorted(os.listdir(os.path.join(path, "part=x")))
    result = compact(path, plan_only=True)
    assert result.plan_only and len(result.plan.bins) == 1 and not result.commits
    after = sorted(os.listdir(os.path.join(path, "_delta_log"))), sorted(os.listdir(os.path.join(path, "part=x")))
    assert before == after
    doc = json.loads(json.dumps(result.to_dict()))
    plan = CompactionPlan.from_dict(doc["plan"])
    assert plan.to_dict() == result.plan.to_dict()
    assert plan.snapshot_version == 3 and plan.table_id == t.snapshot().metadata.id
    with pytest.raises(InvalidArgumentError, match="format_version 99"):
        CompactionPlan.from_dict({**doc["plan"], "format_version": 99})
    old = {k: v for k, v in doc["plan"].items() if k != "format_version"}
    with pytest.raises(InvalidArgumentError, match="format_version 1 .*plan again"):
        CompactionPlan.from_dict({**old, "formatVersion": 1})  # a plan written before the keys were snake_case
    with pytest.raises(InvalidArgumentError, match="names no table: 'table_id' must be"):
        CompactionPlan.from_dict({"format_version": 2})
    with pytest.raises(InvalidArgumentError, match="malformed"):
        CompactionPlan.from_dict({"format_version": 2, "table_id": "x", "snapshot_version": 0})


def test_refuses_tables_with_unsupported_writer_features(tmp_path):
    path = str(tmp_path / "t")
    t = make_table(path)
    append(t, rows(2))
    append(t, rows(2, 2))
    # A later writer turned on variant shredding, whose files pyarrow cannot rewrite (Spark can).
    commit0 = os.path.join(path, "_delta_log", f"{0:020d}.json")
    lines = [json.loads(x) for x in open(commit0).read().splitlines()]
    for action in lines:
        if "protocol" in action:
            features = ("variantType", "variantShredding")
            action["protocol"] = Protocol(3, 7, features, features).to_dict()
    open(commit0, "w").write("\n".join(json.dumps(a) for a in lines) + "\n")
    assert plan_compaction(path).bins  # a plan for whichever engine: the Spark engine may run it
    with pytest.raises(UnsupportedProtocolError, match="variantShredding: .*pyarrow cannot .*engine='spark'"):
        compact(path)
    with pytest.raises(UnsupportedProtocolError, match="variantShredding"):
        compact(path, plan=plan_compaction(path))
