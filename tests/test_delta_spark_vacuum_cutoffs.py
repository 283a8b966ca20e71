"""Vacuum judged by Delta Spark at exact cutoffs (issue 20, item 4).

``VACUUM ... RETAIN n HOURS`` rounds ``n`` to whole hours and reads the system clock,
so a comparison through it is only as exact as an hour. Here deltalog's plan is made
with a fixed clock (``plan_vacuum(now_ms=...)``) and Delta Spark's dry run with its
``DeltaLog`` clock set so that its cutoff (clock - the table's
``delta.deletedFileRetentionDuration``, which its VACUUM reads from that clock) is the
plan's cutoff to the millisecond. Cutoffs: 0 hours, the default (7 days), just after a
commit (the files the commit removed become deletable, those of the next one stay) and
half way between two commits. Full and lite mode, on the tables of ``CUTOFF_TABLES`` in the run.

A file deltalog would delete and Delta Spark keeps fails the test (Delta Spark is asked wherever deltalog's plan
deletes anything, and at the "just after" cutoff, whose shape check judges Delta Spark's list too); so does a
Spark-engine plan (from an
inventory of the table, full mode, the "just after" cutoff) that differs from the local engine's. Files only Delta
Spark lists are printed as a table with the deltalog rule that keeps them; empty
directories (Delta Spark's dry run lists them) are counted apart.
"""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import unquote

import pytest

from delta_spark import Corpus, fresh_clock_ms
from deltalog import DeltaTable
from deltalog.errors import DeltaLogError
from deltalog.log.history import CommitTimestamps, ict_enablement_version
from deltalog.vacuuming.plan import plan_vacuum
from deltalog.vacuuming.retained import scan_commits
from oracle_checks import spark_vacuum_dry_run

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(2400)]

#: The tables compared at exact cutoffs (those in the run's corpus): every history shape vacuum
#: reads differently (partitions, multi-part / V2 checkpoints, DVs, CDC files, in-commit
#: timestamps as commit times, column mapping, clustering). tests/test_delta_spark_oracle.py
#: compares every table at 0 hours and the default through RETAIN; eight dry runs per table
#: here would add about 20 minutes on a loaded 2-core machine for all 24.
CUTOFF_TABLES = (
    "plain",
    "plain_unpartitioned",
    "multipart_checkpoint",
    "deletion_vectors",
    "change_data_feed",
    "v2_checkpoint",
    "in_commit_timestamp",
    "column_mapping_name",
    "clustering",
)

#: The comparison table's "deleted by both" where deltalog's plan deletes nothing and Delta Spark is not asked.
NOTHING_PLANNED = "0 (deltalog deletes nothing)"

#: The commit after which the "just after" cutoff falls (v7 is OPTIMIZE: it removes every file).
JUST_AFTER = 6
#: Between these two commits the "half way" cutoff falls (v8 is a DELETE).
HALF_WAY = (7, 8)


def _commit_times(path: str) -> CommitTimestamps:
    table = DeltaTable(path)
    listing = table.list_log()
    conf = table.snapshot(listing=listing).metadata.configuration
    return CommitTimestamps(table.storage, listing, ict_enablement_version(conf))


def _removed_by(path: str, version: int) -> set[str]:
    """Table-relative paths the commit at ``version`` removes (decoded, as the plans name them)."""
    table = DeltaTable(path)
    refs = scan_commits(table.storage, [table.list_log().commits[version]], kinds=("remove",))
    return {unquote(p) for p in refs.removed}


def cutoffs(path: str, now_ms: int) -> list[tuple[str, int, float | None]]:
    """(label, cutoff ms, retention hours for deltalog) of the comparisons on one table."""
    stamps = _commit_times(path)
    after = stamps(JUST_AFTER) + 1
    lo, hi = (stamps(v) for v in HALF_WAY)
    half = (lo + hi) // 2
    return [
        ("0 h", now_ms, 0.0),
        ("default", now_ms - 7 * 24 * 3600 * 1000, None),
        (f"1 ms after v{JUST_AFTER}", after, (now_ms - after) / 3_600_000),
        (f"half way v{HALF_WAY[0]}..v{HALF_WAY[1]}", half, (now_ms - half) / 3_600_000),
    ]


def _only_spark_reason(rel: str, plan: Any, path: str) -> str:
    full = os.path.join(path, rel)
    if os.path.isdir(full):
        return "directory"
    try:
        mtime = int(os.stat(full).st_mtime * 1000)
    except FileNotFoundError:
        return "gone"
    if mtime >= plan.cutoff_ms:
        return "file newer than the cutoff"
    return f"kept for version v{plan.fully_readable_from} (the state at the cutoff) or later"


