"""Delta Spark, the reference implementation, as the tests' oracle: one session, one cached corpus.

Registered as a pytest plugin from ``conftest.py``. Fixtures:

- ``delta_spark`` (session): one Delta Spark 4.4.0 session on Spark 4.2.0
  ``local[1]`` for the whole test run (JVM start-up is paid once; the jars come
  from the cache ``scripts/spark_jars.py`` fills).
- ``delta_corpus`` (session): one small table per feature Delta Spark can enable,
  each with a real history (appends, UPDATE, DELETE, MERGE, OPTIMIZE, RESTORE,
  checkpoints), built in that session once per Delta version and recipe into
  ``~/.cache/deltalog/corpus-<delta version>-<recipe hash>`` and reused after.
  ``manifest.json`` there lists the tables, the ones Delta Spark could not build
  (with its error) and, per table and version, the row count and an
  order-independent content hash Delta Spark computed.

Content hash: ``sum(xxhash64(to_json(struct(*))))`` over the rows Delta Spark
reads, as a decimal, plus the row count; equal multisets of rows give equal hashes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deltalog.engines.spark_packages import DELTA_SPARK_VERSION, cache_root, spark_conf
from oracle_checks import spark_state

log = logging.getLogger(__name__)

#: Session settings for the oracle: tiny, quiet, deterministic, and short retention allowed
#: (the tests pick retention themselves).
ORACLE_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.databricks.delta.retentionDurationCheck.enabled": "false",
    "spark.databricks.delta.vacuum.parallelDelete.enabled": "false",
    # Tiny tables: one partition for log replay instead of 50 tasks per snapshot, and one
    # listing task for VACUUM instead of thousands.
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "1",
    "spark.driver.memory": "1g",
    "spark.sql.session.timeZone": "UTC",
}


def start_session(master: str = "local[1]") -> Any:
    """A Delta Spark session (the jars from the version-keyed Ivy cache)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("deltalog-oracle")
    for k, v in {**spark_conf(delta=True, s3a=False), **ORACLE_CONF}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# --- the corpus ------------------------------------------------------------------------

BASE_COLUMNS = "id BIGINT, part STRING, v DOUBLE, s STRING, n INT"
INSERT_COLUMNS = "(id, part, v, s, n)"


def rows_sql(start: int, count: int) -> str:
    """A SELECT of ``count`` deterministic rows with ids from ``start`` (three partitions)."""
    return (
        f"SELECT id, concat('p', cast(id % 3 AS STRING)) AS part, id * 1.5 AS v, "
        f"concat('s', cast(id AS STRING)) AS s, cast(id % 11 AS INT) AS n FROM range({start}, {start + count}, 1, 1)"
    )


@dataclass(frozen=True)
class Recipe:
    """One corpus table: how it is created and what its history does beyond the common one."""

    name: str
    feature: str
    columns: str = BASE_COLUMNS
    partitioned: bool = True
    clause: str = ""  # e.g. CLUSTER BY (id)
    properties: dict[str, str] = field(default_factory=dict)
    extra_steps: tuple[str, ...] = ()  # SQL run after the common history ({t} is the table)
    session_conf: dict[str, str] = field(default_factory=dict)


#: Every table checkpoints every 4 commits, so its history has checkpoints and commits after them.
COMMON_PROPERTIES = {"delta.checkpointInterval": "4"}

