"""Table feature x operation: what deltalog does with each table feature, per operation.

This is the one source of truth for feature support. :func:`deltalog.protocol.table_protocol.check_readable`
and :func:`deltalog.protocol.table_protocol.check_writable` consult it before any operation touches
a table, ``deltalog features`` prints it, ``scripts/features_doc.py`` renders it
into ``docs/features.md`` and the Delta Spark corpus tests compare it with what
really happens, cell by cell. A feature missing here is refused by every
operation (a feature deltalog does not know is never ignored).

Each cell is one of:

- ``supported``: the operation honours the feature's rules (PROTOCOL.md and its
  accepted RFCs) unconditionally;
- ``conditional``: the operation runs, but refuses the tables (or requests) whose
  state it cannot handle, with the condition given in the reason; the operation's own
  module checks it;
- ``refused``: the operation refuses every table with the feature, for the reason
  given (a one-line error that says what deltalog lacks).

Operations that only read the log and preserve actions (checkpoint, log cleanup,
vacuum, manifest) support most writer features: they never write data and copy the
actions they keep field by field (``baseRowId``, ``defaultRowCommitVersion``,
``clusteringProvider``, domain metadata).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "CATALOG_FEATURES",
    "FEATURES",
    "READ_ONLY",
    "Cell",
    "Feature",
    "Operation",
    "feature_cell",
    "markdown",
    "reader_features",
    "support_table",
    "text_table",
]


class Operation(StrEnum):
    """What deltalog does to a table; the columns of the support table."""

    SNAPSHOT = "snapshot"
    COMMIT_REQUEST = "commit request"
    COMPACTION_LOCAL = "compaction local"
    COMPACTION_SPARK = "compaction spark"
    CHECKPOINT = "checkpoint"
    LOG_CLEANUP = "log cleanup"
    VACUUM = "vacuum"
    MANIFEST = "manifest"
    CONVERT = "convert"
    CREATE = "create"


#: Operations that read only (the others write or delete).
READ_ONLY = frozenset({Operation.SNAPSHOT})

SUPPORTED = "supported"
CONDITIONAL = "conditional"
REFUSED = "refused"


@dataclass(frozen=True)
class Cell:
    """One operation's support for one feature."""

    status: str  # SUPPORTED | CONDITIONAL | REFUSED
    reason: str = ""

    @property
    def allowed(self) -> bool:
        """Whether the protocol check lets the operation start (conditional cells are checked later)."""
        return self.status != REFUSED

    def to_dict(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason}


@dataclass(frozen=True)
class Feature:
    """A table feature: reader-writer or writer-only, and its cell per operation."""

    name: str
    kind: str  # "reader-writer" | "writer"
    summary: str
    cells: dict[Operation, Cell]

    def cell(self, op: Operation) -> Cell:
        return self.cells[op]

    def to_dict(self) -> dict[str, Any]:
        return {
            "feature": self.name,
            "kind": self.kind,
            "summary": self.summary,
            "operations": {op.value: self.cells[op].to_dict() for op in Operation},
        }


_OK = Cell(SUPPORTED)
_NEVER_CREATED = "deltalog never creates a table with this feature"


def _feature(name: str, kind: str, summary: str, default: Cell = _OK, **overrides: Cell) -> Feature:
    """A feature whose cells are ``default`` except the operations named (``commit_request=...``)."""
    cells = {op: default for op in Operation}
    for key, cell in overrides.items():
        cells[Operation[key.upper()]] = cell
    if kind == "writer" and cells[Operation.SNAPSHOT].status == REFUSED:
        raise ValueError(f"{name}: readers ignore writer-only features")
    return Feature(name, kind, summary, cells)


def _refused(reason: str) -> Cell:
    return Cell(REFUSED, reason)


def _conditional(reason: str) -> Cell:
    return Cell(CONDITIONAL, reason)


_NOT_CONVERTED = _refused("convert writes a new table with only the features its Parquet files need; " + _NEVER_CREATED)
_NO_CREATE = _refused(_NEVER_CREATED)

