"""Delta Spark, the reference implementation, as the tests' oracle: one session, one cached corpus.

Registered as a pytest plugin from ``conftest.py``. Fixtures:

- ``delta_spark`` (session): one Delta Spark 4.4.0 session on Spark 4.2.0
  ``local[1]`` for the whole test run (JVM start-up is paid once; the jars come
  from the cache ``scripts/spark_jars.py`` fills).
- ``delta_corpus`` (session): one small table per feature Delta Spark can enable,
  each with a real history (appends, UPDATE, DELETE, MERGE, OPTIMIZE, RESTORE,
  checkpoints). Each table comes, in this order, from the repo's copy
  (``tests/data/delta_spark_corpus/<name>``, see ``corpus_store.py``) when its key
  and Delta Spark version are today's, copied once per machine to
  ``~/.cache/deltalog/corpus-<delta version>/<name>-<key>-stored-<digest>``; else
  from the per-table cache ``~/.cache/deltalog/corpus-<delta version>/<name>-<key>``;
  else it is built in that session into that cache (the key hashes that table's
  recipe and history, so changing one recipe rebuilds one table). Next to each
  table, ``<name>-<key>[...].json`` keeps, per version, the row count and an
  order-independent content hash Delta Spark computed and Delta Spark's replay of
  the version (live files, protocol, metadata); or the error when Delta Spark could
  not build the table.

The tables keep the times they were built at (commit and file times, in-commit
timestamps, tombstones' deletion times), which may be weeks old in a stored copy. So
the oracle session lets Delta Spark time travel past ``delta.deletedFileRetentionDuration``
(a read policy: a table just built is inside it), and checks whose answer depends on
the clock take it from the table (:func:`fresh_clock_ms`), not from the wall.

Content hash: ``sum(xxhash64(to_json(struct(*))))`` over the rows Delta Spark
reads, as a decimal, plus the row count; equal multisets of rows give equal hashes,
and the hash of a union of rows is the sum of the hashes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from corpus_store import REGENERATE, STORE_ROOT, StoredTable, materialize, read_stored, stale_reason
from deltalog.engines.spark_packages import DELTA_SPARK_VERSION, SPARK_VERSION, cache_root, spark_conf
from jvm_options import SHORT_JVM_OPTIONS

log = logging.getLogger(__name__)

#: Delta Spark's policy of refusing time travel beyond ``delta.deletedFileRetentionDuration``.
TIME_TRAVEL_CHECK = "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration"

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
    # Cheaper on the CPU for a JVM that runs thousands of tiny queries (measured on six corpus tables:
    # 171 -> 140 CPU s, 88 -> 75 s wall): no whole-stage code generation (each query's generated Java
    # compiled by Janino, for a few rows) and no adaptive re-planning (one shuffle partition anyway);
    # the same plans and results, interpreted. A serial collector and two JIT compiler threads: the
    # session runs one task at a time, and C2's threads were a third of its CPU.
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:CICompilerCount=2",
    "spark.sql.session.timeZone": "UTC",
    # Reads of every version must not depend on the table's age: the corpus keeps the times it
    # was built at (a stored copy's may be months old), and past the 7-day file retention Delta
    # Spark refuses time travel by policy (DELTA_UNSUPPORTED_TIME_TRAVEL_BEYOND_DELETED_FILE_
    # RETENTION_DURATION), although every file is there. The checks read the files themselves.
    TIME_TRAVEL_CHECK: "false",
    # Geometry and geography columns (the geospatial table feature) are a preview in Delta Spark 4.4.
    "spark.databricks.delta.geo.preview.enabled": "true",
}


def oracle_jars_conf() -> dict[str, str]:
    """Delta Spark and the s3a connector on the classpath (the side-by-side test writes to the S3
    test server through it; its endpoint and keys are set per test, at run time)."""
    conf = spark_conf(delta=True, s3a=False)
    s3a = spark_conf(delta=False, s3a=True)
    if "spark.jars" in conf and "spark.jars" in s3a:
        conf["spark.jars"] += "," + s3a["spark.jars"]
    else:
        conf.update(spark_conf(delta=True, s3a=True))
    return conf


def start_session(master: str = "local[1]") -> Any:
    """A Delta Spark session (the jars from the version-keyed Ivy cache)."""
    from pyspark.sql import SparkSession

    # Python tasks (the Spark vacuum engine's) run this interpreter, which has deltalog and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName("deltalog-oracle")
    for k, v in {**oracle_jars_conf(), **ORACLE_CONF}.items():
        builder = builder.config(k, v)
    # The short-lived JVMs' C1-only setting (conftest.py) made this long-lived one slower (80 -> 103 s on six
    # corpus tables): it starts without it.
    short_jvm = os.environ.get("SPARK_SUBMIT_OPTS")
    if short_jvm == SHORT_JVM_OPTIONS:
        del os.environ["SPARK_SUBMIT_OPTS"]
    try:
        spark = builder.getOrCreate()
    finally:
        if short_jvm is not None:
            os.environ["SPARK_SUBMIT_OPTS"] = short_jvm
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
    Recipe(
        "materialize_partition_columns",
        "materializePartitionColumns",
        properties={"delta.feature.materializePartitionColumns": "supported"},
    ),
    Recipe("geospatial", "geospatial", columns=BASE_COLUMNS + ", g GEOMETRY(4326), h GEOGRAPHY(4326)"),
)

#: A point (1 2) as WKB: the geospatial table's geometry and geography value.
POINT_WKB = "X'0101000000000000000000F03F0000000000000040'"


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
    if "g GEOMETRY" in recipe.columns:
        cols = "(id, part, v, s, n, g, h)"
        select = select.replace(
            " FROM range", f", ST_GeomFromWKB({POINT_WKB}, 4326) AS g, ST_GeogFromWKB({POINT_WKB}) AS h FROM range"
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


#: Bump when what a table's entry records changes (the recipes above are hashed as text).
CORPUS_FORMAT = 2


def table_key(recipe: Recipe) -> str:
    """The cache key of one table: its recipe, its history and the entry format (not their formatting).

    One key per table, so adding or changing a recipe rebuilds that table only.
    """
    text = json.dumps(
        [CORPUS_FORMAT, COMMON_PROPERTIES, repr(recipe), create_sql(recipe, "T"), history(recipe)], sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def content_hash(spark: Any, path: str, version: int) -> tuple[int, str]:
    """(row count, order-independent hash) of what Delta Spark reads at ``version``."""
    from oracle_checks import content_hashes

    got = content_hashes(spark, path, [version])[version]
    if isinstance(got, str):
        raise AssertionError(f"Delta Spark cannot read v{version} of {path}: {got}")
    return got


def build_table(spark: Any, recipe: Recipe, path: str) -> dict[str, Any]:
    """Create and write one table; returns its entry (versions with their content hashes and states)."""
    from oracle_checks import content_hashes, spark_states

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
    versions = list(range(latest + 1))
    # A version Delta Spark cannot read keeps its "unreadable: ..." string (not split into characters).
    hashes = {str(v): h if isinstance(h, str) else list(h) for v, h in content_hashes(spark, path, versions).items()}
    # Delta Spark's own replay of every version, recorded once: the snapshot checks compare
    # deltalog with it without a JVM on warm runs.
    states = {str(v): s for v, s in spark_states(spark, path, versions).items()}
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
    """The run's corpus tables: each a folder in the per-table cache, with its entry."""

    dirs: dict[str, Path]
    tables: list[dict[str, Any]]
    not_built: list[dict[str, str]]
    #: Tables this run built, and the seconds each took (a warm run builds none).
    built: dict[str, float] = field(default_factory=dict)
    #: Tables (and recorded failures) taken from the repo's copy (tests/data/delta_spark_corpus).
    stored: tuple[str, ...] = ()

    def path(self, name: str) -> str:
        return str(self.dirs[name])

    def copy(self, name: str, dest: Path) -> str:
        """A private copy of a corpus table (tests change tables; the cache stays pristine)."""
        target = dest / name
        shutil.copytree(self.dirs[name], target)
        return str(target)

    @property
    def build_seconds(self) -> float:
        """Seconds this run spent building tables."""
        return round(sum(self.built.values()), 1)

    @property
    def cold_seconds(self) -> float:
        """What building every table of the run took when it was built (recorded per table)."""
        return round(sum(t.get("seconds", 0) for t in self.tables), 1)


