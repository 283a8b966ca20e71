"""What the Delta Spark oracle tests compare: table state both ways, deltalog operations, the report.

Kept apart from the tests so the report script and the tests share one definition.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from deltalog import DeltaTable
from deltalog.errors import DeltaLogError
from deltalog.protocol.features import Operation
from deltalog.protocol.table_protocol import Protocol
from reader_checks import ReaderCheck

DAY_MS = 24 * 3600 * 1000


# --- state of a version, as each side sees it ---------------------------------------------


def _dv(dv: dict[str, Any] | None) -> tuple | None:
    if not dv:
        return None
    return (dv["storageType"], dv["pathOrInlineDv"], dv.get("offset"), int(dv["sizeInBytes"]), int(dv["cardinality"]))


def _protocol(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "minReaderVersion": int(p["minReaderVersion"]),
        "minWriterVersion": int(p["minWriterVersion"]),
        "readerFeatures": sorted(p.get("readerFeatures") or []),
        "writerFeatures": sorted(p.get("writerFeatures") or []),
    }


def _metadata(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": m["id"],
        "partitionColumns": list(m.get("partitionColumns") or []),
        "configuration": dict(m.get("configuration") or {}),
        "schema": json.loads(m["schemaString"]),
    }


def spark_states(spark: Any, path: str, versions: list[int]) -> dict[int, dict[str, Any]]:
    """Live files, protocol and metadata of each version as Delta Spark's DeltaLog replays them.

    The live files of all versions come from one Spark job (a union of the snapshots'
    file lists); protocol and metadata from the snapshots themselves.
    """
    from functools import reduce

    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    jvm = spark._jvm
    dlog = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    defaults = [getattr(dlog, f"getSnapshotAt$default${i}")() for i in (2, 3, 4)]
    snaps = {v: dlog.getSnapshotAt(v, *defaults) for v in versions}
    frames = [
        DataFrame(snap.allFiles().toDF(), spark).select(
            F.lit(v).alias("version"), "path", "size", "partitionValues", "deletionVector"
        )
        for v, snap in snaps.items()
    ]
    files: dict[int, list] = {v: [] for v in versions}
    for r in reduce(DataFrame.unionAll, frames).collect():
        files[r["version"]].append(
            (
                r["path"],
                int(r["size"]),
                tuple(sorted((r["partitionValues"] or {}).items())),
                _dv(r["deletionVector"] and r["deletionVector"].asDict()),
            )
        )
    return {
        v: {
            "files": sorted(files[v]),
            "protocol": _protocol(json.loads(snap.protocol().json())["protocol"]),
            "metadata": _metadata(json.loads(snap.metadata().json())["metaData"]),
        }
        for v, snap in snaps.items()
    }


def spark_state(spark: Any, path: str, version: int) -> dict[str, Any]:
    """:func:`spark_states` of one version."""
    return spark_states(spark, path, [version])[version]


#: Order-independent content hash of the rows Delta Spark reads (see tests/delta_spark.py).
HASH_COLUMNS = ("count(*) AS n", "sum(cast(xxhash64(to_json(struct(*))) AS DECIMAL(38, 0))) AS h")


def hashable(df: Any) -> Any:
    """``df`` with its geometry and geography columns as hex WKB (``to_json`` has no form for them).

    Tables without such columns are returned as they are, so their hashes stay what they were.
    """
    geo = {f.name for f in df.schema.fields if f.dataType.typeName() in ("geometry", "geography")}
    if not geo:
        return df
    return df.selectExpr(*(f"hex(ST_AsBinary(`{c}`)) AS `{c}`" if c in geo else f"`{c}`" for c in df.columns))


def content_hashes(spark: Any, path: str, versions: list[int] | set[int]) -> dict[int, tuple[int, str]]:
    """(row count, content hash) of each version Delta Spark reads, in one Spark job.

    The versions' reads are one union of per-version aggregates; when it fails (a
    version Delta Spark cannot read) each version is read alone, and an unreadable one
    maps to ``"unreadable: <first line of the error>"`` instead of a pair.
    """
    from functools import reduce

    from pyspark.sql import DataFrame

    def frame(v: int) -> DataFrame:
        df = spark.read.format("delta").option("versionAsOf", v).load(path)
        return hashable(df).selectExpr(f"{int(v)} AS version", *HASH_COLUMNS)

    def pair(r: Any) -> tuple[int, str]:
        return int(r["n"]), str(r["h"] or 0)

    versions = sorted(versions)
    if not versions:
        return {}
    try:
        rows = reduce(DataFrame.unionAll, [frame(v) for v in versions]).collect()
        return {r["version"]: pair(r) for r in rows}
    except Exception:  # noqa: BLE001 - find which version fails, below
        pass
    out: dict[int, Any] = {}
    for v in versions:
        try:
            out[v] = pair(frame(v).collect()[0])
        except Exception as exc:  # noqa: BLE001 - an unreadable version is the finding
            out[v] = f"unreadable: {(str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]}"
    return out


def deltalog_state(path: str, version: int | None = None) -> dict[str, Any]:
    """The same as :func:`spark_state`, from ``deltalog``'s snapshot."""
    snap = DeltaTable(path).snapshot(version=version)
    doc = snap.to_dict(include_files=False)
    f = snap.files
    dvs = f.column("deletionVector").to_pylist()
    files = sorted(
        (p, int(s), tuple(sorted((dict(pv) if isinstance(pv, list) else (pv or {})).items())), _dv(dv))
        for p, s, pv, dv in zip(
            f.column("path").to_pylist(), f.column("size").to_pylist(), f.column("partitionValues").to_pylist(), dvs
        )
    )
    meta = doc["metadata"]
    return {
        "files": files,
        "protocol": _protocol(doc["protocol"]),
        "metadata": _metadata(meta),
        "version": snap.version,
    }


