"""UniForm: deltalog writes the Iceberg metadata of every Delta version it commits, and Iceberg readers see it.

pyiceberg (a real Iceberg reader) and DuckDB's ``iceberg_scan`` read every Iceberg snapshot
deltalog wrote and must see what deltalake (delta-rs) reads at the Delta version the snapshot
names, and DuckDB's ``delta_scan`` that version too (tests/reader_checks.py); the metadata is
also checked field by field against Delta's converter's conventions. Spark with the Iceberg
runtime and Delta Spark are in ``test_uniform_spark.py``, S3 in ``test_uniform_s3.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pyarrow as pa
import pytest

from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.compaction import compact
from deltalog.errors import OperationRefusedError
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.uniform import expire_iceberg_snapshots, sync_iceberg_metadata
from deltalog.uniform.metadata_files import UniformMetadataError, read_head
from reader_checks import uniform_readers_agree
from uniform_tables import (
    append,
    create_uniform,
    deltalake_rows,
    iceberg_rows,
    iceberg_snapshot_for,
    rows,
    snapshots_by_delta_version,
)

DAY_MS = 24 * 3600 * 1000


def _metadata(path: str) -> dict:
    with open(os.path.join(path, "metadata", "version-hint.text")) as fh:
        version = fh.read()
    with open(os.path.join(path, "metadata", f"v{version}.metadata.json")) as fh:
        return json.load(fh)


def _check_every_version(path: str) -> int:
    """Every Delta version the log still holds reads the same rows through pyiceberg and DuckDB (its
    iceberg_scan of the version's snapshot, its delta_scan of the version) as through deltalake."""
    latest = DeltaTable(path).snapshot().version
    by_version = snapshots_by_delta_version(path)
    checked = 0
    for version in range(latest + 1):
        snapshot_id = iceberg_snapshot_for(by_version, version)
        if snapshot_id is None:
            continue
        assert iceberg_rows(path, snapshot_id=snapshot_id) == deltalake_rows(path, version), version
        assert not uniform_readers_agree(path, version, snapshot_id)
        checked += 1
    assert iceberg_rows(path) == deltalake_rows(path, latest)
    assert not uniform_readers_agree(path, latest)
    return checked


def test_create_writes_the_iceberg_table_as_deltas_converter_does(tmp_path):
    path = str(tmp_path / "t")
    table = create_uniform(path)
    md = table.snapshot().metadata
    doc = _metadata(path)
    assert doc["format-version"] == 2 and doc["location"] == f"file://{path}"
    assert doc["table-uuid"] == md.id  # the Delta table's id
    assert doc["properties"]["delta-version"] == "0" and doc["properties"]["delta-table-id"] == md.id
    assert doc["snapshots"] == [] and doc.get("current-snapshot-id") in (None, -1)
    # Field ids are the column mapping ids; the list element and map key/value ids are the nested ids.
    delta = {f["name"]: f for f in json.loads(md.schema_string)["fields"]}
    iceberg = {f["name"]: f for f in doc["schemas"][0]["fields"]}
    assert {n: f["id"] for n, f in iceberg.items()} == {
        n: f["metadata"]["delta.columnMapping.id"] for n, f in delta.items()
    }
    nested = delta["tags"]["metadata"]["delta.columnMapping.nested.ids"]
    assert iceberg["tags"]["type"]["element-id"] == next(iter(nested.values()))
    assert iceberg["ts"]["type"] == "timestamptz" and iceberg["small"]["type"] == "int"
    assert iceberg["amount"]["type"] == "decimal(10, 2)"
    assert [f["name"] for f in iceberg["point"]["type"]["fields"]] == ["x", "y"]
    assert doc["partition-specs"][0]["fields"] == [
        {"source-id": iceberg["part"]["id"], "field-id": 1000, "transform": "identity", "name": "part"}
    ]
    mapping = json.loads(doc["properties"]["schema.name-mapping.default"])
    assert {m["names"][0]: m["field-id"] for m in mapping}["id"] == iceberg["id"]["id"]
    assert iceberg_rows(path) == []


def test_every_commit_kind_reaches_iceberg_readers_at_every_version(tmp_path):
    """Appends, a compaction (replace), a delete, an overwrite and a Z-order: one snapshot per Delta version."""
    path = str(tmp_path / "t")
    table = create_uniform(path)
    for i, part in enumerate("aabb"):
        result = append(table, rows(i * 10, 10, part))
        hook = {h.name: h for h in result.hooks}["iceberg_metadata"]
        assert hook.ok and hook.detail["snapshots"][0]["operation"] == "append"
    done = compact(table, target_size=1 << 30)
    assert done.commits
    snap = DeltaTable(path).snapshot()
    live = snap.files.to_pylist()
    # A delete of one file and an overwrite (remove + add with data change).
    txn = Transaction(table.storage, snap, operation="DELETE")
    txn.remove([{"path": live[0]["path"], "dataChange": True, "deletionTimestamp": int(time.time() * 1000)}])
    txn.commit()
    append(table, rows(100, 5, "a"))
    compact(table, zorder_by=["id", "n"], target_size=1 << 30)
    ops = {}
    by_version = snapshots_by_delta_version(path)
    from pyiceberg.table import StaticTable

    metadata = StaticTable.from_metadata(path).metadata
    for s in metadata.snapshots:
        ops[int(s.summary["delta-version"])] = s.summary.operation.value
    latest = DeltaTable(path).snapshot().version
    assert sorted(by_version) == list(range(1, latest + 1))
    assert ops[1] == ops[2] == ops[3] == ops[4] == "append"
    assert "replace" in ops.values() and "delete" in ops.values()
    assert ops[latest] == "replace"  # the Z-order: same rows, new files
    assert _check_every_version(path) == latest
    # Each snapshot's time is its Delta commit's (time travel by timestamp finds the same version).
    times = [s.timestamp_ms for s in metadata.snapshots]
    assert times == sorted(times)
    assert metadata.properties["delta-version"] == str(latest)


def test_statistics_become_bounds_that_keep_every_row(tmp_path):
    """Iceberg readers prune with the bounds; a filter on each converted type still finds every matching row."""
    path = str(tmp_path / "t")
    table = create_uniform(path)
    append(table, rows(0, 50, "a"))
    append(table, rows(50, 50, "b"))
    from pyiceberg.table import StaticTable

    iceberg = StaticTable.from_metadata(path)
    schema = iceberg.schema()
    (data_file,) = [
        t.file for t in iceberg.scan(row_filter="part == 'a'").plan_files()
    ]  # identity partitions prune too
    ids = {f.name: f.field_id for f in schema.fields}
    assert ids["n"] in data_file.lower_bounds and ids["n"] in data_file.upper_bounds
    assert ids["id"] not in data_file.lower_bounds  # long: not converted, as in Delta's converter
    assert data_file.null_value_counts[ids["name"]] == 6  # ids 0, 9, ..., 45
    assert data_file.record_count == 50
    for expr, expected in (
        ("n == 3", [r for r in range(100) if r % 7 == 3]),
        ("small >= 4", [r for r in range(100) if r % 5 >= 4]),
        ("name == 'name-49'", [49]),
        ("day == '2024-01-05'", [r for r in range(100) if r % 28 == 4]),
        ("ts >= '2024-01-01T00:01:39.000099+00:00'", [99]),
        ("amount > 24.50", [r for r in range(100) if r / 4 > 24.5]),
        ("name is null", [r for r in range(100) if r % 9 == 0]),
    ):
        got = sorted(iceberg.scan(row_filter=expr).to_arrow().column("id").to_pylist())
        assert got == expected, expr


def test_commits_another_writer_left_unconverted_are_caught_up_one_snapshot_per_version(tmp_path):
    """As Delta Spark 4.4 leaves a path table's Iceberg metadata behind: the next sync converts each version."""
    path = str(tmp_path / "t")
    table = create_uniform(path)
    append(table, rows(0, 5, "a"))
    for i in range(3):
        append(table, rows(10 + i * 5, 5, "b"), run_hooks=False)
    assert json.loads(json.dumps(_metadata(path)["properties"]))["delta-version"] == "1"
    result = sync_iceberg_metadata(path)
    assert result.mode == "incremental" and result.previous_delta_version == 1
    assert [s.delta_version for s in result.snapshots] == [2, 3, 4]
    assert _check_every_version(path) == 4
    assert sync_iceberg_metadata(path).mode == "up_to_date"


def test_far_behind_or_cleaned_up_commits_give_one_catch_up_snapshot(tmp_path):
    path = str(tmp_path / "t")
    table = create_uniform(path)
    append(table, rows(0, 5, "a"))
    for i in range(3):
        append(table, rows(10 + i * 5, 5, "a" if i == 0 else "b"), run_hooks=False)
    compact(table, target_size=1 << 30, run_hooks=False)  # version 5: the converted file is compacted away
    from deltalog.log_maintenance import create_checkpoint

    create_checkpoint(path)  # the table stays readable from its checkpoint
    os.remove(os.path.join(path, "_delta_log", "00000000000000000002.json"))  # as log cleanup would
    result = sync_iceberg_metadata(path)
    assert result.mode == "catch_up" and [s.delta_version for s in result.snapshots] == [5]
    assert result.snapshots[0].operation == "overwrite"
    assert iceberg_rows(path) == deltalake_rows(path, 5)


def test_a_commit_whose_actions_do_not_add_up_is_redone_as_a_catch_up(tmp_path):
    """An add without data change of a new file (Delta's converter would drop it): the totals check catches it."""
    path = str(tmp_path / "t")
    table = create_uniform(path)
    append(table, rows(0, 5, "a"))
    from uniform_tables import write_file

    rel = write_file(table, rows(50, 5, "a"), "a")
    snap = DeltaTable(path).snapshot()
    phys = json.loads(snap.metadata.schema_string)["fields"][-1]["metadata"]["delta.columnMapping.physicalName"]
    size = os.path.getsize(os.path.join(path, rel))
    txn = Transaction(table.storage, snap, operation="WRITE", run_hooks=False)
    txn.add(
        [
            {
                "path": rel,
                "partitionValues": {phys: "a"},
                "size": size,
                "modificationTime": 0,
                "dataChange": False,
                "stats": json.dumps({"numRecords": 5}),
            }
        ]
    )
    txn.commit()
    result = sync_iceberg_metadata(path)
    assert result.mode in ("incremental", "catch_up")
    assert iceberg_rows(path) == deltalake_rows(path, 2)


def test_a_failed_conversion_never_fails_the_commit_and_the_next_one_catches_up(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    table = create_uniform(path)
    import deltalog.uniform.convert as convert

    real = convert.write_metadata

    def broken(*args, **kwargs):
        raise OSError("the metadata folder is not writable")

    monkeypatch.setattr(convert, "write_metadata", broken)
    result = append(table, rows(0, 5, "a"))
    hook = {h.name: h for h in result.hooks}["iceberg_metadata"]
    assert result.version == 1 and not hook.ok and "not writable" in hook.detail
    assert "post-commit hooks failed: iceberg_metadata" in result.summary_line()
    assert not [n for n in os.listdir(os.path.join(path, "metadata")) if n.endswith(".avro")]  # nothing left over
    monkeypatch.setattr(convert, "write_metadata", real)
    result = append(table, rows(5, 5, "a"))
    detail = {h.name: h for h in result.hooks}["iceberg_metadata"].detail
    assert [s["delta_version"] for s in detail["snapshots"]] == [1, 2]
    assert _check_every_version(path) == 2


def test_a_writer_that_loses_the_race_starts_again_and_leaves_no_manifest_behind(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    table = create_uniform(path)
    append(table, rows(0, 5, "a"), run_hooks=False)
    import deltalog.uniform.convert as convert

    real = convert.write_metadata
    raced = []

    def rival_first(storage, version, metadata):
        if not raced:
            raced.append(version)
            monkeypatch.setattr(convert, "write_metadata", real)
            sync_iceberg_metadata(path)  # another process converts the same version and wins
        return real(storage, version, metadata)

    monkeypatch.setattr(convert, "write_metadata", rival_first)
    result = sync_iceberg_metadata(path)
    assert raced == [2] and result.mode == "up_to_date" and result.attempts == 2
    from pyiceberg.table import StaticTable

    iceberg = StaticTable.from_metadata(path)
    referenced = set()
    for snapshot in iceberg.metadata.snapshots:
        referenced.add(os.path.basename(snapshot.manifest_list))
        referenced |= {os.path.basename(m.manifest_path) for m in snapshot.manifests(iceberg.io)}
    on_disk = {n for n in os.listdir(os.path.join(path, "metadata")) if n.endswith(".avro")}
    assert on_disk == referenced
    assert iceberg_rows(path) == deltalake_rows(path, 1)


def test_what_iceberg_metadata_cannot_express_is_refused_before_anything_is_written(tmp_path):
    from deltalog.create import create_table

    schema = pa.schema([pa.field("id", pa.int64()), pa.field("part", pa.string())])
    with pytest.raises(OperationRefusedError, match="exactly one of delta.enableIcebergCompatV1 / V2"):
        create_table(str(tmp_path / "a"), schema, configuration={"delta.universalFormat.enabledFormats": "iceberg"})
    with pytest.raises(OperationRefusedError, match="deletion vectors are enabled"):
        create_uniform(str(tmp_path / "b"), schema=schema, configuration={"delta.enableDeletionVectors": "true"})
    assert not os.path.exists(tmp_path / "a" / "_delta_log") and not os.path.exists(tmp_path / "b" / "_delta_log")
    # A table another writer left with deletion vectors enabled: compaction and commit requests refuse it.
    path = str(tmp_path / "t")
    table = create_uniform(path, schema=schema)
    append_ok = append(table, pa.table({"id": [1, 2], "part": ["a", "a"]}))
    assert append_ok.version == 1
    snap = table.snapshot()
    from deltalog.protocol.table_protocol import Protocol

    txn = Transaction(table.storage, snap, operation="SET TBLPROPERTIES", run_hooks=False)
    txn.update_protocol(
        Protocol(3, 7, ("columnMapping", "deletionVectors"), ("columnMapping", "deletionVectors", "icebergCompatV2"))
    )
    md = snap.metadata
    import dataclasses

    txn.update_metadata(dataclasses.replace(md, configuration={**md.configuration}))
    txn.commit()
    _force_property(path, "delta.enableDeletionVectors", "true")
    files_before = sorted(os.listdir(path))
    with pytest.raises(OperationRefusedError, match="deletion vectors are enabled"):
        compact(path, target_size=1 << 30)
    with pytest.raises(OperationRefusedError, match="deletion vectors are enabled"):
        append(table, pa.table({"id": [3], "part": ["a"]}))
    assert sorted(os.listdir(path)) == [n for n in files_before]
    with pytest.raises(OperationRefusedError, match="deletion vectors are enabled"):
        sync_iceberg_metadata(path)


def _force_property(path: str, key: str, value: str) -> None:
    """Another writer's commit changing one table property (written as Delta Spark would, unchecked by us)."""
    snap = DeltaTable(path).snapshot()
    md = json.loads(json.dumps(snap.to_dict(include_files=False)["metadata"]))
    md["configuration"][key] = value
    action = {
        "metaData": {
            "id": md["id"],
            "format": {"provider": "parquet", "options": {}},
            "schemaString": md["schemaString"],
            "partitionColumns": md["partitionColumns"],
            "configuration": md["configuration"],
            "createdTime": md["createdTime"],
        }
    }
    name = os.path.join(path, "_delta_log", f"{snap.version + 1:020d}.json")
    with open(name, "w") as fh:
        fh.write(json.dumps({"commitInfo": {"operation": "SET TBLPROPERTIES"}}) + "\n" + json.dumps(action) + "\n")


def test_a_type_change_iceberg_cannot_read_is_refused_naming_the_column(tmp_path):
    from deltalog.protocol.uniform import type_change_problem, uniform_iceberg_problem

    assert type_change_problem("integer", "long") is None and type_change_problem("float", "double") is None
    assert type_change_problem("decimal(5,2)", "decimal(9,2)") is None
    assert type_change_problem("integer", "double") and type_change_problem("decimal(5,2)", "decimal(6,3)")
    schema = {
        "type": "struct",
        "fields": [
            {
                "name": "x",
                "type": "double",
                "nullable": True,
                "metadata": {"delta.typeChanges": [{"fromType": "integer", "toType": "double"}]},
            }
        ],
    }
    config = {
        "delta.universalFormat.enabledFormats": "iceberg",
        "delta.enableIcebergCompatV2": "true",
        "delta.columnMapping.mode": "name",
    }
    problem = uniform_iceberg_problem({"typeWidening"}, config, json.dumps(schema), [])
    assert problem and "column x was widened from integer to double" in problem


def test_schema_changes_become_new_iceberg_schemas_with_the_same_ids(tmp_path):
    path = str(tmp_path / "t")
    table = create_uniform(path)
    append(table, rows(0, 5, "a"))
    snap = DeltaTable(path).snapshot()
    doc = json.loads(snap.metadata.schema_string)
    doc["fields"].append(
        {
            "name": "extra",
            "type": "string",
            "nullable": True,
            "metadata": {"delta.columnMapping.id": 40, "delta.columnMapping.physicalName": "col-extra"},
        }
    )
    import dataclasses

    txn = Transaction(table.storage, snap, operation="ADD COLUMNS")
    txn.update_metadata(
        dataclasses.replace(
            snap.metadata,
            schema_string=json.dumps(doc),
            configuration={**snap.metadata.configuration, "delta.columnMapping.maxColumnId": "40"},
        )
    )
    result = txn.commit()
    assert {h.name: h.ok for h in result.hooks}["iceberg_metadata"]
    meta = _metadata(path)
    assert len(meta["schemas"]) == 2 and meta["current-schema-id"] == 1
    assert {f["name"]: f["id"] for f in meta["schemas"][1]["fields"]}["extra"] == 40
    assert meta["last-column-id"] >= 40
    assert iceberg_rows(path) == deltalake_rows(path, 2)  # old files read the new column as null


def test_iceberg_metadata_of_another_location_is_refused(tmp_path):
    path = str(tmp_path / "t")
    table = create_uniform(path)
    append(table, rows(0, 5, "a"))
    copy = str(tmp_path / "copy")
    shutil.copytree(path, copy)
    append(DeltaTable(copy), rows(5, 5, "a"), run_hooks=False)
    with pytest.raises(UniformMetadataError, match="belongs to the table at"):
        sync_iceberg_metadata(copy)
    assert read_head(DeltaTable(copy).storage).version == 2  # nothing written


def test_expiry_keeps_the_current_snapshot_and_what_retained_ones_reference(tmp_path):
    path = str(tmp_path / "t")
    table = create_uniform(path, configuration={"delta.deletedFileRetentionDuration": "interval 1 days"})
    for i in range(3):
        append(table, rows(i * 5, 5, "a"))
    compact(table, target_size=1 << 30)
    from pyiceberg.table import StaticTable

    before = StaticTable.from_metadata(path).metadata
    current = before.current_snapshot_id
    metadata_dir = os.path.join(path, "metadata")
    data_files = sorted(n for n, _, fs in os.walk(path) for f in fs if f.endswith(".parquet"))
    config = DeltaTable(path).snapshot().metadata.configuration
    # Within the retention: nothing expires.
    plan = expire_iceberg_snapshots(path, config, dry_run=True)
    assert plan.expired == [] and plan.skipped_reason
    # Two days on: every snapshot but the current one has expired.
    later = int(time.time() * 1000) + 2 * DAY_MS
    plan = expire_iceberg_snapshots(path, config, dry_run=True, now_ms=later)
    assert plan.dry_run and len(plan.expired) == len(before.snapshots) - 1
    assert current not in {s.snapshot_id for s in plan.expired}
    assert all(f.startswith("metadata/") for f in plan.files)
    current_files = {os.path.basename(before.current_snapshot().manifest_list)} | {
        os.path.basename(m.manifest_path)
        for m in before.current_snapshot().manifests(StaticTable.from_metadata(path).io)
    }
    assert not current_files & {os.path.basename(f) for f in plan.files}
    assert sorted(os.listdir(metadata_dir)) == sorted(os.listdir(metadata_dir))  # the dry run deleted nothing
    # Log cleanup runs the expiry, dry run and real.
    dry = cleanup_log(path, dry_run=True, now_ms=later)
    assert dry.iceberg is not None and len(dry.iceberg["expired"]) == len(plan.expired)
    assert "Iceberg: would expire" in dry.summary_line()
    done = cleanup_log(path, now_ms=later)
    assert done.iceberg["num_deleted"] == len(plan.files) > 0
    after = StaticTable.from_metadata(path).metadata
    assert [s.snapshot_id for s in after.snapshots] == [current]
    for rel in plan.files:
        assert not os.path.exists(os.path.join(path, rel))
    assert sorted(n for n, _, fs in os.walk(path) for f in fs if f.endswith(".parquet")) == data_files
    assert iceberg_rows(path) == deltalake_rows(path, DeltaTable(path).snapshot().version)
    assert not uniform_readers_agree(path, DeltaTable(path).snapshot().version)
    # Old metadata files past the retention went too; the current one and its hint stay.
    assert os.path.exists(os.path.join(metadata_dir, f"v{read_head(DeltaTable(path).storage).version}.metadata.json"))


def test_uniform_sync_cli(tmp_path, capsys):
    from deltalog.cli import main

    path = str(tmp_path / "t")
    table = create_uniform(path)
    append(table, rows(0, 5, "a"), run_hooks=False)
    assert main(["uniform-sync", path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "incremental" and out["delta_version"] == 1 and out["iceberg_version"] == 2
    assert main(["uniform-sync", path]) == 0
    assert "already at Delta version 1" in capsys.readouterr().out
    _force_property(path, "delta.enableDeletionVectors", "true")
    snap = DeltaTable(path).snapshot()
    assert "deletionVectors" not in snap.protocol.effective_writer_features()  # the property alone is not enough
    assert main(["uniform-sync", path]) == 0


def test_fleet_maintenance_keeps_the_iceberg_metadata_current(tmp_path):
    """The fleet compacts with its post-commit hooks off; it writes the Iceberg metadata itself afterwards."""
    from deltalog.fleet.maintain import maintain_table

    path = str(tmp_path / "t")
    table = create_uniform(path)
    for i in range(6):
        append(table, rows(i * 5, 5, "a"))
    out = maintain_table(path)
    assert any(step.startswith("compaction") for step in out.ran), out
    assert any(step.startswith("iceberg_metadata") for step in out.ran), out
    latest = DeltaTable(path).snapshot().version
    assert _metadata(path)["properties"]["delta-version"] == str(latest)
    assert _check_every_version(path) >= 7


def test_iceberg_compat_v1_tables_convert_too(tmp_path):
    """icebergCompatV1 (no list or map columns) writes the same Iceberg format version 2 metadata."""
    path = str(tmp_path / "t")
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string()), pa.field("part", pa.string())])
    table = create_uniform(
        path,
        schema=schema,
        configuration={"delta.enableIcebergCompatV1": "true", "delta.enableIcebergCompatV2": "false"},
    )
    for i in range(3):
        append(table, rows(i * 4, 4, "a").select(["id", "name", "part"]))
    compact(table, target_size=1 << 30)
    assert _metadata(path)["format-version"] == 2
    assert _check_every_version(path) == DeltaTable(path).snapshot().version


def test_our_metadata_and_vacuum_past_retention_keep_what_iceberg_readers_need(tmp_path):
    """deltalog's Iceberg metadata writer and its vacuum together (issue 36's 'done means'): after compaction,
    vacuum past the table's retention keeps every file the newest Iceberg snapshot references, even while that
    snapshot lags behind the Delta log; Iceberg and Delta readers see the same rows."""
    from pyiceberg.table import StaticTable

    from deltalog.vacuuming import execute_vacuum, plan_vacuum

    path = str(tmp_path / "t")
    table = create_uniform(path)
    for i in range(3):
        append(table, rows(i * 5, 5, "a"))
    compact(table, target_size=1 << 30)
    later = int(time.time() * 1000) + 8 * DAY_MS  # the table's 7-day retention has passed for everything

    def newest_files() -> set[str]:
        tasks = StaticTable.from_metadata(path).scan().plan_files()
        return {t.file.file_path.removeprefix(f"file://{path}/") for t in tasks}

    def on_disk() -> set[str]:
        return {
            os.path.relpath(os.path.join(d, f), path)
            for d, _, fs in os.walk(path)
            for f in fs
            if f.endswith(".parquet")
        }

    plan = plan_vacuum(path, now_ms=later)
    assert plan.files.num_rows == 3  # the compacted small files: no Iceberg snapshot a reader may use needs them
    execute_vacuum(path, plan)
    assert newest_files() <= on_disk()
    assert iceberg_rows(path) == deltalake_rows(path, DeltaTable(path).snapshot().version)
    assert not uniform_readers_agree(path, DeltaTable(path).snapshot().version)
    # Iceberg metadata behind (a compaction whose hooks were off): vacuum keeps what its current snapshot names.
    for i in range(2):
        append(table, rows(100 + i * 5, 5, "a"))
    behind = _metadata(path)["properties"]["delta-version"]
    compact(table, target_size=1 << 30, run_hooks=False)
    referenced = newest_files()
    plan = plan_vacuum(path, now_ms=later)
    kept = set(plan.kept_for_iceberg.column("path").to_pylist())
    assert kept and kept <= referenced and not set(plan.files.column("path").to_pylist()) & referenced
    execute_vacuum(path, plan)
    assert referenced <= on_disk()
    assert iceberg_rows(path) == deltalake_rows(path, int(behind))
    assert not uniform_readers_agree(path, int(behind))
    # Caught up and expired (log cleanup past the retention), the old files are no longer anyone's.
    sync_iceberg_metadata(path)
    cleanup_log(path, now_ms=later)
    plan = plan_vacuum(path, now_ms=later)
    assert plan.kept_for_iceberg.num_rows == 0 and set(plan.files.column("path").to_pylist()) == kept
    execute_vacuum(path, plan)
    assert newest_files() <= on_disk()
    assert iceberg_rows(path) == deltalake_rows(path, DeltaTable(path).snapshot().version)
    assert not uniform_readers_agree(path, DeltaTable(path).snapshot().version)


def test_vacuum_is_not_due_while_iceberg_readers_keep_every_file_it_could_delete(tmp_path):
    """Issue 41: ``maintenance_due`` judges vacuum by vacuum's own rules, Iceberg's among them. Iceberg metadata
    behind the log (a compaction with its hooks off) still names the replaced small files: vacuum would keep
    every one, so it is not due, and the reason says why; caught up and expired, they are vacuum's again."""
    from deltalog.maintenance.due import maintenance_due
    from deltalog.vacuuming import plan_vacuum

    path = str(tmp_path / "t")
    table = create_uniform(path)
    for i in range(3):
        append(table, rows(i * 5, 5, "a"))
    compact(table, target_size=1 << 30, run_hooks=False)
    later = int(time.time() * 1000) + 8 * DAY_MS  # the table's 7-day retention has passed for everything
    plan = plan_vacuum(path, now_ms=later)
    assert plan.num_files == 0 and plan.kept_for_iceberg.num_rows == 3
    due = maintenance_due(path, now_ms=later)
    assert not due.vacuum and due.reclaimable_files == 0
    assert (due.files_kept_for_iceberg, due.to_dict()["work"]["files_kept_for_iceberg"]) == (3, 3)
    (why,) = [r for r in due.reasons if r.startswith("vacuum:")]
    assert "3 files" in why and "kept for Iceberg readers" in why and "current snapshot" in why
    assert "would delete none of them" in why
    sync_iceberg_metadata(path)
    cleanup_log(path, now_ms=later)  # expires the Iceberg snapshots past the retention
    due = maintenance_due(path, now_ms=later)
    assert due.vacuum and due.reclaimable_files == 3 == plan_vacuum(path, now_ms=later).num_files
    assert due.files_kept_for_iceberg == 0
