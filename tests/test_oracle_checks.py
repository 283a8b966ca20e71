"""The Delta Spark oracle's own logic, without Spark: the agreement rule between the report and the feature
table, which versions an operation makes Delta Spark re-read, and the per-table corpus cache key
(the repo's copy of the corpus: tests/test_corpus_store.py).

These decide what the slow oracle suite (tests/test_delta_spark_oracle.py) checks, so each is shown to
fail where it must.
"""

from __future__ import annotations

import dataclasses

import pytest

import delta_spark
from oracle_checks import Outcome, disagreements, versions_to_reread

PLAIN = {"minReaderVersion": 1, "minWriterVersion": 2}
CATALOG = {
    "minReaderVersion": 3,
    "minWriterVersion": 7,
    "readerFeatures": ["catalogManaged"],
    "writerFeatures": ["catalogManaged", "inCommitTimestamp"],
}
V2 = {
    "minReaderVersion": 3,
    "minWriterVersion": 7,
    "readerFeatures": ["v2Checkpoint"],
    "writerFeatures": ["appendOnly", "invariants", "v2Checkpoint"],
}


def _o(table: str, op: str, status: str, detail: str = "") -> Outcome:
    return Outcome(table, "f", op, status, detail, 0.0)


def test_agreement_follows_the_feature_table_cell_by_cell() -> None:
    protocols = {"plain": PLAIN, "cat": CATALOG, "v2": V2}
    agreeing = [
        _o("plain", "compaction Spark", "ok"),
        _o("plain", "convert", "ok"),
        _o("plain", "checkpoint V2", "n/a"),
        _o("v2", "checkpoint classic", "n/a"),
        _o(
            "cat",
            "compaction Spark",
            "refused",
            "UnsupportedProtocolError: the table is catalog-managed (catalogManaged)",
        ),
        _o("cat", "convert", "n/a", "not run"),
        _o("plain", "commit request", "refused", "InvalidCommitRequestError: appendOnly"),  # conditional cell
        _o("plain", "Delta Spark writes after", "ok"),  # Delta Spark's work: no cell
    ]
    assert disagreements(agreeing, protocols) == []
    wrong = [
        _o("cat", "compaction Spark", "ok"),  # the table says refused
        _o("cat", "compaction Spark", "refused", "EngineError: the job failed"),  # refused, but not for the feature
        _o("v2", "checkpoint V2", "refused", "OperationRefusedError: no"),  # supported: must run
        _o("plain", "convert", "n/a"),  # convert applies to a plain table
        _o("plain", "checkpoint classic", "n/a"),  # a plain table's checkpoints are classic
        _o("plain", "manifest", "failed"),
    ]
    found = disagreements(wrong, protocols)
    assert len(found) == len(wrong), found
    assert "features.py says refused (catalogManaged)" in found[0]


def test_rereads_follow_what_the_operation_changed() -> None:
    before = {"_delta_log/00000000000000000010.json": 10, "a.parquet": 5, "b.parquet": 5}
    readable = range(3, 12)
    # A deleted data file: every readable version.
    assert versions_to_reread(before, {k: v for k, v in before.items() if k != "a.parquet"}, readable)[0] == list(
        readable
    )
    # A new checkpoint at v8 (and _last_checkpoint): v8 and later.
    after = {**before, "_delta_log/00000000000000000008.checkpoint.parquet": 3, "_delta_log/_last_checkpoint": 1}
    assert versions_to_reread(before, after, readable)[0] == [8, 9, 10, 11]
    # A new commit: that version only.
    assert versions_to_reread(before, {**before, "_delta_log/00000000000000000011.json": 2}, readable)[0] == [11]
    # Manifests (no log file): nothing.
    assert versions_to_reread(before, {**before, "_symlink_format_manifest/manifest": 4}, readable)[0] == []


def test_corpus_cache_is_keyed_per_table(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = {r.name: delta_spark.table_key(r) for r in delta_spark.RECIPES}
    assert len(set(keys.values())) == len(keys)
    changed = dataclasses.replace(delta_spark.RECIPES[0], properties={"delta.appendOnly": "false"})
    recipes = (changed, *delta_spark.RECIPES[1:])
    monkeypatch.setattr(delta_spark, "RECIPES", recipes)
    after = {r.name: delta_spark.table_key(r) for r in recipes}
    assert {n for n in keys if keys[n] != after[n]} == {changed.name}
