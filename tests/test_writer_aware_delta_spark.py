"""Delta Spark's own conflict checker judges writer-aware compaction (issue 43), in the oracle's session.

A Delta Spark DELETE transaction that read the table (``filterFiles``: what every DELETE, UPDATE
and MERGE does first) is running while deltalog compacts the table (it commits an app
transaction of its own, so its commit touches no file the compaction rewrites):

* writer-aware (the default), the compaction waits for the writer's quiet moment: the Delta
  Spark transaction commits, then deltalog's lands right after it. No conflict;
* plain (``writer_aware=False``), deltalog's commit lands inside the transaction, and Delta
  Spark fails it (``ConcurrentAppendException``: files were added to what it read).

The writer's rhythm is what the log shows: three earlier DELETE commits (made by hand, with
their ``executionTimeMs``: the rhythm is the log's, whoever wrote it), 30 s apart, the last one
30 s ago: the next transaction is due to be running now. Rows are the same in Delta Spark and
deltalake at the end, and each compaction commit left the rows of the version before it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as LakeTable
from deltalake import QueryBuilder
from py4j.protocol import Py4JJavaError

from deltalog.commit.transaction import Transaction
from deltalog.compaction import compact
from deltalog.log.load import snapshot_at
from deltalog.storage.filesystem import Storage

pytestmark = [pytest.mark.slow, pytest.mark.spark]

CYCLE_MS = 30_000


def _set_time(table: Path, version: int, ms: int) -> None:
    os.utime(table / "_delta_log" / f"{version:020d}.json", (ms / 1000, ms / 1000))


def _lake_rows(table: Path, version: int | None = None) -> list:
    lake = LakeTable(str(table), version=version) if version is not None else LakeTable(str(table))
    data = pa.table(QueryBuilder().register("t", lake).execute("select id, v from t").read_all())
    return sorted(zip(data.column("id").to_pylist(), data.column("v").to_pylist()))


def _delete_commit(table: Path, n: int) -> int:
    """A DELETE that matched nothing, as a writer's job leaves one (its app transaction, its timer); its version."""
    storage = Storage(str(table))
    txn = Transaction(
        storage, snapshot_at(storage), operation="DELETE", operation_parameters={"predicate": '["(id#1L = -1)"]'}
    )
    txn.set_app_transaction("corrections", n)
    return txn.commit({"executionTimeMs": 4000}).version


def _start_transaction(spark: Any, table: Path) -> Any:
    """A Delta Spark transaction that read the whole table (its read predicate matches every file)."""
    jvm = spark._jvm
    txn = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(table)).startTransaction()
    assert txn.filterFiles().size() > 0
    return txn


def _commit(spark: Any, txn: Any, app: str) -> None:
    """Commit it as a DELETE (an app transaction its only action: the rows stay as they are)."""
    jvm = spark._jvm
    scala = jvm.scala.jdk.javaapi.CollectionConverters
    actions = jvm.java.util.ArrayList()
    actions.add(jvm.org.apache.spark.sql.delta.actions.SetTransaction(app, 1, jvm.scala.Option.apply(None)))
    op = getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$Delete")(
        scala.asScala(jvm.java.util.ArrayList()).toSeq()
    )
    key = "spark.databricks.delta.history.metricsEnabled"  # a hand-made DELETE has no SQL metrics to report
    spark.conf.set(key, "false")
    try:
        txn.commit(scala.asScala(actions).toSeq(), op)
    finally:
        spark.conf.unset(key)


def test_writer_aware_compaction_lands_after_a_running_delta_spark_transaction(delta_spark: Any, tmp_path: Path):
    spark = delta_spark
    table = tmp_path / "t"
    t = f"delta.`{table}`"
    spark.sql(
        f"CREATE TABLE {t} (id BIGINT, v DOUBLE) USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    spark.sql(f"INSERT INTO {t} SELECT id, cast(id AS DOUBLE) FROM range(0, 40, 1, 4)")  # four small files
    deletes = [_delete_commit(table, n) for n in range(3)]
    before = _lake_rows(table)

    # Writer-aware: the transaction runs, deltalog waits for it, it commits, deltalog lands after it.
    txn = _start_transaction(spark, table)
    now = int(time.time() * 1000)
    for v in range(deletes[0]):
        _set_time(table, v, now - 3_600_000 + v)
    for i, v in enumerate(deletes):  # a writer every 30 s, the last 30 s ago: the next one is running now
        _set_time(table, v, now - CYCLE_MS - (2 - i) * CYCLE_MS)
    out: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: out.update(r=compact(str(table), writer_wait_seconds=60)))
    worker.start()
    time.sleep(2.0)
    running = deletes[-1] + 1
    assert worker.is_alive() and not (table / "_delta_log" / f"{running:020d}.json").exists(), "deltalog did not wait"
    _commit(spark, txn, "aware")  # no conflict: nothing landed inside it
    worker.join(timeout=120)
    aware = out["r"]
    assert aware.ok and [c.version for c in aware.commits] == [running + 1]
    assert "right after their commit" in aware.commits[0].writer_wait["reason"]
    assert _lake_rows(table, running + 1) == _lake_rows(table, running) == before

    # Plain: deltalog commits inside the running transaction, and Delta Spark fails it.
    spark.sql(f"INSERT INTO {t} SELECT id, cast(id AS DOUBLE) FROM range(100, 120, 1, 2)")
    txn = _start_transaction(spark, table)
    plain = compact(str(table), writer_aware=False)
    assert plain.ok and plain.commits
    version = plain.commits[0].version
    with pytest.raises(Py4JJavaError, match="DELTA_CONCURRENT_APPEND|ConcurrentAppendException") as failed:
        _commit(spark, txn, "plain")
    assert f"version {version}" in str(failed.value)
    assert _lake_rows(table, version) == _lake_rows(table, version - 1)
    theirs = sorted((int(r["id"]), float(r["v"])) for r in spark.read.format("delta").load(str(table)).collect())
    assert theirs == _lake_rows(table) and len(theirs) == len(before) + 20
    assert json.loads(json.dumps(aware.to_dict()))["num_bins_committed"] == 1