def state_differences(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """Human-readable differences (empty when the two states are the same)."""
    out = []
    a = {json.dumps(f) for f in ours["files"]}  # files are lists once stored as JSON
    b = {json.dumps(f) for f in theirs["files"]}
    for f in sorted(a - b)[:5]:
        out.append(f"only deltalog has {f}")
    for f in sorted(b - a)[:5]:
        out.append(f"only Delta Spark has {f}")
    for key in ("protocol", "metadata"):
        if ours[key] != theirs[key]:
            out.append(f"{key}: deltalog {ours[key]} != Delta Spark {theirs[key]}")
    return out


# --- deltalog operations, each recorded as ok or refused ---------------------------------------


@dataclass(frozen=True)
class Outcome:
    """One feature x operation cell of the report."""

    table: str
    feature: str
    operation: str
    status: str  # ok | refused | failed | n/a
    detail: str
    seconds: float


#: The report's columns, in the order the checks run them, each with the column of the feature
#: table (provider/deltalog/features.py) it is judged by; ``None``: Delta Spark's own work.
REPORT_COLUMNS: dict[str, Operation | None] = {
    "snapshot": Operation.SNAPSHOT,
    "commit request": Operation.COMMIT_REQUEST,
    "checkpoint classic": Operation.CHECKPOINT,
    "checkpoint V2": Operation.CHECKPOINT,
    "compaction local": Operation.COMPACTION_LOCAL,
    "manifest": Operation.MANIFEST,
    "vacuum lite": Operation.VACUUM,
    "vacuum full": Operation.VACUUM,
    "log cleanup": Operation.LOG_CLEANUP,
    "compaction Spark": Operation.COMPACTION_SPARK,
    "convert": Operation.CONVERT,
    "Delta Spark writes after": None,
}

#: Run one after the other on one private copy of a table, in maintenance order (lite vacuum
#: before log cleanup: it reads the commits cleanup removes). Compaction by the Spark engine
#: gets a fresh copy (after the local one there would be nothing left to compact), convert the
#: Parquet files of the latest version.
SEQUENCE = (
    "commit request",
    "checkpoint",
    "compaction local",
    "manifest",
    "vacuum lite",
    "vacuum full",
    "log cleanup",
)

Hash = tuple[int, str]

#: With deferred reads, the operations before which the pending reads run: log cleanup deletes
#: the history the operations before it may have changed.
READ_BEFORE = ("log cleanup",)


def add_hashes(a: Hash, b: Hash) -> Hash:
    """The content hash of the union of two multisets of rows."""
    return a[0] + b[0], str(int(a[1]) + int(b[1]))


@dataclass(frozen=True)
class Step:
    """What one deltalog operation did, as far as the checks need it."""

    status: str  # ok | refused | n/a
    detail: str
    readable_from: int | None = None  # the oldest version deltalog says is still readable (deleting ops)
    added: Hash | None = None  # the rows the operation's commit added (commit request); None: rows unchanged
    column: str | None = None  # the report column when the operation decides it (checkpoint kind)


def refusal(exc: DeltaLogError) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:240]}"


