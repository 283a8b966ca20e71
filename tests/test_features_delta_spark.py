"""The feature x operation table against tables Delta Spark really wrote: cell by cell, what happens is what it says.

One small table per feature this issue implements (row tracking, liquid clustering,
identity, defaults, CHECK constraints, generated columns, Iceberg compatibility V2),
written by Delta Spark 4.4 in one session; every deltalog operation runs on each, and:

- a cell that says *refused* raises :class:`UnsupportedProtocolError` naming the feature;
- a cell that says *supported* succeeds;
- a *conditional* cell succeeds or refuses with a deltalog error (its condition);

and afterwards Delta Spark reads every row it wrote plus the rows deltalog committed.
Row tracking is judged by Delta Spark too: ``_metadata.row_id`` and
``_metadata.row_commit_version`` of every row are unchanged by deltalog's commits and
compaction. One Spark session serves the module.
Uses the oracle's session-scoped ``delta_spark`` fixture when the suite has one (its
corpus will replace these tables), else a session of its own for this module.
"""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

from deltalog import DeltaTable
from deltalog.compaction import compact
from deltalog.errors import DeltaLogError, UnsupportedProtocolError
from deltalog.ingest import commit_request
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.log_maintenance.manifest import generate_manifest
from deltalog.protocol.features import FEATURES, REFUSED, SUPPORTED, Operation
from deltalog.vacuuming import vacuum
from helpers import write_data_file
from spark_session_jobs import compaction_jobs_in_session

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.slow, pytest.mark.spark]

#: name -> (CREATE TABLE tail, extra statement run after creation or None, INSERT column list)
TABLES = {
    "rowTracking": ("(id BIGINT, s STRING) USING delta TBLPROPERTIES ('delta.enableRowTracking' = 'true')", None),
    "clustering": ("(id BIGINT, s STRING) USING delta CLUSTER BY (id)", None),
    "identityColumns": ("(id BIGINT, s STRING, k BIGINT GENERATED ALWAYS AS IDENTITY) USING delta", None),
    "allowColumnDefaults": (
        "(id BIGINT, s STRING DEFAULT 'x') USING delta TBLPROPERTIES ('delta.feature.allowColumnDefaults' = "
        "'supported')",
        None,
    ),
    "checkConstraints": ("(id BIGINT, s STRING) USING delta", "ALTER TABLE {t} ADD CONSTRAINT nonneg CHECK (id >= 0)"),
    "generatedColumns": ("(id BIGINT, s STRING, g BIGINT GENERATED ALWAYS AS (id * 2)) USING delta", None),
    "icebergCompatV2": (
        "(id BIGINT, s STRING) USING delta TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
        "'delta.enableIcebergCompatV2' = 'true')",
        None,
    ),
}

#: The Spark engine's options as a user would pass them (the job runs in the session: see the ``spark`` fixture).
SPARK_JOB = {"master": "local[1]", "timeout": 600}

OPERATIONS = (
    Operation.SNAPSHOT,
    Operation.CHECKPOINT,
    Operation.LOG_CLEANUP,
    Operation.VACUUM,
    Operation.MANIFEST,
    Operation.COMMIT_REQUEST,
    Operation.COMPACTION_LOCAL,
)


@pytest.fixture(scope="module")
def spark(delta_spark):
    """The test run's one Delta Spark session (tests/delta_spark.py); ``compact(engine="spark")`` runs its job
    there instead of in a spark-submit JVM of its own (tests/spark_session_jobs.py: what is checked here is
    what the job writes; its launch has its own tests)."""
    with compaction_jobs_in_session(delta_spark):
        yield delta_spark


def _copy_a_live_file(path: str, src: str | None = None) -> str:
    """A new data file with the rows of a live one (Delta Spark's own layout, so every rule can be met)."""
    src = src or DeltaTable(path).snapshot().files.column("path").to_pylist()[0]
    dst = f"copy-{uuid.uuid4().hex}.parquet"
    shutil.copyfile(os.path.join(path, src), os.path.join(path, dst))
    return dst


