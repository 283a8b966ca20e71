"""The feature x operation table: enforced by the protocol checks, printed by the CLI, rendered into the docs.

Plus hand-built tables (the actions Delta Spark writes for row tracking, liquid
clustering, identity columns, defaults and collations) on which every snapshot-only
operation runs and keeps what the protocol says it must keep.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.cli import main
from deltalog.compaction import compact
from deltalog.errors import OperationRefusedError, UnsupportedProtocolError
from deltalog.ingest import commit_request
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.log_maintenance.manifest import generate_manifest
from deltalog.maintenance.due import maintenance_due
from deltalog.protocol.features import CONDITIONAL, FEATURES, READ_ONLY, REFUSED, SUPPORTED, Operation, markdown
from deltalog.protocol.schema import arrow_schema_to_schema_string
from deltalog.protocol.table_protocol import Protocol, check_readable, check_writable
from deltalog.uniform import IcebergMetadataError
from deltalog.vacuuming import vacuum
from helpers import rows, write_data_file

ROOT = Path(__file__).resolve().parent.parent


def _protocol_with(name: str) -> Protocol:
    """The smallest table-features protocol that lists ``name`` as the table feature says it is."""
    if FEATURES[name].kind == "reader-writer":
        return Protocol(3, 7, (name,), (name,))
    return Protocol(1, 7, None, (name,))


# --- the table itself ---------------------------------------------------------------


def test_docs_page_is_current():
    doc = (ROOT / "docs" / "features.md").read_text(encoding="utf-8")
    assert doc == markdown(), "docs/features.md is stale: run .venv/bin/python scripts/features_doc.py"


def test_every_cell_is_well_formed():
    for f in FEATURES.values():
        assert f.kind in ("reader-writer", "writer")
        assert set(f.cells) == set(Operation)
        for op, cell in f.cells.items():
            assert cell.status in (SUPPORTED, CONDITIONAL, REFUSED), (f.name, op)
            # A refusal or a condition always says why, in one line.
            if cell.status != SUPPORTED:
                assert cell.reason and "\n" not in cell.reason, (f.name, op)


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_check_writable_follows_each_cell(name):
    """Cell by cell: the protocol check refuses exactly the refused cells, with the cell's reason."""
    protocol = _protocol_with(name)
    for op in Operation:
        cell = FEATURES[name].cell(op)
        if op in READ_ONLY:
            if cell.allowed:
                check_readable(protocol)
            else:
                with pytest.raises(UnsupportedProtocolError):
                    check_readable(protocol)
            continue
        if cell.allowed:
            check_writable(protocol, op.value, op)
        else:
            with pytest.raises(UnsupportedProtocolError, match=name) as info:
                check_writable(protocol, op.value, op)
            assert name in info.value.features
            if name not in ("catalogManaged", "catalogOwned-preview", "coordinatedCommits-preview"):
                assert cell.reason in str(info.value)


def test_without_an_operation_a_commit_is_held_to_the_commit_request_column():
    # Every commit of arbitrary actions may add files, as a commit request does.
    for name, f in FEATURES.items():
        protocol = _protocol_with(name)
        if f.cell(Operation.COMMIT_REQUEST).allowed:
            check_writable(protocol, "write")
        else:
            with pytest.raises(UnsupportedProtocolError, match=name):
                check_writable(protocol, "write")


@pytest.mark.parametrize("op", [op for op in Operation if op not in READ_ONLY])
def test_unknown_features_are_refused_by_every_operation(op):
    with pytest.raises(UnsupportedProtocolError, match="does not implement: someFutureFeature"):
        check_writable(Protocol(1, 7, None, ("someFutureFeature",)), op.value, op)
    with pytest.raises(UnsupportedProtocolError, match="readerFuture"):
        check_readable(Protocol(3, 7, ("readerFuture",), ("readerFuture",)))


