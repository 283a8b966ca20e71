"""Regenerate the Delta Spark corpus kept in the repo (tests/data/delta_spark_corpus).

    .venv/bin/python scripts/corpus_tables.py            # store what is missing or stale
    .venv/bin/python scripts/corpus_tables.py plain ...  # these tables (missing or stale)
    .venv/bin/python scripts/corpus_tables.py --rebuild  # build every named (or every) table anew
    .venv/bin/python scripts/corpus_tables.py --check    # only report, exit 1 when anything is stale

A stored table is stale when its recipe (tests/delta_spark.py: ``table_key``) or the
Delta Spark / Spark version changed; ``tests/test_corpus_store.py`` fails then and
names this command. A table is taken from the per-table cache (``~/.cache/deltalog``)
when one was built there for the same key and versions, else built in a Delta Spark
session (minutes per table; the jars from ``scripts/bootstrap.sh``). Stored folders of
recipes that no longer exist are removed. Commit the result (``git add
tests/data/delta_spark_corpus``).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import corpus_store  # noqa: E402
import delta_spark  # noqa: E402

log = logging.getLogger("corpus_tables")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="recipes to store (default: every recipe)")
    parser.add_argument("--rebuild", action="store_true", help="build anew, ignoring the repo's copy and the cache")
    parser.add_argument("--check", action="store_true", help="report what is stale and exit 1 if anything is")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[corpus_tables] %(message)s")

    recipes = {r.name: r for r in delta_spark.RECIPES}
    unknown = sorted(set(args.names) - set(recipes))
    if unknown:
        parser.error(f"no recipe named {', '.join(unknown)} (recipes: {', '.join(recipes)})")
    wanted = [recipes[n] for n in args.names] if args.names else list(recipes.values())
    orphans = sorted(set(corpus_store.stored_names()) - set(recipes))

    todo = []
    for recipe in wanted:
        stored = corpus_store.read_stored(recipe.name)
        why = (
            "missing"
            if stored is None
            else corpus_store.stale_reason(stored, delta_spark.table_key(recipe), delta_spark.engine_versions())
        )
        if why is None and stored is not None:
            bad = corpus_store.verify(stored)
            why = f"files changed ({bad[0]})" if bad else None
        if why or args.rebuild:
            todo.append(recipe)
            log.info("%s: %s", recipe.name, why or "rebuild requested")
    if args.check:
        for name in orphans:
            log.info("%s: stored, but no recipe has that name", name)
        log.info("%d stale or missing, %d without a recipe", len(todo), len(orphans))
        return 1 if todo or orphans else 0

    session: list[Any] = []

    def spark() -> Any:
        if not session:
            log.info("starting a Delta Spark session")
            session.append(delta_spark.start_session())
        return session[0]

    scratch = Path(tempfile.mkdtemp(prefix="deltalog-corpus-"))
    try:
        for recipe in todo:
            got = _table(recipe, spark, scratch if args.rebuild else None)
            entry = {**got.entry, "key": delta_spark.table_key(recipe), **delta_spark.engine_versions()}
            stored = corpus_store.write_stored(recipe.name, entry, got.path)
            size = sum(f["size"] for f in stored.manifest.get("files", {}).values())
            log.info("%s: stored (%s, %d bytes)", recipe.name, "error recorded" if not stored.built else got.how, size)
        for name in orphans:
            shutil.rmtree(corpus_store.STORE_ROOT / name)
            log.info("%s: removed (no recipe)", name)
    finally:
        for s in session:
            s.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _table(recipe: delta_spark.Recipe, spark: Any, fresh_cache: Path | None) -> delta_spark.CorpusTable:
    """The table from the machine's cache or built into it; with ``fresh_cache``, built there anew."""
    return delta_spark._cached_or_built(recipe, spark, fresh_cache)


if __name__ == "__main__":
    sys.exit(main())
