"""Writer conflicts maintenance causes: Delta Spark's OPTIMIZE and deltalog side by side (issue 43).

``python benchmarks/run.py writer_conflicts [--seconds 180] [--seed 43] [--tables events,ledger,clicks]``

One Delta Spark session (``local[2]``) runs the same seeded writer mix on two sets of tables at
once, for a fixed time, while maintenance runs beside each set with the same target file size:

* **delta**: Delta Spark's own ``OPTIMIZE`` (``optimize.maxFileSize`` = the target,
  ``optimize.minFileSize`` = half of it), one loop per table in the writers' session;
* **deltalog**: ``compact(target_size=...)`` with its defaults (writer-aware), one loop per
  table in a child process (``writer_conflicts_maintainer.py``); ``--arms delta,deltalog,plain``
  adds a third set maintained by deltalog with ``writer_aware=False``.

Both loops pause ``--pause`` seconds between rounds of a table. The writer mix is what
pipelines run (``--tables`` picks; the default is all five: partitioned and unpartitioned tables,
each with and without deletion vectors, receiving DML, and an append-only one):

* ``events``: partitioned by ``day`` (8 days), deletion vectors on: a Structured Streaming append
  (rate source, a checkpoint location, a trigger every 10 s) and blind INSERTs into today's
  partition, and a corrections job on the last four days, today's included: DELETE and UPDATE pinned to a day
  (``WHERE day = 'd5' AND ...``), MERGE upserts with the day in the condition
  (``ON t.day = 'd5' AND t.id = s.id``, as Delta's docs advise for concurrent writers);
* ``orders``: the same without deletion vectors (UPDATE and MERGE rewrite whole files);
* ``ledger`` (deletion vectors off) and ``users`` (on), unpartitioned dimension tables kept by a
  CDC job: DELETE and UPDATE by key predicates, MERGE upserts by key, over the whole table;
* ``clicks``: an append-only fact table: blind INSERTs only.

Each DML job runs one statement, then thinks 1 to 3 s (seeded), as a job of corrections or a
scheduled MERGE does; the INSERT job writes one of its tables every 2 to 4 s, round robin.
Maintenance starts once every DML job has landed a few statements (the log holds their rhythm,
as on a table in use); what starts before is not counted.

Reported per set and statement kind: attempts, and conflicts per 100 attempts split by who won
the race (the version Delta Spark's error names: a maintenance commit, OPTIMIZE or deltalog's,
or another writer's), the small files left at the end (and their mean over the run, sampled
every 5 s), maintenance commits, deltalog's bins lost to writers and files it deferred; then
every retained version of every table read by deltalake and by Delta Spark (the same rows at
each version, and a maintenance commit's version the rows of the one before it). The goal
(issue 43): deltalog's DELETE/UPDATE/MERGE conflicts per 100 at most 0.25x OPTIMIZE's, with no
more small files left, and none for blind and streaming appends.
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
log = logging.getLogger("bench_writer_conflicts")

#: Delta Spark's concurrent-modification error classes (and exception names in older messages).
CONFLICT = re.compile(
    r"DELTA_CONCURRENT_\w+|DELTA_METADATA_CHANGED|DELTA_PROTOCOL_CHANGED|"
    r"Concurrent(Append|DeleteRead|DeleteDelete|Transaction|Write)Exception|MetadataChangedException"
)
#: The winning commit: the error class's text names its version, the "Conflicting commit" JSON too.
WINNER = re.compile(r"committed at version (\d+)|\"version\":(\d+)")
DML_KINDS = ("delete", "update", "merge")
DAYS = [f"d{i}" for i in range(8)]
#: The warm-up lasts until every DML job landed this many statements: the log holds the writers' rhythm.
WARMUP_STATEMENTS = 3


def _winner(m: re.Match[str] | None) -> int | None:
    return int(m.group(1) or m.group(2)) if m else None


def add_arguments(p: Any) -> None:
    p.add_argument("--seconds", type=float, help="how long the writers run (default: 180; --scale small: 75)")
    p.add_argument("--seed", type=int, default=43, help="the writers' random choices")
    p.add_argument("--pause", type=float, default=5.0, help="seconds between two maintenance rounds of a table")
    p.add_argument("--target-size", type=int, default=1 << 20, help="target file size of both maintainers (bytes)")
    p.add_argument("--arms", default="delta,deltalog", help="delta, deltalog and plain (deltalog, writer_aware off)")
    p.add_argument("--workdir", help="where the tables go (default: a temporary folder, removed after)")
    p.add_argument("--spark-check-every", type=int, default=1, help="Delta Spark reads every Nth version (1: all)")
    p.add_argument(
        "--warmup",
        type=float,
        default=240.0,
        help="the longest the writers run before maintenance starts (not counted): until each DML job landed "
        f"{WARMUP_STATEMENTS} statements, at least 20 s",
    )
    p.add_argument(
        "--tables",
        default="events,orders,users,ledger,clicks",
        help="which tables of the mix each set has: events, orders, users, ledger, clicks (default: all)",
    )


@dataclass(frozen=True)
class TableSpec:
    name: str
    partition: str | None  # the partition column
    values: tuple[str, ...]  # its values
    dv: bool
    streaming: bool = False  # a streaming append into ``appends_to``
    appends_to: str | None = None  # blind INSERTs: into this partition ("" on an unpartitioned table)
    corrects: tuple[str, ...] = ()  # the partitions its DML job pins (empty: it reads the whole table)
    dml: bool = True


TABLES = (
    # Today's partition takes the appends; the corrections job works on the last four days, today
    # included (late records and dedup MERGEs hit the partition the appends go to, as pipelines do).
    TableSpec("events", "day", tuple(DAYS), dv=True, streaming=True, appends_to=DAYS[-1], corrects=tuple(DAYS[-4:])),
    # The same, without deletion vectors (UPDATE and MERGE rewrite whole files).
    TableSpec("orders", "day", tuple(DAYS), dv=False, appends_to=DAYS[-1], corrects=tuple(DAYS[-4:])),
    # Dimension tables kept by a CDC job: DELETE, UPDATE and MERGE upserts by key over the whole table.
    TableSpec("users", None, (), dv=True),
    TableSpec("ledger", None, (), dv=False),
    # An append-only fact table: blind appends, nothing else.
    TableSpec("clicks", None, (), dv=False, appends_to="", dml=False),
)


@dataclass
class Op:
    arm: str
    table: str
    kind: str  # append, stream, delete, update, merge, optimize
    status: str  # ok, conflict, error
    start: float
    seconds: float
    detail: str = ""
    winner: int | None = None
    by: str | None = None  # maintenance / writer (who won the conflicting race)


@dataclass
class Arm:
    name: str
    root: Path
    tables: dict[str, Path] = field(default_factory=dict)
    samples: dict[str, list[int]] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    #: The 1-minute load average, sampled every 5 s over the run (the machine's, shared).
    load: list[float] = field(default_factory=list)
    #: The maintainer process's peak RSS (deltalog's sets; Delta Spark's OPTIMIZE shares the writers' JVM).
    peak_mb: float | None = None


def _session(args: Any) -> Any:
    from pyspark.sql import SparkSession

    from deltalog.engines.spark_packages import spark_conf

    target = int(args.target_size)
    conf = {
        **spark_conf(delta=True, s3a=False),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "1",
        "spark.default.parallelism": "2",
        "spark.scheduler.mode": "FAIR",  # each writer is its own job, as separate pipelines are
        "spark.databricks.delta.snapshotPartitions": "1",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "2g",
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.adaptive.enabled": "false",
        "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:CICompilerCount=2",
        "spark.databricks.delta.optimize.maxFileSize": str(target),
        "spark.databricks.delta.optimize.minFileSize": str(target // 2),
        "spark.databricks.delta.retentionDurationCheck.enabled": "false",
        "spark.sql.streaming.stopTimeout": "60s",
    }
    builder = SparkSession.builder.master("local[2]").appName("deltalog-bench-writer-conflicts")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _select(spec: TableSpec, start: int, count: int, bump: str = "0", part: str | None = None, slices: int = 1) -> str:
    """Rows with ids ``start..start+count``: the partition value from the id, or ``part``."""
    if spec.partition is None:
        col = ""
    elif part is not None:
        col = f", '{part}' AS {spec.partition}"
    else:
        n = len(spec.values)
        col = f", concat('{spec.values[0][0]}', cast(id % {n} AS STRING)) AS {spec.partition}"
    return (
        f"SELECT id{col}, cast(id AS DOUBLE) + {bump} AS v, repeat(md5(cast(id AS STRING)), 6) AS payload "
        f"FROM range({start}, {start + count}, 1, {slices})"
    )


def _create(spark: Any, spec: TableSpec, path: Path) -> None:
    t = f"delta.`{path}`"
    part_col = f", {spec.partition} STRING" if spec.partition else ""
    part_by = f" PARTITIONED BY ({spec.partition})" if spec.partition else ""
    spark.sql(
        f"CREATE TABLE {t} (id BIGINT{part_col}, v DOUBLE, payload STRING) USING delta{part_by} "
        f"TBLPROPERTIES ('delta.enableDeletionVectors' = '{str(spec.dv).lower()}')"
    )
    # The table before the run: many small files (several per partition), all of them compactable.
    spark.sql(f"INSERT INTO {t} {_select(spec, 0, 4000, slices=6)}")
    spark.sql(f"INSERT INTO {t} {_select(spec, 4000, 2000, slices=4)}")


class Writers:
    """The seeded writer mix of one set of tables (threads in the shared Spark session)."""

    def __init__(
        self,
        spark: Any,
        arm: Arm,
        seed: int,
        stop: threading.Event,
        ops: list[Op],
        lock: threading.Lock,
        specs: tuple[TableSpec, ...],
    ):
        self.spark, self.arm, self.stop, self.ops, self.lock = spark, arm, stop, ops, lock
        self.seed, self.specs = seed, specs
        self.next_id = {s.name: 100_000 for s in specs}
        self.threads: list[threading.Thread] = []
        self.queries: list[Any] = []

    def _record(self, op: Op) -> None:
        with self.lock:
            self.ops.append(op)

    def _run(self, table: str, kind: str, sql: str) -> None:
        t0 = time.time()
        try:
            self.spark.sql(sql).collect()
            status, detail, winner = "ok", "", None
        except Exception as exc:  # noqa: BLE001 - classified
            text = str(exc)
            m = CONFLICT.search(text)
            w = WINNER.search(text)
            status = "conflict" if m else "error"
            detail = m.group(0) if m else text.splitlines()[0][:300] if text else type(exc).__name__
            winner = _winner(w)
        self._record(Op(self.arm.name, table, kind, status, t0, time.time() - t0, detail, winner))

    def _sleep(self, rng: random.Random, lo: float, hi: float) -> None:
        self.stop.wait(rng.uniform(lo, hi))

    def dml(self, spec: TableSpec) -> None:
        rng = random.Random(f"{self.seed}/{spec.name}/dml")
        t = f"delta.`{self.arm.tables[spec.name]}`"
        while not self.stop.is_set():
            kind = rng.choices(["delete", "update", "merge"], weights=[4, 3, 3])[0]
            k = rng.randrange(97)
            if spec.corrects:
                part = rng.choice(spec.corrects)
                where = f"{spec.partition} = '{part}' AND "
            else:
                part, where = None, ""
            if kind == "delete":
                sql = f"DELETE FROM {t} WHERE {where}id % 97 = {k}"
            elif kind == "update":
                sql = f"UPDATE {t} SET v = v + 1 WHERE {where}id % 89 = {k}"
            else:
                # Upserts of a range of keys; on a partitioned table the day is in the condition (pruning).
                lo = rng.randrange(0, 6000)
                on = f"t.{spec.partition} = '{part}' AND " if part is not None else ""
                sql = (
                    f"MERGE INTO {t} AS t USING ({_select(spec, lo, 60, bump='0.5', part=part)}) AS s ON {on}"
                    "t.id = s.id WHEN MATCHED THEN UPDATE SET t.v = s.v WHEN NOT MATCHED THEN INSERT *"
                )
            self._run(spec.name, kind, sql)
            self._sleep(rng, 1.0, 3.0)

    def appends(self) -> None:
        rng = random.Random(f"{self.seed}/appends")
        targets = [s for s in self.specs if s.appends_to is not None]
        i = 0
        while targets and not self.stop.is_set():
            spec = targets[i % len(targets)]
            i += 1
            start = self.next_id[spec.name]
            self.next_id[spec.name] += 200
            part = spec.appends_to or None
            sql = f"INSERT INTO delta.`{self.arm.tables[spec.name]}` {_select(spec, start, 200, part=part)}"
            self._run(spec.name, "append", sql)
            self._sleep(rng, 2.0, 4.0)

    def start_stream(self, spec: TableSpec, restart: int = 0) -> Any:
        from pyspark.sql import functions as F

        path = self.arm.tables[spec.name]
        df = (
            self.spark.readStream.format("rate")
            .option("rowsPerSecond", 40)
            .load()
            .select(
                (F.col("value") + F.lit(10_000_000 + 1_000_000 * restart)).alias("id"),
                F.lit(spec.appends_to).alias(spec.partition),
                F.col("value").cast("double").alias("v"),
                F.repeat(F.md5(F.col("value").cast("string")), 6).alias("payload"),
            )
        )
        return (
            df.writeStream.format("delta")
            .option("checkpointLocation", str(self.arm.root / f"_checkpoints_{spec.name}"))
            .trigger(processingTime="10 seconds")
            .outputMode("append")
            .start(str(path))
        )

    def stream_watch(self, spec: TableSpec) -> None:
        """The streaming append: restarted (from its checkpoint) when a batch fails, each failure counted."""
        restarts = 0
        query = self.start_stream(spec)
        self.queries.append(query)
        while not self.stop.wait(1.0):
            if query.isActive:
                continue
            exc = query.exception()
            text = str(exc) if exc is not None else "stopped"
            m = CONFLICT.search(text)
            w = WINNER.search(text)
            self._record(
                Op(
                    self.arm.name,
                    spec.name,
                    "stream",
                    "conflict" if m else "error",
                    time.time(),
                    0.0,
                    m.group(0) if m else text[:300],
                    _winner(w),
                )
            )
            restarts += 1
            query = self.start_stream(spec, restarts)
            self.queries.append(query)

    def start(self) -> None:
        for spec in self.specs:
            if spec.dml:
                self.threads.append(threading.Thread(target=self.dml, args=(spec,), daemon=True))
            if spec.streaming:
                self.threads.append(threading.Thread(target=self.stream_watch, args=(spec,), daemon=True))
        self.threads.append(threading.Thread(target=self.appends, daemon=True))
        for th in self.threads:
            th.start()

    def join(self) -> None:
        for th in self.threads:
            th.join(timeout=300)
        for q in self.queries:
            try:
                if q.isActive:
                    q.stop()
            except Exception:  # noqa: BLE001 - stopping at the end
                pass


def delta_optimize_loops(
    spark: Any, arm: Arm, pause: float, stop: threading.Event, ops: list[Op], lock: threading.Lock
) -> list[threading.Thread]:
    def loop(name: str, path: Path) -> None:
        while not stop.is_set():
            t0 = time.time()
            try:
                spark.sql(f"OPTIMIZE delta.`{path}`").collect()
                status, detail = "ok", ""
            except Exception as exc:  # noqa: BLE001
                text = str(exc)
                m = CONFLICT.search(text)
                status, detail = ("conflict", m.group(0)) if m else ("error", text.splitlines()[0][:300])
            with lock:
                ops.append(Op(arm.name, name, "optimize", status, t0, time.time() - t0, detail))
            stop.wait(pause)

    threads = [threading.Thread(target=loop, args=(n, p), daemon=True) for n, p in arm.tables.items()]
    for t in threads:
        t.start()
    return threads


def sample_small_files(arms: list[Arm], threshold: int, stop: threading.Event) -> None:
    import os

    from deltalog.log.load import snapshot_at
    from deltalog.storage.filesystem import Storage

    while not stop.wait(5.0):
        arms[0].load.append(os.getloadavg()[0])
        for arm in arms:
            for name, path in arm.tables.items():
                try:
                    files = snapshot_at(Storage(str(path))).files
                    n = sum(1 for s in files.column("size").to_pylist() if s < threshold)
                except Exception:  # noqa: BLE001 - a sample missed
                    continue
                arm.samples.setdefault(name, []).append(n)


def attribute(ops: list[Op], arms: dict[str, Arm]) -> None:
    """Who won each conflict: a maintenance commit (OPTIMIZE, deltalog's rewrite) or another writer."""
    from deltalog.log.commit_lines import parse_commit
    from deltalog.log.writer_activity import recent_commit

    for o in ops:
        if o.status != "conflict" or o.winner is None:
            continue
        f = arms[o.arm].tables[o.table] / "_delta_log" / f"{o.winner:020d}.json"
        try:
            c = recent_commit(o.winner, 0, parse_commit(f.read_bytes(), f.name))
        except OSError:
            o.by = "unknown"
            continue
        o.by = "maintenance" if c.kind in ("deltalog", "maintenance") else "writer"


def _rows_deltalake(path: Path, version: int, dv: bool) -> list[tuple[int, float]]:
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    t = DeltaTable(str(path), version=version)
    if dv:
        data = pa.table(QueryBuilder().register("t", t).execute("select id, v from t").read_all())
    else:
        data = t.to_pyarrow_table(columns=["id", "v"])
    return sorted(zip(data.column("id").to_pylist(), data.column("v").to_pylist()))


#: Versions Delta Spark reads in one job (a union of ``versionAsOf`` scans: one action instead of one each).
SPARK_VERSIONS_PER_JOB = 40


def _spark_rows(spark: Any, path: Path, versions: list[int]) -> dict[int, list[tuple[int, float]]]:
    """Delta Spark's rows of each of ``versions`` of ``path``, read in jobs of :data:`SPARK_VERSIONS_PER_JOB`."""
    from functools import reduce

    from pyspark.sql import functions as F

    out: dict[int, list[tuple[int, float]]] = {v: [] for v in versions}
    for i in range(0, len(versions), SPARK_VERSIONS_PER_JOB):
        chunk = versions[i : i + SPARK_VERSIONS_PER_JOB]
        frames = [
            spark.read.format("delta").option("versionAsOf", v).load(str(path)).select(F.lit(v).alias("_v"), "id", "v")
            for v in chunk
        ]
        for r in reduce(lambda a, b: a.unionAll(b), frames).collect():
            out[int(r[0])].append((int(r[1]), float(r[2])))
    return {v: sorted(rows) for v, rows in out.items()}


def check_versions(spark: Any, arm: Arm, every: int) -> dict[str, Any]:
    """Every retained version: deltalake's rows, Delta Spark's rows (every ``every``-th version), and a
    maintenance commit's rows equal to the version before it."""
    from deltalog.log.commit_lines import parse_commit
    from deltalog.log.listing import list_log
    from deltalog.log.writer_activity import recent_commit
    from deltalog.storage.filesystem import Storage

    problems: list[str] = []
    checked = spark_checked = 0
    for spec in (s for s in TABLES if s.name in arm.tables):
        path = arm.tables[spec.name]
        listing = list_log(Storage(str(path)))
        oldest, latest = listing.oldest_reconstructable_version() or 0, listing.latest_version or 0
        versions = list(range(oldest, latest + 1))
        sampled = [v for v in versions if (v - oldest) % every == 0 or v == latest]
        theirs = _spark_rows(spark, path, sampled)
        spark_checked += len(sampled)
        previous = None
        for v in versions:
            rows = _rows_deltalake(path, v, spec.dv)
            checked += 1
            f = listing.commits.get(v)
            kind = recent_commit(v, 0, parse_commit(Path(f.path).read_bytes(), f.name)).kind if f else "?"
            if kind in ("deltalog", "maintenance") and previous is not None and rows != previous:
                problems.append(f"{arm.name}/{spec.name} v{v}: the maintenance commit changed the rows")
            if v in theirs and theirs[v] != rows:
                problems.append(f"{arm.name}/{spec.name} v{v}: Delta Spark and deltalake read different rows")
            previous = rows
    return {"versions": checked, "spark_versions": spark_checked, "problems": problems}


def _per100(n: int, d: int) -> float | None:
    return round(100.0 * n / d, 2) if d else None


def run(args: Any) -> list[dict[str, Any]]:
    from deltalog.log.load import snapshot_at
    from deltalog.storage.filesystem import Storage

    seconds = args.seconds or (75.0 if args.scale == "small" else 180.0)
    names = [t.strip() for t in args.tables.split(",") if t.strip()]
    specs = tuple(s for s in TABLES if s.name in names)
    if len(specs) != len(names) or not specs:
        raise SystemExit(f"error: --tables takes {', '.join(s.name for s in TABLES)}, got {args.tables!r}")
    arm_names = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = set(arm_names) - {"delta", "deltalog", "plain"}
    if unknown or not arm_names:
        raise SystemExit(f"error: --arms takes delta, deltalog and plain, got {args.arms!r}")
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-writer-conflicts-"))
    work.mkdir(parents=True, exist_ok=True)
    target = int(args.target_size)
    spark = _session(args)
    try:
        arms = {}
        for name in arm_names:
            arm = Arm(name, work / name)
            for spec in specs:
                arm.tables[spec.name] = arm.root / spec.name
                _create(spark, spec, arm.tables[spec.name])
            arms[name] = arm
        ops: list[Op] = []
        lock = threading.Lock()
        stop = threading.Event()
        stop_file = work / "stop"
        # The writers first: maintenance starts once the log holds their rhythm, as on a table in use.
        writers = [Writers(spark, arm, args.seed, stop, ops, lock, specs) for arm in arms.values()]
        for w in writers:
            w.start()
        warm_until = time.time() + max(0.0, args.warmup)
        stop.wait(min(20.0, max(0.0, args.warmup)))
        while time.time() < warm_until:
            with lock:
                landed = [
                    sum(1 for o in ops if o.arm == a and o.table == t and o.kind in DML_KINDS and o.status == "ok")
                    for a in arms
                    for t in arms[a].tables
                    if next(s for s in specs if s.name == t).dml
                ]
            if min(landed) >= WARMUP_STATEMENTS:
                break
            stop.wait(1.0)
        children = {}
        for name in ("deltalog", "plain"):
            if name in arms:
                spec_json = {
                    "tables": [str(p) for p in arms[name].tables.values()],
                    "target_size": target,
                    "pause": args.pause,
                    "stop_file": str(stop_file),
                    "out": str(work / f"{name}-rounds.json"),
                    "writer_aware": name == "deltalog",
                }
                children[name] = subprocess.Popen(
                    [sys.executable, str(BENCH_DIR / "writer_conflicts_maintainer.py"), json.dumps(spec_json)]
                )
        started = time.time()
        log.info("maintenance starts after a warm-up of %.0f s", started - warm_until + max(0.0, args.warmup))
        optimizers = delta_optimize_loops(spark, arms["delta"], args.pause, stop, ops, lock) if "delta" in arms else []
        sampler = threading.Thread(
            target=sample_small_files, args=(list(arms.values()), target // 2, stop), daemon=True
        )
        sampler.start()
        stop.wait(seconds)
        stop.set()
        stop_file.touch()
        for w in writers:
            w.join()
        for t in optimizers:
            t.join(timeout=300)
        for name, child in children.items():
            child.wait(timeout=600)
            out = work / f"{name}-rounds.json"
            doc = json.loads(out.read_text()) if out.exists() else {}
            arms[name].rounds = doc.get("rounds", []) if isinstance(doc, dict) else doc
            arms[name].peak_mb = doc.get("peak_mb") if isinstance(doc, dict) else None
        elapsed = time.time() - started
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
        # Streaming batches that landed: the STREAMING UPDATE commits of each set's events table.
        from deltalog.log.history import history as read_history
        from deltalog.log.listing import list_log

        for arm in arms.values():
            for spec in specs:
                if not spec.streaming:
                    continue
                st = Storage(str(arm.tables[spec.name]))
                for h in read_history(st, list_log(st), None):
                    if h.operation == "STREAMING UPDATE":
                        ops.append(Op(arm.name, spec.name, "stream", "ok", h.timestamp / 1000, 0.0))
        # What is measured: the statements that started once maintenance ran (the warm-up is not counted).
        ops[:] = [o for o in ops if o.start >= started]
        attribute(ops, arms)
        (work / "ops.json").write_text(json.dumps([vars(o) for o in ops]))
        log.info("writers stopped after %.0f s; reading every version of every table", elapsed)
        t0 = time.time()
        checks = {name: check_versions(spark, arm, max(1, args.spark_check_every)) for name, arm in arms.items()}
        log.info("versions read in %.0f s", time.time() - t0)
    finally:
        spark.stop()
    small_end = {}
    for name, arm in arms.items():
        small_end[name] = sum(
            sum(1 for s in snapshot_at(Storage(str(p))).files.column("size").to_pylist() if s < target // 2)
            for p in arm.tables.values()
        )
    rows = report(ops, arms, checks, small_end, elapsed, args, target)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def report(
    ops: list[Op],
    arms: dict[str, Arm],
    checks: dict[str, Any],
    small_end: dict[str, int],
    elapsed: float,
    args: Any,
    target: int,
) -> list[dict[str, Any]]:
    kinds = ("append", "stream", "delete", "update", "merge")
    print(
        f"\nwriters and maintenance side by side for {elapsed:.0f} s (seed {args.seed}, pause {args.pause} s, "
        f"target {target} bytes)"
    )
    load = next(iter(arms.values())).load
    if load:
        print(
            f"load average (1 min) over the run: min {min(load):.1f}, mean {sum(load) / len(load):.1f}, max {max(load):.1f}\n"
        )
    print(
        "| set | statement | attempts | landed | conflicts: maintenance | conflicts: writers | errors | "
        "maintenance per 100 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    figures: dict[str, dict[str, Any]] = {}
    for name in arms:
        mine = [o for o in ops if o.arm == name]
        fig: dict[str, Any] = {}
        for kind in kinds:
            k = [o for o in mine if o.kind == kind]
            att = len(k)
            by_m = sum(1 for o in k if o.status == "conflict" and o.by == "maintenance")
            by_w = sum(1 for o in k if o.status == "conflict" and o.by != "maintenance")
            err = sum(1 for o in k if o.status == "error")
            fig[kind] = (att, by_m, by_w, err)
            print(
                f"| {name} | {kind} | {att} | {sum(1 for o in k if o.status == 'ok')} | {by_m} | {by_w} | {err} | "
                f"{_per100(by_m, att)} |"
            )
        dml = [o for o in mine if o.kind in ("delete", "update", "merge")]
        dml_m = sum(1 for o in dml if o.status == "conflict" and o.by == "maintenance")
        appends = [o for o in mine if o.kind in ("append", "stream")]
        app_m = sum(1 for o in appends if o.status == "conflict" and o.by == "maintenance")
        samples = [
            sum(v[i] for v in arms[name].samples.values() if i < len(v))
            for i in range(min((len(v) for v in arms[name].samples.values()), default=0))
        ]
        rounds = arms[name].rounds
        fig.update(
            dml_attempts=len(dml),
            dml_by_maintenance=dml_m,
            dml_per100=_per100(dml_m, len(dml)),
            append_attempts=len(appends),
            append_by_maintenance=app_m,
            small_end=small_end[name],
            small_mean=round(sum(samples) / len(samples), 1) if samples else None,
            errors=[o.detail for o in mine if o.status == "error"][:5],
            maintenance_commits=(
                sum(len(r.get("versions") or []) for r in rounds)
                if rounds
                else sum(1 for o in mine if o.kind == "optimize" and o.status == "ok")
            ),
            bins_lost=sum(int(r.get("bins_lost") or 0) for r in rounds),
            files_deferred=sum(int(r.get("files_deferred") or 0) for r in rounds),
            bins_deferred=sum(int(r.get("bins_deferred") or 0) for r in rounds),
            waited_s=round(sum(float(r.get("waited_s") or 0) for r in rounds), 1),
            maintenance_errors=[r["error"] for r in rounds if r.get("error")][:3]
            + [o.detail for o in mine if o.kind == "optimize" and o.status == "error"][:3],
        )
        figures[name] = fig
    print()
    for name, fig in figures.items():
        c = checks[name]
        print(
            f"{name}: DELETE/UPDATE/MERGE conflicts caused by maintenance {fig['dml_by_maintenance']} of "
            f"{fig['dml_attempts']} ({fig['dml_per100']} per 100); appends and streaming batches "
            f"{fig['append_by_maintenance']} of {fig['append_attempts']}; small files left {fig['small_end']} "
            f"(mean over the run {fig['small_mean']}); maintenance commits {fig['maintenance_commits']}; "
            f"bins lost to writers {fig['bins_lost']}, files deferred {fig['files_deferred']}, bins deferred "
            f"{fig['bins_deferred']}, waited {fig['waited_s']} s; maintainer peak {arms[name].peak_mb} MiB; "
            f"versions read {c['versions']} (Delta Spark "
            f"{c['spark_versions']}), problems {len(c['problems'])}; writer errors {fig['errors']}; maintenance "
            f"errors {fig['maintenance_errors']}"
        )
        for p in c["problems"][:10]:
            print("  problem:", p)
    rows = []
    for name, fig in figures.items():
        rows.append(
            {
                "case": f"{name}: DML conflicts caused per 100 DML ops",
                "note": (
                    f"{fig['dml_by_maintenance']}/{fig['dml_attempts']}; appends {fig['append_by_maintenance']}/"
                    f"{fig['append_attempts']}; small files left {fig['small_end']} (mean {fig['small_mean']}); "
                    f"{fig['maintenance_commits']} maintenance commits; rows at {checks[name]['versions']} versions: "
                    f"{'equal' if not checks[name]['problems'] else 'PROBLEMS'}"
                ),
                "per100": fig["dml_per100"],
                **{f"{k}_attempts": fig[k][0] for k in kinds},
                **{f"{k}_by_maintenance": fig[k][1] for k in kinds},
                "small_files_end": fig["small_end"],
                "small_files_mean": fig["small_mean"],
            }
        )
    if "delta" in figures and "deltalog" in figures:
        d, o = figures["delta"], figures["deltalog"]
        ratio = (o["dml_per100"] / d["dml_per100"]) if d["dml_per100"] else None
        met = (
            ratio is not None
            and ratio <= 0.25
            and o["small_end"] <= d["small_end"]
            and o["append_by_maintenance"] == 0
            and not checks["deltalog"]["problems"]
            and not checks["delta"]["problems"]
        )
        print(
            f"\nratio deltalog/OPTIMIZE of DML conflicts per 100: {ratio if ratio is None else round(ratio, 3)} "
            f"(goal <= 0.25); small files left {o['small_end']} vs {d['small_end']} (mean {o['small_mean']} vs "
            f"{d['small_mean']}); append conflicts {o['append_by_maintenance']}: goal {'met' if met else 'NOT met'}"
        )
        rows.append(
            {
                "case": "deltalog / Delta Spark OPTIMIZE, DML conflicts per 100",
                "conflict_ratio": ratio,
                "target": "<= 0.25x, small files left <=, 0 append conflicts",
                "met": met,
                "note": (
                    f"ratio {'-' if ratio is None else f'{ratio:.3f}'}x; small files left {o['small_end']} vs "
                    f"{d['small_end']}; mean {o['small_mean']} vs {d['small_mean']}"
                ),
            }
        )
    return rows
