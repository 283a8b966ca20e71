"""Delta Spark 4.4.0 (Spark 4.2.0) as the oracle: its corpus, read and rewritten by deltalog, read back by it.

One Delta Spark session for the whole run (``delta_spark``) and one cached corpus
(``delta_corpus``, see tests/delta_spark.py), every recipe of it. Per corpus table:

- deltalog's snapshot equals Delta Spark's state at every version (live files with
  path, size, partition values and DV; protocol; metadata);
- each deltalog operation (commit request, compaction local, checkpoint classic or V2,
  manifest, vacuum lite and full, log cleanup on one private copy; compaction by the
  Spark engine on another; convert of the latest version's Parquet files) either runs
  or refuses with a deltalog error; Delta Spark reads every version deltalog says is
  still readable and an operation may have changed with the content hash expected of
  it (batched: one read before log cleanup and one after the sequence; on a mismatch the
  sequence runs again on a fresh copy with a read after each operation, to name it); then ``DESCRIBE HISTORY`` works and Delta Spark can append,
  delete and OPTIMIZE, with deltalog then seeing exactly Delta Spark's state;
- beside Delta Spark, DuckDB's ``delta_scan`` and deltalake (in this process, no JVM) read every
  version an operation may have changed right after it, with the rows expected of it; what
  they read of the untouched table is the baseline, and where one of them cannot read a table
  as Delta Spark wrote it, that is its own limitation, recorded in tests/reader_checks.py and
  checked both ways;
- the feature x operation report (ok / refused with the reason) is written to
  build/feature-matrix.md (``scripts/feature_matrix.py`` regenerates
  docs/feature-matrix.md), printed at the end of the run, and must agree cell by
  cell with the feature table in provider/deltalog/features.py.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

from delta_spark import REPORTS, TIMINGS, Corpus, fresh_clock_ms
from deltalog.engines.spark_packages import DELTA_SPARK_VERSION, SPARK_VERSION
from deltalog.errors import DeltaLogError
from oracle_checks import (
    SEQUENCE,
    Outcome,
    TableCheck,
    convert_check,
    deltalog_state,
    deltalog_vacuum_plan,
    disagreements,
    report_markdown,
    spark_vacuum_dry_run,
    state_differences,
    write_report,
)
from reader_checks import COST, READERS, ReaderCheck, TableShape, corpus_untouched, read_as_expected

#: Generous: every table's checks run inside one test (one Spark session), and a loaded
#: 2-core machine runs Spark statements many times slower than an idle one.
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(3600)]

#: Filled by the tests below, written once at the end of the module.
OUTCOMES: list[Outcome] = []


def _json(state: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(state))


def test_corpus_has_a_table_per_feature(delta_corpus: Corpus) -> None:
    from delta_spark import selected_recipes

    built = {t["name"] for t in delta_corpus.tables}
    failed = {t["name"] for t in delta_corpus.not_built}
    selected = {r.name for r in selected_recipes()}
    assert built | failed == selected
    # The features Delta Spark 4.4.0 is known to write must be there (the rest is reported).
    assert {
        "plain",
        "deletion_vectors",
        "column_mapping_name",
        "v2_checkpoint",
        "multipart_checkpoint",
    } & selected <= built
    if "multipart_checkpoint" in selected:
        multipart = os.path.join(delta_corpus.path("multipart_checkpoint"), "_delta_log")
        assert any(".checkpoint.0000000001." in p for p in os.listdir(multipart)), "no multi-part checkpoint"
    for t in delta_corpus.tables:
        assert t["latest"] >= 10, t["name"]


def test_snapshot_equals_delta_spark_at_every_version(delta_corpus: Corpus) -> None:
    """deltalog replays every version of every corpus table exactly as Delta Spark did."""
    problems = []
    for t in delta_corpus.tables:
        path = delta_corpus.path(t["name"])
        t0 = time.perf_counter()
        try:
            for v in range(t["latest"] + 1):
                diff = state_differences(_json(deltalog_state(path, v)), t["states"][str(v)])
                problems += [f"{t['name']} v{v}: {d}" for d in diff]
            status, detail = "ok", f"{t['latest'] + 1} versions equal"
        except DeltaLogError as exc:
            status, detail = "refused", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        OUTCOMES.append(Outcome(t["name"], t["feature"], "snapshot", status, detail, time.perf_counter() - t0))
    assert not problems, "\n".join(problems[:40])


def test_other_readers_read_the_untouched_corpus_as_recorded(delta_corpus: Corpus) -> None:
    """DuckDB's delta_scan and deltalake on every version of every corpus table as Delta Spark wrote it: the
    row counts are Delta Spark's, the rows the same, and each table a reader cannot read (or reads in part) is
    a limitation recorded in tests/reader_checks.py's LIMITS, which must really occur."""
    findings, table = [], []
    for t in delta_corpus.tables:
        u = corpus_untouched(t, delta_corpus.path(t["name"]))
        findings += u.findings
        cells = []
        for reader in READERS:
            limits = u.shape.limits(reader)
            cells.append("; ".join(f"{limit.effect} ({limit.feature})" for limit in limits) or "reads")
        table.append(f"| {t['name']} | " + " | ".join(cells) + f" | {u.reference or 'none'} |")
    print("\n| table | " + " | ".join(READERS) + " | expected rows from |\n|---|---|---|---|")
    print("\n".join(table))
    assert not findings, "\n".join(findings[:40])


