"""Log cleanup judged by Delta Spark's own (issue 20, item 3): twin copies, same clock, same retention.

For each corpus table with checkpoints of every kind (classic, multi-part, V2 with
sidecars, checkpointProtection, in-commit timestamps), two private copies get the same
log file times and the same clock; Delta Spark's ``MetadataCleanup.cleanUpExpiredLogs``
(through its JVM ``DeltaLog``, with a ``ManualClock``) cleans one, deltalog's
``cleanup_log`` the other. Scenarios: the log as written with the clock 40 days ahead
(everything past the default 30-day ``delta.logRetentionDuration``), and log file times
spread 4 hours apart per version with the cleanup's midnight cutoff placed right after
a chosen version.

Must hold: deltalog never deletes a log file Delta Spark keeps; each side reads every
version the other leaves readable (and DuckDB's ``delta_scan`` and deltalake every version
deltalog leaves readable, with the rows of the untouched table); a version deltalog keeps and Delta Spark does not is
explained by the rule in the comparison table (PROTOCOL.md, Metadata Cleanup: "retain
everything including and after the cutoffCommit"; Delta Spark's
``BufferingLogDeletionIterator`` instead deletes up to the newest checkpoint whose
*preceding* commit expired, i.e. also the cutoff commit and the versions between the
cutoff checkpoint and it).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from delta_spark import TIME_TRAVEL_CHECK, Corpus, content_hash, fresh_clock_ms
from deltalog import DeltaTable
from deltalog.log_maintenance.log_cleanup import cleanup_log
from oracle_checks import deltalog_state, state_differences
from reader_checks import ReaderCheck, corpus_untouched

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(1800)]

DAY_MS = 24 * 3600 * 1000
HOUR_MS = 3600 * 1000

#: The corpus tables whose logs exercise every cleanup rule (those in this run's corpus are checked).
CLEANUP_TABLES = (
    "plain",
    "multipart_checkpoint",
    "v2_checkpoint",
    "checkpoint_protection",
    "in_commit_timestamp",
    "deletion_vectors",
)

#: (label, version after which the midnight cutoff falls; None: the log as written, clock +40 days).
SCENARIOS: tuple[tuple[str, int | None], ...] = (
    ("as written, clock +40 d", None),
    ("cutoff after v5", 5),
    ("cutoff after v7", 7),
    ("cutoff after v8", 8),
)


def log_files(path: str) -> set[str]:
    """Every file under ``_delta_log`` (sidecars and staged commits included), relative to it."""
    root = Path(path) / "_delta_log"
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _version_of(name: str) -> int | None:
    base = name.rsplit("/", 1)[-1]
    head = base.split(".", 1)[0]
    return int(head) if head.isdigit() and len(head) == 20 else None


def spread_log_times(path: str, split_after: int, midnight_ms: int) -> None:
    """Give version ``v``'s log files the time ``midnight - 2 h + (v - split_after) * 4 h``.

    Within a version the listing order (checkpoint, crc, json) gets increasing times a
    second apart after the commit, so neither side needs to adjust a timestamp; sidecars
    take their checkpoint's time. Only ``_delta_log`` is touched.
    """
    root = Path(path) / "_delta_log"
    base = midnight_ms - 2 * HOUR_MS - split_after * 4 * HOUR_MS
    for p in root.rglob("*"):
        if not p.is_file():
            continue
        name = p.name
        v = _version_of(name)
        if v is None and p.parent.name == "_sidecars":
            v = _sidecar_version(root, name)
        if v is None:
            continue
        offset = 2000 if ".checkpoint." in name else 1000 if name.endswith(".crc") else 0
        t = (base + v * 4 * HOUR_MS + offset) / 1000
        os.utime(p, (t, t))


def _sidecar_version(root: Path, sidecar: str) -> int | None:
    """The version of the V2 checkpoint that names ``sidecar`` (its file holds the name)."""
    for cp in root.glob("*.checkpoint.*"):
        if sidecar.encode() in cp.read_bytes():
            return _version_of(cp.name)
    return None


def spark_cleanup(spark: Any, path: str, now_ms: int) -> None:
    """Delta Spark's own log cleanup of ``path`` with its clock at ``now_ms``.

    ``DeltaLog.forTable(spark, path, ManualClock)`` (after clearing the cache, so the
    clock is this one) and ``cleanUpExpiredLogs(snapshot)``, the method a checkpoint
    calls as its post-commit cleanup, with the table's own retention and the day
    granularity (its defaults).
    """
    jvm = spark._jvm
    delta_log_cls = jvm.org.apache.spark.sql.delta.DeltaLog
    delta_log_cls.clearCache()
    clock = jvm.org.apache.spark.util.ManualClock(now_ms)
    dlog = delta_log_cls.forTable(spark._jsparkSession, jvm.org.apache.hadoop.fs.Path(path), clock)
    snap = dlog.update(*(getattr(dlog, f"update$default${i}")() for i in (1, 2, 3)))
    defaults = [getattr(dlog, f"cleanUpExpiredLogs$default${i}")() for i in (2, 3, 4)]
    dlog.cleanUpExpiredLogs(snap, *defaults)
    delta_log_cls.clearCache()


def oldest_readable(path: str) -> int | None:
    """The oldest version the remaining log rebuilds (the same rule for both sides' results)."""
    return DeltaTable(path).list_log().oldest_reconstructable_version()


@dataclass(frozen=True)
class Twin:
    table: str
    scenario: str
    both: int
    only_spark: list[str]
    only_ours: list[str]
    spark_created: list[str]
    ours_from: int | None
    spark_from: int | None
    seconds_ours: float
    seconds_spark: float
    ict: bool


def _midnight(ms: int) -> int:
    d = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).date()
    return int(dt.datetime(d.year, d.month, d.day, tzinfo=dt.UTC).timestamp() * 1000)