def table_features(protocol: dict[str, Any]) -> set[str]:
    """Every feature a protocol action (as recorded in the corpus) makes the table use."""
    p = Protocol.from_action(protocol)
    return p.effective_reader_features() | p.effective_writer_features()


def _live_file_without_dv(path: str) -> tuple[str, dict[str, Any]]:
    """A live data file without a deletion vector (unescaped table-relative path) and its add."""
    from urllib.parse import unquote

    files = DeltaTable(path).snapshot().files.to_pylist()
    plain = [f for f in files if not f.get("deletionVector")]
    if not plain:
        raise AssertionError(f"{path}: every live file has a deletion vector")
    pick = max(plain, key=lambda f: (f.get("modificationTime") or 0, f["path"]))
    return unquote(pick["path"]), pick


def commit_request_step(spark: Any, path: str) -> Step:
    """A commit request adding a copy of a live file (Delta Spark's own layout, so every writer rule
    can be met) with that file's partition values; the rows it adds are those Delta Spark reads from
    the original at the latest version."""
    import shutil
    import uuid

    from deltalog.ingest import commit_request

    src, add = _live_file_without_dv(path)
    folder, _, name = src.rpartition("/")
    copy = (folder + "/" if folder else "") + f"part-deltalog-{uuid.uuid4().hex[:8]}-{name.split('-', 1)[-1]}"
    version = DeltaTable(path).snapshot().version
    row = (
        hashable(
            spark.read.format("delta")
            .option("versionAsOf", version)
            .load(path)
            .where(f"_metadata.file_name = '{name}'")
        )
        .selectExpr(*HASH_COLUMNS)
        .collect()[0]
    )
    pv = add.get("partitionValues") or {}
    shutil.copyfile(os.path.join(path, src), os.path.join(path, copy))
    try:
        r = commit_request(
            path,
            {
                "operation": "WRITE",
                "add": [{"path": copy, "partitionValues": dict(pv) if isinstance(pv, list) else pv}],
            },
        )
    except DeltaLogError:
        os.remove(os.path.join(path, copy))
        raise
    return Step("ok", f"v{r.version}: added a copy of {src}", added=(int(row["n"]), str(row["h"] or 0)))


def spark_compaction_step(spark: Any, path: str) -> Step:
    """Compaction by deltalog's Spark engine, its job run in the oracle's session (no spark-submit:
    one JVM for the whole run); the plan and the commit are deltalog's as in ``compact(engine="spark")``."""
    from deltalog.compaction import commit_outputs
    from deltalog.compaction.plan import plan_from_snapshot
    from deltalog.compaction.spark.commit import outputs_from_request
    from deltalog.compaction.spark.job import SparkBinRewriter, check_spark_can_rewrite
    from spark_session_jobs import job_settings

    table = DeltaTable(path)
    plan = plan_from_snapshot(table.snapshot(), table.uri, engine="spark")
    if not plan.bins:
        return Step("ok", "nothing to compact")
    check_spark_can_rewrite(plan)  # as compact(engine="spark") does before it submits the job
    with job_settings(spark):
        rewrite = SparkBinRewriter(spark, plan, table.uri).run()
    outputs, skipped = outputs_from_request(table.storage, plan, rewrite.request, rewrite.failures)
    r = commit_outputs(table, plan, outputs, skipped, engine="spark")
    if r.error:
        return Step("refused", r.error)
    d = r.to_dict()
    return Step("ok", f"{d['num_files_removed']} files -> {d['num_files_added']}")


