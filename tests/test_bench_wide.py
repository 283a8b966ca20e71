"""The wide-table benchmark's generator and grouping (benchmarks/wide_table.py, bench_wide.py): no timing here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_wide  # noqa: E402
import wide_table  # noqa: E402


def test_the_wide_batch_has_every_column_type_and_is_seeded():
    a = wide_table.make_batch(np.random.default_rng(1), 100, 2000)
    b = wide_table.make_batch(np.random.default_rng(1), 100, 2000)
    assert a.equals(b)
    types = dict(zip(a.schema.names, a.schema.types))
    assert types["amount"] == pa.decimal128(18, 2) and types["price"] == pa.decimal128(38, 10)
    assert types["event_ts"] == pa.timestamp("us", tz="UTC") and types["event_date"] == pa.date32()
    assert pa.types.is_struct(types["payload"]) and pa.types.is_list(types["tags"])
    assert types["active"] == pa.bool_() and types["score"] == pa.float64() and types["user"] == pa.string()
    assert a.column("id").to_pylist() == list(range(100, 2100))
    assert set(a.column("region").to_pylist()) == set(wide_table.REGIONS)
    assert 0 < a.column("score").null_count < 400


def test_ceiling_groups_follow_partitions_and_the_target(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_wide, "TARGET", 250)
    for d, sizes in {"region=a": [100, 100, 100], "region=b": [40]}.items():
        os.makedirs(tmp_path / d)
        for i, n in enumerate(sizes):
            (tmp_path / d / f"f{i}.parquet").write_bytes(b"x" * n)
    os.makedirs(tmp_path / "_delta_log")
    (tmp_path / "_delta_log" / "x.parquet").write_bytes(b"x")
    groups = bench_wide._groups(tmp_path, tmp_path / "out")
    names = [[os.path.relpath(f, tmp_path) for f in g["files"]] for g in groups]
    assert names == [["region=a/f0.parquet", "region=a/f1.parquet"], ["region=a/f2.parquet"], ["region=b/f0.parquet"]]