def run_twin(spark: Any, corpus: Corpus, name: str, scenario: str, split: int | None, tmp: Path) -> Twin:
    ours = corpus.copy(name, tmp / "ours")
    theirs = corpus.copy(name, tmp / "theirs")
    # The clock of a table built an hour ago: the corpus keeps its build times (in-commit
    # timestamps included), which in a stored copy may lie weeks back.
    real_now = fresh_clock_ms(ours)
    if split is None:
        now = real_now + 40 * DAY_MS
    else:
        # The cleanup cutoff is midnight UTC of now - 30 days: put it 10 days back and the
        # log around it, so the whole history lies in the past.
        midnight = _midnight(real_now) - 10 * DAY_MS
        now = midnight + 30 * DAY_MS + 12 * HOUR_MS
        for p in (ours, theirs):
            spread_log_times(p, split, midnight)
    before = log_files(ours)
    assert before == log_files(theirs)
    t0 = time.perf_counter()
    result = cleanup_log(ours, now_ms=now)
    t1 = time.perf_counter()
    spark_cleanup(spark, theirs, now)
    t2 = time.perf_counter()
    after_ours, after_theirs = log_files(ours), log_files(theirs)
    gone_ours, gone_theirs = before - after_ours, before - after_theirs
    assert result.num_deleted == len(gone_ours) or result.skipped_reason, result.summary_line()
    return Twin(
        table=name,
        scenario=scenario,
        both=len(gone_ours & gone_theirs),
        only_spark=sorted(gone_theirs - gone_ours),
        only_ours=sorted(gone_ours - gone_theirs),
        spark_created=sorted(after_theirs - before),
        ours_from=oldest_readable(ours),
        spark_from=oldest_readable(theirs),
        seconds_ours=t1 - t0,
        seconds_spark=t2 - t1,
        ict=DeltaTable(ours).snapshot().metadata.configuration.get("delta.enableInCommitTimestamps") == "true",
    )


def _versions(names: list[str]) -> str:
    vs = sorted({v for v in (_version_of(n) for n in names) if v is not None})
    if not vs:
        return "-" if not names else f"{len(names)} files"
    return f"{len(names)} files (v{vs[0]}..v{vs[-1]})"


def _explain(t: Twin) -> str:
    if not t.only_spark:
        return "same files"
    if t.ict and t.scenario != SCENARIOS[0][0]:
        return (
            "in-commit timestamps (today) are the commit times PROTOCOL.md's cleanup goes by; Delta Spark's "
            "goes by file modification times, here set days back"
        )
    if t.ours_from is not None and t.spark_from is not None and t.ours_from < t.spark_from:
        return (
            f"deltalog keeps v{t.ours_from}..v{t.spark_from - 1}: PROTOCOL.md keeps the cutoff commit and "
            "everything after its newest checkpoint; Delta Spark deletes up to the checkpoint after the "
            "cutoff commit"
        )
    return "Delta Spark deleted more log files of the same versions"


