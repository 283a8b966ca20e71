"""Delta Spark 4.4.0 (Spark 4.2.0) as the oracle: its corpus, read and rewritten by deltalog, read back by it.

One Delta Spark session for the whole run (``delta_spark``) and one cached corpus
(``delta_corpus``, see tests/delta_spark.py). Per corpus table:

- deltalog's snapshot equals Delta Spark's state at every version (live files with
  path, size, partition values and DV; protocol; metadata);
- each deltalog operation (compaction, checkpoint, log cleanup, vacuum lite and full,
  manifest) either runs or refuses with a deltalog error; after it, Delta Spark reads
  the oldest version deltalog says is readable and the latest one with the same
  content hash as before, ``DESCRIBE HISTORY`` works, and Delta Spark can append,
  delete and OPTIMIZE, with deltalog then seeing exactly Delta Spark's state;
- the feature x operation report (ok / refused with the reason) is written to
  build/feature-matrix.md (``scripts/feature_matrix.py`` regenerates
  docs/feature-matrix.md) and printed at the end of the run.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

from delta_spark import REPORTS, Corpus, spark_sql
from deltalog.engines.spark_packages import DELTA_SPARK_VERSION, SPARK_VERSION
from deltalog.errors import DeltaLogError
from oracle_checks import (
    OPERATIONS,
    Outcome,
    deltalog_state,
    deltalog_vacuum_plan,
    report_markdown,
    run_operation,
    spark_state,
    spark_vacuum_dry_run,
    state_differences,
    write_report,
)

#: Generous: every table's checks run inside one test (one Spark session), and a loaded
#: 2-core machine runs Spark statements many times slower than an idle one.
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(3600)]

#: Filled by the tests below, written once at the end of the module.
OUTCOMES: list[Outcome] = []


def _json(state: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(state))


def _readable_hash(spark: Any, path: str, version: int) -> list:
    from delta_spark import content_hash

    return list(content_hash(spark, path, version))


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
        multipart = delta_corpus.root / "multipart_checkpoint" / "_delta_log"
        assert any(".checkpoint.0000000001." in p.name for p in multipart.iterdir()), "no multi-part checkpoint"
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


def test_operations_keep_every_readable_version_for_delta_spark(
    delta_spark: Any, delta_corpus: Corpus, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """After each deltalog operation Delta Spark reads the same rows; then it writes and we read its result."""
    problems = []
    for t in delta_corpus.tables:
        name = t["name"]
        path = delta_corpus.copy(name, tmp_path_factory.mktemp(name))
        expected_latest = t["hashes"][str(t["latest"])]
        readable_from = 0
        for op in OPERATIONS:
            t0 = time.perf_counter()
            status, detail, oldest = run_operation(op, path)
            if oldest is not None:
                readable_from = max(readable_from, oldest)
            if status == "ok":
                delta_spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
                latest = deltalog_state(path)["version"]
                for v in sorted({readable_from, latest}):
                    want = t["hashes"][str(v)] if v <= t["latest"] else expected_latest
                    try:
                        got = _readable_hash(delta_spark, path, v)
                    except Exception as exc:  # noqa: BLE001 - any read failure is the finding
                        got = f"unreadable: {(str(exc).splitlines() or [''])[0][:200]}"
                    if got != want:
                        problems.append(f"{name} after {op}: Delta Spark v{v} {got} != {want}")
                        status = "failed"
            OUTCOMES.append(Outcome(name, t["feature"], op, status, detail, time.perf_counter() - t0))
        # Delta Spark keeps working on the table deltalog maintained, and deltalog reads the result.
        t0 = time.perf_counter()
        run = spark_sql(delta_spark, path)
        history = run("DESCRIBE HISTORY {t}").collect()
        base = deltalog_state(path)["version"]
        run(f"INSERT INTO {{t}} SELECT * FROM {{t}} VERSION AS OF {base} WHERE id % 5 = 1")
        run("DELETE FROM {t} WHERE id % 5 = 2")
        run("OPTIMIZE {t}")
        latest = deltalog_state(path)["version"]
        diff = state_differences(_json(deltalog_state(path, latest)), _json(spark_state(delta_spark, path, latest)))
        problems += [f"{name} after Delta Spark's writes: {d}" for d in diff]
        assert history and history[0]["version"] == base, f"{name}: DESCRIBE HISTORY does not end at v{base}"
        status = "ok" if not diff else "failed"
        OUTCOMES.append(
            Outcome(
                name,
                t["feature"],
                "Delta Spark writes after",
                status,
                f"DESCRIBE HISTORY {len(history)} rows; append, delete, OPTIMIZE -> v{latest}",
                time.perf_counter() - t0,
            )
        )
    assert not problems, "\n".join(problems[:40])


def test_write_feature_matrix(delta_corpus: Corpus) -> None:
    """The report: every corpus table x operation, ok or refused with the reason (last test of the module)."""
    assert OUTCOMES, "the checks above recorded nothing"
    header = (
        "# Feature matrix: deltalog operations on tables Delta Spark wrote\n\n"
        f"Generated by `scripts/feature_matrix.py` (tests/test_delta_spark_oracle.py) against Delta Spark "
        f"{DELTA_SPARK_VERSION} on Spark {SPARK_VERSION}. `ok`: the operation ran (or had nothing to do) and "
        "Delta Spark then read the oldest version deltalog says is readable and the latest one with the same "
        "rows; `refused`: deltalog refused with the error quoted below (nothing written); `failed`: a check "
        "failed. The `snapshot` column compares deltalog's snapshot with Delta Spark's at every version."
    )
    from delta_spark import left_out_recipes

    left_out = [(r.name, r.feature) for r in left_out_recipes()]
    text = report_markdown(OUTCOMES, delta_corpus.not_built, header, left_out)
    target = write_report(text, OUTCOMES)
    REPORTS.append(target)
    print(f"\n{text}\n(report written to {target})")
    assert not [o for o in OUTCOMES if o.status == "failed"]


#: (retention label, hours for both sides); None is each side's table default (7 days).
VACUUM_RETENTIONS = (("0 h", 0), ("default", None))


def test_vacuum_plan_never_deletes_what_delta_spark_keeps(
    delta_spark: Any, delta_corpus: Corpus, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Delta Spark's VACUUM DRY RUN vs deltalog's plan, full and lite, at 0 h and the default, every table."""
    bugs, rows = [], []
    for t in delta_corpus.tables:
        path = delta_corpus.copy(t["name"], tmp_path_factory.mktemp("vac-" + t["name"]))
        for mode in ("full", "lite"):
            for label, hours in VACUUM_RETENTIONS:
                try:
                    ours, our_dirs = deltalog_vacuum_plan(path, mode, hours)
                except DeltaLogError as exc:
                    rows.append((t["name"], mode, label, "deltalog refused", str(exc).splitlines()[0][:120]))
                    continue
                theirs = spark_vacuum_dry_run(delta_spark, path, mode, hours)
                for f in sorted(ours - theirs):
                    bugs.append(f"{t['name']} {mode} {label}: deltalog deletes {f}, Delta Spark keeps it")
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
    print("\n| table | mode | retention | same | differences |\n|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(map(str, r)) + " |")
    assert not bugs, "\n".join(bugs[:40])
