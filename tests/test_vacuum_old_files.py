"""Inventories of tables whose files predate their first commit (issue 30, item 3).

Vacuum with an inventory refused every converted table ("modificationTime ... before
the table's first commit"): the Parquet files a CONVERT adopts, ours or Delta Spark's,
are as old as they are. The unit check now goes by magnitude (seconds read as
milliseconds land before 1973, micro- and nanoseconds centuries ahead), so such
inventories are read, while a wrong unit is still refused.
"""

from __future__ import annotations

import os
import shutil

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.compaction import compact
from deltalog.convert import convert_to_delta
from deltalog.errors import InvalidArgumentError
from deltalog.log_maintenance import create_checkpoint
from deltalog.vacuuming import vacuum
from vacuum_helpers import files_on_disk, set_mtime

#: 2015-06-01: years before any commit of the tables here.
OLD_MS = 1_433_116_800_000
#: 1995-01-01: a believable unit, an unbelievable time for a data file (kept, reported).
ANCIENT_MS = 788_918_400_000


def parquet_dir(path: str, n: int = 3, at_ms: int = OLD_MS) -> list[str]:
    os.makedirs(path)
    names = []
    for i in range(n):
        name = f"part-{i:05d}.parquet"
        pq.write_table(pa.table({"id": pa.array([i, i + 100], pa.int64())}), os.path.join(path, name))
        set_mtime(os.path.join(path, name), at_ms)
        names.append(name)
    return names


def inventory_of(path: str, scale: float = 1.0) -> pa.Table:
    """Every object under ``path`` with its size and modification time (ms, times ``scale``)."""
    rows = []
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(dirpath, name)
            st = os.stat(full)
            rows.append({"path": full, "size": st.st_size, "modificationTime": int(st.st_mtime * 1000 * scale)})
    return pa.Table.from_pylist(rows)


def ids(path: str) -> list[int]:
    return sorted(deltalake.DeltaTable(path).to_pyarrow_table().column("id").to_pylist())


def converted_and_compacted(path: str) -> list[str]:
    """A converted table whose converted (2015) files were then compacted away: tombstones to vacuum."""
    originals = parquet_dir(path)
    convert_to_delta(path)
    compact(path, target_size=1 << 20)
    return originals


def test_an_inventory_of_a_converted_table_is_read_and_its_old_files_vacuumed(tmp_path):
    path = str(tmp_path / "t")
    originals = converted_and_compacted(path)
    expected = ids(path)
    inventory = inventory_of(path)
    dry = vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True, inventory=inventory)
    assert sorted(dry.plan.files.column("path").to_pylist()) == originals
    listed = vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True)
    assert sorted(listed.plan.files.column("path").to_pylist()) == originals  # the same as a listing plans
    vacuum(path, retention_hours=0, allow_short_retention=True, inventory=inventory)
    assert not set(originals) & files_on_disk(path)
    assert ids(path) == expected


def test_without_commit_0_the_converted_table_is_still_read(tmp_path):
    """Log cleanup leaves no CONVERT commit to recognise; the times alone must do."""
    path = str(tmp_path / "t")
    originals = converted_and_compacted(path)
    create_checkpoint(DeltaTable(path))
    os.unlink(os.path.join(path, "_delta_log", f"{0:020d}.json"))
    dry = vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True, inventory=inventory_of(path))
    assert sorted(dry.plan.files.column("path").to_pylist()) == originals


def test_an_old_file_added_to_a_new_table_is_accepted(tmp_path):
    """Not a CONVERT at all: a table created now, then a file copied in with its old time preserved."""
    from deltalog.ingest import commit_request
    from helpers import make_table

    path = str(tmp_path / "t")
    make_table(path)
    src = str(tmp_path / "src")
    (name,) = parquet_dir(src, n=1)
    pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "value": ["x"]}), os.path.join(path, "copied.parquet"))
    set_mtime(os.path.join(path, "copied.parquet"), OLD_MS)
    commit_request(path, {"add": [{"path": "copied.parquet"}]})
    stray = os.path.join(path, "stray.parquet")
    shutil.copy(os.path.join(src, name), stray)
    set_mtime(stray, OLD_MS)
    dry = vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True, inventory=inventory_of(path))
    assert dry.plan.files.column("path").to_pylist() == ["stray.parquet"]


def test_a_file_dated_before_2000_is_kept_and_reported_not_refused(tmp_path):
    path = str(tmp_path / "t")
    converted_and_compacted(path)
    stray = os.path.join(path, "ancient.parquet")
    pq.write_table(pa.table({"id": [1]}), stray)
    set_mtime(stray, ANCIENT_MS)
    dry = vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True, inventory=inventory_of(path))
    assert "ancient.parquet" not in dry.plan.files.column("path").to_pylist()
    assert any("before 2000" in w and "ancient.parquet" in w for w in dry.warnings)


@pytest.mark.parametrize(("unit", "scale"), [("seconds", 1e-3), ("microseconds", 1e3), ("nanoseconds", 1e6)])
def test_a_converted_tables_inventory_in_another_unit_is_refused(tmp_path, unit, scale):
    path = str(tmp_path / "t")
    converted_and_compacted(path)
    before = files_on_disk(path)
    inventory = inventory_of(path, scale)
    with pytest.raises(InvalidArgumentError, match="column 'modificationTime' holds") as info:
        vacuum(path, retention_hours=0, allow_short_retention=True, inventory=inventory)
    assert "Is the column in seconds, microseconds or nanoseconds?" in str(info.value)
    assert files_on_disk(path) == before


def test_the_cli_reads_a_converted_tables_inventory(tmp_path, capsys):
    from deltalog.cli import main

    path = str(tmp_path / "t")
    originals = converted_and_compacted(path)
    inv = str(tmp_path / "inventory.parquet")
    pq.write_table(inventory_of(path), inv)
    args = ["vacuum", path, "--retention-hours", "0", "--allow-short-retention", "--dry-run", "--inventory", inv]
    assert main([*args, "--json"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in originals)


@pytest.mark.slow
@pytest.mark.spark
def test_delta_spark_convert_to_delta_then_our_inventory_vacuum(tmp_path, delta_spark):
    """Delta Spark's CONVERT TO DELTA of 2015 files, Delta Spark's OPTIMIZE, then our inventory vacuum."""
    path = str(tmp_path / "t")
    originals = parquet_dir(path)
    delta_spark.sql(f"CONVERT TO DELTA parquet.`{path}`")
    delta_spark.sql(f"OPTIMIZE delta.`{path}`")
    expected = sorted(r.id for r in delta_spark.read.format("delta").load(path).collect())
    theirs = delta_spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS DRY RUN").collect()
    theirs_paths = sorted(os.path.relpath(r[0].removeprefix("file:"), path) for r in theirs)
    dry = vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True, inventory=inventory_of(path))
    assert sorted(dry.plan.files.column("path").to_pylist()) == originals == theirs_paths
    vacuum(path, retention_hours=0, allow_short_retention=True, inventory=inventory_of(path))
    assert not set(originals) & files_on_disk(path)
    got = sorted(r.id for r in delta_spark.read.format("delta").load(path).collect())
    assert got == expected == ids(path)
