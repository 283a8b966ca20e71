"""The local engine end to end: rows survive (read back by deltalake), files are exact, commits are OPTIMIZE."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.compaction import LocalOptions, compact
from deltalog.compaction.bin_writer import dictionary_columns, read_ahead
from deltalog.compaction.options import READ_AHEAD_SHARE
from deltalog.create import create_table
from deltalog.protocol.parquet_layout import physical_data_schema
from helpers import append, make_table, rows
from shared_data import golden_copy
from test_compaction_support import (
    RICH_SCHEMA,
    add_deletion_vector,
    commit_actions,
    make_rich_table,
    read_multiset,
    rich_rows,
)


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
def test_rows_survive_and_second_run_is_a_noop(tmp_path, partitioned):
    path = make_rich_table(str(tmp_path / "t"), partitioned, appends=6, rows_per_append=40)
    before = read_multiset(path)
    version_before = deltalake.DeltaTable(path).version()

    result = compact(path)

    assert result.ok and len(result.commits) == 1
    assert read_multiset(path) == before
    d = result.to_dict()
    assert d["num_files_removed"] == (12 if partitioned else 6)
    assert d["num_files_added"] == (2 if partitioned else 1)
    assert d["num_partitions_optimized"] == (2 if partitioned else 1)
    version = result.commits[0].version
    assert version == version_before + 1
    actions = commit_actions(path, version)
    info = actions[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE" and info["isolationLevel"] == "SnapshotIsolation"
    assert info["operationMetrics"]["numRemovedFiles"] == str(d["num_files_removed"])
    assert info["operationMetrics"]["p50FileSize"] == str(result.commits[0].operation_metrics["p50FileSize"])
    files = [a for a in actions if "add" in a or "remove" in a]
    assert files and all(next(iter(a.values()))["dataChange"] is False for a in files)
    assert deltalake.DeltaTable(path).history(1)[0]["operation"] == "OPTIMIZE"

    again = compact(path)
    assert again.noop and not again.commits
    assert deltalake.DeltaTable(path).version() == version


def test_new_files_have_the_table_schema_and_true_stats(tmp_path):
    path = make_rich_table(str(tmp_path / "t"), True, appends=3, rows_per_append=30)
    compact(path)
    snap = DeltaTable(path).snapshot()
    expected = physical_data_schema(snap.metadata.schema_string, ["part"], "none")
    for row in snap.files.to_pylist():
        data_file = os.path.join(path, row["path"])
        schema = pq.read_schema(data_file)
        assert schema.names == expected.names
        for f in expected:
            got = schema.field(f.name)
            assert got.type.equals(f.type) and got.nullable == f.nullable, f.name
        assert schema.field("id").nullable is False  # the table says NOT NULL; deltalake's files did too
        data = pq.read_table(data_file)
        stats = json.loads(row["stats"])
        assert stats["numRecords"] == data.num_rows
        assert stats["nullCount"]["name"] == data.column("name").null_count
        assert stats["nullCount"]["amount"] == data.column("amount").null_count
        assert stats["minValues"]["id"] == pc.min(data.column("id")).as_py()
        assert stats["maxValues"]["id"] == pc.max(data.column("id")).as_py()
        assert stats["minValues"]["nested"]["a"] == pc.min(pc.struct_field(data.column("nested"), "a")).as_py()
        assert pq.ParquetFile(data_file).metadata.row_group(0).column(0).compression == "ZSTD"


def test_codec_follows_the_table_property(tmp_path):
    path = str(tmp_path / "t")
    t = make_table(path, configuration={"delta.parquet.compression.codec": "snappy"})
    for i in range(3):
        append(t, rows(10, i * 10))
    compact(path)
    (new,) = DeltaTable(path).snapshot().file_paths()
    assert new.endswith(".snappy.parquet")
    assert pq.ParquetFile(os.path.join(path, new)).metadata.row_group(0).column(0).compression == "SNAPPY"


@pytest.mark.parametrize(
    "name, mode", [("table-with-columnmapping-mode-id", "id"), ("table-with-columnmapping-mode-name", "name")]
)
def test_column_mapping_files_use_physical_names_and_field_ids(tmp_path, name, mode):
    path = golden_copy(name, tmp_path)
    before = read_multiset(path)
    result = compact(path)
    assert result.ok and result.to_dict()["num_files_removed"] == 2
    assert read_multiset(path) == before
    snap = DeltaTable(path).snapshot()
    (row,) = snap.files.to_pylist()
    schema = pq.read_schema(os.path.join(path, row["path"]))
    logical = snap.metadata.schema
    physical = [(f.metadata or {})[b"delta.columnMapping.physicalName"].decode() for f in logical]
    assert schema.names == physical
    if mode == "id":
        ids = [int(schema.field(n).metadata[b"PARQUET:field_id"]) for n in schema.names]
        assert ids == [int(f.metadata[b"delta.columnMapping.id"]) for f in logical]
    stats = json.loads(row["stats"])
    assert set(stats["nullCount"]) <= set(physical)  # stats keyed by physical names


def _append_next_to_dv_files(path: str) -> list[str]:
    """Give each partition holding a (Spark-written) DV file a second small file, so the DV file gets binned."""
    t = DeltaTable(path)
    snap = t.snapshot()
    fields = {f.name: f for f in snap.metadata.schema}
    phys = {
        n: (f.metadata or {}).get(b"delta.columnMapping.physicalName", n.encode()).decode() for n, f in fields.items()
    }
    dv_rows = [r for r in snap.files.to_pylist() if r["deletionVector"]]
    for i, r in enumerate(dv_rows):
        pv = dict(r["partitionValues"])
        data = pa.table({phys["col1"]: pa.array([1000 + i, 2000 + i], pa.int32()), phys["col2"]: ["new", None]})
        append(t, data, pv)
    return [r["path"] for r in dv_rows]


@pytest.mark.parametrize("name", ["dv-partitioned-with-checkpoint", "dv-with-columnmapping"])
def test_deletion_vectors_written_by_spark_are_applied(tmp_path, name):
    path = golden_copy(name, tmp_path)
    dv_files = _append_next_to_dv_files(path)
    before = read_multiset(path)
    result = compact(path)
    assert result.ok
    assert read_multiset(path) == before
    assert result.to_dict()["num_deletion_vectors_applied"] == len(dv_files) == 2
    snap = DeltaTable(path).snapshot()
    assert all(dv is None for dv in snap.files.column("deletionVector").to_pylist())
    removes = [a["remove"] for a in commit_actions(path, result.commits[0].version) if "remove" in a]
    assert {r["path"] for r in removes if r.get("deletionVector")} == set(dv_files)


@pytest.mark.parametrize("runs", [False, True], ids=["array-bitmap", "runs"])
def test_own_deletion_vectors_on_disk_and_inline(tmp_path, runs, monkeypatch):
    import test_compaction_support as support

    path = str(tmp_path / "t")
    create_table(path, RICH_SCHEMA, partition_by=["part"], configuration={"delta.enableDeletionVectors": "true"})
    make_rich_table(path, True, appends=3, rows_per_append=6000)
    paths = DeltaTable(path).snapshot().file_paths()
    serialize = support.serialize_bitmap
    monkeypatch.setattr(support, "serialize_bitmap", lambda r: serialize(r, runs))
    add_deletion_vector(path, paths[0], list(range(0, 5000)) + [5999])  # a bitmap container (> 4096 values)
    add_deletion_vector(path, paths[1], [1, 2, 3, 100], inline=True)
    before = read_multiset(path)
    assert sum(before.values()) == 6 * 6000 - 5001 - 4  # deltalake applies our DVs
    result = compact(path)
    assert result.ok and result.to_dict()["num_deletion_vectors_applied"] == 2
    assert read_multiset(path) == before
    stats = [json.loads(s) for s in DeltaTable(path).snapshot().files.column("stats").to_pylist()]
    assert sum(s["numRecords"] for s in stats) == sum(before.values())


def test_old_files_missing_a_new_column_get_nulls(tmp_path):
    path = str(tmp_path / "t")
    write = lambda data, **kw: deltalake.write_deltalake(path, data, mode="append", **kw)  # noqa: E731
    write(pa.table({"id": [1, 2], "v": ["a", "b"]}))
    write(pa.table({"id": [3], "v": ["c"]}))
    write(pa.table({"id": [4], "v": ["d"], "extra": [1.5]}), schema_mode="merge")
    before = read_multiset(path)
    assert compact(path).ok
    assert read_multiset(path) == before
    (f,) = DeltaTable(path).snapshot().file_paths()
    data = pq.read_table(os.path.join(path, f))
    assert data.column("extra").null_count == 3


def test_batches_commit_as_they_go_and_where_limits_partitions(tmp_path):
    path = make_rich_table(str(tmp_path / "t"), True, appends=3, rows_per_append=20)
    before = read_multiset(path)
    only_a = compact(path, where="part = 'a'")
    assert [b.partition_values for b in only_a.plan.bins] == [{"part": "a"}]
    assert json.loads(
        commit_actions(path, only_a.commits[0].version)[0]["commitInfo"]["operationParameters"]["predicate"]
    ) == ["part = 'a'"]
    for i in range(3):
        deltalake.write_deltalake(path, rich_rows(5, 10_000 + i * 5, "a"), mode="append", partition_by=["part"])
    result = compact(path, bins_per_commit=1)
    assert len(result.commits) == 2 and [c.bins for c in result.commits] == [[0], [1]]
    assert result.commits[1].version == result.commits[0].version + 1
    assert sum(read_multiset(path).values()) == sum(before.values()) + 15


def test_cancel_stops_between_bins_and_keeps_what_committed(tmp_path, monkeypatch):
    """The cancel event (Airflow's on_kill) reaches the core: committed bins stay, the rest is aborted."""
    import threading

    import deltalog.compaction.batches as compaction_module
    from deltalog.errors import OperationCancelledError

    path = make_rich_table(str(tmp_path / "t"), True, appends=3, rows_per_append=10)
    before = read_multiset(path)
    cancel = threading.Event()
    cancel.set()
    version = DeltaTable(path).version()

    def data_files() -> set[str]:
        return {f for d, _, names in os.walk(path) if "_delta_log" not in d for f in names}

    files = data_files()
    with pytest.raises(OperationCancelledError, match="nothing was committed"):
        compact(path, cancel=cancel)
    assert DeltaTable(path).version() == version and data_files() == files  # nothing rewritten either

    cancel.clear()
    real_commit = compaction_module.commit_bins

    def commit_then_cancel(*args, **kwargs):
        out = real_commit(*args, **kwargs)
        cancel.set()
        return out

    monkeypatch.setattr(compaction_module, "commit_bins", commit_then_cancel)
    result = compact(path, bins_per_commit=1, cancel=cancel)
    assert [c.bins for c in result.commits] == [[0]] and result.error == "cancelled" and not result.ok
    assert [(s.bin_id, s.kind) for s in result.skipped] == [(1, "aborted")]
    assert read_multiset(path) == before
    assert len(DeltaTable(path).snapshot().file_paths()) == 1 + 3  # part a compacted, part b untouched


def test_output_row_groups_are_bounded_by_the_buffer(tmp_path):
    path = make_rich_table(str(tmp_path / "t"), False, appends=5, rows_per_append=100)
    before = read_multiset(path)
    result = compact(path, local_options=LocalOptions(batch_rows=16, row_group_rows=64))
    assert read_multiset(path) == before
    (f,) = DeltaTable(path).snapshot().file_paths()
    md = pq.ParquetFile(os.path.join(path, f)).metadata
    assert md.num_rows == 500 and md.num_row_groups == 8  # 7 groups of 64 rows (+/- a batch) and the rest
    assert all(md.row_group(i).num_rows <= 64 + 15 for i in range(md.num_row_groups))
    assert result.outputs[0].rows_out == 500


@pytest.fixture(scope="module")
def big_bin_table(tmp_path_factory):
    """One bin of 12 files holding ~49 MB of decoded Arrow data (480k rows of 90-character strings)."""
    path = str(tmp_path_factory.mktemp("big") / "t")
    t = make_table(path, pa.schema([("id", pa.int64()), ("value", pa.string())]))
    n = 40_000
    for i in range(12):
        ids = range(i * n, (i + 1) * n)
        append(t, pa.table({"id": pa.array(ids, pa.int64()), "value": pa.array([f"{j:0>90}" for j in ids])}))
    return path


@pytest.mark.parametrize(
    "row_group_bytes, bounded, read_ahead",
    [(2 << 20, True, False), (2 << 20, True, True), (256 << 20, False, True)],
    ids=["2MB", "2MB-read-ahead", "256MB"],
)
def test_memory_is_bounded_by_the_row_group_buffer_not_the_bin(
    tmp_path, big_bin_table, row_group_bytes, bounded, read_ahead
):
    """Peak Arrow memory of a fresh process rewriting the bin follows the buffer size, not the bin size."""
    path = str(tmp_path / "t")
    shutil.copytree(big_bin_table, path)
    script = textwrap.dedent(
        f"""
        import json
        import pyarrow as pa
        from deltalog.compaction import LocalOptions, compact
        opts = LocalOptions(row_group_bytes={row_group_bytes}, batch_rows=8192, memory_budget=None,
                            read_ahead={read_ahead})
        r = compact({path!r}, local_options=opts)
        print(json.dumps({{"ok": r.ok, "rows": r.outputs[0].rows_out, "peak": pa.default_memory_pool().max_memory()}}))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["ok"] and doc["rows"] == 480_000
    decoded = 480_000 * (8 + 90 + 4)
    # Without a budget, read-ahead adds its share of the row group on top of the buffer.
    buffered = 1 + READ_AHEAD_SHARE if read_ahead else 1
    if bounded:
        assert doc["peak"] < buffered * decoded / 4, doc
    else:  # the measurement can tell: a buffer as big as the bin holds the whole bin
        assert doc["peak"] > decoded / 2, doc


def test_workers_share_the_memory_budget(tmp_path):
    """Two bins at once: each worker's row groups close at half the budget, whatever row_group_bytes says."""
    one = make_rich_table(str(tmp_path / "one"), True, appends=6, rows_per_append=400)
    two = str(tmp_path / "two")
    shutil.copytree(one, two)
    before = read_multiset(one)
    budget = 64 * 1024
    opts = LocalOptions(memory_budget=budget)
    assert opts.worker_row_group_bytes(2) + opts.worker_read_ahead_bytes(2) == budget // 2  # row group + read-ahead
    assert opts.worker_read_ahead_bytes(2) == budget // 8
    assert LocalOptions(memory_budget=budget, read_ahead=False).worker_row_group_bytes(2) == budget // 2
    assert LocalOptions(row_group_bytes=1 << 20, memory_budget=None).worker_row_group_bytes(8) == 1 << 20

    def row_groups(path: str, workers: int) -> list[int]:
        opts = LocalOptions(max_workers=workers, batch_rows=50, row_group_bytes=1 << 30, memory_budget=budget)
        result = compact(path, local_options=opts)
        assert result.ok and len(result.outputs) == 2 and read_multiset(path) == before
        files = DeltaTable(path).snapshot().file_paths()
        return [pq.ParquetFile(os.path.join(path, f)).metadata.num_row_groups for f in files]

    alone, shared = row_groups(one, 1), row_groups(two, 2)
    assert min(alone) > 1  # the budget, not row_group_bytes (1 GiB), closed the row groups
    assert min(shared) >= 1.6 * max(alone), (alone, shared)  # half the budget each: about twice as many


def test_a_file_without_any_current_column_keeps_its_rows(tmp_path):
    """Rows of a file whose columns were all dropped since are rows of nulls, not lost rows."""
    path = str(tmp_path / "t")
    t = make_table(path, pa.schema([("id", pa.int64()), ("value", pa.string())]))
    append(t, pa.table({"id": [1, 2], "value": ["a", "b"]}))
    append(t, pa.table({"gone": [10, 20, 30]}))  # written before id/value existed
    before = read_multiset(path)
    assert sum(before.values()) == 5
    result = compact(path)
    assert result.ok and result.outputs[0].rows_out == 5
    assert read_multiset(path) == before


@pytest.mark.parametrize("run_hooks", [True, False])
def test_post_commit_hooks_can_be_left_to_another_task(tmp_path, run_hooks):
    path = str(tmp_path / "t")
    t = make_table(path, configuration={"delta.checkpointInterval": "5"})
    for i in range(4):
        append(t, rows(5, i * 5))
    result = compact(path, run_hooks=run_hooks)
    assert result.commits[0].version == 5
    checkpoint = os.path.join(path, "_delta_log", f"{5:020d}.checkpoint.parquet")
    assert os.path.exists(checkpoint) == run_hooks
    assert bool(result.commits[0].hooks) == run_hooks


def _batches(n: int, rows: int = 100, log: list | None = None, fail_at: int | None = None):
    try:
        for i in range(n):
            if i == fail_at:
                raise ValueError(f"bad batch {i}")
            if log is not None:
                log.append(("made", i))
            yield pa.record_batch([pa.array(range(i * rows, (i + 1) * rows), pa.int64())], names=["x"])
    finally:
        if log is not None:
            log.append(("closed", None))


def test_read_ahead_yields_every_batch_in_order_and_stays_within_its_limit():
    log: list = []
    one = _batches(1)
    limit = 2 * next(one).nbytes  # two batches may wait
    seen = []
    for b in read_ahead(_batches(20, log=log), limit):
        made = sum(1 for e in log if e[0] == "made")
        # the one handed out, two waiting and one decoded but not yet queued
        assert made - len(seen) <= 4, (made, len(seen))
        seen.append(b.column(0)[0].as_py())
    assert seen == [i * 100 for i in range(20)]
    assert log[-1] == ("closed", None)


def test_read_ahead_raises_the_readers_error_and_closes_the_reader_when_the_writer_stops():
    with pytest.raises(ValueError, match="bad batch 3"):
        list(read_ahead(_batches(10, fail_at=3), 1))
    log: list = []
    gen = read_ahead(_batches(1000, log=log), 1)
    next(gen)
    gen.close()  # the writer failed: the reader stops and closes its input
    assert log[-1] == ("closed", None) and sum(1 for e in log if e[0] == "made") < 10


def test_dictionaries_only_where_values_repeat():
    n = 20_000
    t = pa.table(
        {
            "unique": pa.array(range(n), pa.int64()),
            "few": pa.array([f"c{i % 10}" for i in range(n)]),
            "nested": pa.StructArray.from_arrays(
                [pa.array([float(i) * 1.5 for i in range(n)]), pa.array([i % 7 for i in range(n)], pa.int32())],
                ["weight", "code"],
            ),
        }
    )
    assert dictionary_columns(t) == ["few", "nested.code"]
    assert dictionary_columns(t.slice(0, 100)) is True  # too few rows to judge: pyarrow's default


def test_bins_read_ahead_only_when_a_core_would_be_idle(tmp_path, monkeypatch):
    """A reader thread per bin pays only when fewer bins than cores are left (one bin, or the last)."""
    import deltalog.compaction.bin_writer as local

    calls: list[str] = []
    real = local.read_ahead

    def counting(items, limit):
        calls.append(threading.current_thread().name)
        return real(items, limit)

    monkeypatch.setattr(local, "read_ahead", counting)
    one_bin = make_rich_table(str(tmp_path / "one"), False, appends=4, rows_per_append=50)
    before = read_multiset(one_bin)
    assert compact(one_bin, local_options=LocalOptions(max_workers=2)).ok
    assert len(calls) == 1 and read_multiset(one_bin) == before  # one bin, two cores: read ahead
    calls.clear()
    assert compact(
        make_rich_table(str(tmp_path / "single"), False, appends=4), local_options=LocalOptions(max_workers=1)
    ).ok
    assert calls == []  # one core: nothing to overlap with
    calls.clear()
    many = make_rich_table(str(tmp_path / "many"), True, appends=4, rows_per_append=50)
    before = read_multiset(many)
    result = compact(many, local_options=LocalOptions(max_workers=2, batch_rows=8))
    assert result.ok and len(result.outputs) == 2 and read_multiset(many) == before
    assert len(calls) <= 1  # the first bin to finish leaves a core idle: only the other switches