def _run(op: Operation, path: str) -> None:
    if op is Operation.SNAPSHOT:
        DeltaTable(path).snapshot()
    elif op is Operation.CHECKPOINT:
        create_checkpoint(path)
    elif op is Operation.LOG_CLEANUP:
        cleanup_log(path, dry_run=True)
    elif op is Operation.VACUUM:
        vacuum(path, dry_run=True)
    elif op is Operation.MANIFEST:
        generate_manifest(path, dry_run=True)
    elif op is Operation.COMMIT_REQUEST:
        commit_request(path, {"operation": "WRITE", "add": [{"path": _copy_a_live_file(path)}]}, run_hooks=False)
    elif op is Operation.COMPACTION_LOCAL:
        compact(path, target_size=1 << 30)


def test_what_happens_is_what_the_feature_table_says(spark, tmp_path):
    outcomes: list[tuple[str, str, str, str]] = []
    for feature, (ddl, extra) in TABLES.items():
        path = str(tmp_path / feature)
        t = f"delta.`{path}`"
        spark.sql(f"CREATE TABLE {t} {ddl}")
        if extra:
            spark.sql(extra.format(t=t))
        for start in (0, 5, 10):
            spark.sql(f"INSERT INTO {t} (id, s) SELECT id, concat('s', id) FROM range({start}, {start + 5}, 1, 1)")
        protocol = DeltaTable(path).snapshot().protocol
        assert feature in protocol.effective_writer_features(), (feature, protocol)
        rows_before = spark.read.format("delta").load(path).count()
        committed = 0
        for op in OPERATIONS:
            cells = {
                f: FEATURES[f].cell(op)
                for f in protocol.effective_writer_features() | protocol.effective_reader_features()
            }
            refused = sorted(f for f, c in cells.items() if c.status == REFUSED)
            exact = all(c.status == SUPPORTED for c in cells.values())
            try:
                _run(op, path)
            except UnsupportedProtocolError as exc:
                outcomes.append((feature, op.value, "refused", str(exc)))
                assert refused, f"{feature} / {op.value}: refused but the table says it runs: {exc}"
                assert any(f in str(exc) for f in refused)
                continue
            except DeltaLogError as exc:
                outcomes.append((feature, op.value, "refused (condition)", str(exc)))
                assert not exact and not refused, f"{feature} / {op.value}: {exc}"
                continue
            outcomes.append((feature, op.value, "ok", ""))
            assert not refused, f"{feature} / {op.value}: ran but the table says refused ({refused})"
            if op is Operation.COMMIT_REQUEST:
                committed = 5
        # Delta Spark reads every row it wrote plus the rows deltalog committed, and can still write.
        assert spark.read.format("delta").load(path).count() == rows_before + committed, feature
        spark.sql(f"INSERT INTO {t} (id, s) VALUES (100, 'z')")
        assert DeltaTable(path).snapshot().version >= 4
    report = "\n".join(" | ".join(o) for o in outcomes)
    print(f"\nfeature | operation | outcome | error\n{report}")


# --- row tracking, judged by Delta Spark's _metadata.row_id / row_commit_version ------------------