_ROW_IDS = (
    "new files get baseRowId above the delta.rowTracking high-water mark (advanced in the same commit) and the "
    "commit's version as defaultRowCommitVersion; removes keep the live add's fields"
)
_ROW_REWRITE = _conditional(
    _ROW_IDS + "; when enabled, every row's stable row ID and commit version (the materialised value, else "
    "baseRowId + its position in the file and the file's defaultRowCommitVersion) are materialised into the "
    "delta.rowTracking.materialized* columns, as Delta Spark's OPTIMIZE does; refused when those are not named or "
    "a file lacks baseRowId"
)
_CATALOG = _refused(
    "the table's commits and maintenance belong to its managing catalog's commit coordinator (PROTOCOL.md "
    "'Catalog-managed tables'); deltalog does not talk to catalogs"
)
_ROW_RULES = _conditional(
    "every row of every new file is checked with DuckDB (NULL violates, as in Delta Spark; generated columns "
    "null-safe equal); a violation, or an expression DuckDB cannot evaluate, refuses naming the rule"
)
_ICEBERG_SPARK_V2 = _conditional(
    "new files follow the writer rules as on the local engine; refused when the schema holds an array or a map: "
    "Spark's Parquet writer cannot put the V2 nested field ids on list elements and map keys/values (the local "
    "engine can)"
)
_ICEBERG_COMPACT = Cell(
    SUPPORTED,
    "new files follow the writer rules: partition values materialised after the data columns, field ids on every "
    "column (V2: list element and map key/value ids from delta.columnMapping.nested.ids), numRecords in stats, no "
    "deletion vectors; the Iceberg metadata is Delta Spark's to write on its next commit",
)
_ICEBERG_COMMIT = _conditional(
    "a new file must follow the writer rules (partition values materialised, Parquet field ids equal to the column "
    "mapping ids, V2 nested ids, numRecords in stats); refused naming the rule otherwise, and naming the column "
    "when the table's schema holds a type the version does not allow (V1: map, array, void; V2: outside its "
    "type allow-list)"
)
_ICEBERG_VACUUM = _conditional(
    "keeps every data and delete file the Iceberg snapshots readers may still use reference (the current snapshot "
    "of every newest metadata/*.metadata.json, its branches and tags, the snapshot current at the cutoff, every "
    "snapshot committed inside the retention window; docs/vacuum.md), in every mode and on both engines, and "
    "never lists or deletes metadata/; refused, before anything is deleted, when that metadata cannot be read "
    "(torn JSON, a missing or corrupt manifest list or manifest of a snapshot the newest metadata lists, a format "
    "version other than 1 to 3) or names another table's location"
)
_SHREDDED = _conditional(
    "a new file's variant columns must be unshredded or, while delta.enableVariantShredding is true, in the Parquet "
    "variant shredding layout (metadata, value, typed_value; object fields and array elements value/typed_value; "
    "checked from the footer); refused naming the column otherwise"
)
_SHREDDED_LOCAL = _refused(
    "files may hold shredded variant columns (Parquet variant shredding), which pyarrow cannot reassemble into "
    "variant values; the Spark engine rewrites them (engine='spark')"
)
_SHREDDED_SPARK = Cell(
    SUPPORTED,
    "Spark reads shredded and unshredded variant columns and writes them unshredded (the protocol lets any file "
    "be unshredded); shredding them again is left to Delta Spark's writers",
)
_CLUSTERING_LOCAL = _conditional(
    "clusters as Delta Spark's OPTIMIZE does: unclustered and small clustered files are rewritten along a Hilbert "
    "curve of the delta.clustering columns (clusteringProvider liquid, ZCUBE tags), clustered files of a good size "
    "or by other columns stay (full=True re-clusters those); the domain is kept; refused when an output lacks "
    "statistics for a clustering column"
)
_CLUSTERING_SPARK = _conditional(
    "clusters like the local engine (same files chosen, same tags and commit) along a Z curve of sampled range ids "
    "of the delta.clustering columns; refused when an output lacks statistics for a clustering column"
)

