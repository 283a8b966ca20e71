"""Vacuum keeps what Iceberg readers need (issue 36): UniForm tables whose Iceberg metadata pyiceberg wrote.

The tables are built from the protocol (``tests/iceberg_helpers.py``) and their Iceberg metadata
by pyiceberg's own writer (a ``SqlCatalog`` in the test's tmp folder, the table's location the
Delta root). "Past retention" is the vacuum's injected clock (``plan_vacuum(now_ms=...)``), as
the other vacuum tests place their cutoffs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest

from deltalog import DeltaTable
from deltalog.compaction import compact
from deltalog.uniform.iceberg_references import ForeignIcebergMetadataError, IcebergMetadataError
from deltalog.vacuuming import execute_vacuum, plan_vacuum, vacuum
from deltalog.vacuuming.path_set import PathSet, PathSetBuilder
from iceberg_helpers import (
    append_iceberg,
    append_uniform,
    data_file,
    delta_rows,
    iceberg_catalog,
    iceberg_rows,
    make_uniform_table,
    newest_metadata,
    register_iceberg_table,
    replace_iceberg,
    write_uniform_file,
)
from vacuum_helpers import DAY_MS, files_on_disk, log_files, now_ms

WEEK_MS = 7 * DAY_MS
#: A clock 8 days ahead: the table's default retention (7 days) has passed for everything written now.
LATER_MS = 8 * DAY_MS


def uri(path: str, rel: str) -> str:
    return "file://" + os.path.join(path, rel)


def uniform_with_iceberg(tmp_path, files: int = 3) -> tuple[str, object]:
    """A UniForm table with ``files`` appends, and Iceberg metadata (pyiceberg) referencing exactly its live files."""
    path = str(tmp_path / "t")
    os.makedirs(path)
    make_uniform_table(path)
    for i in range(files):
        append_uniform(path, i * 2)
    table = register_iceberg_table(iceberg_catalog(str(tmp_path / "catalog")), "file://" + path)
    live = DeltaTable(path).snapshot().file_paths()
    table = append_iceberg(table, [data_file(uri(path, f)) for f in live])
    return path, table


def newest_snapshot_files(path: str) -> set[str]:
    """The table-relative files the newest Iceberg snapshot references (pyiceberg's own scan planning)."""
    from pyiceberg.table import StaticTable

    tasks = StaticTable.from_metadata(newest_metadata(path)).scan().plan_files()
    return {t.file.file_path.removeprefix("file://" + path + "/") for t in tasks}


# --- the Done-means scenario ------------------------------------------------------------------


def test_compaction_then_vacuum_past_retention_keeps_every_file_the_newest_iceberg_snapshot_references(tmp_path):
    path, _ = uniform_with_iceberg(tmp_path)
    referenced = newest_snapshot_files(path)
    assert referenced == set(DeltaTable(path).snapshot().file_paths()) and len(referenced) == 3
    assert compact(path, target_size=1 << 30).ok
    replaced = referenced - set(DeltaTable(path).snapshot().file_paths())
    plan = plan_vacuum(path, now_ms=now_ms() + LATER_MS)
    # Without Iceberg the removed small files would go (expired tombstones); the plan keeps them and says why.
    kept = {r["path"]: r["reason"] for r in plan.kept_for_iceberg.to_pylist()}
    assert set(kept) == replaced and len(replaced) == 3
    assert all("current snapshot of metadata/" in why and "the newest metadata" in why for why in kept.values())
    assert not set(plan.files.column("path").to_pylist()) & referenced
    assert plan.to_dict()["num_kept_for_iceberg"] == 3 and plan.stats["files_kept_for_iceberg"] == 3
    assert "3 files kept for Iceberg readers" in plan.summary_line()
    result = execute_vacuum(path, plan)
    assert result.status == "COMPLETED" and result.num_kept_for_iceberg == 3
    assert "3 files kept for Iceberg readers" in result.summary_line()
    assert referenced <= files_on_disk(path)
    # An Iceberg reader and a Delta reader see the same rows.
    rows = delta_rows(path)
    assert len(rows) == 6 and iceberg_rows(newest_metadata(path)) == rows
    # The Iceberg metadata itself is hidden from vacuum (never listed, never deleted).
    assert all(not p.startswith("metadata/") for p in plan.files.column("path").to_pylist())
    assert any(p.startswith("metadata/") for p in files_on_disk(path))


def test_lite_and_inventory_modes_keep_them_too(tmp_path):
    path, _ = uniform_with_iceberg(tmp_path)
    referenced = newest_snapshot_files(path)
    compact(path, target_size=1 << 30)
    later = now_ms() + LATER_MS
    lite = plan_vacuum(path, mode="lite", now_ms=later)
    assert lite.mode == "lite" and set(lite.kept_for_iceberg.column("path").to_pylist()) == referenced
    assert lite.num_files == 0
    on_disk = sorted(files_on_disk(path))
    stats = [os.stat(os.path.join(path, p)) for p in on_disk]
    inventory = pa.table(
        {
            "path": on_disk,
            "size": [s.st_size for s in stats],
            "modificationTime": [int(s.st_mtime * 1000) for s in stats],
        }
    )
    full = plan_vacuum(path, inventory=inventory, now_ms=later)
    assert full.source == "inventory" and set(full.kept_for_iceberg.column("path").to_pylist()) == referenced
    assert not {p for p in full.files.column("path").to_pylist() if p in referenced}
    # The inventory names metadata/ files: hidden, so never planned.
    assert all(not p.startswith("metadata/") for p in full.files.column("path").to_pylist())
    result = execute_vacuum(path, lite)
    assert result.num_deleted_files == 0 and referenced <= files_on_disk(path)


@pytest.mark.slow
@pytest.mark.spark
def test_the_spark_engine_keeps_the_same_files(delta_spark, tmp_path, monkeypatch):
    from deltalog.vacuuming.spark import driver as spark_driver

    path, _ = uniform_with_iceberg(tmp_path)
    referenced = newest_snapshot_files(path)
    compact(path, target_size=1 << 30)
    junk = write_uniform_file(path, 100)  # untracked, old: the job's verdict deletes it
    os.utime(os.path.join(path, junk), (time.time() - 9 * 86400,) * 2)
    later = now_ms() + LATER_MS
    local = plan_vacuum(path, now_ms=later)
    session = {"engine": "spark", "spark_options": {"session": delta_spark}}
    spark = plan_vacuum(path, now_ms=later, **session)
    assert spark.engine == "spark"
    assert set(spark.kept_for_iceberg.column("path").to_pylist()) == referenced
    assert spark.kept_for_iceberg.sort_by("path").to_pylist() == local.kept_for_iceberg.sort_by("path").to_pylist()
    assert spark.files.column("path").to_pylist() == local.files.column("path").to_pylist() == [junk]
    # A spilled plan (past LOAD_LIMIT files) is filtered batch by batch, and executes.
    monkeypatch.setattr(spark_driver, "LOAD_LIMIT", 0)
    spilled = plan_vacuum(path, now_ms=later, **session)
    assert spilled.files_location and spilled.num_files == 1 and spilled.num_kept_for_iceberg == 3
    result = execute_vacuum(path, spilled)
    assert result.num_deleted_files == 1 and result.num_kept_for_iceberg == 3
    assert referenced <= files_on_disk(path) and junk not in files_on_disk(path)


# --- the rule is exact: what an expired snapshot alone references may go -------------------


def test_a_snapshot_older_than_retention_no_longer_protects_its_files(tmp_path):
    """S1 {f1, f2} -> S2 {f2, f3} -> S3 {f3, f4}, cutoff between S2 and S3: S3 is current, S2 was current at
    the cutoff (what a reader then had), S1 is neither: f1 goes, f2 stays for S2's readers."""
    path = str(tmp_path / "t")
    os.makedirs(path)
    make_uniform_table(path)
    f = [append_uniform(path, i * 2) for i in range(2)]  # f1, f2 live in Delta
    f3, f4 = write_uniform_file(path, 4), write_uniform_file(path, 6)
    from deltalog.ingest import commit_request

    commit_request(path, {"operation": "DELETE", "remove": [f[0]], "add": [{"path": f3}]}, run_hooks=False)
    commit_request(path, {"operation": "DELETE", "remove": [f[1]], "add": [{"path": f4}]}, run_hooks=False)
    table = register_iceberg_table(iceberg_catalog(str(tmp_path / "catalog")), "file://" + path)
    table = append_iceberg(table, [data_file(uri(path, p)) for p in f])
    time.sleep(0.01)
    table = replace_iceberg(table, [uri(path, f[0])], [data_file(uri(path, f3))])
    time.sleep(0.01)
    table = replace_iceberg(table, [uri(path, f[1])], [data_file(uri(path, f4))])
    s1, s2, s3 = [s.timestamp_ms for s in table.metadata.snapshots]
    assert s1 < s2 < s3
    plan = plan_vacuum(path, now_ms=s3 - 1 + WEEK_MS)  # cutoff = s3 - 1
    assert plan.files.column("path").to_pylist() == [f[0]]
    (kept,) = plan.kept_for_iceberg.to_pylist()
    assert kept["path"] == f[1] and str(table.metadata.snapshots[1].snapshot_id) in kept["reason"]
    why = {s["snapshot_id"]: s["why"] for s in plan.to_dict()["iceberg"]["snapshots"]}
    assert table.metadata.snapshots[0].snapshot_id not in why
    result = execute_vacuum(path, plan)
    assert result.num_deleted_files == 1 and f[0] not in files_on_disk(path) and f[1] in files_on_disk(path)
    assert iceberg_rows(newest_metadata(path)) == delta_rows(path)
    # Once S3 itself is the state at the cutoff, S2 stops protecting f2.
    assert plan_vacuum(path, now_ms=now_ms() + LATER_MS).files.column("path").to_pylist() == [f[1]]


def test_every_snapshot_inside_retention_and_every_tag_protects(tmp_path):
    """An old file only Iceberg ever referenced (S2 added it, S3 dropped it): kept while S2 is inside the
    retention window, deleted once S2 is older, kept again once a tag names S2."""
    path, table = uniform_with_iceberg(tmp_path, files=1)
    only_iceberg = write_uniform_file(path, 10)
    os.utime(os.path.join(path, only_iceberg), (time.time() - 9 * 86400,) * 2)
    table = append_iceberg(table, [data_file(uri(path, only_iceberg))])
    s2 = table.current_snapshot().snapshot_id
    table = replace_iceberg(table, [uri(path, only_iceberg)], [])
    inside = plan_vacuum(path, now_ms=now_ms() + DAY_MS)  # cutoff 6 days ago: S2 is inside the window
    (kept,) = inside.kept_for_iceberg.to_pylist()
    # (S2 is also the current snapshot of a metadata file written inside the window: that reason comes first.)
    assert kept["path"] == only_iceberg and f"snapshot {s2} (current snapshot of metadata/00002-" in kept["reason"]
    past = plan_vacuum(path, now_ms=now_ms() + LATER_MS)
    assert past.files.column("path").to_pylist() == [only_iceberg] and past.num_kept_for_iceberg == 0
    table.manage_snapshots().create_tag(s2, "release").commit()
    tagged = plan_vacuum(path, now_ms=now_ms() + LATER_MS)
    (kept,) = tagged.kept_for_iceberg.to_pylist()
    assert kept["path"] == only_iceberg and "tag 'release'" in kept["reason"] and tagged.num_files == 0


# --- any metadata naming this location counts, in any spelling --------------------------------


def test_iceberg_metadata_beside_a_plain_delta_table_is_honoured_and_hidden(tmp_path):
    """Not UniForm by its properties, but an Iceberg table lives at the same location: its files and its
    metadata are kept (the metadata folder is hidden from vacuum as on UniForm tables)."""
    from helpers import append, make_table, rows

    path = str(tmp_path / "plain")
    delta = make_table(path)
    append(delta, rows(3))
    (rel,) = delta.snapshot().file_paths()
    from deltalog.ingest import commit_request

    commit_request(path, {"operation": "DELETE", "remove": [rel]}, run_hooks=False)
    catalog = iceberg_catalog(str(tmp_path / "catalog"))
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "value", StringType(), required=False),
        NestedField(3, "part", StringType(), required=False),
    )
    table = catalog.create_table("delta.plain", schema, location=path)  # a plain path: another spelling
    table.add_files([os.path.join(path, rel)])
    plan = plan_vacuum(path, now_ms=now_ms() + LATER_MS)
    assert plan.kept_for_iceberg.column("path").to_pylist() == [rel]
    assert plan.files.num_rows == 0, plan.files.to_pylist()  # metadata/*.avro and *.json are not listed
    execute_vacuum(path, plan)
    assert rel in files_on_disk(path) and any(p.startswith("metadata/") for p in files_on_disk(path))


