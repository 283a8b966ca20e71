"""Delta Spark and deltalog side by side, at the same time (issue 20, item 5).

Delta Spark (the session of the test run) appends, DELETEs, MERGEs and OPTIMIZEs one
table in a loop while deltalog, in a child process (tests/side_by_side_maintainer.py),
compacts, checkpoints, cleans up the log and vacuums it, for a bounded time, on a local
path and on the S3 test server. The table starts with a short history whose log is 40
days old (local: file times set back) and an untracked leftover file of the same age,
so log cleanup and vacuum really delete while the writers run.

Must hold:

- every Delta Spark statement either lands or fails with one of Delta Spark's
  concurrent-modification conflicts; every deltalog operation either lands or loses to
  a conflict (our ConflictError, or a compaction bin skipped as a conflict);
- the final rows equal the rows the model built from the statements that landed
  (nothing lost, nothing duplicated), read by both;
- every version the log still holds reads, in deltalog and in Delta Spark, as one of
  the model's states, in commit order;
- every commit deltalog reported as landed is in the log as deltalog's.

On S3, Delta Spark commits through its default ``S3SingleDriverLogStore``, whose
check-then-PUT is atomic only inside one driver (Delta asks for ``S3DynamoDBLogStore``
with several writers; its jar does not resolve from the project's Maven Central, see
docs/delta-spark.md): a Delta Spark commit can overwrite a concurrent one of ours, as
it did in CI. So on S3 the test gives Delta Spark what that log store would: each
statement holds a lock file while it runs, and deltalog's commit step (the conditional
PUT of a version) takes the same lock. Everything else of deltalog (snapshots, plans,
rewrites, checkpoints, deletes) still runs during the statements, so its commits race
Delta Spark's and go through its conflict checks; Delta Spark's conflict checks against
our commits are covered by the local run. The run must show it: some deltalog operation
overlaps a Delta Spark statement in time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog import DeltaTable
from deltalog.log.history import read_commit_info
from side_by_side_maintainer import holding

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(1200)]

HERE = Path(__file__).parent
#: How long the writers and the maintenance run side by side, per backend.
BUDGET_SECONDS = float(os.environ.get("DELTALOG_SIDE_BY_SIDE_SECONDS", "45"))
#: The hard cap: statements take 20-70 s each on a loaded 2-core machine.
MAX_SECONDS = 4 * BUDGET_SECONDS
DAY_MS = 86_400_000
#: S3: the pause between two Delta Spark statements, in which a deltalog commit waiting for the lock goes.
LOCK_PAUSE_SECONDS = 0.5
#: The history before the run (appends v1..v5; Delta Spark checkpoints v5), 40 days old on local files.
PREFIX_VERSIONS = 5

#: Delta Spark's ConcurrentModificationException family (error classes and exception names).
SPARK_CONFLICT = re.compile(
    r"DELTA_CONCURRENT_\w+|DELTA_METADATA_CHANGED|DELTA_PROTOCOL_CHANGED|"
    r"Concurrent(Append|DeleteRead|DeleteDelete|Transaction|Write)Exception|MetadataChangedException|"
    r"ProtocolChangedException"
)

Rows = tuple[tuple[int, float], ...]


@dataclass
class Model:
    """The rows the table must hold, from the statements that landed, and every state it went through."""

    rows: dict[int, float] = field(default_factory=dict)
    states: list[Rows] = field(default_factory=list)
    next_id: int = 0

    def snapshot(self) -> None:
        self.states.append(tuple(sorted(self.rows.items())))


def _select(start: int, end: int, bump: float = 0.0) -> str:
    return (
        f"SELECT id, concat('p', cast(id % 3 AS STRING)) AS part, cast(id AS DOUBLE) + {bump} AS v "
        f"FROM range({start}, {end}, 1, 1)"
    )


def spark_statement(op: str, n: int, table: str, model: Model) -> tuple[str, Any]:
    """The SQL of the ``n``-th statement and how it changes the model once it lands."""
    if op == "append":
        a, b = model.next_id, model.next_id + 30

        def apply() -> None:
            model.rows.update({i: float(i) for i in range(a, b)})
            model.next_id = b

        return f"INSERT INTO {table} {_select(a, b)}", apply
    if op == "delete":
        k = n % 7

        def apply() -> None:
            for i in [i for i in model.rows if i % 7 == k]:
                del model.rows[i]

        return f"DELETE FROM {table} WHERE id % 7 = {k}", apply
    if op == "merge":
        a, b = max(0, model.next_id - 20), model.next_id + 20
        bump = 1000.0 * (n + 1)

        def apply() -> None:
            model.rows.update({i: float(i) + bump for i in range(a, b)})
            model.next_id = b

        return (
            f"MERGE INTO {table} AS t USING ({_select(a, b, bump)}) AS s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET t.v = s.v WHEN NOT MATCHED THEN INSERT *"
        ), apply
    if op == "optimize":
        return f"OPTIMIZE {table}", lambda: None
    raise ValueError(op)


#: The writers' cycle: appends make small files for compaction, DELETE and MERGE rewrite
#: files compaction may be rewriting too, OPTIMIZE competes with it directly.
CYCLE = ("append", "delete", "append", "merge", "append", "optimize")


@dataclass
class Backend:
    name: str
    spark_uri: str  # what Delta Spark opens (s3a:// on S3)
    uri: str  # what deltalog opens
    storage_options: dict[str, Any] | None
    local_root: Path | None  # the table directory on a local backend
    commit_lock: Path | None = None  # S3: the lock Delta Spark's statements and deltalog's commits share


def deltalog_rows(backend: Backend, version: int) -> Rows:
    """(id, v) of every row deltalog's snapshot at ``version`` holds (no DVs: the table has them off)."""
    table = DeltaTable(backend.uri, storage_options=backend.storage_options)
    snap = table.snapshot(version=version)
    out: list[tuple[int, float]] = []
    for path in snap.files.column("path").to_pylist():
        body = table.storage.read_bytes(table.storage.join(*unquote(path).split("/")))
        data = pq.read_table(pa.BufferReader(body), columns=["id", "v"])
        out += zip(data.column("id").to_pylist(), data.column("v").to_pylist())
    return tuple(sorted(out))


