"""What the Delta Spark oracle tests compare: table state both ways, deltalog operations, the report.

Kept apart from the tests so the report script and the tests share one definition.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from deltalog import DeltaTable
from deltalog.errors import DeltaLogError

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


def spark_state(spark: Any, path: str, version: int) -> dict[str, Any]:
    """Live files, protocol and metadata of ``version`` as Delta Spark's DeltaLog replays them."""
    from pyspark.sql import DataFrame

    jvm = spark._jvm
    dlog = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    defaults = [getattr(dlog, f"getSnapshotAt$default${i}")() for i in (2, 3, 4)]
    snap = dlog.getSnapshotAt(version, *defaults)
    rows = DataFrame(snap.allFiles().toDF(), spark).select("path", "size", "partitionValues", "deletionVector")
    files = sorted(
        (
            r["path"],
            int(r["size"]),
            tuple(sorted((r["partitionValues"] or {}).items())),
            _dv(r["deletionVector"] and r["deletionVector"].asDict()),
        )
        for r in rows.collect()
    )
    return {
        "files": files,
        "protocol": _protocol(json.loads(snap.protocol().json())["protocol"]),
        "metadata": _metadata(json.loads(snap.metadata().json())["metaData"]),
    }


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
    status: str  # ok | refused | failed
    detail: str
    seconds: float


def run_operation(name: str, path: str) -> tuple[str, str, int | None]:
    """Run one deltalog operation on ``path``: (status, detail, oldest version still readable or None).

    A deltalog error is a refusal (recorded with its line); anything else propagates.
    """
    from deltalog.checkpoint import create_checkpoint
    from deltalog.compaction import compact
    from deltalog.log_cleanup import cleanup_log
    from deltalog.manifest import generate_manifest
    from deltalog.vacuum import vacuum

    try:
        if name == "compaction":
            r = compact(path, min_files=2)
            if r.error:
                return "refused", r.error, None
            d = r.to_dict()
            return "ok", f"{d['numFilesRemoved']} files -> {d['numFilesAdded']}", None
        if name == "checkpoint":
            r = create_checkpoint(path)
            return "ok", f"{r.kind} checkpoint at v{r.version} ({len(r.sidecars)} sidecars)", None
        if name == "log cleanup":
            # The log as if 40 days old: past the default 30-day retention.
            r = cleanup_log(path, now_ms=int(time.time() * 1000) + 40 * DAY_MS)
            if r.skipped_reason:
                return "ok", f"nothing deleted: {r.skipped_reason}", None
            return (
                "ok",
                f"{r.num_deleted} log files deleted, readable from v{r.oldest_version_kept}",
                r.oldest_version_kept,
            )
        if name in ("vacuum lite", "vacuum full"):
            mode = name.split()[1]
            r = vacuum(path, retention_hours=0, mode=mode, allow_short_retention=True)
            return (
                "ok",
                f"{r.num_deleted_files} files deleted, readable from v{r.fully_readable_from_version}",
                r.fully_readable_from_version,
            )
        if name == "manifest":
            r = generate_manifest(path)
            return "ok", "manifest written", None
    except DeltaLogError as exc:
        return "refused", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}", None
    raise ValueError(f"unknown operation {name}")


#: In maintenance order; lite vacuum before log cleanup (it reads the commits cleanup removes).
OPERATIONS = ("compaction", "checkpoint", "vacuum lite", "vacuum full", "log cleanup", "manifest")


def report_markdown(
    outcomes: list[Outcome], not_built: list[dict[str, str]], header: str, left_out: list[tuple[str, str]] = ()
) -> str:
    """The feature x operation matrix: ok / refused (reason) per cell, plus the tables not built."""
    tables: dict[str, dict[str, Outcome]] = {}
    features: dict[str, str] = {}
    for o in outcomes:
        tables.setdefault(o.table, {})[o.operation] = o
        features[o.table] = o.feature
    ops = [op for op in ("snapshot", *OPERATIONS, "Delta Spark writes after") if any(op in t for t in tables.values())]
    lines = [header, "", "| table | feature | " + " | ".join(ops) + " |", "|---|---|" + "---|" * len(ops)]
    reasons: list[str] = []
    for name in sorted(tables):
        cells = []
        for op in ops:
            o = tables[name].get(op)
            if o is None:
                cells.append("")
            elif o.status == "ok":
                cells.append("ok")
            else:
                reasons.append(f"- `{name}` / {op}: {o.status}: {o.detail}")
                cells.append(f"{o.status} [{len(reasons)}]")
        lines.append(f"| `{name}` | {features[name]} | " + " | ".join(cells) + " |")
    if reasons:
        lines += ["", "Reasons:", ""] + [f"{i}. {r[2:]}" for i, r in enumerate(reasons, 1)]
    if left_out:
        lines += ["", "Recipes this run did not build or check (`DELTALOG_ORACLE_TABLES=all` runs them):", ""]
        lines += [f"- `{name}` ({feature})" for name, feature in left_out]
    if not_built:
        lines += ["", "Tables Delta Spark could not build (not checked):", ""]
        lines += [f"- `{t['name']}` ({t['feature']}): {t['error']}" for t in not_built]
    return "\n".join(lines) + "\n"


def write_report(text: str, outcomes: list[Outcome]) -> str:
    """``$DELTALOG_FEATURE_MATRIX`` (the report script points it at docs/) or build/feature-matrix.md."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("DELTALOG_FEATURE_MATRIX") or os.path.join(here, "build", "feature-matrix.md")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.splitext(target)[0] + ".json", "w", encoding="utf-8") as f:
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


def deltalog_vacuum_plan(path: str, mode: str, hours: float | None) -> tuple[set[str], set[str]]:
    """(files, directories) deltalog's plan would delete, table-relative and unescaped."""
    from urllib.parse import unquote

    from deltalog.vacuum.plan import plan_vacuum

    plan = plan_vacuum(path, retention_hours=hours, mode=mode, allow_short_retention=True)
    files = {unquote(p) for p in plan.files.column("path").to_pylist()}
    return files, {unquote(d).rstrip("/") for d in plan.directories}