def test_paths_outside_the_table_are_not_its_own_and_do_not_stop_vacuum(tmp_path):
    path, table = uniform_with_iceberg(tmp_path, files=1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = write_uniform_file(str(elsewhere), 50)
    spellings = [f"file:{path}/{p}" for p in DeltaTable(path).snapshot().file_paths()]
    table = append_iceberg(
        table,
        [data_file("file://" + str(elsewhere / other))]
        + [data_file(s, footer=False, size=1, records=1) for s in spellings],
    )
    plan = plan_vacuum(path, now_ms=now_ms() + LATER_MS)
    assert plan.stats["iceberg_paths_outside_table"] == 1
    assert plan.to_dict()["iceberg"]["paths_outside_table"] == 1
    execute_vacuum(path, plan)
    assert (elsewhere / other).exists()


def test_iceberg_paths_in_any_spelling_protect_the_file_they_name(tmp_path):
    """Escaped, unescaped, ``file:/`` and ``file:///``, ``..`` segments: each names a file of the table."""
    path, table = uniform_with_iceberg(tmp_path, files=1)
    os.makedirs(os.path.join(path, "odd dir"))
    names = []
    for i in range(4):
        rel = f"odd dir/{write_uniform_file(path, 60 + i * 2)}"
        os.rename(os.path.join(path, os.path.basename(rel)), os.path.join(path, rel))
        os.utime(os.path.join(path, rel), (time.time() - 9 * 86400,) * 2)
        names.append(rel)
    spellings = [
        f"file://{path}/{names[0].replace(' ', '%20')}",
        f"file:{path}/{names[1]}",
        f"{path}/odd dir/../{names[2]}",
        f"file://{path}/{names[3]}",
    ]
    append_iceberg(table, [data_file(s, footer=False, size=1, records=1) for s in spellings])
    plan = plan_vacuum(path, now_ms=now_ms() + LATER_MS)
    assert sorted(plan.kept_for_iceberg.column("path").to_pylist()) == sorted(names)
    assert plan.files.num_rows == 0 and plan.stats["iceberg_paths_outside_table"] == 0


# --- re-validation at execution ----------------------------------------------------------------


def test_metadata_written_after_planning_protects_before_deleting(tmp_path):
    path, table = uniform_with_iceberg(tmp_path, files=1)
    stray = write_uniform_file(path, 40)  # untracked by Delta: an old leftover the plan deletes
    os.utime(os.path.join(path, stray), (time.time() - 9 * 86400,) * 2)
    plan = plan_vacuum(path, now_ms=now_ms() + LATER_MS)
    assert plan.files.column("path").to_pylist() == [stray]
    append_iceberg(table, [data_file(uri(path, stray))])  # an Iceberg writer now references it
    result = execute_vacuum(path, plan)
    assert result.num_deleted_files == 0 and result.num_kept_for_iceberg == 1
    assert stray in files_on_disk(path)


def test_metadata_appearing_after_planning_on_a_table_without_any_is_read(tmp_path):
    path = str(tmp_path / "t")
    os.makedirs(path)
    make_uniform_table(path)
    rel = append_uniform(path, 0)
    stray = write_uniform_file(path, 40)
    os.utime(os.path.join(path, stray), (time.time() - 9 * 86400,) * 2)
    plan = plan_vacuum(path, now_ms=now_ms() + LATER_MS)
    assert plan.iceberg is None and plan.to_dict()["iceberg"] is None and "Iceberg" not in plan.summary_line()
    table = register_iceberg_table(iceberg_catalog(str(tmp_path / "catalog")), "file://" + path)
    append_iceberg(table, [data_file(uri(path, rel)), data_file(uri(path, stray))])
    result = execute_vacuum(path, plan)
    assert result.num_deleted_files == 0 and result.num_kept_for_iceberg == 1 and stray in files_on_disk(path)


# --- refusals: unreadable or foreign metadata, nothing written ---------------------------------


def _untouched(path: str):
    before = (files_on_disk(path), log_files(path))
    return lambda: (files_on_disk(path), log_files(path)) == before


def _refused(path: str, error: type, match: str) -> None:
    unchanged = _untouched(path)
    for mode in ("full", "lite"):
        with pytest.raises(error, match=match):
            vacuum(path, mode=mode)
    with pytest.raises(error, match=match):
        plan_vacuum(path, now_ms=now_ms() + LATER_MS)
    assert unchanged()


def test_torn_metadata_json_is_refused(tmp_path):
    path, _ = uniform_with_iceberg(tmp_path)
    newest = newest_metadata(path)
    text = open(newest).read()
    with open(newest, "w") as fh:
        fh.write(text[: len(text) // 2])
    _refused(path, IcebergMetadataError, r"is not valid JSON \(torn or partly written\?\)")


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: d.update({"format-version": 4}), "format version 4"),
        (lambda d: d.pop("format-version"), "is not Iceberg table metadata"),
        (lambda d: d.update({"current-snapshot-id": 42}), "current snapshot 42, which it does not list"),
        (lambda d: d["snapshots"][0].pop("manifest-list"), "lists its manifests inline"),
        (lambda d: d.update({"location": 7}), "is not valid Iceberg table metadata"),
    ],
    ids=["format-4", "no-format-version", "unknown-current", "v1-inline-manifests", "bad-location"],
)
def test_unsupported_or_malformed_metadata_is_refused(tmp_path, edit, match):
    path, _ = uniform_with_iceberg(tmp_path)
    newest = newest_metadata(path)
    doc = json.load(open(newest))
    edit(doc)
    json.dump(doc, open(newest, "w"))
    _refused(path, IcebergMetadataError, match)