def selected_recipes() -> tuple[Recipe, ...]:
    """Every recipe, or those named in ``$DELTALOG_ORACLE_TABLES`` (comma-separated; ``all`` = every one)."""
    wanted = [n for n in os.environ.get("DELTALOG_ORACLE_TABLES", "").split(",") if n]
    unknown = set(wanted) - {r.name for r in RECIPES} - {"all"}
    if unknown:
        raise pytest.UsageError(f"DELTALOG_ORACLE_TABLES names no recipe: {', '.join(sorted(unknown))}")
    return tuple(r for r in RECIPES if not wanted or "all" in wanted or r.name in wanted)


def left_out_recipes() -> list[Recipe]:
    chosen = {r.name for r in selected_recipes()}
    return [r for r in RECIPES if r.name not in chosen]


def corpus_cache() -> Path:
    """Where the corpus tables live: one folder per Delta version, one entry per table and key."""
    return cache_root() / f"corpus-{DELTA_SPARK_VERSION}"


def _entry_file(recipe: Recipe, cache: Path | None = None) -> Path:
    return (cache or corpus_cache()) / f"{recipe.name}-{table_key(recipe)}.json"


#: The engines a stored table must have been written by (with its key) to stand for a build today.
def engine_versions() -> dict[str, str]:
    return {"delta_spark": DELTA_SPARK_VERSION, "spark": SPARK_VERSION}