def _row_tracking(spark, path: str) -> dict[int, tuple[int, int]]:
    df = spark.read.format("delta").load(path).select("id", "_metadata.row_id", "_metadata.row_commit_version")
    return {r[0]: (r[1], r[2]) for r in df.collect()}


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_row_ids_survive_deltalog_commits_and_compaction(spark, tmp_path, engine):
    """Both engines materialise every row's stable ID and commit version, as Delta Spark's OPTIMIZE does."""
    import pyarrow as pa

    path = str(tmp_path / "t")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, s STRING) USING delta "
        "TBLPROPERTIES ('delta.enableRowTracking' = 'true', 'delta.enableDeletionVectors' = 'true')"
    )
    for start in (0, 10, 20):
        spark.sql(f"INSERT INTO delta.`{path}` SELECT id, concat('s', id) FROM range({start}, {start + 10}, 1, 1)")
    spark.sql(f"UPDATE delta.`{path}` SET s = 'u' WHERE id % 7 = 0")  # materialised IDs, new commit versions
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 5 = 1")  # deletion vectors
    before = _row_tracking(spark, path)

    data = pa.table({"id": pa.array(range(100, 105), pa.int64()), "s": [f"n{i}" for i in range(5)]})
    landed = commit_request(path, {"operation": "WRITE", "add": [{"path": write_data_file(path, data)["path"]}]})
    result = compact(path, target_size=1 << 30, engine=engine, spark_options=SPARK_JOB)
    assert result.ok and result.to_dict()["plan"]["num_bins"] >= 1, result.to_dict()
    assert DeltaTable(path).snapshot().files.num_rows == 1

    after = _row_tracking(spark, path)
    assert {i: after[i] for i in before} == before
    new = {i: after[i] for i in range(100, 105)}
    assert {v for _, v in new.values()} == {landed.version}
    ids = [rid for rid, _ in after.values()]
    assert len(set(ids)) == len(ids)
    # Delta Spark can still write to the table and reads its row IDs consistently.
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (200, 'z')")
    final = _row_tracking(spark, path)
    assert {i: final[i] for i in after} == after and final[200][0] not in ids


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_row_ids_survive_compaction_of_a_partitioned_id_mapped_table(spark, tmp_path, engine):
    """Partitions and column mapping id mode: inputs resolved by field id, the materialised columns by name."""
    path = str(tmp_path / "t")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, s STRING, p STRING) USING delta PARTITIONED BY (p) "
        "TBLPROPERTIES ('delta.enableRowTracking' = 'true', 'delta.enableDeletionVectors' = 'true', "
        "'delta.columnMapping.mode' = 'id')"
    )
    for start in (0, 10, 20):
        spark.sql(
            f"INSERT INTO delta.`{path}` SELECT id, concat('s', id), IF(id % 3 = 0, 'x', 'y') "
            f"FROM range({start}, {start + 10}, 1, 1)"
        )
    spark.sql(f"UPDATE delta.`{path}` SET s = 'u' WHERE id % 4 = 0")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 5 = 1")
    before = _row_tracking(spark, path)
    rows = sorted(spark.read.format("delta").load(path).collect())
    result = compact(path, target_size=1 << 30, engine=engine, spark_options=SPARK_JOB)
    assert result.ok and result.to_dict()["num_files_added"] == 2, result.to_dict()
    assert _row_tracking(spark, path) == before
    assert sorted(spark.read.format("delta").load(path).collect()) == rows


@pytest.mark.parametrize("mode", ["zorder", "purge"])
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_row_ids_survive_zorder_and_deletion_vector_purge(spark, tmp_path, engine, mode):
    """Layout rewrites are compactions too: Z-order and DV purge keep every row's ID and commit version."""
    path = str(tmp_path / "t")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, k BIGINT, s STRING) USING delta "
        "TBLPROPERTIES ('delta.enableRowTracking' = 'true', 'delta.enableDeletionVectors' = 'true')"
    )
    for start in (0, 10, 20):
        spark.sql(
            f"INSERT INTO delta.`{path}` SELECT id, (id * 7) % 11, concat('s', id) FROM range({start}, {start + 10}, 1, 1)"
        )
    spark.sql(f"UPDATE delta.`{path}` SET s = 'u' WHERE id % 7 = 0")  # materialised IDs, new commit versions
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 5 = 1")  # deletion vectors
    assert any(dv is not None for dv in DeltaTable(path).snapshot().files.column("deletionVector").to_pylist())
    before = _row_tracking(spark, path)
    rows = sorted(spark.read.format("delta").load(path).collect())

    layout = {"zorder_by": ["k", "id"]} if mode == "zorder" else {"purge_deletion_vectors": True}
    result = compact(path, target_size=1 << 30, engine=engine, spark_options=SPARK_JOB, **layout)
    assert result.ok and result.to_dict()["num_files_removed"] >= 1, result.to_dict()
    assert all(dv is None for dv in DeltaTable(path).snapshot().files.column("deletionVector").to_pylist())

    assert _row_tracking(spark, path) == before
    assert sorted(spark.read.format("delta").load(path).collect()) == rows
    # Delta Spark can still write to the table and gives the new row a fresh ID.
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (200, 0, 'z')")
    final = _row_tracking(spark, path)
    assert {i: final[i] for i in before} == before
    assert final[200][0] not in {rid for rid, _ in before.values()}