@pytest.mark.parametrize("which", ["manifest list", "manifest"])
def test_a_missing_manifest_list_or_manifest_of_a_current_snapshot_is_refused(tmp_path, which):
    path, table = uniform_with_iceberg(tmp_path)
    snapshot = table.current_snapshot()
    target = snapshot.manifest_list if which == "manifest list" else snapshot.manifests(table.io)[0].manifest_path
    os.remove(target.removeprefix("file://"))
    _refused(path, IcebergMetadataError, f"its {which} .* is missing, and the newest Iceberg metadata still lists")


def test_a_corrupt_manifest_is_refused(tmp_path):
    path, table = uniform_with_iceberg(tmp_path)
    manifest = table.current_snapshot().manifests(table.io)[0].manifest_path.removeprefix("file://")
    data = open(manifest, "rb").read()
    open(manifest, "wb").write(data[: len(data) // 2])
    _refused(path, IcebergMetadataError, "is not a readable Iceberg manifest")


def test_a_manifest_list_iceberg_expired_is_skipped_with_a_warning(tmp_path):
    """Iceberg's own snapshot expiry removed an old snapshot's manifest list; an older metadata file still lists
    it inside retention. No reader can use it: it protects nothing, and vacuum goes on."""
    path, table = uniform_with_iceberg(tmp_path, files=1)
    first = table.current_snapshot()
    table = append_iceberg(table, [data_file(uri(path, append_uniform(path, 10)))])
    table.maintenance.expire_snapshots().by_id(first.snapshot_id).commit()
    os.remove(first.manifest_list.removeprefix("file://"))
    plan = plan_vacuum(path)
    assert any("Iceberg expired it" in w for w in plan.warnings), plan.warnings


def test_foreign_metadata_is_refused(tmp_path):
    """A copy of the table carries metadata naming the original's location: its readers open the original."""
    path, _ = uniform_with_iceberg(tmp_path)
    copy = str(tmp_path / "copy")
    shutil.copytree(path, copy)
    _refused(copy, ForeignIcebergMetadataError, "is for the table at file://.*/t, not this one")


def test_the_cli_refuses_in_one_line_with_exit_1(tmp_path):
    path, _ = uniform_with_iceberg(tmp_path)
    copy = str(tmp_path / "copy")
    shutil.copytree(path, copy)
    unchanged = _untouched(copy)
    run = subprocess.run(
        [sys.executable, "-m", "deltalog", "vacuum", copy], capture_output=True, text=True, env=dict(os.environ)
    )
    assert run.returncode == 1, run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.strip() and " WARNING " not in ln and " INFO " not in ln]
    assert len(lines) == 1 and lines[0].startswith("error: the Iceberg metadata file metadata/"), run.stderr
    assert unchanged()
    # The dry run of the intact table (compacted, zero retention: its removed files are candidates) names the
    # files it keeps for Iceberg, in --json and in the text output.
    compact(path, target_size=1 << 30)
    args = [sys.executable, "-m", "deltalog", "vacuum", path, "--dry-run", "--retention-hours", "0"]
    args.append("--allow-short-retention")
    run = subprocess.run([*args, "--json"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["num_kept_for_iceberg"] == 3 and doc["plan"]["iceberg"]["snapshots"]
    assert {r["path"] for r in doc["plan"]["kept_for_iceberg"]} == newest_snapshot_files(path)
    text = subprocess.run(args, capture_output=True, text=True).stdout
    assert "3 files kept for Iceberg readers" in text and "kept for Iceberg readers (3):" in text


# --- the labelled path set ---------------------------------------------------------------------


@pytest.mark.parametrize("exact_up_to", [100, 2], ids=["exact", "fingerprints"])
def test_a_labelled_path_set_answers_the_smallest_label(exact_up_to):
    builder = PathSetBuilder(exact_up_to=exact_up_to)
    builder.add(pa.array(["a", "b"]), 3)
    builder.add(pa.array(["b", "c"]), 1)
    builder.add(pa.array(["c"]), 5)
    built = builder.build()
    assert built.exact == (exact_up_to == 100) and len(built) == 5
    labels = built.labels_of(pa.array(["a", "b", "c", "d"]))
    assert labels.tolist() == [3, 1, 1, -1]
    direct = PathSet(pa.array(["x", "y", "x"]), exact_up_to=exact_up_to, labels=np.array([4, 2, 0]))
    assert direct.labels_of(pa.array(["x", "y", "z"])).tolist() == [0, 2, -1]


# --- on S3 (moto's server): s3 and s3a spellings, metadata read through the table's storage -------------


@pytest.mark.s3
@pytest.mark.slow
def test_on_s3_the_files_iceberg_references_in_another_spelling_are_kept(
    tmp_path, s3_server, s3_bucket, s3_storage_options
):
    import io

    import pyarrow.parquet as pq
    from pyiceberg.catalog.sql import SqlCatalog

    from deltalog.create import create_table
    from helpers import DEFAULT_SCHEMA, rows
    from s3_server import ACCESS_KEY, REGION, SECRET_KEY

    uri = f"s3://{s3_bucket}/t"
    create_table(uri, DEFAULT_SCHEMA, storage_options=s3_storage_options, run_hooks=False)
    storage = DeltaTable(uri, s3_storage_options).storage
    names = ["a.parquet", "odd dir/b.parquet", "junk.parquet"]
    for i, name in enumerate(names):  # untracked by Delta: only Iceberg references the first two
        buf = io.BytesIO()
        pq.write_table(rows(1, i), buf)
        storage.fs.pipe(storage.join(name), buf.getvalue())
    catalog = SqlCatalog(
        "s3",
        uri=f"sqlite:///{tmp_path / 'catalog.db'}",
        **{"s3.endpoint": s3_server, "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY},
        **{"s3.region": REGION},
    )
    catalog.create_namespace("delta")
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "value", StringType(), required=False),
        NestedField(3, "part", StringType(), required=False),
    )
    location = f"s3a://{s3_bucket}/t"  # another spelling of the table's location
    table = catalog.create_table("delta.t", schema, location=location)
    append_iceberg(table, [data_file(f"{location}/{n}", footer=False, size=1, records=1) for n in names[:2]])
    time.sleep(1.1)  # S3 keeps modification times to the second
    plan = plan_vacuum(uri, retention_hours=0, allow_short_retention=True, storage_options=s3_storage_options)
    assert sorted(plan.kept_for_iceberg.column("path").to_pylist()) == sorted(names[:2])
    assert plan.files.column("path").to_pylist() == ["junk.parquet"]
    result = execute_vacuum(uri, plan, storage_options=s3_storage_options)
    assert result.num_deleted_files == 1 and result.num_kept_for_iceberg == 2
    storage.fs.invalidate_cache()
    left = {k[len(storage.root) + 1 :] for k in storage.fs.find(storage.root) if "/_delta_log/" not in k}
    assert set(names[:2]) <= left and "junk.parquet" not in left
    assert any(k.startswith("metadata/") and k.endswith(".metadata.json") for k in left)