def test_operations_keep_every_readable_version_for_delta_spark(
    delta_spark: Any, delta_corpus: Corpus, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """After each deltalog operation Delta Spark reads the same rows; then it writes and we read its result."""
    problems = []
    for t in delta_corpus.tables:
        name = t["name"]
        t0 = time.perf_counter()
        base = tmp_path_factory.mktemp(name)
        untouched = corpus_untouched(t, delta_corpus.path(t["name"]))
        check = TableCheck(
            delta_spark, t, delta_corpus.copy(name, base / "ops"), defer_reads=True, readers=ReaderCheck(untouched)
        )
        for op in SEQUENCE:
            check.run(op)
        if not check.read_deferred():
            # Name the operation: the sequence again on a fresh copy, Delta Spark reading after each.
            found = check.problems
            check = TableCheck(
                delta_spark, t, delta_corpus.copy(name, base / "ops-one-by-one"), readers=ReaderCheck(untouched)
            )
            for op in SEQUENCE:
                check.run(op)
            check.problems = check.problems or found
        check.delta_spark_writes()
        # The Spark engine on a fresh copy: after the local compaction nothing would be left to do.
        spark_check = TableCheck(
            delta_spark, t, delta_corpus.copy(name, base / "spark"), readers=ReaderCheck(untouched)
        )
        spark_check.run("compaction Spark")
        c0 = time.perf_counter()
        status, detail = convert_check(delta_spark, t, delta_corpus.path(name), str(base / "convert"))
        check.record("convert", status, detail, time.perf_counter() - c0)
        if status == "failed":
            problems.append(f"{name} convert: {detail}")
        if status == "ok" and t["latest"] in untouched.expected:
            # The converted table holds the latest version's rows: the other readers read them there too.
            converted = str(base / "convert")
            shape = TableShape.of_table(converted)
            problems += read_as_expected(converted, 0, untouched.expected[t["latest"]], shape, f"{name} convert")
        OUTCOMES.extend(check.outcomes + spark_check.outcomes)
        problems += check.problems + spark_check.problems
        TIMINGS.append((name, "checks", round(time.perf_counter() - t0, 1), check.reads + spark_check.reads))
    print(f"\nDuckDB and deltalake: {COST['reads']} version reads in this process, {COST['cpu_s']:.1f} CPU s")
    assert not problems, "\n".join(problems[:40])


def _header() -> str:
    return (
        "# Feature matrix: deltalog operations on tables Delta Spark wrote\n\n"
        f"Generated by `scripts/feature_matrix.py` (tests/test_delta_spark_oracle.py) against Delta Spark "
        f"{DELTA_SPARK_VERSION} on Spark {SPARK_VERSION}, every corpus table. `ok`: the operation ran (or had "
        "nothing to do) and Delta Spark then read every version deltalog says is still readable and the "
        "operation may have changed with the rows expected of it (batched: one read before log cleanup, one "
        "after the table's sequence of operations; a mismatch reruns the sequence with a read after each "
        "operation to name it); `refused`: deltalog refused with the error "
        "quoted below (nothing written); `failed`: a check failed; `n/a`: checkpoint classic / V2 is the kind "
        "the table's protocol does not use, convert is run only where every feature of the table lets convert "
        "make such a table (provider/deltalog/features.py). The `snapshot` column compares deltalog's snapshot "
        "with Delta Spark's at every version. Every cell agrees with docs/features.md (a test checks it)."
    )


def test_write_feature_matrix(delta_corpus: Corpus) -> None:
    """The report: every corpus table x operation, ok / refused with the reason / n/a."""
    assert OUTCOMES, "the checks above recorded nothing"
    from delta_spark import left_out_recipes

    left_out = [(r.name, r.feature) for r in left_out_recipes()]
    text = report_markdown(OUTCOMES, delta_corpus.not_built, _header(), left_out)
    target = write_report(text, OUTCOMES)
    REPORTS.append(target)
    assert not [o for o in OUTCOMES if o.status == "failed"]


def test_report_agrees_with_the_feature_table(delta_corpus: Corpus) -> None:
    """One source of truth: every cell of the report is what provider/deltalog/features.py says."""
    assert OUTCOMES, "the checks above recorded nothing"
    protocols = {t["name"]: t["states"][str(t["latest"])]["protocol"] for t in delta_corpus.tables}
    tables = {o.table for o in OUTCOMES}
    assert tables == set(protocols), "a corpus table has no cell in the report"
    wrong = disagreements(OUTCOMES, protocols)
    assert not wrong, "\n".join(wrong)


#: (retention label, hours for both sides); None is each side's table default (7 days), judged on
#: the clock of a table built an hour ago (both sides; the corpus keeps its build times, a stored
#: copy's maybe weeks back, and on the wall clock the default would reach past every commit).
VACUUM_RETENTIONS = (("0 h", 0), ("default", None))


def test_vacuum_plan_never_deletes_what_delta_spark_keeps(
    delta_spark: Any, delta_corpus: Corpus, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Delta Spark's VACUUM DRY RUN vs deltalog's plan, full and lite, at 0 h and the default, every table
    (Delta Spark asked where the plan deletes anything); at 0 h the Spark engine's full plan too, which must
    equal the local engine's."""
    bugs, rows = [], []
    spark_plans = 0
    spark_seconds = 0.0
    for t in delta_corpus.tables:
        path = delta_corpus.copy(t["name"], tmp_path_factory.mktemp("vac-" + t["name"]))
        clock = fresh_clock_ms(path)
        for mode in ("full", "lite"):
            for label, hours in VACUUM_RETENTIONS:
                # RETAIN n HOURS reads the system clock on Delta Spark's side: 0 h is the same then.
                now = clock if hours is None else None
                try:
                    ours, our_dirs = deltalog_vacuum_plan(path, mode, hours, now_ms=now)
                except DeltaLogError as exc:
                    rows.append((t["name"], mode, label, "deltalog refused", str(exc).splitlines()[0][:120]))
                    continue
                # A plan that deletes nothing cannot delete what Delta Spark keeps: Delta Spark is asked only
                # when there is something to judge (at the default retention, on the clock of a table built an
                # hour ago, nothing is old enough on either side; tests/test_delta_spark_vacuum_cutoffs.py has the
                # same rule).
                theirs = spark_vacuum_dry_run(delta_spark, path, mode, hours, clock_ms=now) if ours else None
                for f in sorted(ours - (theirs or set())):
                    bugs.append(f"{t['name']} {mode} {label}: deltalog deletes {f}, Delta Spark keeps it")
                if mode == "full" and label == "0 h":
                    # The Spark engine (listing in its tasks, in this run's session) plans the same files.
                    t_spark = time.perf_counter()
                    on_spark, _ = deltalog_vacuum_plan(
                        path, mode, hours, engine="spark", spark_options={"session": delta_spark}
                    )
                    if on_spark != ours:
                        bugs.append(
                            f"{t['name']} {mode} {label}: the Spark engine plans {sorted(on_spark ^ ours)[:3]} "
                            "unlike the local engine"
                        )
                    spark_seconds += time.perf_counter() - t_spark
                    spark_plans += 1
                if theirs is None:
                    rows.append((t["name"], mode, label, "deltalog deletes nothing", "Delta Spark not asked"))
                    continue
                only_theirs = theirs - ours - our_dirs
                dirs = {p for p in only_theirs if os.path.isdir(os.path.join(path, p))}
                rows.append(
                    (
                        t["name"],
                        mode,
                        label,
                        f"both {len(ours & theirs)}",
                        f"only Delta Spark: {len(only_theirs - dirs)} files, {len(dirs)} dirs",
                    )
                )
    planned = [r for r in rows if r[1] == "full" and r[2] == "0 h" and r[3] != "deltalog refused"]
    assert planned and spark_plans == len(planned), "the Spark engine did not plan every table the local one did"
    # At 0 h every table's history has files to delete (OPTIMIZE and DELETE removed some): Delta Spark judged
    # both modes of every table deltalog planned.
    judged = [r for r in rows if r[2] == "0 h" and r[3].startswith("both ")]
    assert len(judged) == len([r for r in rows if r[2] == "0 h" and r[3] != "deltalog refused"]), rows
    print(f"\nthe Spark engine planned {spark_plans} tables in {spark_seconds:.1f} s")
    print("\n| table | mode | retention | same | differences |\n|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(map(str, r)) + " |")
    assert not bugs, "\n".join(bugs[:40])