_MATERIALIZED = Cell(
    SUPPORTED,
    "new files carry the partition columns after the data columns, as Delta Spark writes them, with no statistics "
    "for them (protocol_rfcs/materialize-partition-columns.md; delta.writePartitionColumnsToParquet=true does the same)",
)
_GEO_SPARK = _conditional(
    "refused while the schema holds a geometry or geography column: the Spark job is not proven to keep the "
    "GEOMETRY/GEOGRAPHY logical type (CRS, edge algorithm) Delta Spark needs to read the files (the local engine "
    "keeps it); tables whose geospatial columns were dropped are written as any other"
)
_GEO_LOCAL = _conditional(
    "top-level geometry and geography columns are rewritten as read (WKB), annotated with the GEOMETRY/GEOGRAPHY "
    "logical type of the column's CRS and edges as Delta Spark writes them (pyarrow 21 or later, through the "
    "geoarrow.wkb extension type); refused for such a column inside a struct, array or map, or with an older pyarrow"
)

#: Preview names Delta Spark wrote before a feature was ratified -> the ratified feature: the
#: same support, cell for cell (listed right after it).
PREVIEW_NAMES = {
    "typeWidening-preview": "typeWidening",
    "variantType-preview": "variantType",
    "variantShredding-preview": "variantShredding",
    "catalogOwned-preview": "catalogManaged",
    "geospatial-dev": "geospatial",
}


def _with_previews(features: list[Feature]) -> dict[str, Feature]:
    """The table by name, each ratified feature followed by its preview name (same cells)."""
    out: dict[str, Feature] = {}
    previews = {base: name for name, base in PREVIEW_NAMES.items()}
    for f in features:
        out[f.name] = f
        if f.name in previews:
            out[previews[f.name]] = Feature(previews[f.name], f.kind, f"preview name of {f.name}", f.cells)
    return out