def usable_stored(recipe: Recipe) -> StoredTable | None:
    """The repo's copy of ``recipe``'s table when it is the one today's recipe and Delta Spark would
    build (else None: the cache or a build serves, and ``tests/test_corpus_store.py`` fails)."""
    stored = read_stored(recipe.name)
    if stored is None:
        return None
    why = stale_reason(stored, table_key(recipe), engine_versions())
    if why:
        log.warning("corpus: the stored %s is not used: %s (regenerate: %s)", recipe.name, why, REGENERATE)
        return None
    return stored


@dataclass(frozen=True)
class CorpusTable:
    """One corpus table as a run has it: its entry, its folder (None if not built) and where it came from."""

    entry: dict[str, Any]
    path: Path | None
    #: ``stored`` (the repo's copy), ``cached`` (the per-table cache) or ``built`` (by this run).
    how: str


def ensure_table(recipe: Recipe, spark: Callable[[], Any]) -> CorpusTable:
    """The table from the repo's copy, the cache, or built now (``spark()`` gives the session).

    Per table: a lock (runs building different tables do not wait for each other), the
    table copied or built into a ``.partial`` folder and renamed, the entry written last.
    A table Delta Spark cannot build is recorded with its error, never dropped.
    """
    stored = usable_stored(recipe)
    if stored is not None:
        return _stored_table(recipe, stored)
    return _cached_or_built(recipe, spark)


def _locked(entry_file: Path) -> Any:
    import fcntl

    entry_file.parent.mkdir(parents=True, exist_ok=True)
    lock = open(entry_file.with_suffix(".lock"), "w")  # noqa: SIM115 - closed by the caller's with
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def _write_entry(entry_file: Path, entry: dict[str, Any]) -> None:
    tmp = entry_file.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(entry))
    tmp.rename(entry_file)