RECIPES: tuple[Recipe, ...] = (
    Recipe("plain", "none"),
    Recipe("plain_unpartitioned", "none", partitioned=False),
    Recipe(
        "multipart_checkpoint",
        "none (multi-part checkpoints)",
        session_conf={"spark.databricks.delta.checkpoint.partSize": "3"},
    ),
    Recipe("deletion_vectors", "deletionVectors", properties={"delta.enableDeletionVectors": "true"}),
    Recipe(
        "deletion_vectors_unpartitioned",
        "deletionVectors",
        partitioned=False,
        properties={"delta.enableDeletionVectors": "true"},
    ),
    Recipe(
        "column_mapping_name",
        "columnMapping (name)",
        properties={"delta.columnMapping.mode": "name"},
        extra_steps=("ALTER TABLE {t} RENAME COLUMN s TO s_renamed",),
    ),
    Recipe(
        "column_mapping_id",
        "columnMapping (id)",
        properties={"delta.columnMapping.mode": "id"},
        extra_steps=("ALTER TABLE {t} DROP COLUMN n",),
    ),
    Recipe("row_tracking", "rowTracking", properties={"delta.enableRowTracking": "true"}),
    Recipe("clustering", "clustering (liquid)", partitioned=False, clause="CLUSTER BY (id)"),
    Recipe("v2_checkpoint", "v2Checkpoint", properties={"delta.checkpointPolicy": "v2"}),
    Recipe("in_commit_timestamp", "inCommitTimestamp", properties={"delta.enableInCommitTimestamps": "true"}),
    Recipe(
        "type_widening",
        "typeWidening",
        properties={"delta.enableTypeWidening": "true"},
        extra_steps=("ALTER TABLE {t} ALTER COLUMN n TYPE BIGINT", "INSERT INTO {t} {cols} " + rows_sql(900, 10)),
    ),
    Recipe("timestamp_ntz", "timestampNtz", columns=BASE_COLUMNS + ", ts TIMESTAMP_NTZ"),
    Recipe("variant", "variantType", partitioned=False, columns=BASE_COLUMNS + ", j VARIANT"),
    Recipe("change_data_feed", "changeDataFeed", properties={"delta.enableChangeDataFeed": "true"}),
    Recipe(
        "identity_columns",
        "identityColumns",
        columns="id BIGINT GENERATED BY DEFAULT AS IDENTITY, part STRING, v DOUBLE, s STRING, n INT",
    ),
    Recipe("generated_columns", "generatedColumns", columns=BASE_COLUMNS + ", g BIGINT GENERATED ALWAYS AS (id * 2)"),
    Recipe(
        "check_constraints",
        "checkConstraints",
        extra_steps=("ALTER TABLE {t} ADD CONSTRAINT id_not_negative CHECK (id >= 0)",),
    ),
    Recipe(
        "column_defaults",
        "allowColumnDefaults",
        columns=BASE_COLUMNS + ", d STRING DEFAULT 'dflt'",
        properties={"delta.feature.allowColumnDefaults": "supported"},
    ),
    Recipe("domain_metadata", "domainMetadata", properties={"delta.feature.domainMetadata": "supported"}),
    Recipe(
        "vacuum_protocol_check", "vacuumProtocolCheck", properties={"delta.feature.vacuumProtocolCheck": "supported"}
    ),
    Recipe(
        "checkpoint_protection",
        "checkpointProtection (DROP FEATURE deletionVectors)",
        properties={"delta.enableDeletionVectors": "true"},
        extra_steps=(
            "ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')",
            "ALTER TABLE {t} DROP FEATURE deletionVectors",
        ),
    ),
    Recipe(
        "iceberg_compat_v2",
        "icebergCompatV2",
        properties={"delta.columnMapping.mode": "name", "delta.enableIcebergCompatV2": "true"},
    ),
    Recipe("collations", "collations", columns="id BIGINT, part STRING, v DOUBLE, s STRING COLLATE UTF8_LCASE, n INT"),
)


def _select_for(recipe: Recipe, start: int, count: int) -> tuple[str, str]:
    """Column list and SELECT for an insert into ``recipe``'s table (extra columns filled per feature)."""
    cols, select = INSERT_COLUMNS, rows_sql(start, count)
    if "ts TIMESTAMP_NTZ" in recipe.columns:
        cols = "(id, part, v, s, n, ts)"
        select = select.replace(
            " FROM range",
            ", timestamp_ntz '2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS ts FROM range",
        )
    if "j VARIANT" in recipe.columns:
        cols = "(id, part, v, s, n, j)"
        select = select.replace(
            " FROM range", ", parse_json(concat('{\"k\":', cast(id AS STRING), ',\"a\":[1,2]}')) AS j FROM range"
        )
    return cols, select


def history(recipe: Recipe) -> list[str]:
    """The SQL of the table's history, one commit each (``{t}`` is the table, ``{cols}`` its insert columns)."""
    cols, first = _select_for(recipe, 0, 120)
    _, second = _select_for(recipe, 120, 120)
    _, merge_src = _select_for(recipe, 200, 80)
    _, third = _select_for(recipe, 300, 60)
    _, last = _select_for(recipe, 400, 30)
    set_col = "v"
    steps = [
        f"INSERT INTO {{t}} {cols} {first}",  # v1
        f"INSERT INTO {{t}} {cols} {second}",  # v2
        f"UPDATE {{t}} SET {set_col} = {set_col} + 1 WHERE id % 10 = 0",  # v3
        "DELETE FROM {t} WHERE id % 7 = 0",  # v4 (checkpoint)
        (
            f"MERGE INTO {{t}} AS tgt USING ({merge_src}) AS src ON tgt.id = src.id "
            f"WHEN MATCHED THEN UPDATE SET tgt.v = src.v * 2 "
            f"WHEN NOT MATCHED THEN INSERT {cols} VALUES {cols.replace('(', '(src.').replace(', ', ', src.')}"
        ),  # v5
        f"INSERT INTO {{t}} {cols} {third}",  # v6
        "OPTIMIZE {t}",  # v7
        "DELETE FROM {t} WHERE id BETWEEN 20 AND 30",  # v8 (checkpoint)
        "RESTORE TABLE {t} TO VERSION AS OF 6",  # v9
        f"INSERT INTO {{t}} {cols} {last}",  # v10
    ]
    return steps + [s.replace("{cols}", cols) for s in recipe.extra_steps]


