"""UniForm with real Iceberg readers beside real Delta writers: Spark with the Iceberg runtime and pyiceberg read
what Delta Spark and deltalake read, at every version, through a history mixing Delta Spark's commits and ours.

The table is created and first written by Delta Spark 4.4.0 (``delta.universalFormat.enabledFormats=iceberg``:
Delta Spark accepts it and writes no Iceberg metadata for a table addressed by its path, the
delta-iceberg jar or not: its converter works through Unity Catalog only since 4.x, and the
jar is not served here). deltalog then syncs, appends, compacts with both engines, Z-orders,
purges (nothing: icebergCompat forbids deletion vectors), Delta Spark writes, updates and
deletes in between, log cleanup expires Iceberg snapshots and vacuum removes what no
retained version needs. At each step every version the log keeps is read four ways:

- Delta Spark (``versionAsOf``) and Spark with the Iceberg runtime (``snapshot-id`` of the
  Iceberg snapshot written for that version) as ``to_json(struct(*))`` rows, compared exactly;
- deltalake and pyiceberg as Python values, compared exactly, and DuckDB's ``iceberg_scan`` (of the
  snapshot) and ``delta_scan`` (of the version) against deltalake (tests/reader_checks.py);
- the four readers' ``id`` columns, compared.

Spark with the Iceberg runtime is Spark 4.1 in its own JVM (``scripts/iceberg_spark.py``:
no Iceberg runtime loads on the lock's Spark 4.2), started once for the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from deltalog import DeltaTable
from deltalog.compaction import compact
from deltalog.log_maintenance.log_cleanup import cleanup_log
from deltalog.uniform import sync_iceberg_metadata
from deltalog.vacuuming import vacuum
from reader_checks import uniform_readers_agree
from uniform_tables import (
    append,
    deltalake_rows,
    iceberg_rows,
    iceberg_snapshot_for,
    rows,
    snapshots_by_delta_version,
)

pytestmark = [pytest.mark.slow, pytest.mark.spark]

REPO = Path(__file__).resolve().parent.parent
#: The Spark test schema: no list or map, since the Spark engine cannot write icebergCompatV2's nested ids
#: (test_uniform.py covers lists and maps with pyiceberg).
COLUMNS = ["id", "n", "small", "amount", "name", "day", "ts", "point", "part"]
DDL = (
    "id BIGINT, n INT, small SMALLINT, amount DECIMAL(10,2), name STRING, day DATE, ts TIMESTAMP, "
    "point STRUCT<x: DOUBLE, y: DOUBLE>, part STRING"
)
EXACT_JSON = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
}


def _sql_rows(start: int, count: int, part: str) -> str:
    return (
        f"SELECT id, cast(id % 7 AS INT) AS n, cast(id % 5 AS SMALLINT) AS small, "
        f"cast(id / 4 AS DECIMAL(10,2)) AS amount, IF(id % 9 = 0, NULL, concat('name-', id)) AS name, "
        f"date_add(DATE'2024-01-01', cast(id % 28 AS INT)) AS day, "
        f"timestamp_micros(1704067200000000 + id * 1000001) AS ts, named_struct('x', id * 1.5, 'y', -id * 0.5) AS point, "
        f"'{part}' AS part FROM range({start}, {start + count})"
    )


class IcebergSpark:
    """Spark 4.1 with the Iceberg runtime, one process answering read requests."""

    def __init__(self) -> None:
        sys.path.insert(0, str(REPO / "scripts"))
        import iceberg_spark

        iceberg_spark.ensure()
        self.proc = subprocess.Popen(
            [
                str(iceberg_spark.python()),
                str(REPO / "tests" / "iceberg_spark_reader.py"),
                str(iceberg_spark.jars_file()),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        ready = json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]
        assert ready["ready"].startswith("4.1"), ready

    def rows(self, location: str, snapshot_id: int | None = None) -> list[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"location": location, "snapshot_id": snapshot_id}) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        assert "error" not in answer, answer
        return answer["rows"]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def iceberg_spark():
    reader = IcebergSpark()
    try:
        yield reader
    finally:
        reader.close()


def _delta_spark_rows(spark: Any, path: str, version: int) -> list[str]:
    from pyspark.sql.functions import col, struct, to_json

    frame = spark.read.format("delta").option("versionAsOf", version).load(path)
    return sorted(r[0] for r in frame.select(to_json(struct(*[col(c) for c in frame.columns]), EXACT_JSON)).collect())


def _ids(json_rows: list[str]) -> list[int]:
    return sorted(json.loads(r)["id"] for r in json_rows)


def _check(spark: Any, iceberg: IcebergSpark, path: str, versions: list[int]) -> int:
    """Every listed version reads the same four ways (see the module doc); returns how many were read."""
    location = f"file://{path}"
    by_version = snapshots_by_delta_version(path)
    read = 0
    for version in versions:
        snapshot_id = iceberg_snapshot_for(by_version, version)
        if snapshot_id is None:
            continue
        delta_spark = _delta_spark_rows(spark, path, version)
        iceberg_spark_rows = iceberg.rows(location, snapshot_id)
        assert iceberg_spark_rows == delta_spark, f"version {version}"
        delta_rs = deltalake_rows(path, version)
        assert iceberg_rows(path, snapshot_id=snapshot_id) == delta_rs, f"version {version}"
        assert not uniform_readers_agree(path, version, snapshot_id)  # DuckDB's iceberg_scan and delta_scan
        assert sorted(r[sorted(COLUMNS).index("id")] for r in delta_rs) == _ids(delta_spark), f"version {version}"
        read += 1
    latest = DeltaTable(path).snapshot().version
    assert iceberg.rows(location) == _delta_spark_rows(spark, path, latest)  # the hint's newest version
    return read


def _iceberg_version(path: str) -> int:
    return int(Path(path, "metadata", "version-hint.text").read_text())


def test_iceberg_readers_follow_delta_spark_and_deltalog_commits(delta_spark, iceberg_spark, tmp_path):
    spark = delta_spark
    path = str(tmp_path / "uniform")
    spark.sql(
        f"CREATE TABLE delta.`{path}` ({DDL}) USING delta PARTITIONED BY (part) TBLPROPERTIES ("
        "'delta.enableIcebergCompatV2'='true', 'delta.universalFormat.enabledFormats'='iceberg', "
        "'delta.columnMapping.mode'='name', 'delta.checkpointInterval'='5')"
    )
    spark.sql(f"INSERT INTO delta.`{path}` {_sql_rows(0, 30, 'a')}")
    spark.sql(f"INSERT INTO delta.`{path}` {_sql_rows(30, 30, 'b')}")
    # Delta Spark 4.4 writes no Iceberg metadata for a path table (no converter runs, nothing is logged as failed).
    assert not Path(path, "metadata").exists()
    created = sync_iceberg_metadata(path)
    assert created.mode == "created" and created.delta_version == 2
    table = DeltaTable(path)
    for i in range(3):
        result = append(table, rows(100 + i * 10, 10, "a").select(COLUMNS))
        assert {h.name: h.ok for h in result.hooks}["iceberg_metadata"]
    local = compact(table, target_size=1 << 30)
    assert local.commits
    purge = compact(table, purge_deletion_vectors=True)
    assert not purge.commits  # icebergCompat forbids deletion vectors: there is nothing to purge
    append(table, rows(200, 10, "b").select(COLUMNS))
    append(table, rows(210, 10, "b").select(COLUMNS))
    remote = compact(table, engine="spark", target_size=1 << 30, spark_options={"master": "local[1]", "timeout": 420})
    assert remote.commits and remote.engine == "spark"
    zorder = compact(table, zorder_by=["n", "id"], target_size=1 << 30)
    assert zorder.commits
    # Delta Spark writes again: an insert, a delete and an update (copy-on-write: no deletion vectors).
    before = _iceberg_version(path)
    spark.sql(f"INSERT INTO delta.`{path}` {_sql_rows(300, 10, 'a')}")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 10 = 3")
    spark.sql(f"UPDATE delta.`{path}` SET name = 'updated' WHERE id % 10 = 5")
    assert _iceberg_version(path) == before  # still behind: Delta Spark did not convert
    caught = sync_iceberg_metadata(path)
    assert caught.mode == "incremental" and len(caught.snapshots) == 3
    assert {s.operation for s in caught.snapshots} == {"append", "overwrite"}
    latest = DeltaTable(path).snapshot().version
    assert _check(spark, iceberg_spark, path, list(range(latest + 1))) == latest + 1 - 2  # from version 2 on

    # Log cleanup eight days on expires every Iceberg snapshot but the current one (retention: 7 days); vacuum
    # then removes the files no retained version needs. The readers still agree at the latest version.
    later = int(time.time() * 1000) + 8 * 24 * 3600 * 1000
    snapshots = len(snapshots_by_delta_version(path))
    cleaned = cleanup_log(path, now_ms=later)
    assert cleaned.iceberg is not None and len(cleaned.iceberg["expired"]) == snapshots - 1
    assert list(snapshots_by_delta_version(path)) == [latest]
    swept = vacuum(path, retention_hours=0, allow_short_retention=True)
    assert swept.num_deleted_files > 0
    vacuumed = DeltaTable(path).snapshot().version  # VACUUM START/END: no data change, no new Iceberg snapshot
    assert vacuumed == latest + 2 and list(snapshots_by_delta_version(path)) == [latest]
    assert _check(spark, iceberg_spark, path, [latest, vacuumed]) == 2
    # Delta Spark keeps reading and writing the table; deltalog's next sync continues from its metadata.
    spark.sql(f"INSERT INTO delta.`{path}` {_sql_rows(400, 5, 'c')}")
    after = sync_iceberg_metadata(path)
    assert after.mode == "incremental" and after.previous_delta_version == vacuumed
    newest = DeltaTable(path).snapshot().version
    assert _check(spark, iceberg_spark, path, [newest]) == 1
    assert spark.read.format("delta").load(path).count() == len(deltalake_rows(path, newest))
    assert os.path.exists(os.path.join(path, "metadata", f"v{_iceberg_version(path)}.metadata.json"))