def run_step(name: str, path: str, spark: Any) -> Step:
    """Run one deltalog operation on ``path``; a deltalog error is a refusal (recorded with its line)."""
    from deltalog.compaction import compact
    from deltalog.log_maintenance import create_checkpoint
    from deltalog.log_maintenance.log_cleanup import cleanup_log
    from deltalog.log_maintenance.manifest import generate_manifest
    from deltalog.vacuuming import vacuum

    try:
        if name == "commit request":
            return commit_request_step(spark, path)
        if name == "compaction local":
            r = compact(path, min_files=2)
            if r.error:
                return Step("refused", r.error)
            d = r.to_dict()
            return Step("ok", f"{d['num_files_removed']} files -> {d['num_files_added']}")
        if name == "compaction Spark":
            return spark_compaction_step(spark, path)
        if name == "checkpoint":
            # Sidecars of at most 5 actions: a V2 checkpoint of these small tables gets several.
            c = create_checkpoint(path, sidecar_max_actions=5)
            column = "checkpoint V2" if c.kind == "v2" else "checkpoint classic"
            again = " (already there)" if c.already_existed else ""
            return Step("ok", f"at v{c.version}{again}, {len(c.sidecars)} sidecars", column=column)
        if name == "log cleanup":
            # The log as if 40 days old: past the default 30-day retention.
            r = cleanup_log(path, now_ms=int(time.time() * 1000) + 40 * DAY_MS)
            if r.skipped_reason:
                return Step("ok", f"nothing deleted: {r.skipped_reason}")
            return Step(
                "ok",
                f"{r.num_deleted} log files deleted, readable from v{r.oldest_version_kept}",
                readable_from=r.oldest_version_kept,
            )
        if name in ("vacuum lite", "vacuum full"):
            v = vacuum(path, retention_hours=0, mode=name.split()[1], allow_short_retention=True)
            return Step(
                "ok",
                f"{v.num_deleted_files} files deleted, readable from v{v.fully_readable_from_version}",
                readable_from=v.fully_readable_from_version,
            )
        if name == "manifest":
            m = generate_manifest(path)
            return Step("ok", m.summary_line())
    except DeltaLogError as exc:
        column = None
        if name == "checkpoint":
            v2 = "v2Checkpoint" in table_features(DeltaTable(path).snapshot().protocol.to_dict())
            column = "checkpoint V2" if v2 else "checkpoint classic"
        return Step("refused", refusal(exc), column=column)
    raise ValueError(f"unknown operation {name}")


# --- which versions an operation can have changed for a reader ------------------------------


def table_files(path: str) -> dict[str, int]:
    """Every file under the table (relative path -> size): what a reader of any version may touch."""
    out = {}
    for dirpath, _, names in os.walk(path):
        for n in names:
            full = os.path.join(dirpath, n)
            out[os.path.relpath(full, path).replace(os.sep, "/")] = os.path.getsize(full)
    return out


def _log_version(rel: str) -> int | None:
    """The version a log file belongs to (commit, checkpoint, checksum), None for others."""
    name = rel.removeprefix("_delta_log/")
    head = name.split(".", 1)[0]
    return int(head) if "/" not in name and len(head) == 20 and head.isdigit() else None


def versions_to_reread(before: dict[str, int], after: dict[str, int], readable: range) -> tuple[list[int], str]:
    """The readable versions whose read may differ after a change of the table's files, and why.

    A version's read uses the newest checkpoint at or below it, the commits after that
    checkpoint and the data and DV files live in it. So: a deleted file (data, DV or
    log) may have been needed by any version, re-read them all; a new or rewritten log
    file of version n (a commit, a checkpoint) changes the read of n and later; new
    files outside the log (data not committed, manifests) change no read.
    """
    removed = before.keys() - after.keys()
    changed = {p for p in before.keys() & after.keys() if before[p] != after[p]}
    added = after.keys() - before.keys()
    if removed:
        return list(readable), f"{len(removed)} files deleted"
    log_files = sorted(p for p in added | changed if p.startswith("_delta_log/"))
    if not log_files:
        return [], "no log file changed"
    versions = [_log_version(p) for p in log_files]
    if "_delta_log/_last_checkpoint" in log_files:
        versions.append(readable.stop - 1)
    known = [v for v in versions if v is not None]
    if not known:
        return list(readable), "log changed (" + ", ".join(log_files[:3]) + ")"
    low = min(known)
    return [v for v in readable if v >= low], f"log changed from v{low}"