def create_sql(recipe: Recipe, path: str) -> str:
    props = {**COMMON_PROPERTIES, **recipe.properties}
    parts = [f"CREATE TABLE delta.`{path}` ({recipe.columns}) USING delta"]
    if recipe.partitioned:
        parts.append("PARTITIONED BY (part)")
    if recipe.clause:
        parts.append(recipe.clause)
    parts.append("TBLPROPERTIES (" + ", ".join(f"'{k}' = '{v}'" for k, v in props.items()) + ")")
    return " ".join(parts)


#: Bump when what the manifest records changes (the recipes above are hashed as text).
CORPUS_FORMAT = 2


def recipe_hash() -> str:
    """Changes whenever a recipe, the history or the manifest format changes (not with formatting)."""
    text = json.dumps(
        [CORPUS_FORMAT, COMMON_PROPERTIES] + [[repr(r), create_sql(r, "T"), history(r)] for r in RECIPES],
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def content_hash(spark: Any, path: str, version: int | None = None) -> tuple[int, str]:
    """(row count, order-independent hash) of what Delta Spark reads at ``version``."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    row = (
        reader.load(path)
        .selectExpr("count(*) AS n", "sum(cast(xxhash64(to_json(struct(*))) AS DECIMAL(38, 0))) AS h")
        .collect()[0]
    )
    return int(row["n"]), str(row["h"] or 0)


def build_table(spark: Any, recipe: Recipe, path: str) -> dict[str, Any]:
    """Create and write one table; returns its manifest entry (versions with their content hashes)."""
    for k, v in recipe.session_conf.items():
        spark.conf.set(k, v)
    try:
        spark.sql(create_sql(recipe, path))
        for step in history(recipe):
            t0 = time.perf_counter()
            spark.sql(step.replace("{t}", f"delta.`{path}`"))
            log.debug("corpus: %s %.1fs %s", recipe.name, time.perf_counter() - t0, step[:60])
    finally:
        for k in recipe.session_conf:
            spark.conf.unset(k)
    latest = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]["version"]
    t0 = time.perf_counter()
    hashes = {str(v): list(content_hash(spark, path, v)) for v in range(latest + 1)}
    # Delta Spark's own replay of every version, recorded once: the snapshot checks compare
    # deltalog with it without a JVM on warm runs.
    states = {str(v): spark_state(spark, path, v) for v in range(latest + 1)}
    log.debug("corpus: %s hashes and states %.1fs", recipe.name, time.perf_counter() - t0)
    return {
        "name": recipe.name,
        "feature": recipe.feature,
        "partitioned": recipe.partitioned,
        "latest": latest,
        "hashes": hashes,
        "states": states,
    }


@dataclass(frozen=True)
class Corpus:
    root: Path
    tables: list[dict[str, Any]]
    not_built: list[dict[str, str]]
    build_seconds: float

    def path(self, name: str) -> str:
        return str(self.root / name)

    def copy(self, name: str, dest: Path) -> str:
        """A private copy of a corpus table (tests change tables; the cache stays pristine)."""
        target = dest / name
        shutil.copytree(self.root / name, target)
        return str(target)


#: The tables the default run builds and checks: those the checks have been run on so far
#: (the first cold build of all of them took longer than one working session on a shared
#: 2-core machine). ``DELTALOG_ORACLE_TABLES=all`` runs every recipe; the report lists the
#: recipes a run left out, so none is skipped silently.
DEFAULT_TABLES = ("plain", "plain_unpartitioned", "multipart_checkpoint", "deletion_vectors", "change_data_feed")


def selected_recipes() -> tuple[Recipe, ...]:
    """``DEFAULT_TABLES``, or the recipes named in ``$DELTALOG_ORACLE_TABLES`` (comma-separated, or ``all``)."""
    env = os.environ.get("DELTALOG_ORACLE_TABLES", "")
    wanted = [n for n in env.split(",") if n] or list(DEFAULT_TABLES)
    return tuple(r for r in RECIPES if "all" in wanted or r.name in wanted)


def left_out_recipes() -> list[Recipe]:
    chosen = {r.name for r in selected_recipes()}
    return [r for r in RECIPES if r.name not in chosen]


def full_corpus_dir() -> Path:
    return cache_root() / f"corpus-{DELTA_SPARK_VERSION}-{recipe_hash()}"


def corpus_dir() -> Path:
    recipes = selected_recipes()
    subset = (
        ""
        if len(recipes) == len(RECIPES)
        else "-" + hashlib.sha256(",".join(r.name for r in recipes).encode()).hexdigest()[:6]
    )
    return cache_root() / f"corpus-{DELTA_SPARK_VERSION}-{recipe_hash()}{subset}"


def build_corpus(spark: Any, root: Path, only: set[str] | None = None) -> Corpus | None:
    """Build the tables into ``root``, resumably: each finished table leaves ``<name>.entry.json``
    in ``<root>.partial`` and is not built again; the folder becomes ``root`` once all are there.

    ``only`` builds just those tables (several processes can share a cold build) and
    leaves the corpus unfinished unless nothing else is missing.
    """
    partial = root.with_name(root.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    tables, not_built = [], []
    for recipe in selected_recipes():
        entry_file = partial / f"{recipe.name}.entry.json"
        if not entry_file.exists():
            _reuse_from_full_corpus(recipe.name, partial)
        if not entry_file.exists() and (only is None or recipe.name in only):
            shutil.rmtree(partial / recipe.name, ignore_errors=True)  # an interrupted attempt
            t0 = time.perf_counter()
            try:
                entry = build_table(spark, recipe, str(partial / recipe.name))
                entry["seconds"] = round(time.perf_counter() - t0, 1)
                log.info("corpus: %s built in %.1fs (%d versions)", recipe.name, entry["seconds"], entry["latest"] + 1)
            except Exception as exc:  # noqa: BLE001 - a feature this release cannot write is recorded, not fatal
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                entry = {"name": recipe.name, "feature": recipe.feature, "error": first}
                shutil.rmtree(partial / recipe.name, ignore_errors=True)
                log.warning("corpus: %s not built: %s", recipe.name, first)
            entry_file.write_text(json.dumps(entry))
        if not entry_file.exists():
            continue
        entry = json.loads(entry_file.read_text())
        (not_built if "error" in entry else tables).append(entry)
    if len(tables) + len(not_built) < len(selected_recipes()):
        return None
    seconds = round(sum(t.get("seconds", 0) for t in tables), 1)
    manifest = {"delta": DELTA_SPARK_VERSION, "tables": tables, "not_built": not_built, "build_seconds": seconds}
    (partial / "manifest.json").write_text(json.dumps(manifest, indent=1))
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)
    return load_corpus(root)


def _reuse_from_full_corpus(name: str, partial: Path) -> None:
    """A subset run copies a table the full corpus (finished or partial) already has."""
    full = full_corpus_dir()
    if partial.name.startswith(full.name + "."):
        return  # this is the full corpus
    for source in (full, full.with_name(full.name + ".partial")):
        entries = source / "manifest.json"
        entry = None
        if source == full and entries.exists():
            doc = json.loads(entries.read_text())
            entry = next((t for t in doc["tables"] + doc["not_built"] if t["name"] == name), None)
        elif (source / f"{name}.entry.json").exists():
            entry = json.loads((source / f"{name}.entry.json").read_text())
        if entry is None:
            continue
        if "error" not in entry:
            shutil.copytree(source / name, partial / name)
        (partial / f"{name}.entry.json").write_text(json.dumps(entry))
        return


def load_corpus(root: Path) -> Corpus:
    doc = json.loads((root / "manifest.json").read_text())
    return Corpus(root, doc["tables"], doc["not_built"], doc["build_seconds"])


# --- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def delta_spark() -> Iterator[Any]:
    """The one Delta Spark session of the test run."""
    t0 = time.perf_counter()
    spark = start_session()
    log.info("Delta Spark session started in %.1fs", time.perf_counter() - t0)
    try:
        yield spark
    finally:
        spark.stop()


@pytest.fixture(scope="session")
def delta_corpus(delta_spark: Any) -> Corpus:
    """The feature corpus, from the cache or built now (once per Delta version and recipe)."""
    import fcntl

    root = corpus_dir()
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / "manifest.json").exists():
            return load_corpus(root)
        corpus = build_corpus(delta_spark, root)
        assert corpus is not None
    print(f"\nDelta Spark corpus built in {corpus.build_seconds}s into {root}")
    return corpus


#: Reports written in this run, printed in the terminal summary.
REPORTS: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for path in REPORTS:
        terminalreporter.write_sep("-", f"Delta Spark feature matrix ({path})")
        terminalreporter.write(Path(path).read_text())


def spark_sql(spark: Any, path: str) -> Callable[[str], Any]:
    """``run("DELETE FROM {t} WHERE ...")`` against the table at ``path``."""
    return lambda sql: spark.sql(sql.replace("{t}", f"delta.`{path}`"))