def _stored_table(recipe: Recipe, stored: StoredTable) -> CorpusTable:
    """The repo's copy, copied once per machine into the cache (with the build's file times) under a
    name of its own: a copy never replaces a folder another run may be reading."""
    if not stored.built:
        return CorpusTable(stored.entry, None, "stored")
    entry_file = corpus_cache() / f"{recipe.name}-{table_key(recipe)}-stored-{stored.digest}.json"
    final = entry_file.with_suffix("")
    with _locked(entry_file):
        if not entry_file.exists():
            partial = final.with_name(final.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            materialize(stored, partial)
            shutil.rmtree(final, ignore_errors=True)
            partial.rename(final)
            _write_entry(entry_file, stored.entry)
            log.info("corpus: %s copied from the repo (%s)", recipe.name, stored.root)
        return CorpusTable(json.loads(entry_file.read_text()), final, "stored")


def _cached_or_built(recipe: Recipe, spark: Callable[[], Any], cache: Path | None = None) -> CorpusTable:
    """The table from the per-table cache (``cache``: another folder than the machine's), or built into it."""
    entry_file = _entry_file(recipe, cache)
    final = entry_file.with_suffix("")
    with _locked(entry_file):
        if entry_file.exists():
            entry = json.loads(entry_file.read_text())
            return CorpusTable(entry, None if "error" in entry else final, "cached")
        partial = final.with_name(final.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)  # an interrupted attempt
        t0 = time.perf_counter()
        try:
            entry = build_table(spark(), recipe, str(partial))
            entry["seconds"] = round(time.perf_counter() - t0, 1)
            shutil.rmtree(final, ignore_errors=True)
            partial.rename(final)
            log.info("corpus: %s built in %.1fs (%d versions)", recipe.name, entry["seconds"], entry["latest"] + 1)
        except Exception as exc:  # noqa: BLE001 - a feature this release cannot write is recorded, not fatal
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            entry = {"name": recipe.name, "feature": recipe.feature, "error": first}
            shutil.rmtree(partial, ignore_errors=True)
            log.warning("corpus: %s not built: %s", recipe.name, first)
        entry["key"] = table_key(recipe)
        entry.update(engine_versions())
        _write_entry(entry_file, entry)
        return CorpusTable(entry, None if "error" in entry else final, "built")


def load_corpus(spark: Callable[[], Any]) -> Corpus:
    """Every selected table, from the repo's copy, the cache or built now (only the missing ones are built)."""
    dirs, tables, not_built, built, stored = {}, [], [], {}, []
    for recipe in selected_recipes():
        got = ensure_table(recipe, spark)
        entry = got.entry
        if got.how == "built" and "error" not in entry:
            built[recipe.name] = entry["seconds"]
        if got.how == "stored":
            stored.append(recipe.name)
        if got.path is None:
            not_built.append(entry)
        else:
            dirs[recipe.name] = got.path
            tables.append(entry)
    return Corpus(dirs, tables, not_built, built, tuple(stored))


def fresh_clock_ms(path: str | Path) -> int:
    """The clock as it was an hour after the table was built: its newest file time + 1 hour.

    For checks whose answer depends on ``now`` (retention windows): a table's files, commit
    times and tombstones keep the time it was built at, a stored or long-cached copy's weeks
    back, so the wall clock would push every window past the whole history. This clock gives
    every copy the answers of a table built an hour ago.
    """
    newest = max(
        (os.stat(os.path.join(here, n)).st_mtime_ns for here, _, names in os.walk(path) for n in names), default=0
    )
    return newest // 1_000_000 + 3600 * 1000


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


#: The corpus of this run, for the terminal summary.
CORPORA: list[Corpus] = []


@pytest.fixture(scope="session")
def delta_corpus(delta_spark: Any) -> Corpus:
    """The feature corpus: each table from the cache or built now (once per Delta version and recipe)."""
    t0 = time.perf_counter()
    corpus = load_corpus(lambda: delta_spark)
    log.info("Delta Spark corpus ready in %.1fs", time.perf_counter() - t0)
    CORPORA.append(corpus)
    return corpus


def corpus_summary(corpus: Corpus) -> str:
    """One paragraph for the terminal: where the tables came from and what building them costs cold."""
    cold = ", ".join(f"{t['name']} {t.get('seconds', 0):g}" for t in corpus.tables)
    stored = set(corpus.stored)
    cached = [n for n in corpus.dirs if n not in stored and n not in corpus.built]
    lines = [
        f"{len(corpus.tables)} tables: {len(stored & set(corpus.dirs))} from the repo's copy ({STORE_ROOT}), "
        f"{len(cached)} cached in {corpus_cache()}, {len(corpus.built)} built by this run in "
        f"{corpus.build_seconds}s; {len(corpus.not_built)} Delta Spark could not build.",
        f"Cold build of these tables: {corpus.cold_seconds}s in all (s per table as recorded when built: {cold}).",
    ]
    if cached or corpus.built:
        lines.append(
            f"Tables not from the repo's copy: {', '.join(cached + list(corpus.built))} (store them: {REGENERATE})."
        )
    return "\n".join(lines) + "\n"


#: Reports written in this run, printed in the terminal summary.
REPORTS: list[str] = []
#: (table, phase, seconds, Delta Spark version reads) of the checks, printed in the terminal summary.
TIMINGS: list[tuple[str, str, float, int]] = []
#: What parallel workers (pytest-xdist) sent the controller, which prints the one summary of the run.
FROM_WORKERS: dict[str, list[Any]] = {"corpora": [], "reports": [], "timings": [], "cold": []}


def _summary_state() -> dict[str, list[Any]]:
    """This process's part of the summary, as plain data (what a worker sends the controller)."""
    return {
        "corpora": [corpus_summary(corpus) for corpus in CORPORA],
        "reports": list(REPORTS),
        "timings": [list(t) for t in TIMINGS],
        "cold": [[t["name"], t.get("seconds", 0)] for corpus in CORPORA for t in corpus.tables],
    }


def pytest_sessionfinish(session: Any) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller prints the summary
        workeroutput["deltalog_delta_spark"] = _summary_state()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    for key, values in (getattr(node, "workeroutput", None) or {}).get("deltalog_delta_spark", {}).items():
        FROM_WORKERS[key] += values


def pytest_terminal_summary(terminalreporter: Any) -> None:
    state = _summary_state()
    for key, values in FROM_WORKERS.items():
        state[key] += values
    for text in state["corpora"]:
        terminalreporter.write_sep("-", "Delta Spark corpus")
        terminalreporter.write(text)
    for path in state["reports"]:
        terminalreporter.write_sep("-", f"Delta Spark feature matrix ({path})")
        terminalreporter.write(Path(path).read_text())
    if state["timings"]:
        terminalreporter.write_sep("-", "Delta Spark oracle: seconds per table")
        cold = dict(state["cold"])
        lines = ["| table | phase | seconds | versions Delta Spark read | cold build s |", "|---|---|---|---|---|"]
        for name, phase, seconds, reads in state["timings"]:
            lines.append(f"| {name} | {phase} | {seconds} | {reads} | {cold.get(name, '')} |")
        total = round(sum(t[2] for t in state["timings"]), 1)
        terminalreporter.write("\n".join(lines) + f"\ntotal {total}s\n")


def spark_sql(spark: Any, path: str) -> Callable[[str], Any]:
    """``run("DELETE FROM {t} WHERE ...")`` against the table at ``path``."""
    return lambda sql: spark.sql(sql.replace("{t}", f"delta.`{path}`"))
