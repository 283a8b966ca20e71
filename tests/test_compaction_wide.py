"""Local compaction of the wide benchmark table's twelve column types: the rewritten files read back identical.

The rows come from the benchmark's own generator (``benchmarks/wide_table.py``): long,
high- and low-cardinality strings, decimal(18,2), decimal(38,10), timestamp (UTC), date,
boolean, double with nulls, struct<int, string, double>, list<string> and the partition
column. Enough rows per bin that the writer's dictionary choice takes effect.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.compaction import compact

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import wide_table  # noqa: E402

APPENDS = 4
ROWS = 24_000  # 12,000 per partition: enough for the dictionary verdict (10,000)


def _make(path: str, partitioned: bool) -> None:
    rng = np.random.default_rng(7)
    for i in range(APPENDS):
        deltalake.write_deltalake(
            path,
            wide_table.make_batch(rng, i * ROWS, ROWS),
            mode="append",
            partition_by=["region"] if partitioned else None,
        )


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


@pytest.fixture(scope="module", params=[True, False], ids=["partitioned", "flat"])
def compacted(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("wide") / "t")
    _make(path, request.param)
    before = _sorted(deltalake.DeltaTable(path).to_pyarrow_table())
    old_files = set(DeltaTable(path).snapshot().file_paths())
    result = compact(path)
    assert result.ok and result.outputs, result.to_dict()
    return path, before, old_files, request.param


def test_deltalake_reads_every_row_and_type_back_identical(compacted):
    path, before, old_files, partitioned = compacted
    live = set(DeltaTable(path).snapshot().file_paths())
    assert not live & old_files and len(live) == (8 if partitioned else 1)
    after = _sorted(deltalake.DeltaTable(path).to_pyarrow_table())
    assert after.schema == before.schema
    assert after.num_rows == APPENDS * ROWS
    assert after.equals(before)


def test_pyarrow_reads_each_new_file_identical_to_its_rows(compacted):
    path, before, _, partitioned = compacted
    data_columns = [n for n in before.column_names if not (partitioned and n == "region")]
    seen = 0
    for rel in DeltaTable(path).snapshot().file_paths():
        t = pq.read_table(os.path.join(path, rel))
        assert t.column_names == data_columns
        expected = before
        if partitioned:
            region = rel.split("/")[0].split("=", 1)[1]
            expected = before.filter(pc.equal(before.column("region"), region))
        expected = expected.select(data_columns)
        assert t.schema.equals(expected.schema), (t.schema, expected.schema)
        assert _sorted(t).equals(expected)
        seen += t.num_rows
    assert seen == APPENDS * ROWS


def test_writer_settings_dictionaries_only_where_values_repeat_and_statistics_everywhere(compacted):
    path, _, _, _ = compacted
    rel = sorted(DeltaTable(path).snapshot().file_paths())[0]
    md = pq.ParquetFile(os.path.join(path, rel)).metadata
    group = md.row_group(0)
    chunks = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
    for unique in ("id", "user", "amount", "price", "event_ts", "payload.weight"):
        assert not chunks[unique].has_dictionary_page, unique
    for repeating in ("category", "event_date", "payload.code", "payload.label", "tags.list.element"):
        assert chunks[repeating].has_dictionary_page, repeating
    assert all(c.compression == "ZSTD" for c in chunks.values())  # Delta's default codec
    assert all(c.is_stats_set and c.statistics.has_null_count for c in chunks.values())
    # Spark's decimal layout: precision <= 18 as a machine integer, wider ones as fixed-length bytes.
    assert chunks["amount"].physical_type == "INT64"
    assert chunks["price"].physical_type == "FIXED_LEN_BYTE_ARRAY"
    add = next(
        json.loads(line)["add"]
        for line in open(os.path.join(path, "_delta_log", f"{APPENDS:020d}.json"))
        if '"add"' in line
    )
    stats = json.loads(add["stats"])
    assert set(stats["minValues"]) >= {"id", "user", "amount", "price", "event_ts", "event_date", "score"}
    amounts = pq.read_table(os.path.join(path, add["path"]), columns=["amount"]).column("amount")
    bounds = pc.min_max(amounts)
    assert stats["minValues"]["amount"] == float(bounds["min"].as_py())
    assert stats["maxValues"]["amount"] == float(bounds["max"].as_py())


def test_compaction_does_not_import_pandas(tmp_path):
    """pyarrow imports pandas on its first Python-value conversion: 40-50 MB of every compaction's peak."""
    path = str(tmp_path / "t")
    _make(path, True)
    script = textwrap.dedent(
        f"""
        import sys
        from deltalog.compaction import compact
        r = compact({path!r}, run_hooks=False)
        print(r.ok, len(r.outputs), "pandas" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == ["True", "8", "False"], out.stdout + out.stderr
