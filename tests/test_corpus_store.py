"""The Delta Spark corpus kept in the repo (tests/data/delta_spark_corpus, see tests/corpus_store.py).

Without Spark: every recipe has a stored table whose key and Delta Spark / Spark
versions are today's (a changed recipe or an upgrade fails here, naming the command that
regenerates the tables), the stored files are byte for byte the ones listed, they name
no path of the machine that built them, and the tests get a private copy with the build's
file times, never a stale or changed one.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import corpus_store
import delta_spark
from corpus_store import REGENERATE, StoredCorpusError, materialize, read_stored, stale_reason, stored_names

COMMIT = re.compile(r"^_delta_log/(\d{20})\.json$")


def _no_spark():
    raise AssertionError("a stored table needs no Spark")


def test_every_recipe_has_a_stored_table_with_todays_key() -> None:
    stale = []
    for recipe in delta_spark.RECIPES:
        stored = read_stored(recipe.name)
        if stored is None:
            stale.append(f"{recipe.name}: not stored")
            continue
        why = stale_reason(stored, delta_spark.table_key(recipe), delta_spark.engine_versions())
        if why:
            stale.append(f"{recipe.name}: {why}")
    assert not stale, (
        "the repo's Delta Spark corpus is not what today's recipes and Delta Spark build "
        f"(regenerate and commit it: {REGENERATE}):\n" + "\n".join(stale)
    )


def test_no_stored_table_without_a_recipe() -> None:
    orphans = sorted(set(stored_names()) - {r.name for r in delta_spark.RECIPES})
    assert not orphans, f"stored tables no recipe builds (remove them: {REGENERATE}): {orphans}"


def test_stored_files_are_the_ones_delta_spark_wrote() -> None:
    problems = [p for name in stored_names() for p in corpus_store.verify(read_stored(name))]
    assert not problems, f"regenerate with {REGENERATE} <name>:\n" + "\n".join(problems[:20])


def test_stored_entries_describe_their_tables() -> None:
    """Each entry belongs to its folder: its name, its latest commit, and every live file it records is stored."""
    problems = []
    for name in stored_names():
        stored = read_stored(name)
        entry = stored.entry
        if entry["name"] != name:
            problems.append(f"{name}: the entry is {entry['name']}'s")
        if not stored.built:
            assert entry["error"], name
            continue
        files = set(stored.manifest["files"])
        commits = [int(m.group(1)) for m in map(COMMIT.match, files) if m]
        if max(commits) != entry["latest"]:
            problems.append(f"{name}: the entry ends at v{entry['latest']}, the log at v{max(commits)}")
        for v, state in entry["states"].items():
            missing = [f[0] for f in state["files"] if f[0] not in files]
            if missing:
                problems.append(f"{name} v{v}: live files not stored: {missing[:3]}")
    assert not problems, "\n".join(problems[:20])


def test_stored_tables_name_no_path_of_the_machine_that_built_them() -> None:
    """Paths inside the tables are table-relative: a stored copy reads the same wherever it is copied."""
    needles = [b"file:/", str(Path.home()).encode() + b"/", b"/tmp/", b".cache/deltalog", b".partial"]
    found = []
    for name in stored_names():
        stored = read_stored(name)
        for rel in stored.manifest.get("files", {}):
            data = (stored.table_dir / rel).read_bytes()
            found += [f"{name}/{rel}: {n.decode()}" for n in needles if n in data]
    assert not found, "\n".join(found[:20])


def test_the_tests_get_a_private_copy_with_the_build_times(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DELTALOG_CACHE", str(tmp_path / "cache"))
    recipe = next(r for r in delta_spark.RECIPES if r.name == "plain")
    stored = read_stored(recipe.name)
    got = delta_spark.ensure_table(recipe, _no_spark)
    assert got.how == "stored" and got.entry == stored.entry
    assert got.path is not None and got.path.is_relative_to(tmp_path / "cache")
    for rel, meta in stored.manifest["files"].items():
        st = os.stat(got.path / rel)
        assert (st.st_size, st.st_mtime_ns) == (meta["size"], meta["mtime_ns"]), rel
    for rel, mtime in stored.manifest["dirs"].items():
        assert os.stat(got.path / rel).st_mtime_ns == mtime, rel
    # Once per machine: the second run finds the copy.
    (got.path / "marker").write_text("x")
    again = delta_spark.ensure_table(recipe, _no_spark)
    assert again.path == got.path and (again.path / "marker").exists()
    assert not (stored.table_dir / "marker").exists()
    # The clock of the checks: an hour after the newest file of the build.
    newest = max(m["mtime_ns"] for m in stored.manifest["files"].values()) // 1_000_000
    (got.path / "marker").unlink()
    assert delta_spark.fresh_clock_ms(got.path) == newest + 3600 * 1000


def _fake_store(tmp_path: Path, recipe: delta_spark.Recipe, **changes) -> Path:
    table = tmp_path / "src"
    (table / "_delta_log").mkdir(parents=True)
    (table / "_delta_log" / "00000000000000000000.json").write_text('{"commitInfo":{}}\n')
    entry = {"name": recipe.name, "feature": recipe.feature, "latest": 0, "hashes": {}, "states": {}}
    entry |= {"key": delta_spark.table_key(recipe), **delta_spark.engine_versions(), **changes}
    root = tmp_path / "store"
    corpus_store.write_stored(recipe.name, entry, table, root)
    return root


@pytest.mark.parametrize(
    "change",
    [{"key": "000000000000"}, {"delta_spark": "0.0.1"}, {"spark": "0.0.1"}],
    ids=["recipe changed", "other Delta Spark", "other Spark"],
)
def test_a_stale_stored_table_is_not_used(tmp_path, monkeypatch, change) -> None:
    recipe = delta_spark.RECIPES[0]
    monkeypatch.setattr(corpus_store, "STORE_ROOT", _fake_store(tmp_path, recipe, **change))
    monkeypatch.setenv("DELTALOG_CACHE", str(tmp_path / "cache"))
    assert stale_reason(read_stored(recipe.name), delta_spark.table_key(recipe), delta_spark.engine_versions())
    got = delta_spark.ensure_table(recipe, _no_spark)
    # Not the stored copy: a build was attempted (and failed here, without Spark).
    assert got.how == "built" and "needs no Spark" in got.entry["error"]


def test_a_current_fake_store_is_used_and_a_changed_file_refused(tmp_path, monkeypatch) -> None:
    recipe = delta_spark.RECIPES[0]
    root = _fake_store(tmp_path, recipe)
    monkeypatch.setattr(corpus_store, "STORE_ROOT", root)
    monkeypatch.setenv("DELTALOG_CACHE", str(tmp_path / "cache"))
    stored = read_stored(recipe.name)
    assert stale_reason(stored, delta_spark.table_key(recipe), delta_spark.engine_versions()) is None
    got = delta_spark.ensure_table(recipe, _no_spark)
    assert got.how == "stored"
    assert (got.path / "_delta_log" / "00000000000000000000.json").read_text() == '{"commitInfo":{}}\n'

    # The same byte count, other bytes (as an end-of-line conversion or a hand edit would leave it).
    commit = stored.table_dir / "_delta_log" / "00000000000000000000.json"
    commit.write_text('{"commitInfo":[]}\n')
    assert corpus_store.verify(stored)
    with pytest.raises(StoredCorpusError, match="not the one its manifest lists"):
        materialize(stored, tmp_path / "copy")
    # A file nobody listed.
    commit.write_text('{"commitInfo":{}}\n')
    (stored.table_dir / "extra.parquet").write_bytes(b"x")
    assert any("not listed" in p for p in corpus_store.verify(stored))


def test_a_recipe_delta_spark_cannot_build_is_stored_as_its_error(tmp_path) -> None:
    recipe = delta_spark.RECIPES[0]
    entry = {"name": recipe.name, "feature": recipe.feature, "error": "DELTA_UNSUPPORTED_DATA_TYPES"}
    stored = corpus_store.write_stored(recipe.name, entry, None, tmp_path)
    assert not stored.built and not (stored.root / corpus_store.TABLE).exists()
    assert json.loads((stored.root / "entry.json").read_text())["error"] == "DELTA_UNSUPPORTED_DATA_TYPES"
    assert corpus_store.verify(stored) == []