# --- Iceberg compatibility on the Spark engine ------------------------------------------------------


def test_spark_engine_writes_iceberg_compatible_files(spark, tmp_path):
    """icebergCompatV1/V2 tables written by Delta Spark, compacted by the Spark engine: every new file passes the
    commit-request check of the writer rules (partition values materialised last, field ids = column mapping ids,
    numRecords), and Delta Spark reads the same rows; V2 with an array column is refused (no nested ids)."""
    import json

    import pyarrow.parquet as pq

    from deltalog.errors import OperationRefusedError
    from deltalog.write_checks.iceberg_compat import check_iceberg_file

    for version in (1, 2):
        path = str(tmp_path / f"v{version}")
        t = f"delta.`{path}`"
        spark.sql(
            f"CREATE TABLE {t} (id BIGINT, st STRUCT<a: INT, b: STRING>, d DATE, p STRING) USING delta "
            f"PARTITIONED BY (p) TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
            f"'delta.enableIcebergCompatV{version}' = 'true')"
        )
        for start in (0, 4, 8):
            spark.sql(
                f"INSERT INTO {t} SELECT id, named_struct('a', CAST(id AS INT), 'b', concat('b', id)), "
                f"date_add(DATE'2024-01-01', CAST(id AS INT)), IF(id % 2 = 0, 'even', NULL) "
                f"FROM range({start}, {start + 4}, 1, 1)"
            )
        before = sorted(spark.read.format("delta").load(path).collect())
        result = compact(path, target_size=1 << 30, engine="spark", spark_options=SPARK_JOB)
        assert result.ok and result.to_dict()["num_files_added"] == 2, result.to_dict()
        assert sorted(spark.read.format("delta").load(path).collect()) == before
        snap = DeltaTable(path).snapshot()
        md = snap.metadata
        for add in snap.files.to_pylist():
            schema = pq.read_schema(os.path.join(path, add["path"]))
            check_iceberg_file(add["path"], schema, md, add["stats"])  # raises naming the broken rule
            (p,) = [f for f in json.loads(md.schema_string)["fields"] if f["name"] == "p"]
            assert schema.names[-1] == p["metadata"]["delta.columnMapping.physicalName"]  # materialised, last
            assert all(b"PARQUET:field_id" in (f.metadata or {}) for f in schema)
            assert all(b"PARQUET:field_id" in (f.metadata or {}) for f in schema.field(1).type)
            assert json.loads(add["stats"])["numRecords"] == 6 and add.get("deletionVector") is None
        spark.sql(f"INSERT INTO {t} SELECT 100, NULL, NULL, 'even'")  # Delta Spark still writes to it
        assert spark.read.format("delta").load(path).count() == 13

    path = str(tmp_path / "v2-array")
    t = f"delta.`{path}`"
    spark.sql(
        f"CREATE TABLE {t} (id BIGINT, tags ARRAY<STRING>) USING delta TBLPROPERTIES "
        "('delta.columnMapping.mode' = 'name', 'delta.enableIcebergCompatV2' = 'true')"
    )
    for start in (0, 1):
        spark.sql(f"INSERT INTO {t} SELECT id, array('x') FROM range({start}, {start + 1}, 1, 1)")
    version = DeltaTable(path).version()
    with pytest.raises(OperationRefusedError, match="column tags holds an array or a map: icebergCompatV2"):
        compact(path, target_size=1 << 30, engine="spark", spark_options=SPARK_JOB)
    assert DeltaTable(path).version() == version
    assert compact(path, target_size=1 << 30).ok  # the local engine writes the nested ids


# --- variant and shredded variant ----------------------------------------------------------------