FEATURES: dict[str, Feature] = _with_previews(
    [
        # --- reader-writer features -------------------------------------------------------
        _feature(
            "columnMapping",
            "reader-writer",
            "logical column names map to physical names / field ids",
            convert=_NOT_CONVERTED,
            manifest=_conditional(
                "refused while delta.columnMapping.mode is name or id: manifest readers would read physical names"
            ),
        ),
        _feature(
            "deletionVectors",
            "reader-writer",
            "rows deleted through deletion vector files",
            convert=_NOT_CONVERTED,
            manifest=_conditional(
                "refused while live files carry deletion vectors: manifest readers would see deleted rows"
            ),
        ),
        _feature("timestampNtz", "reader-writer", "timestamp without time zone columns"),
        _feature("typeWidening", "reader-writer", "column types widened in place", convert=_NOT_CONVERTED),
        _feature("v2Checkpoint", "reader-writer", "UUID-named checkpoints with sidecars", convert=_NOT_CONVERTED),
        _feature(
            "vacuumProtocolCheck",
            "reader-writer",
            "vacuum checks the writer protocol (deltalog always does)",
            convert=_NOT_CONVERTED,
            create=_NO_CREATE,
        ),
        _feature("variantType", "reader-writer", "variant (semi-structured) columns", convert=_NOT_CONVERTED),
        _feature(
            "variantShredding",
            "reader-writer",
            "variant columns stored shredded into typed Parquet columns",
            commit_request=_SHREDDED,
            compaction_local=_SHREDDED_LOCAL,
            compaction_spark=_SHREDDED_SPARK,
            convert=_NOT_CONVERTED,
            create=_NO_CREATE,
        ),
        _feature(
            "geospatial",
            "reader-writer",
            "geometry and geography columns (WKB in Parquet GEOMETRY/GEOGRAPHY columns)",
            commit_request=_conditional(
                "a new file's geometry or geography column must be WKB with the Parquet GEOMETRY/GEOGRAPHY logical "
                "type of the column's CRS and edges, as Delta Spark writes it (its footer proves it); refused naming "
                "the column otherwise"
            ),
            compaction_local=_GEO_LOCAL,
            compaction_spark=_GEO_SPARK,
            convert=_NOT_CONVERTED,
            create=_NO_CREATE,
        ),
        _feature(
            "catalogManaged",
            "reader-writer",
            "commits go through the managing catalog",
            default=_CATALOG,
            snapshot=_conditional(
                "reads the commits published in _delta_log, and says so (a warning in the snapshot and health "
                "results and on stderr, naming the catalog and any staged commits): ratified commits the catalog "
                "has not published yet are not seen; a version past the published ones is refused naming the "
                "catalog"
            ),
        ),
        # --- writer-only features ---------------------------------------------------------
        _feature(
            "appendOnly",
            "writer",
            "no data may be removed",
            commit_request=_conditional("removes with dataChange=true are refused while delta.appendOnly is true"),
        ),
        # Protocol (1, 2), which convert writes, implies appendOnly and invariants (supported, not active).
        _feature("invariants", "writer", "column invariants (SQL expressions)", commit_request=_ROW_RULES),
        _feature(
            "checkConstraints",
            "writer",
            "CHECK constraints (SQL expressions)",
            commit_request=_ROW_RULES,
            convert=_NOT_CONVERTED,
        ),
        _feature(
            "generatedColumns",
            "writer",
            "columns computed from SQL expressions",
            commit_request=_ROW_RULES,
            convert=_NOT_CONVERTED,
        ),
        _feature("changeDataFeed", "writer", "change data files for row-level changes", convert=_NOT_CONVERTED),
        _feature("domainMetadata", "writer", "named metadata domains kept in the log", convert=_NOT_CONVERTED),
        _feature("inCommitTimestamp", "writer", "commit timestamps stored in commitInfo", convert=_NOT_CONVERTED),
        _feature(
            "checkpointProtection",
            "writer",
            "log cleanup keeps checkpoints needed to drop a feature",
            convert=_NOT_CONVERTED,
            create=_NO_CREATE,
        ),
        _feature(
            "rowTracking",
            "writer",
            "row IDs and row commit versions",
            commit_request=Cell(SUPPORTED, _ROW_IDS),
            compaction_local=_ROW_REWRITE,
            compaction_spark=_ROW_REWRITE,
            convert=_NOT_CONVERTED,
            create=_NO_CREATE,
        ),
        _feature(
            "identityColumns",
            "writer",
            "columns generated as IDENTITY (high-water mark in the schema)",
            commit_request=_conditional(
                "the files must carry the identity values (deltalog generates none): without allowExplicitInsert "
                "each is start + k * step, beyond delta.identity.highWaterMark and unique; the mark is advanced in "
                "the schema in the same commit; refused naming the column otherwise"
            ),
            convert=_NOT_CONVERTED,
            create=_NO_CREATE,
        ),
        _feature(
            "clustering",
            "writer",
            "liquid clustering (delta.clustering domain, clusteringProvider on files)",
            commit_request=_conditional(
                "new files are unclustered (no clusteringProvider); refused when one lacks statistics for a "
                "clustering column"
            ),
            compaction_local=_CLUSTERING_LOCAL,
            compaction_spark=_CLUSTERING_SPARK,
            convert=_NOT_CONVERTED,
            create=_NO_CREATE,
        ),
        _feature(
            "allowColumnDefaults",
            "writer",
            "column DEFAULT values",
            commit_request=_conditional(
                "a file that does not carry a column with a non-NULL CURRENT_DEFAULT is refused (its rows would "
                "read NULL instead of the default); files carrying the column have explicit values"
            ),
            convert=_NOT_CONVERTED,
            create=_NO_CREATE,
        ),
        _feature(
            "icebergCompatV1",
            "writer",
            "UniForm Iceberg compatibility, version 1",
            commit_request=_ICEBERG_COMMIT,
            compaction_local=_ICEBERG_COMPACT,
            compaction_spark=_ICEBERG_COMPACT,
            vacuum=_ICEBERG_VACUUM,
            convert=_NOT_CONVERTED,
            create=_NO_CREATE,
        ),
        _feature(
            "icebergCompatV2",
            "writer",
            "UniForm Iceberg compatibility, version 2",
            commit_request=_ICEBERG_COMMIT,
            compaction_local=_ICEBERG_COMPACT,
            compaction_spark=_ICEBERG_SPARK_V2,
            vacuum=_ICEBERG_VACUUM,
            convert=_NOT_CONVERTED,
            create=_NO_CREATE,
        ),
        _feature(
            "materializePartitionColumns",
            "writer",
            "partition columns written into every new data file",
            commit_request=_conditional(
                "a new file must carry every partition column, holding exactly the file's partition value (its "
                "footer proves it); refused naming the column otherwise"
            ),
            compaction_local=_MATERIALIZED,
            compaction_spark=_MATERIALIZED,
            convert=_NOT_CONVERTED,
            create=_NO_CREATE,
        ),
        _feature(
            "collations",
            "writer",
            "collated string columns (statistics may be per collation)",
            convert=_NOT_CONVERTED,
            create=_NO_CREATE,
        ),
        _feature(
            "coordinatedCommits-preview",
            "writer",
            "commits go through a commit coordinator (preview of catalogManaged)",
            default=_CATALOG,
            snapshot=_conditional(
                "reads the commits published in _delta_log; commits the coordinator has not backfilled are not seen"
            ),
        ),
    ]
)