def _same(got: Any, want: Hash) -> bool:
    return isinstance(got, tuple | list) and tuple(got) == tuple(want)


@dataclass
class TableCheck:
    """The deltalog operations of :data:`SEQUENCE` on one private copy of a corpus table.

    After each operation that ran, Delta Spark re-reads every version deltalog says is
    still readable whose read the operation may have changed (:func:`versions_to_reread`;
    all of them at once, one Spark job) and must get the content hash expected of it:
    the corpus's for the versions Delta Spark wrote, the previous version's for the
    commits of an operation that changes no row, plus the rows added by a commit
    request.

    With ``defer_reads`` the re-reads wait for :meth:`read_deferred`: one Spark job over
    every version some operation may have changed that is still readable, run before log
    cleanup deletes the history (:data:`READ_BEFORE`) and after the sequence (the CI
    budget: two jobs per table instead of six; measured 137 s -> 94 s on four tables).
    An operation's effect on a version stays until that read (nothing of the sequence
    rewrites a checkpoint or commit another wrote), so a bad read shows there; what it
    gives up is a version vacuum lite declared readable that vacuum full's cutoff then
    retires before the read (vacuum's deletions are judged against Delta Spark's own plans
    on every corpus table in ``test_vacuum_plan_never_deletes_what_delta_spark_keeps``).
    On a mismatch the caller runs the sequence again on a fresh copy without deferral,
    which names the operation.

    With ``readers`` (tests/reader_checks.py) the in-process readers, DuckDB's ``delta_scan``
    and deltalake, read the same versions right after each operation (never deferred: they
    cost milliseconds a version), each against the rows expected of the version.
    """

    spark: Any
    entry: dict[str, Any]
    path: str
    outcomes: list[Outcome] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    expected: dict[int, Hash] = field(default_factory=dict)
    readable_from: int = 0
    reads: int = 0
    defer_reads: bool = False
    deferred: dict[int, list[str]] = field(default_factory=dict)  # version -> the operations that may change it
    deferred_failed: bool = False
    readers: ReaderCheck | None = None

    def __post_init__(self) -> None:
        if not self.expected:
            self.expected = {int(v): (int(h[0]), str(h[1])) for v, h in self.entry["hashes"].items()}

    def record(self, column: str, status: str, detail: str, seconds: float) -> None:
        self.outcomes.append(Outcome(self.entry["name"], self.entry["feature"], column, status, detail, seconds))

    def run(self, name: str) -> None:
        if self.defer_reads and name in READ_BEFORE:
            self.read_deferred()
        t0 = time.perf_counter()
        before = table_files(self.path)
        old_latest = DeltaTable(self.path).list_log().latest_version
        step = run_step(name, self.path, self.spark)
        status, detail = step.status, step.detail
        if status == "ok":
            latest = DeltaTable(self.path).list_log().latest_version
            for v in range(old_latest + 1, latest + 1):
                prev = self.expected[v - 1]
                self.expected[v] = add_hashes(prev, step.added) if step.added and v == old_latest + 1 else prev
            if step.readable_from is not None:
                self.readable_from = max(self.readable_from, step.readable_from)
            readable = range(self.readable_from, latest + 1)
            reread, why = versions_to_reread(before, table_files(self.path), readable)
            if self.readers is not None:
                added = step.added[0] if step.added else None
                found = self.readers.committed(self.path, old_latest, latest, added, name)
                found += self.readers.check(self.path, reread, name)
                self.problems += found
                status = "failed" if found else status
                if reread and self.readers.readers:
                    detail += f"; {' and '.join(self.readers.readers)} read v{reread[0]}..v{reread[-1]}"
            if reread and self.defer_reads:
                for v in reread:
                    self.deferred.setdefault(v, []).append(name)
                detail += f"; Delta Spark reads v{reread[0]}..v{reread[-1]} in a batched read ({why})"
            elif reread:
                bad = self._reread(reread, {v: [name] for v in reread})
                status = "failed" if bad else status
                detail += f"; Delta Spark read v{reread[0]}..v{reread[-1]} ({len(reread)} versions: {why})"
            else:
                detail += f"; nothing for Delta Spark to re-read ({why})"
        column = step.column or name
        self.record(column, status, detail, time.perf_counter() - t0)
        if name == "checkpoint" and column.startswith("checkpoint "):
            other = "checkpoint classic" if column == "checkpoint V2" else "checkpoint V2"
            self.record(other, "n/a", f"the table's protocol makes deltalog write {column.split()[1]} ones", 0.0)

    def read_deferred(self) -> bool:
        """The deferred re-reads, in one Spark job, of the versions still readable; False once any mismatched."""
        latest = DeltaTable(self.path).list_log().latest_version
        versions = sorted(v for v in self.deferred if self.readable_from <= v <= latest)
        pending, self.deferred = self.deferred, {}
        if versions and self._reread(versions, pending):
            self.deferred_failed = True
        return not self.deferred_failed

    def _reread(self, versions: list[int], after: dict[int, list[str]]) -> list[int]:
        """Delta Spark reads ``versions`` in one job; the versions whose hash is not the expected one
        (each a problem naming the operations in ``after`` that may have changed it)."""
        self.spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
        got = content_hashes(self.spark, self.path, versions)
        self.reads += len(versions)
        bad = [v for v in versions if not _same(got.get(v), self.expected[v])]
        for v in bad:
            self.problems.append(
                f"{self.entry['name']} after {', '.join(after[v])}: Delta Spark v{v} {got.get(v)} != {self.expected[v]}"
            )
        return bad

    def delta_spark_writes(self) -> None:
        """Delta Spark keeps working on the table deltalog maintained, and deltalog reads the result."""
        t0 = time.perf_counter()
        name = self.entry["name"]
        spark = self.spark
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()

        def run(sql: str) -> Any:
            return spark.sql(sql.replace("{t}", f"delta.`{self.path}`"))

        history = run("DESCRIBE HISTORY {t}").collect()
        base = deltalog_state(self.path)["version"]
        problems = []
        if not history or history[0]["version"] != base:
            problems.append(f"DESCRIBE HISTORY does not end at v{base}")
        run(f"INSERT INTO {{t}} SELECT * FROM {{t}} VERSION AS OF {base} WHERE id % 5 = 1")
        run("DELETE FROM {t} WHERE id % 5 = 2")
        run("OPTIMIZE {t}")
        latest = deltalog_state(self.path)["version"]
        theirs = json.loads(json.dumps(spark_state(spark, self.path, latest)))
        ours = json.loads(json.dumps(deltalog_state(self.path, latest)))
        problems += state_differences(ours, theirs)
        self.problems += [f"{name} after Delta Spark's writes: {d}" for d in problems]
        self.record(
            "Delta Spark writes after",
            "failed" if problems else "ok",
            f"DESCRIBE HISTORY {len(history)} rows; append, delete, OPTIMIZE -> v{latest}",
            time.perf_counter() - t0,
        )


