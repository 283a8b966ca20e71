"""The benchmarks' peer sides read the peers' own metrics (deltalake's keys are camelCase, not ours).

No timing here: each deltalake side runs once on a tiny table so a renamed key fails in the
suite instead of in the next benchmark run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_compaction  # noqa: E402
import bench_layout  # noqa: E402
import bench_wide  # noqa: E402


def _small_files(path: Path, files: int = 3) -> str:
    for i in range(files):
        batch = pa.table({"x": pa.array(range(i * 10, i * 10 + 10), pa.int64()), "y": pa.array([float(i)] * 10)})
        deltalake.write_deltalake(str(path), batch, mode="append")
    return str(path)


@pytest.mark.parametrize(
    "side",
    [
        lambda p: bench_compaction.deltalake_compact(p),
        lambda p: bench_wide.deltalake_compact(p, "zstd"),
        lambda p: bench_layout.deltalake_zorder(p, 1 << 20),
    ],
    ids=["compaction", "wide", "layout"],
)
def test_deltalake_sides_report_files_removed_and_added(tmp_path, side):
    got = side(_small_files(tmp_path / "t"))
    assert (got["removed"], got["added"]) == (3, 1)