def test_log_cleanup_never_deletes_what_delta_spark_keeps(
    delta_spark: Any, delta_corpus: Corpus, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Twin copies, the same clock and retention: deltalog's deletions are a subset of Delta Spark's."""
    # The spread log times put the versions days in the past: Delta Spark would refuse time travel
    # beyond delta.deletedFileRetentionDuration, a read policy beside the point here (the oracle
    # session turns it off; this test does not depend on that).
    before = delta_spark.conf.get(TIME_TRAVEL_CHECK, None)
    delta_spark.conf.set(TIME_TRAVEL_CHECK, "false")
    try:
        _compare_cleanups(delta_spark, delta_corpus, tmp_path_factory)
    finally:
        if before is None:
            delta_spark.conf.unset(TIME_TRAVEL_CHECK)
        else:
            delta_spark.conf.set(TIME_TRAVEL_CHECK, before)


def _compare_cleanups(delta_spark: Any, delta_corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> None:
    names = [t["name"] for t in delta_corpus.tables if t["name"] in CLEANUP_TABLES]
    assert "plain" in names, "the corpus must hold the plain table"
    entries = {t["name"]: t for t in delta_corpus.tables}
    twins: list[Twin] = []
    problems: list[str] = []
    for name in names:
        for scenario, split in SCENARIOS:
            tmp = tmp_path_factory.mktemp(f"lc-{name}")
            twin = run_twin(delta_spark, delta_corpus, name, scenario, split, tmp)
            twins.append(twin)
            if twin.only_ours:
                problems.append(f"{name} / {scenario}: deltalog deleted what Delta Spark keeps: {twin.only_ours}")
            ours_path, theirs_path = str(tmp / "ours" / name), str(tmp / "theirs" / name)
            latest = entries[name]["latest"]
            # Each side reads the oldest version the other left readable, and the latest, as recorded.
            for reader_side, path, start in (
                ("Delta Spark reads deltalog's", ours_path, twin.ours_from),
                ("deltalog reads Delta Spark's", theirs_path, twin.spark_from),
            ):
                if start is None:
                    problems.append(f"{name} / {scenario}: {reader_side} log: no version readable")
                    continue
                if reader_side.startswith("Delta Spark"):
                    # DuckDB's delta_scan and deltalake (in this process) read every version deltalog kept.
                    readers = ReaderCheck(corpus_untouched(entries[name], delta_corpus.path(name)))
                    problems += readers.check(path, list(range(start, latest + 1)), f"log cleanup ({scenario})")
                for v in sorted({start, latest}):
                    if reader_side.startswith("Delta Spark"):
                        delta_spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
                        got = list(content_hash(delta_spark, path, v))
                        if got != entries[name]["hashes"][str(v)]:
                            problems.append(f"{name} / {scenario}: {reader_side} v{v}: {got}")
                    else:
                        diff = state_differences(_json(deltalog_state(path, v)), entries[name]["states"][str(v)])
                        problems += [f"{name} / {scenario}: {reader_side} v{v}: {d}" for d in diff]
    print(
        "\n| table | scenario | deleted by both | only Delta Spark | only deltalog | readable after deltalog "
        "| readable after Delta Spark | why |\n|---|---|---|---|---|---|---|---|"
    )
    for t in twins:
        print(
            f"| {t.table} | {t.scenario} | {t.both} | {_versions(t.only_spark)} | {_versions(t.only_ours)} | "
            f"v{t.ours_from}.. | v{t.spark_from}.. | {_explain(t)} |"
        )
    n = len(twins)
    print(
        f"{n} twin cleanups: deltalog {sum(t.seconds_ours for t in twins) / n:.2f} s, Delta Spark "
        f"{sum(t.seconds_spark for t in twins) / n:.2f} s per cleanup (mean, same JVM, warm)"
    )
    created = [f"{t.table} / {t.scenario}: {t.spark_created}" for t in twins if t.spark_created]
    if created:
        print("Files Delta Spark's cleanup wrote (V2 compatibility checkpoints):\n" + "\n".join(created))
    missing = [n for n in CLEANUP_TABLES if n not in names]
    if missing:
        print(f"Not in this run's corpus (DELTALOG_ORACLE_TABLES): {', '.join(missing)}")
    assert not problems, "\n".join(problems[:40])
    # The comparison must have compared something: at least one scenario where Delta Spark deleted.
    assert any(t.both for t in twins), "neither side deleted anything in any scenario"


def _json(state: dict[str, Any]) -> dict[str, Any]:
    import json

    return json.loads(json.dumps(state))