def canonical_hashes(spark: Any, frames: dict[str, Any]) -> dict[str, Hash]:
    """Content hashes of several DataFrames in one job, each with its columns in name order (so that
    tables with the same rows and columns in another order hash the same)."""
    from functools import reduce

    from pyspark.sql import DataFrame

    parts = [
        hashable(df.select(*sorted(df.columns))).selectExpr(f"'{key}' AS key", *HASH_COLUMNS)
        for key, df in frames.items()
    ]
    return {r["key"]: (int(r["n"]), str(r["h"] or 0)) for r in reduce(DataFrame.unionAll, parts).collect()}


def convert_check(spark: Any, entry: dict[str, Any], source: str, dest: str) -> tuple[str, str]:
    """Convert where it applies: the rows of the latest version written by Spark as a plain (hive-style)
    Parquet folder, converted by deltalog, then read by Delta Spark with the same rows.

    It applies where every feature of the table lets convert make such a table (the
    feature table's convert column); elsewhere the cell is ``n/a`` with the reason.
    """
    from deltalog.convert import convert_to_delta
    from deltalog.protocol.features import REFUSED, feature_cell

    latest = entry["states"][str(entry["latest"])]
    features = table_features(latest["protocol"])
    refused = sorted(f for f in features if feature_cell(f, Operation.CONVERT).status == REFUSED)
    if refused:
        return "n/a", f"not run: {refused[0]}: {feature_cell(refused[0], Operation.CONVERT).reason}"
    parts = latest["metadata"]["partitionColumns"]
    types = {f["name"]: f["type"] for f in latest["metadata"]["schema"]["fields"]}
    rows = spark.read.format("delta").option("versionAsOf", entry["latest"]).load(source)
    rows.write.partitionBy(*parts).parquet(dest)
    try:
        r = convert_to_delta(dest, partition_by=", ".join(f"{c} {types[c]}" for c in parts) or None)
    except DeltaLogError as exc:
        return "refused", refusal(exc)
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    got = canonical_hashes(spark, {"ours": spark.read.format("delta").load(dest), "theirs": rows})
    if got["ours"] != got["theirs"]:
        return "failed", f"Delta Spark reads {got['ours']} from the converted table, {got['theirs']} from the source"
    return "ok", f"{r.num_files} files, {got['ours'][0]} rows as in v{entry['latest']}"