#: Features whose writes are owned by a catalog or commit coordinator.
CATALOG_FEATURES = frozenset({"catalogManaged", "catalogOwned-preview", "coordinatedCommits-preview"})


def feature_cell(feature: str, op: Operation) -> Cell:
    """The cell for ``feature`` under ``op``; a feature deltalog does not know is refused (never ignored)."""
    known = FEATURES.get(feature)
    if known is None:
        return _refused("deltalog does not implement this feature")
    return known.cell(op)


def reader_features() -> frozenset[str]:
    """Reader-writer features a snapshot can read (the old ``SUPPORTED_READER_FEATURES``)."""
    return frozenset(
        f.name for f in FEATURES.values() if f.kind == "reader-writer" and f.cell(Operation.SNAPSHOT).allowed
    )


def support_table() -> list[dict[str, Any]]:
    """Every feature's row, for ``deltalog features --json`` and the docs."""
    return [f.to_dict() for f in FEATURES.values()]


_MARK = {SUPPORTED: "yes", CONDITIONAL: "cond.", REFUSED: "no"}


def text_table() -> str:
    """The table as aligned text (``deltalog features``): a grid, then every reason once."""
    ops = list(Operation)
    width = max(len(n) for n in FEATURES)
    heads = [op.value for op in ops]
    lines = [" " * width + "  " + "  ".join(heads)]
    for f in FEATURES.values():
        marks = [_MARK[f.cell(op).status].ljust(len(h)) for op, h in zip(ops, heads)]
        lines.append(f"{f.name.ljust(width)}  " + "  ".join(marks).rstrip())
    lines.append("")
    lines.append("yes: supported; cond.: supported unless the condition below holds; no: refused")
    for f in FEATURES.values():
        for op in ops:
            cell = f.cell(op)
            if cell.reason:
                lines.append(f"{f.name} / {op.value}: {cell.status}: {cell.reason}")
    return "\n".join(lines)


def markdown() -> str:
    """``docs/features.md``, generated (``python scripts/features_doc.py``; a test keeps it current)."""
    ops = list(Operation)
    out = [
        "# Table features x operations",
        "",
        "<!-- Generated from provider/deltalog/protocol/features.py by scripts/features_doc.py; do not edit. -->",
        "",
        "What each deltalog operation does with a table that uses each table feature. The table in",
        "`provider/deltalog/protocol/features.py` is the one source of truth: the protocol checks consult it",
        "before an operation touches a table, `deltalog features [--json]` prints it, and this page",
        "is rendered from it. A feature not listed here is refused by every operation, reads included",
        "when it is a reader feature. **yes**: supported; **cond.**: supported, except in the state",
        "named in the notes (the operation checks it and refuses); **no**: refused, with the reason in",
        "the notes. Writer-only features never stop a snapshot (readers ignore them).",
        "",
        "Checked against tables Delta Spark wrote by `tests/test_features_delta_spark.py` (slow, spark): on each",
        "table every operation does what its cells say, Delta Spark reads every row afterwards, and row IDs and",
        "row commit versions (`_metadata.row_id`, `_metadata.row_commit_version`) survive commits and compaction.",
        "",
        "| feature | kind | " + " | ".join(op.value for op in ops) + " |",
        "|---|---|" + "---|" * len(ops),
    ]
    for f in FEATURES.values():
        out.append(f"| `{f.name}` | {f.kind} | " + " | ".join(_MARK[f.cell(op).status] for op in ops) + " |")
    out += ["", "## Notes", ""]
    for f in FEATURES.values():
        notes = [(op, f.cell(op)) for op in ops if f.cell(op).reason]
        out.append(f"- `{f.name}` ({f.summary})" + (":" if notes else ": every operation supports it."))
        for op, cell in notes:
            out.append(f"  - {op.value}: {_MARK[cell.status]}, {cell.reason}")
    out.append("")
    return "\n".join(out)