def test_vacuum_at_exact_cutoffs_never_deletes_what_delta_spark_keeps(
    delta_spark: Any, delta_corpus: Corpus, tmp_path_factory: pytest.TempPathFactory
) -> None:
    bugs: list[str] = []
    rows: list[tuple[str, ...]] = []
    shape: list[str] = []
    spark_plans = 0
    spark_seconds = 0.0
    tables = [t for t in delta_corpus.tables if t["name"] in CUTOFF_TABLES]
    assert tables, "none of the exact-cutoff tables is in this run's corpus"
    for t in tables:
        name = t["name"]
        path = delta_corpus.copy(name, tmp_path_factory.mktemp("vcut-" + name))
        # The clock of a table built an hour ago (the corpus keeps its build times, maybe weeks back):
        # the default retention then reaches back before the first commit, as on a fresh build.
        now = fresh_clock_ms(path)
        for label, cutoff, hours in cutoffs(path, now):
            for mode in ("full", "lite"):
                try:
                    plan = plan_vacuum(path, retention_hours=hours, mode=mode, allow_short_retention=True, now_ms=now)
                except DeltaLogError as exc:
                    rows.append((name, mode, label, "deltalog refused", str(exc).splitlines()[0][:100], ""))
                    continue
                if hours is not None and label != "0 h":
                    assert abs(plan.cutoff_ms - cutoff) <= 1, (plan.cutoff_ms, cutoff)
                retention_ms = plan.retention.configured_ms
                ours = {unquote(p) for p in plan.files.column("path").to_pylist()}
                our_dirs = {unquote(d).rstrip("/") for d in plan.directories}
                if not ours and not label.startswith("1 ms after"):
                    # A plan that deletes nothing cannot delete what Delta Spark keeps, and only the "1 ms after"
                    # cutoff judges Delta Spark's own list (below): Delta Spark is not asked (the default
                    # retention on the clock of a table built an hour ago: nothing is old enough on either side).
                    rows.append((name, mode, label, NOTHING_PLANNED, "Delta Spark not asked", ""))
                    continue
                theirs = spark_vacuum_dry_run(delta_spark, path, mode, None, clock_ms=plan.cutoff_ms + retention_ms)
                for f in sorted(ours - theirs):
                    bugs.append(f"{name} {mode} {label}: deltalog deletes {f}, Delta Spark keeps it")
                only_theirs = theirs - ours - our_dirs
                reasons: dict[str, int] = {}
                for p in only_theirs:
                    r = _only_spark_reason(p, plan, path)
                    reasons[r] = reasons.get(r, 0) + 1
                rows.append(
                    (
                        name,
                        mode,
                        label,
                        f"{len(ours & theirs)} (+{len(our_dirs & theirs)} dirs)",
                        ", ".join(f"{n} {r}" for r, n in sorted(reasons.items())) or "-",
                        f"v{plan.fully_readable_from}..",
                    )
                )
                if label.startswith("1 ms after") and mode == "full":
                    # The Spark engine, reading an inventory of the table in Delta Spark's schema: the same plan.
                    inventory = _inventory(path, str(tmp_path_factory.mktemp("inv-" + name)))
                    t_spark = time.perf_counter()
                    on_spark = plan_vacuum(
                        path,
                        retention_hours=hours,
                        allow_short_retention=True,
                        now_ms=now,
                        inventory=inventory,
                        engine="spark",
                        spark_options={"session": delta_spark},
                    )
                    got = {unquote(p) for p in on_spark.files.column("path").to_pylist()}
                    if got != ours:
                        bugs.append(
                            f"{name} {label}: the Spark engine plans {sorted(got ^ ours)[:3]} unlike the local one"
                        )
                    spark_seconds += time.perf_counter() - t_spark
                    spark_plans += 1
                if label.startswith("1 ms after"):
                    # Exactness: what the commits up to the one just before the cutoff removed is
                    # deletable on both sides, what the next commit removed is kept.
                    earlier, later = _removed_around(path, JUST_AFTER)
                    for side, got in (("deltalog", ours), ("Delta Spark", theirs)):
                        if not earlier <= got:
                            shape.append(f"{name} {mode}: {side} keeps {sorted(earlier - got)[:3]}")
                        if got & later:
                            shape.append(f"{name} {mode}: {side} deletes {sorted(got & later)[:3]}")
    print(
        "\n| table | mode | cutoff | deleted by both | only Delta Spark (why deltalog keeps it) | "
        "deltalog keeps versions |\n|---|---|---|---|---|---|"
    )
    for r in rows:
        print("| " + " | ".join(r) + " |")
    assert not bugs, "\n".join(bugs[:40])
    assert not shape, "\n".join(shape[:40])
    assert spark_plans, "the Spark engine planned no table"
    print(f"\nthe Spark engine planned {spark_plans} tables in {spark_seconds:.1f} s")
    deleted_at_0h = [r for r in rows if r[2] == "0 h" and r[3] not in ("0 (+0 dirs)", NOTHING_PLANNED)]
    assert deleted_at_0h, "nothing deletable at 0 hours on any table"


def _inventory(path: str, folder: str) -> str:
    """A Parquet inventory of every file under the table, in Delta Spark's schema (``file:`` paths, ``length``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            full = os.path.join(dirpath, f)
            st = os.stat(full)
            rows.append(
                {
                    "path": "file:" + full,
                    "length": st.st_size,
                    "isDir": False,
                    "modificationTime": int(st.st_mtime * 1000),
                }
            )
    target = os.path.join(folder, "inventory.parquet")
    pq.write_table(pa.Table.from_pylist(rows), target)
    return target


def _removed_around(path: str, version: int) -> tuple[set[str], set[str]]:
    """(files removed up to ``version`` that no later version has, files the next commit removes)."""
    table = DeltaTable(path)
    listing = table.list_log()
    upto = scan_commits(table.storage, [listing.commits[v] for v in sorted(listing.commits) if v <= version])
    after = scan_commits(table.storage, [listing.commits[v] for v in sorted(listing.commits) if v > version])
    live = set(table.snapshot(version=version).files.column("path").to_pylist())
    earlier = {unquote(p) for p in upto.removed} - {unquote(p) for p in live | set(after.added)}
    return earlier, _removed_by(path, version + 1)