def disagreements(outcomes: list[Outcome], protocols: dict[str, dict[str, Any]]) -> list[str]:
    """Cells of the report that contradict the feature table (provider/deltalog/features.py).

    For the table's features (its protocol at the latest version) and the cell's
    operation: a feature refused there means the run must have refused naming one of
    those features; all supported means it must have run (``ok``); conditional means
    it ran or refused (the condition held). ``n/a`` only where the feature table (convert)
    or the protocol (the other checkpoint kind) says so; ``failed`` never agrees.
    """
    from deltalog.protocol.features import REFUSED, SUPPORTED, feature_cell

    out = []
    for o in outcomes:
        op = REPORT_COLUMNS[o.operation]
        if op is None:
            continue
        features = table_features(protocols[o.table])
        cells = {f: feature_cell(f, op) for f in features}
        refused = sorted(f for f, c in cells.items() if c.status == REFUSED)
        if o.operation.startswith("checkpoint ") and o.status == "n/a":
            agree = ("v2Checkpoint" in features) == (o.operation == "checkpoint classic")
            says = "the other checkpoint kind"
        elif o.status == "n/a":
            agree = o.operation == "convert" and bool(refused)
            says = f"refused ({', '.join(refused)})" if refused else "runs"
        elif refused:
            agree = o.status == "refused" and any(f in o.detail for f in refused)
            says = f"refused ({', '.join(refused)})"
        elif all(c.status == SUPPORTED for c in cells.values()):
            agree = o.status == "ok"
            says = "supported"
        else:
            agree = o.status in ("ok", "refused")
            says = "conditional (" + ", ".join(sorted(f for f, c in cells.items() if c.status != SUPPORTED)) + ")"
        if not agree:
            out.append(f"{o.table} / {o.operation}: features.py says {says}; the run: {o.status}: {o.detail}")
    return out


