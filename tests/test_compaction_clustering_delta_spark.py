"""Liquid clustering by deltalog on tables Delta Spark wrote, judged by Delta Spark.

The corpus's ``clustering`` table (``CLUSTER BY (id)``, appends, UPDATE, DELETE, MERGE,
Delta Spark's own OPTIMIZE, RESTORE) is clustered by deltalog; Delta Spark then reads the
same rows at every version, keeps clustering it with its own OPTIMIZE (and ours after its),
and an ``ALTER TABLE ... CLUSTER BY`` is honoured by both. A row-tracking clustered table
keeps every row's ``_metadata.row_id`` and ``row_commit_version`` through our clustering.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from deltalog import DeltaTable
from deltalog.compaction import compact

pytest.importorskip("pyspark")

from delta_spark import RECIPES, content_hash, ensure_table, spark_sql  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def corpus_clustering_table(spark, dest: Path) -> tuple[str, dict]:
    """A private copy of the corpus's clustering table (the repo's copy, the cache, else built now) and its entry."""
    recipe = next(r for r in RECIPES if r.name == "clustering")
    got = ensure_table(recipe, lambda: spark)
    assert got.path is not None, got.entry
    shutil.copytree(got.path, dest / "clustering")
    return str(dest / "clustering"), got.entry


def latest_hash(spark, path: str) -> tuple[int, str]:
    """What Delta Spark reads at the table's latest version."""
    return content_hash(spark, path, DeltaTable(path).snapshot().version)


def _files(path: str) -> list[dict]:
    return DeltaTable(path).snapshot().files.to_pylist()


def _last_operation(spark, path: str) -> dict:
    row = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]
    return {"operation": row["operation"], "parameters": dict(row["operationParameters"] or {})}


def test_delta_spark_reads_and_keeps_clustering_our_clustering(delta_spark, tmp_path):
    spark = delta_spark
    path, entry = corpus_clustering_table(spark, tmp_path)
    run = spark_sql(spark, path)
    latest = entry["latest"]
    assert all(f["clusteringProvider"] is None for f in _files(path))  # the restore brought back unclustered files

    result = compact(path)

    assert result.ok and len(result.commits) == 1 and result.commits[0].version == latest + 1
    (ours,) = _files(path)
    assert ours["clusteringProvider"] == "liquid" and dict(ours["tags"])["ZCUBE_ZORDER_BY"] == '["id"]'
    # Delta Spark: identical rows at every retained version and at ours, and our commit in its history.
    for v in range(latest + 1):
        assert list(content_hash(spark, path, v)) == entry["hashes"][str(v)], f"version {v}"
    assert list(latest_hash(spark, path)) == entry["hashes"][str(latest)]
    op = _last_operation(spark, path)
    assert op["operation"] == "OPTIMIZE" and json.loads(op["parameters"]["clusterBy"]) == ["id"]
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]
    assert list(detail["clusteringColumns"]) == ["id"]  # the domain is kept

    # Delta Spark's next OPTIMIZE: our file is one ZCube of its columns and nothing is unclustered.
    run("OPTIMIZE {t}")
    assert [f["path"] for f in _files(path)] == [ours["path"]]
    # New rows: Delta Spark re-clusters them with our (small) ZCube, and reads the same rows.
    run("INSERT INTO {t} (id, part, v, s, n) VALUES (1000, 'p0', 1.0, 'x', 1), (1001, 'p1', 2.0, 'y', 2)")
    expected = latest_hash(spark, path)
    run("OPTIMIZE {t}")
    theirs = _files(path)
    assert len(theirs) == 1 and theirs[0]["path"] != ours["path"] and theirs[0]["clusteringProvider"] == "liquid"
    assert latest_hash(spark, path) == expected
    assert compact(path).plan.bins == []  # one ZCube by the same columns: nothing for us either

    # ALTER TABLE ... CLUSTER BY: new files are clustered by the new columns, old ZCubes stay.
    run("ALTER TABLE {t} CLUSTER BY (part, n)")
    run("INSERT INTO {t} (id, part, v, s, n) VALUES (2000, 'p2', 3.0, 'z', 3), (2001, 'p0', 4.0, 'w', 4)")
    run("INSERT INTO {t} (id, part, v, s, n) VALUES (2002, 'p1', 5.0, 'q', 5)")
    expected = latest_hash(spark, path)
    result = compact(path)
    assert result.ok and result.plan.clustering.columns == ["part", "n"]
    after = {f["path"]: f for f in _files(path)}
    assert theirs[0]["path"] in after  # clustered by (id): left alone, as Delta Spark leaves it
    (new,) = [f for p, f in after.items() if p != theirs[0]["path"]]
    assert json.loads(dict(new["tags"])["ZCUBE_ZORDER_BY"]) == ["part", "n"]
    assert latest_hash(spark, path) == expected
    # Delta Spark's OPTIMIZE FULL re-clusters everything by the new columns on top of ours.
    run("OPTIMIZE {t} FULL")
    assert latest_hash(spark, path) == expected
    assert {dict(f["tags"] or {}).get("ZCUBE_ZORDER_BY") for f in _files(path)} == {'["part","n"]'}


def test_clustering_keeps_row_ids_on_a_row_tracking_table(delta_spark, tmp_path):
    spark = delta_spark
    path = str(tmp_path / "rt")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, k STRING) USING delta CLUSTER BY (k, id) "
        "TBLPROPERTIES ('delta.enableRowTracking' = 'true')"
    )
    run = spark_sql(spark, path)
    for i in range(4):
        run(
            f"INSERT INTO {{t}} SELECT id, concat('k', cast((id * 7 + {i}) % 13 AS STRING)) FROM range({i * 50}, {i * 50 + 50})"
        )
    run("DELETE FROM {t} WHERE id % 9 = 0")

    def ids() -> list[tuple]:
        df = spark.read.format("delta").load(path).select("id", "k", "_metadata.row_id", "_metadata.row_commit_version")
        return sorted(tuple(r) for r in df.collect())

    before = ids()
    result = compact(path)
    assert result.ok and all(f["clusteringProvider"] == "liquid" for f in _files(path))
    assert ids() == before
    run("OPTIMIZE {t}")  # Delta Spark keeps working on our output
    assert ids() == before