def spark_rows(spark: Any, uri: str, version: int | None = None) -> Rows:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return tuple(sorted((int(r["id"]), float(r["v"])) for r in reader.load(uri).select("id", "v").collect()))


def _backdate_log(root: Path, through: int, days: int = 40) -> None:
    """Log files of versions 0..through (and their checksums) ``days`` old, one second apart, in order."""
    base = time.time() - days * 86400
    logd = root / "_delta_log"
    for p in sorted(logd.iterdir()):
        name = p.name.lstrip(".")
        head = name.split(".", 1)[0]
        if p.is_file() and head.isdigit() and int(head) <= through:
            t = base + int(head) * 10 + (2 if ".checkpoint." in name else 1 if ".crc" in name else 0)
            os.utime(p, (t, t))


@dataclass
class Run:
    backend: str
    seconds: float
    spark_ops: list[dict[str, Any]]
    ours: list[dict[str, Any]]
    versions_checked: int
    spark_versions_checked: int
    oldest: int
    latest: int
    problems: list[str]


def side_by_side(spark: Any, backend: Backend, tmp: Path) -> Run:
    table = f"delta.`{backend.spark_uri}`"
    model = Model()
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, part STRING, v DOUBLE) USING delta PARTITIONED BY (part) "
        "TBLPROPERTIES ('delta.checkpointInterval' = '5', 'delta.enableDeletionVectors' = 'false')"
    )
    model.snapshot()
    for n in range(PREFIX_VERSIONS):  # v1..v5, Delta Spark checkpoints v5
        sql, apply = spark_statement("append", n, table, model)
        spark.sql(sql)
        apply()
        model.snapshot()
    leftover = None
    if backend.local_root is not None:
        _backdate_log(backend.local_root, PREFIX_VERSIONS)
        leftover = backend.local_root / "part=p0" / f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
        pq.write_table(pq.read_table(next((backend.local_root / "part=p0").glob("*.parquet"))), leftover)
        old = time.time() - 40 * 86400
        os.utime(leftover, (old, old))

    out_file, stop_file = tmp / "ours.json", tmp / "stop"
    started = time.time()
    args = {
        "uri": backend.uri,
        "storage_options": backend.storage_options,
        "stop_file": str(stop_file),
        "deadline": started + MAX_SECONDS,
        "out": str(out_file),
        "commit_lock": str(backend.commit_lock) if backend.commit_lock else None,
    }
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, str(HERE / "side_by_side_maintainer.py"), json.dumps(args)], env=env)
    spark_ops: list[dict[str, Any]] = []
    problems: list[str] = []
    try:
        n = 0
        # The budget, and at least one whole cycle (each statement kind once) within the cap.
        while time.time() < started + BUDGET_SECONDS or (n < len(CYCLE) and time.time() < started + MAX_SECONDS):
            op = CYCLE[n % len(CYCLE)]
            sql, apply = spark_statement(op, n, table, model)
            t0 = time.time()
            try:
                with holding(backend.commit_lock):
                    spark.sql(sql).collect()
                status, detail = "ok", ""
                apply()
                model.snapshot()
            except Exception as exc:  # noqa: BLE001 - classified below
                text = str(exc)
                m = SPARK_CONFLICT.search(text)
                status, detail = ("conflict", m.group(0)) if m else ("error", text.splitlines()[0][:300])
            spark_ops.append(
                {"op": op, "status": status, "detail": detail, "start": t0, "seconds": round(time.time() - t0, 2)}
            )
            n += 1
            if backend.commit_lock is not None:
                time.sleep(LOCK_PAUSE_SECONDS)  # flock is not fair: let a waiting deltalog commit in
    finally:
        stop_file.touch()
        try:
            child.wait(timeout=300)
        except subprocess.TimeoutExpired:
            child.kill()
            problems.append("deltalog's maintenance process did not stop within 300 s of the stop signal")
    seconds = time.time() - started
    ours = json.loads(out_file.read_text()) if out_file.exists() else []

    problems += [f"Delta Spark {o['op']}: {o['detail']}" for o in spark_ops if o["status"] == "error"]
    problems += [f"deltalog {o['op']}: {o['detail']}\n{o.get('traceback', '')}" for o in ours if o["status"] == "error"]
    for op in ("compaction", "checkpoint", "log cleanup", "vacuum"):
        if not any(o["op"] == op for o in ours):
            problems.append(f"deltalog never ran {op} during the run")

    # Final content, both readers.
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    expected = model.states[-1]
    dt = DeltaTable(backend.uri, storage_options=backend.storage_options)
    listing = dt.list_log()
    latest = listing.latest_version
    assert latest is not None
    if deltalog_rows(backend, latest) != expected:
        problems.append(f"deltalog reads v{latest} with rows other than the statements that landed")
    if spark_rows(spark, backend.spark_uri) != expected:
        problems.append("Delta Spark reads rows other than the statements that landed")

    # Every version still in the log: one of the model's states, in order; Delta Spark agrees.
    oldest = listing.oldest_reconstructable_version()
    assert oldest is not None
    index = {s: i for i, s in enumerate(model.states)}
    last = -1
    spark_checked = 0
    # Delta Spark reads only versions inside delta.deletedFileRetentionDuration (7 days) by
    # commit time: the 40-day-old history (up to v5) it refuses to time travel to, by design.
    spark_from = max(oldest, PREFIX_VERSIONS + 1) if backend.local_root is not None else oldest
    every = max(1, (latest - spark_from + 1) // 15)  # at most ~16 versions (minutes on a loaded machine)
    for v in range(oldest, latest + 1):
        rows = deltalog_rows(backend, v)
        i = index.get(rows)
        if i is None:
            problems.append(f"v{v}: deltalog reads {len(rows)} rows that no sequence of landed statements gives")
        elif i < last:
            problems.append(f"v{v}: deltalog reads an older state (#{i}) than v{v - 1} (#{last})")
        else:
            last = i
        if v >= spark_from and (v in (spark_from, latest) or (v - spark_from) % every == 0):
            spark_checked += 1
            if spark_rows(spark, backend.spark_uri, v) != rows:
                problems.append(f"v{v}: Delta Spark and deltalog read different rows")

    # deltalog's reported commits are in the log as deltalog's.
    for o in ours:
        for v in o.get("commits", []):
            f = listing.commits.get(v)
            if f is None:
                continue  # cleaned up since (log cleanup by either side)
            info = read_commit_info(dt.storage, f.path, f.name) or {}
            if not str(info.get("engineInfo", "")).startswith("deltalog/"):
                problems.append(f"deltalog's {o['op']} commit v{v} is not in the log (holds {info.get('operation')})")
    if leftover is not None and leftover.exists():
        problems.append("vacuum kept the 40-day-old untracked leftover")
    return Run(backend.name, seconds, spark_ops, ours, latest - oldest + 1, spark_checked, oldest, latest, problems)


def _report(run: Run) -> str:
    def count(items: list[dict[str, Any]], op: str, status: str) -> int:
        return sum(1 for o in items if o["op"] == op and o["status"] == status)

    lines = [
        f"\nside by side on {run.backend}: {run.seconds:.0f} s, table at v{run.latest}, log holds v{run.oldest}.., "
        f"{run.versions_checked} versions read by deltalog, {run.spark_versions_checked} by Delta Spark",
        "| side | operation | landed | conflict | error | seconds (mean) |",
        "|---|---|---|---|---|---|",
    ]
    for side, items in (("Delta Spark", run.spark_ops), ("deltalog", run.ours)):
        for op in dict.fromkeys(o["op"] for o in items):
            mine = [o for o in items if o["op"] == op]
            mean = sum(o["seconds"] for o in mine) / len(mine)
            lines.append(
                f"| {side} | {op} | {count(items, op, 'ok')} | {count(items, op, 'conflict')} | "
                f"{count(items, op, 'error')} | {mean:.1f} |"
            )
    kinds = sorted({o["detail"] for o in run.spark_ops if o["status"] == "conflict"})
    ours = sorted({c for o in run.ours for c in o.get("conflicts", [])})
    lines.append(f"Delta Spark conflicts: {kinds or 'none'}; deltalog conflicts: {ours[:5] or 'none'}")
    deleted = {op: sum(o.get("deleted", 0) for o in run.ours if o["op"] == op) for op in ("log cleanup", "vacuum")}
    commits = sum(len(o.get("commits", [])) for o in run.ours)
    lines.append(f"deltalog commits: {commits}; files deleted by deltalog: {deleted}")
    return "\n".join(lines)


def _check(run: Run) -> None:
    print(_report(run))
    assert {o["op"] for o in run.spark_ops} == set(CYCLE), "Delta Spark did not run every kind of statement"
    assert any(o["status"] == "ok" for o in run.spark_ops), "no Delta Spark statement landed"
    assert any(o["op"] == "compaction" and o["commits"] for o in run.ours), "deltalog's compaction never committed"
    assert not run.problems, "\n".join(run.problems[:30])


def test_side_by_side_on_local_files(delta_spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "table"
    backend = Backend("local files", str(root), str(root), None, root)
    run = side_by_side(delta_spark, backend, tmp_path)
    log_cleaned = sum(o.get("deleted", 0) for o in run.ours if o["op"] == "log cleanup")
    _check(run)
    # The 40-day-old history went: by deltalog's cleanup or by Delta Spark's own after its checkpoints.
    assert run.oldest >= 5, f"the log still holds v{run.oldest}; deltalog's cleanup deleted {log_cleaned} files"


@pytest.mark.s3
def test_side_by_side_on_s3(delta_spark: Any, s3_server: str, s3_bucket: str, tmp_path: Path) -> None:
    from deltalog.engines.spark_packages import s3a_conf
    from s3_server import ACCESS_KEY, REGION, SECRET_KEY, storage_options_for

    conf = {k.removeprefix("spark.hadoop."): v for k, v in s3a_conf(s3_server, ACCESS_KEY, SECRET_KEY, REGION).items()}
    for k, v in conf.items():
        delta_spark.conf.set(k, v)
    try:
        backend = Backend(
            "the S3 test server",
            f"s3a://{s3_bucket}/table",
            f"s3://{s3_bucket}/table",
            storage_options_for(s3_server),
            None,
            commit_lock=tmp_path / "commit.lock",
        )
        run = side_by_side(delta_spark, backend, tmp_path)
    finally:
        for k in conf:
            delta_spark.conf.unset(k)
    _check(run)
    # The lock serialises commits only: deltalog's work still ran while Delta Spark's statements did.
    overlapping = [
        o
        for o in run.ours
        for s in run.spark_ops
        if o["start"] < s["start"] + s["seconds"] and s["start"] < o["start"] + o["seconds"]
    ]
    assert overlapping, "no deltalog operation ran while a Delta Spark statement did"