#: The held-back conformance table's recipe (delta-io/delta kernel test resource
#: spark-shredded-variant-preview-delta), smaller: variants at the top, in arrays, structs and maps.
_VARIANTS = """
    WITH j AS (SELECT id, format_string('{{"key": %s, "s": "x%s", "arr": [%s, 1.5]}}', id, id, id) AS js
               FROM range({start}, {end}, 1, 1))
    SELECT id, IF(id % 5 = 3, NULL, parse_json(js)) AS v,
           array(parse_json(js), NULL) AS array_of_variants,
           named_struct('v', parse_json(js)) AS struct_of_variants,
           map(CAST(id AS STRING), parse_json(js), 'nullKey', NULL) AS map_of_variants
    FROM j
"""
_AS_JSON = (
    "id",
    "to_json(v) AS v",
    "to_json(array_of_variants) AS a",
    "to_json(struct_of_variants) AS s",
    "to_json(map_of_variants) AS m",
)


def _variant_rows(spark, path: str) -> list:
    return sorted(spark.read.format("delta").load(path).selectExpr(*_AS_JSON).collect())


def _variant_table(spark, path: str, properties: str) -> None:
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, v VARIANT, array_of_variants ARRAY<VARIANT>, "
        "struct_of_variants STRUCT<v: VARIANT>, map_of_variants MAP<STRING, VARIANT>) USING delta "
        f"TBLPROPERTIES ({properties})"
    )
    for start in (0, 10, 20):
        spark.sql(f"INSERT INTO delta.`{path}` " + _VARIANTS.format(start=start, end=start + 10))


def _shredded(path: str, rel: str) -> bool:
    import pyarrow.parquet as pq

    schema = pq.ParquetFile(os.path.join(path, rel)).schema
    return any("typed_value" in schema.column(i).path for i in range(len(schema)))


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_variant_tables_keep_every_value_through_compaction(spark, tmp_path, engine):
    """variantType (unshredded): both engines rewrite; Delta Spark reads the same values, and the stats keep a
    variant's nullCount a number (PROTOCOL.md 'Statistics for Variant Columns')."""
    import json

    path = str(tmp_path / "t")
    _variant_table(spark, path, "'delta.checkpointInterval' = '2'")
    before = _variant_rows(spark, path)
    result = compact(path, target_size=1 << 30, engine=engine, spark_options=SPARK_JOB)
    assert result.ok and result.to_dict()["num_files_added"] == 1, result.to_dict()
    assert _variant_rows(spark, path) == before
    (add,) = DeltaTable(path).snapshot().files.to_pylist()
    assert not _shredded(path, add["path"])  # the table does not enable shredding: never shredded
    assert json.loads(add["stats"])["nullCount"]["v"] == 6  # ids 3, 8, 13, ... 28 have a NULL v
    spark.sql(f"INSERT INTO delta.`{path}` " + _VARIANTS.format(start=100, end=101))
    assert len(_variant_rows(spark, path)) == 31