def report_markdown(
    outcomes: list[Outcome], not_built: list[dict[str, str]], header: str, left_out: list[tuple[str, str]] = ()
) -> str:
    """The feature x operation matrix: ok / refused (reason) per cell, plus the tables not built."""
    tables: dict[str, dict[str, Outcome]] = {}
    features: dict[str, str] = {}
    for o in outcomes:
        tables.setdefault(o.table, {})[o.operation] = o
        features[o.table] = o.feature
    ops = [op for op in REPORT_COLUMNS if any(op in t for t in tables.values())]
    lines = [header, "", "| table | feature | " + " | ".join(ops) + " |", "|---|---|" + "---|" * len(ops)]
    reasons: list[str] = []
    for name in sorted(tables):
        cells = []
        for op in ops:
            o = tables[name].get(op)
            if o is None:
                cells.append("")
            elif o.status in ("ok", "n/a"):
                cells.append(o.status)
            else:
                reasons.append(f"- `{name}` / {op}: {o.status}: {o.detail}")
                cells.append(f"{o.status} [{len(reasons)}]")
        lines.append(f"| `{name}` | {features[name]} | " + " | ".join(cells) + " |")
    if reasons:
        lines += ["", "Reasons:", ""] + [f"{i}. {r[2:]}" for i, r in enumerate(reasons, 1)]
    if left_out:
        lines += ["", "Recipes this run did not build or check (`DELTALOG_ORACLE_TABLES` left them out):", ""]
        lines += [f"- `{name}` ({feature})" for name, feature in left_out]
    if not_built:
        lines += ["", "Tables Delta Spark could not build (not checked):", ""]
        lines += [f"- `{t['name']}` ({t['feature']}): {t['error']}" for t in not_built]
    return "\n".join(lines) + "\n"


def write_report(text: str, outcomes: list[Outcome]) -> str:
    """``$DELTALOG_FEATURE_MATRIX`` (the report script points it at docs/) or build/feature-matrix.md; the
    cells with their seconds go to build/feature-matrix.json (not committed: timings change every run)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("DELTALOG_FEATURE_MATRIX") or os.path.join(here, "build", "feature-matrix.md")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w", encoding="utf-8") as f:
        f.write(text)
    os.makedirs(os.path.join(here, "build"), exist_ok=True)
    with open(os.path.join(here, "build", "feature-matrix.json"), "w", encoding="utf-8") as f:
        json.dump([asdict(o) for o in outcomes], f, indent=1)
    return target


# --- vacuum, judged by the reference ---------------------------------------------------------


def spark_vacuum_dry_run(
    spark: Any, path: str, mode: str, hours: float | None, clock_ms: int | None = None
) -> set[str]:
    """Table-relative paths Delta Spark's ``VACUUM ... DRY RUN`` lists (files and directories).

    ``clock_ms`` sets Delta Spark's clock (a ``ManualClock`` on a fresh ``DeltaLog``).
    Its VACUUM reads that clock only for the table's own retention: the cutoff is then
    ``clock_ms - delta.deletedFileRetentionDuration``, to the millisecond. ``RETAIN n
    HOURS`` uses the system clock and rounds ``n`` to whole hours, so ``clock_ms``
    requires ``hours=None``.
    """
    from urllib.parse import unquote

    if clock_ms is not None and hours is not None:
        raise ValueError("Delta Spark's VACUUM reads its DeltaLog clock only without RETAIN: pass hours=None")
    jvm = spark._jvm
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    if clock_ms is not None:
        clock = jvm.org.apache.spark.util.ManualClock(clock_ms)
        jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
            spark._jsparkSession, jvm.org.apache.hadoop.fs.Path(path), clock
        )
    retain = "" if hours is None else f" RETAIN {hours:g} HOURS"
    lite = " LITE" if mode == "lite" else ""
    rows = spark.sql(f"VACUUM delta.`{path}`{lite}{retain} DRY RUN").collect()
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    root = os.path.realpath(path)
    out = set()
    for r in rows:
        p = unquote(r[0].removeprefix("file:"))
        out.add(os.path.relpath(os.path.realpath(p), root))
    return out


def deltalog_vacuum_plan(
    path: str, mode: str, hours: float | None, now_ms: int | None = None, **engine: Any
) -> tuple[set[str], set[str]]:
    """(files, directories) deltalog's plan would delete, table-relative and unescaped (``now_ms``: its clock;
    ``engine``: see plan_vacuum)."""
    from urllib.parse import unquote

    from deltalog.vacuuming.plan import plan_vacuum

    plan = plan_vacuum(path, retention_hours=hours, mode=mode, allow_short_retention=True, now_ms=now_ms, **engine)
    files = {unquote(p) for p in plan.files.column("path").to_pylist()}
    return files, {unquote(d).rstrip("/") for d in plan.directories}
