"""The Spark ingest job: Parquet files into the table folder plus a commit request.

One real ``spark-submit --master local[2]`` run (about 20 s, shared by the slow
tests through a module fixture); the request it leaves is committed with
deltalog and the table read back with deltalake, row for row.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.engines.spark.hadoop import STAGING_DIR, hadoop_uri
from deltalog.engines.spark.ingest import WrittenFile, build_commit_request, parse_partition_dirs, safe_run_id
from deltalog.errors import InvalidArgumentError, StorageError
from helpers import make_table

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAGS = os.path.join(REPO, "dags")
JOB = os.path.join(DAGS, "spark_jobs", "ingest_events.py")
VENV_BIN = os.path.dirname(sys.executable)
DAY = dt.date(2026, 11, 21)
ROWS, FILES = 3000, 3

sys.path.insert(0, DAGS)
from deltalog_example import EVENTS_SCHEMA, PARTITION_BY  # noqa: E402

# --- no Spark needed -------------------------------------------------------------------


def test_hadoop_uri_maps_paths_and_s3() -> None:
    assert hadoop_uri("/data/t") == "file:///data/t"
    assert hadoop_uri("file:///data/t") == "file:///data/t"
    assert hadoop_uri("s3://bucket/w/t") == "s3a://bucket/w/t"
    assert hadoop_uri("s3a://bucket/w/t") == "s3a://bucket/w/t"
    assert hadoop_uri("relative/t") == "file://" + os.path.abspath("relative/t")
    with pytest.raises(InvalidArgumentError):
        hadoop_uri("  ")


def test_safe_run_id_keeps_object_names_clean() -> None:
    assert safe_run_id("scheduled__2026-11-21T00:00:00+00:00") == "scheduled__2026-11-21T00_00_00_00_00"
    with pytest.raises(InvalidArgumentError):
        safe_run_id("::")


def test_partition_dirs_are_unescaped_and_checked() -> None:
    assert parse_partition_dirs("d=2026-11-21/k=a%3Ab", ["d", "k"]) == {"d": "2026-11-21", "k": "a:b"}
    assert parse_partition_dirs("d=__HIVE_DEFAULT_PARTITION__", ["d"]) == {"d": None}
    assert parse_partition_dirs("", []) == {}
    with pytest.raises(StorageError):
        parse_partition_dirs("x=1", ["d"])
    with pytest.raises(StorageError):
        parse_partition_dirs("d=1/x=2", ["d"])


def test_commit_request_document_is_what_deltalog_parses() -> None:
    from deltalog.ingest import load_commit_request

    f = WrittenFile(path="d=1/part-0.parquet", size=10, partition_values={"d": "1"}, modification_time=5)
    doc = build_commit_request([f], user_metadata="ingest 2026-11-21")
    req = load_commit_request(doc)
    assert req.operation == "WRITE" and req.operationParameters == {"mode": "Append"}
    assert [(a.path, a.size, a.partitionValues, a.modificationTime) for a in req.add] == [
        ("d=1/part-0.parquet", 10, {"d": "1"}, 5)
    ]
    assert req.userMetadata == "ingest 2026-11-21"
    assert req.tableId is None  # named only when given (write_ingest always gives it)


# --- one real spark-submit ---------------------------------------------------------------


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("spark_ingest")
    table = str(root / "events")
    make_table(table, schema=EVENTS_SCHEMA, partition_by=PARTITION_BY)
    request = os.path.join(table, "_commit_requests", "run1.json")
    env = dict(os.environ, PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""), PYSPARK_PYTHON=sys.executable)
    cmd = [
        os.path.join(VENV_BIN, "spark-submit"),
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        JOB,
        "--table",
        table,
        "--date",
        DAY.isoformat(),
        "--run-id",
        "manual__2026-11-21T00:00:00+00:00",
        "--request",
        request,
        "--rows",
        str(ROWS),
        "--files",
        str(FILES),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {"table": table, "request": request, "stdout": proc.stdout}


@pytest.mark.slow
@pytest.mark.spark
def test_job_leaves_data_files_and_a_matching_request(ingested: dict[str, str]) -> None:
    table = ingested["table"]
    with open(ingested["request"], encoding="utf-8") as f:
        doc = json.load(f)
    adds = doc["add"]
    assert len(adds) == FILES
    # The request names its table (read by the job through Spark's filesystem): no other table commits it.
    assert (doc["tableId"], doc["readVersion"]) == (DeltaTable(table).snapshot().metadata.id, 0)
    for add in adds:
        assert add["path"].startswith(f"event_date={DAY.isoformat()}/part-")
        assert add["partitionValues"] == {"event_date": DAY.isoformat()}
        assert os.path.getsize(os.path.join(table, add["path"])) == add["size"]
    on_disk = sorted(
        os.path.relpath(os.path.join(d, n), table)
        for d, _, names in os.walk(table)
        for n in names
        if "_delta_log" not in d and "_commit_requests" not in d
    )
    # Exactly the requested files: no staging folder, no .crc or _SUCCESS left behind.
    assert on_disk == sorted(a["path"] for a in adds)
    assert not os.path.exists(os.path.join(table, STAGING_DIR))
    summary = json.loads(ingested["stdout"].split("DELTALOG_INGEST_RESULT ", 1)[1].splitlines()[0])
    assert summary["num_files"] == FILES and summary["num_bytes"] == sum(a["size"] for a in adds)


@pytest.mark.slow
@pytest.mark.spark
def test_request_commits_and_deltalake_reads_every_row(ingested: dict[str, str]) -> None:
    from deltalake import DeltaTable as RsTable

    from deltalog.ingest import commit_request

    result = commit_request(ingested["table"], ingested["request"], app_id="test-ingest", txn_version=1)
    assert result.version == 1
    data = RsTable(ingested["table"]).to_pyarrow_table()
    assert data.num_rows == ROWS
    day_number = (DAY - dt.date(1970, 1, 1)).days
    ids = sorted(data.column("event_id").to_pylist())
    assert ids == list(range(day_number * 1_000_000_000, day_number * 1_000_000_000 + ROWS))
    assert set(data.column("event_date").to_pylist()) == {DAY}
    times = data.column("event_time").cast(pa.timestamp("us", tz="UTC")).to_pylist()
    assert min(times).date() == DAY and max(times).date() == DAY
    assert set(data.column("event_type").to_pylist()) <= {"view", "click", "add_to_cart", "purchase"}
    # The files hold the table's columns minus the partition column, with Delta-readable timestamps.
    first = os.path.join(ingested["table"], json.load(open(ingested["request"]))["add"][0]["path"])
    file_schema = pq.read_schema(first)
    assert file_schema.names == [n for n in EVENTS_SCHEMA.names if n not in PARTITION_BY]
    assert file_schema.field("event_time").type == pa.timestamp("us", tz="UTC")
    # Committing the same request again under the same app transaction is a no-op.
    again = commit_request(ingested["table"], ingested["request"], app_id="test-ingest", txn_version=1)
    assert getattr(again, "noop", False)
    assert RsTable(ingested["table"]).version() == 1