def test_catalog_managed_refusal_names_the_coordinator():
    protocol = Protocol(3, 7, ("catalogManaged",), ("catalogManaged", "inCommitTimestamp"))
    check_readable(protocol)
    with pytest.raises(UnsupportedProtocolError, match=r"Unity Catalog \(table id abc\)"):
        check_writable(protocol, "vacuum", Operation.VACUUM, {"io.unitycatalog.tableId": "abc"})
    with pytest.raises(UnsupportedProtocolError, match="commit coordinator 'dynamodb'"):
        check_writable(
            Protocol(1, 7, None, ("coordinatedCommits-preview",)),
            "compact",
            Operation.COMPACTION_LOCAL,
            {"delta.coordinatedCommits.commitCoordinator-preview": "dynamodb"},
        )


def test_cli_prints_the_table(capsys):
    assert main(["features", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["operations"] == [op.value for op in Operation]
    by_name = {f["feature"]: f for f in data["features"]}
    assert set(by_name) == set(FEATURES)
    assert by_name["rowTracking"]["operations"]["checkpoint"]["status"] == SUPPORTED
    assert by_name["catalogManaged"]["operations"]["vacuum"]["status"] == REFUSED
    assert main(["features"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split() == " ".join(op.value for op in Operation).split()
    assert any(line.startswith("rowTracking ") for line in text.splitlines())


def test_docs_script_writes_the_page(tmp_path):
    # The script is how the page is regenerated; it must run from a clean checkout.
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "features_doc.py")], capture_output=True, text=True, check=True
    )
    assert "features.md" in proc.stdout


# --- a Delta Spark-shaped table with row tracking, clustering, identity, defaults, collations --


def _commit(path: str, version: int, actions: list[dict]) -> None:
    log = os.path.join(path, "_delta_log")
    os.makedirs(log, exist_ok=True)
    with open(os.path.join(log, f"{version:020d}.json"), "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")


def _info(op: str) -> dict:
    return {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": op}}


WRITER_FEATURES = (
    "rowTracking",
    "domainMetadata",
    "clustering",
    "identityColumns",
    "allowColumnDefaults",
    "collations",
    "appendOnly",
    "invariants",
)


def spark_like_table(path: str) -> None:
    """Versions 0-3 as Delta Spark writes them for a clustered, row-tracked table with identity and defaults."""
    schema = json.loads(arrow_schema_to_schema_string(pa.schema([("id", pa.int64()), ("value", pa.string())])))
    schema["fields"][0]["metadata"] = {
        "delta.identity.start": 0,
        "delta.identity.step": 1,
        "delta.identity.highWaterMark": 5,
        "delta.identity.allowExplicitInsert": False,
    }
    schema["fields"][1]["metadata"] = {
        "CURRENT_DEFAULT": "'x'",
        "EXISTS_DEFAULT": "'x'",
        "__COLLATIONS": {"value": "spark.UTF8_LCASE"},
    }
    config = {
        "delta.enableRowTracking": "true",
        "delta.rowTracking.materializedRowIdColumnName": "_row-id-col-1",
        "delta.rowTracking.materializedRowCommitVersionColumnName": "_row-commit-version-col-1",
        "delta.feature.allowColumnDefaults": "supported",
    }
    _commit(
        path,
        0,
        [
            _info("CREATE TABLE"),
            {"protocol": Protocol(1, 7, None, WRITER_FEATURES).to_dict()},
            {
                "metaData": {
                    "id": str(uuid.uuid4()),
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": json.dumps(schema),
                    "partitionColumns": [],
                    "configuration": config,
                    "createdTime": 0,
                }
            },
            {
                "domainMetadata": {
                    "domain": "delta.clustering",
                    "configuration": json.dumps({"clusteringColumns": [["id"]]}),
                    "removed": False,
                }
            },
        ],
    )
    for v, start in ((1, 0), (2, 3)):
        add = write_data_file(path, rows(3, start=start).drop_columns(["part"]))
        add.update(baseRowId=start, defaultRowCommitVersion=v, clusteringProvider="liquid")
        hwm = {"rowIdHighWaterMark": start + 2}
        _commit(
            path,
            v,
            [
                _info("WRITE"),
                {"add": add},
                {"domainMetadata": {"domain": "delta.rowTracking", "configuration": json.dumps(hwm), "removed": False}},
            ],
        )


@pytest.fixture()
def spark_like(tmp_path) -> str:
    path = str(tmp_path / "t")
    spark_like_table(path)
    return path


def test_checkpoint_keeps_row_tracking_clustering_and_domains(spark_like):
    before = DeltaTable(spark_like).snapshot()
    result = create_checkpoint(spark_like)
    assert result.num_domain_metadata == 2
    cp = pq.read_table(os.path.join(spark_like, "_delta_log", result.files[0]))
    adds = [a for a in cp.column("add").to_pylist() if a]
    assert sorted((a["baseRowId"], a["defaultRowCommitVersion"], a["clusteringProvider"]) for a in adds) == [
        (0, 1, "liquid"),
        (3, 2, "liquid"),
    ]
    domains = {d["domain"]: json.loads(d["configuration"]) for d in cp.column("domainMetadata").to_pylist() if d}
    assert domains == {
        "delta.clustering": {"clusteringColumns": [["id"]]},
        "delta.rowTracking": {"rowIdHighWaterMark": 5},
    }
    after = DeltaTable(spark_like).snapshot()  # now read from the checkpoint
    cols = ["path", "baseRowId", "defaultRowCommitVersion", "clusteringProvider"]
    assert after.files.select(cols).sort_by("path").equals(before.files.select(cols).sort_by("path"))
    assert after.domain_metadata == before.domain_metadata
    assert after.metadata.schema_string == before.metadata.schema_string


def test_snapshot_only_operations_run(spark_like):
    assert vacuum(spark_like, dry_run=True).num_deleted_files == 0
    assert not cleanup_log(spark_like, dry_run=True).num_files
    manifest = generate_manifest(spark_like, dry_run=True)
    assert manifest.to_dict()
    assert main(["health", spark_like, "--json"]) == 0


def test_commit_request_on_a_spark_shaped_table_follows_every_feature(spark_like):
    # Both live files were written by a clustering implementation, small and without ZCube tags: the local
    # engine clusters and re-clusters them together (Delta Spark's OPTIMIZE would too).
    assert [len(b.files) for b in compact(spark_like, target_size=1 << 30, plan_only=True).plan.bins] == [2]
    add = write_data_file(spark_like, rows(2, start=10).drop_columns(["part"]))
    r = commit_request(spark_like, {"operation": "WRITE", "add": [{"path": add["path"]}]})
    snap = DeltaTable(spark_like).snapshot()
    new = [f for f in snap.files.to_pylist() if f["path"] == add["path"]][0]
    # Row IDs above the mark (5), this version as row commit version, unclustered, identity mark advanced.
    assert (new["baseRowId"], new["defaultRowCommitVersion"], new["clusteringProvider"]) == (6, r.version, None)
    assert json.loads(snap.domain_metadata["delta.rowTracking"]["configuration"]) == {"rowIdHighWaterMark": 7}
    field = json.loads(snap.metadata.schema_string)["fields"][0]
    assert field["metadata"]["delta.identity.highWaterMark"] == 11
    assert json.loads(snap.domain_metadata["delta.clustering"]["configuration"]) == {"clusteringColumns": [["id"]]}
    # A file without the defaulted column is refused: its rows would read NULL instead of 'x'.
    add = write_data_file(spark_like, rows(2, start=20).drop_columns(["part", "value"]))
    with pytest.raises(OperationRefusedError, match="column 'value' has the default 'x'"):
        commit_request(spark_like, {"operation": "WRITE", "add": [{"path": add["path"]}]})


def test_uniform_vacuum_keeps_the_iceberg_metadata(tmp_path):
    path = str(tmp_path / "t")
    schema = arrow_schema_to_schema_string(pa.schema([("id", pa.int64()), ("value", pa.string())]))
    proto = Protocol(2, 7, None, ("columnMapping", "icebergCompatV2", "invariants", "appendOnly"))
    config = {"delta.enableIcebergCompatV2": "true", "delta.universalFormat.enabledFormats": "iceberg"}
    meta = {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}}, "schemaString": schema}
    meta.update(partitionColumns=[], configuration=config, createdTime=0)
    add = write_data_file(path, rows(2).drop_columns(["part"]))
    _commit(path, 0, [_info("CREATE TABLE"), {"protocol": proto.to_dict()}, {"metaData": meta}, {"add": add}])
    old = time.time() - 30 * 86400
    kept = []
    for rel in ("metadata/v1.metadata.json", "metadata/snap-1.avro", "metadata/sub/x.parquet"):
        full = os.path.join(path, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        open(full, "w").write("{}")
        os.utime(full, (old, old))
        kept.append(full)
    orphan = os.path.join(path, "orphan.parquet")
    open(orphan, "w").write("x")
    os.utime(orphan, (old, old))
    # A metadata file that is no Iceberg metadata: what its readers need cannot be known, so nothing goes.
    with pytest.raises(IcebergMetadataError, match="is not Iceberg table metadata"):
        vacuum(path)
    assert os.path.exists(orphan)
    os.rename(kept[0], kept[0] + ".bak")  # no metadata JSON left: only the hidden-path rule applies
    kept[0] += ".bak"
    result = vacuum(path)
    assert result.num_deleted_files == 1 and not os.path.exists(orphan)
    assert all(os.path.exists(k) for k in kept)
    create_checkpoint(path)


@pytest.mark.parametrize("suffix", ["", "-preview"])
def test_shredded_variant_tables_are_read_and_kept_but_not_rewritten(tmp_path, suffix):
    """variantShredding(-preview): snapshot-only work runs; compaction refuses with the reason, nothing written."""
    path = str(tmp_path / "t")
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "v", "type": "variant", "nullable": True, "metadata": {}},
        ],
    }
    features = (f"variantType{suffix}", f"variantShredding{suffix}")
    meta = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema),
    }
    meta.update(partitionColumns=[], configuration={"delta.enableVariantShredding": "true"}, createdTime=0)
    shredded = pa.struct(
        [("metadata", pa.binary()), ("value", pa.binary()), ("typed_value", pa.struct([("a", pa.int64())]))]
    )
    actions = [_info("CREATE TABLE"), {"protocol": Protocol(3, 7, features, features).to_dict()}, {"metaData": meta}]
    _commit(path, 0, actions)
    for v in (1, 2):
        data = pa.table(
            {
                "id": pa.array([v], pa.int64()),
                "v": pa.array([{"metadata": b"\x01\x00\x00", "value": None, "typed_value": {"a": v}}], shredded),
            }
        )
        _commit(path, v, [_info("WRITE"), {"add": write_data_file(path, data)}])
    snap = DeltaTable(path).snapshot()
    assert snap.num_files == 2 and set(snap.protocol.reader_features or ()) == set(features)
    create_checkpoint(path)
    assert DeltaTable(path).snapshot().files.num_rows == 2
    assert vacuum(path, dry_run=True).num_deleted_files == 0
    assert generate_manifest(path, dry_run=True).to_dict()
    # Maintenance planning: compaction is refused with its reason, the other operations are still judged.
    due = maintenance_due(DeltaTable(path))
    assert due.refused is None and not due.compaction
    assert any(
        r.startswith(f"compaction: refused: refusing to compact: the table uses variantShredding{suffix}")
        for r in due.reasons
    )
    before = sorted(os.listdir(path))
    with pytest.raises(UnsupportedProtocolError, match=f"variantShredding{suffix}: files may hold shredded variant"):
        compact(path, target_size=1 << 30)
    assert sorted(os.listdir(path)) == before


def test_preview_names_have_their_ratified_features_support():
    from deltalog.protocol.features import FEATURES, PREVIEW_NAMES

    for preview, ratified in PREVIEW_NAMES.items():
        assert FEATURES[preview].cells == FEATURES[ratified].cells and FEATURES[preview].kind == FEATURES[ratified].kind
        names = list(FEATURES)
        assert names.index(preview) == names.index(ratified) + 1  # listed right after it (docs/features.md)