def test_shredded_variant_tables_read_and_compact_through_spark(spark, tmp_path):
    """A table like the held-back conformance ones (variantShredding-preview, shredded files, a checkpoint):
    deltalog's snapshot sees what Delta Spark sees; local compaction is refused naming the Spark engine; the
    Spark engine rewrites the shredded files (unshredded) and Delta Spark reads the same values."""
    path = str(tmp_path / "t")
    _variant_table(spark, path, "'delta.enableVariantShredding' = 'true', 'delta.checkpointInterval' = '2'")
    snap = DeltaTable(path).snapshot()
    assert "variantShredding-preview" in snap.protocol.effective_reader_features()
    assert any(_shredded(path, p) for p in snap.file_paths()), "Delta Spark wrote no shredded file"
    assert snap.segment.checkpoint is not None  # read through Delta Spark's checkpoint, as the held-back table
    spark_files = {os.path.basename(f) for f in spark.read.format("delta").load(path).inputFiles()}
    assert {os.path.basename(p) for p in snap.file_paths()} == spark_files
    assert snap.version == spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]["version"]
    # A commit request adds a shredded file (a copy of one Delta Spark wrote): its layout is checked and taken.
    shredded = next(p for p in snap.file_paths() if _shredded(path, p))
    copied = _copy_a_live_file(path, shredded)
    copied_rows = spark.read.parquet(os.path.join(path, shredded)).count()
    before_commit = _variant_rows(spark, path)
    commit_request(path, {"operation": "WRITE", "add": [{"path": copied}]}, run_hooks=False)
    before = _variant_rows(spark, path)
    assert len(before) == len(before_commit) + copied_rows and set(before_commit) <= set(before)

    with pytest.raises(UnsupportedProtocolError, match="pyarrow cannot reassemble"):
        compact(path, target_size=1 << 30)
    result = compact(path, target_size=1 << 30, engine="spark", spark_options=SPARK_JOB)
    assert result.ok and result.to_dict()["num_files_added"] == 1, result.to_dict()
    assert _variant_rows(spark, path) == before
    (new,) = DeltaTable(path).snapshot().file_paths()
    assert not _shredded(path, new)
    create_checkpoint(path)
    vacuum(path, dry_run=True)
    spark.sql(f"INSERT INTO delta.`{path}` " + _VARIANTS.format(start=100, end=101))
    assert len(_variant_rows(spark, path)) == len(before) + 1


def test_decimals_compacted_locally_read_back_by_delta_spark(spark, tmp_path):
    """Decimals of every storage width, from Delta Spark's files and deltalake's, compacted locally.

    Delta Spark stores decimal(5,1) as INT32, decimal(18,2) as INT64 and decimal(38,10) as
    fixed-length bytes; deltalake writes all three as fixed-length bytes. The local engine
    writes Spark's layout; Delta Spark must read every value back and prune by the new stats.
    """
    from decimal import Decimal

    import deltalake
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / "t")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, a DECIMAL(5,1), b DECIMAL(18,2), c DECIMAL(38,10)) USING delta")
    for start in (0, 50):
        spark.sql(
            f"INSERT INTO delta.`{path}` SELECT id, CAST(id / 10 - 2 AS DECIMAL(5,1)), "
            f"CAST(id * 1000.25 - 9e12 AS DECIMAL(18,2)), CAST(id / 7 AS DECIMAL(38,10)) FROM range({start}, {start + 50}, 1, 1)"
        )
    before = sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
    ids = pa.array(range(100, 110), pa.int64())
    extra = pa.table(
        {
            "id": ids,
            "a": pa.array([None if i % 3 == 0 else Decimal(i) for i in range(10)], pa.decimal128(5, 1)),
            "b": pa.array([Decimal(i) for i in range(-5, 5)], pa.decimal128(18, 2)),
            "c": pa.array([Decimal(i) / 4 for i in range(10)], pa.decimal128(38, 10)),
        }
    )
    deltalake.write_deltalake(path, extra, mode="append")
    before += sorted(
        tuple(r)
        for r in spark.createDataFrame(
            extra.to_pylist(), "id BIGINT, a DECIMAL(5,1), b DECIMAL(18,2), c DECIMAL(38,10)"
        ).collect()
    )

    result = compact(path, target_size=1 << 30)
    assert result.ok and result.to_dict()["num_files_added"] == 1, result.to_dict()
    (rel,) = DeltaTable(path).snapshot().file_paths()
    chunks = pq.ParquetFile(os.path.join(path, rel)).metadata.row_group(0)
    physical = {chunks.column(i).path_in_schema: chunks.column(i).physical_type for i in range(chunks.num_columns)}
    assert physical == {"id": "INT64", "a": "INT32", "b": "INT64", "c": "FIXED_LEN_BYTE_ARRAY"}

    df = spark.read.format("delta").load(path)
    assert sorted(tuple(r) for r in df.collect()) == sorted(before)
    for position, (column, bound) in enumerate((("a", "2.5"), ("b", "-8999999000000.00"), ("c", "5.0")), start=1):
        expected = sum(1 for r in before if r[position] is not None and r[position] > Decimal(bound))
        assert 0 < expected < len(before) and df.where(f"{column} > {bound}").count() == expected, column
