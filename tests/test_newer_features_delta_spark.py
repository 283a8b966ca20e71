"""Tables Delta Spark 4.4 writes with ``materializePartitionColumns`` and ``geospatial`` (issue 30, item 3).

Built here with the oracle session (the corpus recipes come once the stored corpus is on
main): Delta Spark writes the table and its history, deltalog maintains it, and Delta
Spark (and deltalake, where it reads the feature) read the same rows afterwards.
"""

from __future__ import annotations

import os

import deltalake
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.compaction import compact
from deltalog.errors import UnsupportedProtocolError
from deltalog.log_maintenance import create_checkpoint
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.vacuuming import vacuum

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(1200)]


def spark_rows(spark, path: str, columns: str) -> list[tuple]:
    spark.catalog.clearCache()
    return sorted(tuple(r) for r in spark.sql(f"SELECT {columns} FROM delta.`{path}`").collect())


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_materialize_partition_columns_table_compacted_by_us(tmp_path, delta_spark, engine):
    path = str(tmp_path / f"mat-{engine}")
    t = f"delta.`{path}`"
    delta_spark.sql(
        f"CREATE TABLE {t} (part STRING, id BIGINT, v DOUBLE) USING delta PARTITIONED BY (part) "
        "TBLPROPERTIES ('delta.feature.materializePartitionColumns' = 'supported')"
    )
    for start in (0, 6, 12):
        delta_spark.sql(f"INSERT INTO {t} SELECT concat('p', id % 2), id, id * 1.5 FROM range({start}, {start + 6})")
    snap = DeltaTable(path).snapshot()
    assert "materializePartitionColumns" in snap.protocol.writer_features
    assert all("part" in pq.read_schema(os.path.join(path, p)).names for p in snap.file_paths())  # Delta Spark's files
    before = spark_rows(delta_spark, path, "part, id, v")
    options = {"spark_options": {"master": "local[2]", "timeout": 600}} if engine == "spark" else {}
    result = compact(path, target_size=1 << 20, engine=engine, **options)
    assert result.ok and len(result.committed_bins) == 2, result.to_dict()
    snap = DeltaTable(path).snapshot()
    for add in snap.files.to_pylist():
        file = pq.read_table(os.path.join(path, add["path"]))
        assert file.column_names[-1] == "part" and set(file.column("part").to_pylist()) == {
            dict(add["partitionValues"])["part"]
        }
    assert spark_rows(delta_spark, path, "part, id, v") == before
    theirs = deltalake.DeltaTable(path).to_pyarrow_table()
    assert (
        sorted(zip(theirs.column("part").to_pylist(), theirs.column("id").to_pylist(), theirs.column("v").to_pylist()))
        == before
    )
    create_checkpoint(DeltaTable(path))
    vacuum(path, retention_hours=0, allow_short_retention=True)
    assert spark_rows(delta_spark, path, "part, id, v") == before


def test_geospatial_table_read_checkpointed_and_vacuumed_by_us(tmp_path, delta_spark):
    path = str(tmp_path / "geo")
    t = f"delta.`{path}`"
    key = "spark.databricks.delta.geo.preview.enabled"
    delta_spark.conf.set(key, "true")
    try:
        delta_spark.sql(f"CREATE TABLE {t} (id BIGINT, g GEOMETRY(4326), h GEOGRAPHY(4326)) USING delta")
        point = "X'0101000000000000000000F03F0000000000000040'"
        for start in (0, 3):
            delta_spark.sql(
                f"INSERT INTO {t} SELECT id, ST_GeomFromWKB({point}, 4326), ST_GeogFromWKB({point}) "
                f"FROM range({start}, {start + 3})"
            )
        delta_spark.sql(f"OPTIMIZE {t}")
        columns = "id, hex(ST_AsBinary(g)), hex(ST_AsBinary(h))"
        before = spark_rows(delta_spark, path, columns)
        assert len(before) == 6
        snap = DeltaTable(path).snapshot()
        assert "geospatial" in snap.protocol.reader_features and snap.num_files == 1
        create_checkpoint(DeltaTable(path))
        cleanup_log(path)
        dry = vacuum(path, retention_hours=0, allow_short_retention=True, dry_run=True)
        theirs = delta_spark.sql(f"VACUUM {t} RETAIN 0 HOURS DRY RUN").collect()
        assert sorted(dry.plan.files.column("path").to_pylist()) == sorted(
            os.path.relpath(r[0].removeprefix("file:"), path) for r in theirs
        )
        vacuum(path, retention_hours=0, allow_short_retention=True)
        assert spark_rows(delta_spark, path, columns) == before
        with pytest.raises(UnsupportedProtocolError, match="geospatial column"):
            compact(path, target_size=1 << 20, engine="spark")
        # Local compaction: the new file keeps the GEOMETRY/GEOGRAPHY logical types Delta Spark reads.
        delta_spark.sql(f"INSERT INTO {t} SELECT id, ST_GeomFromWKB({point}, 4326), NULL FROM range(6, 8)")
        before = spark_rows(delta_spark, path, columns)
        result = compact(path, target_size=1 << 20)
        assert result.ok and len(result.committed_bins) == 1, result.to_dict()
        assert DeltaTable(path).snapshot().num_files == 1
        assert spark_rows(delta_spark, path, columns) == before
    finally:
        delta_spark.conf.unset(key)
