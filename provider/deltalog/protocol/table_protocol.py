"""Table features: what a table's protocol asks for and what deltalog implements.

Reading a snapshot needs every reader feature; any operation that writes or
deletes needs every reader *and* writer feature. The check runs before anything
is touched so a refused operation never leaves half a change behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from deltalog.errors import UnsupportedProtocolError
from deltalog.protocol.features import CATALOG_FEATURES, FEATURES, READ_ONLY, Operation, feature_cell, reader_features
from deltalog.protocol.geoarrow import geospatial_writes_supported
from deltalog.protocol.schema import geospatial_columns, is_geospatial_type

__all__ = [
    "FeatureRequirements",
    "Protocol",
    "check_readable",
    "check_writable",
    "commit_coordinator",
    "refuse_geospatial_writes",
]

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7

#: Reader features whose effect on log replay and file selection deltalog implements
#: (derived from the feature x operation table in :mod:`deltalog.protocol.features`).
SUPPORTED_READER_FEATURES = reader_features()

#: Writer features some writing operation of deltalog honours (each operation's own
#: column of the feature table says which it honours and which it refuses).
SUPPORTED_WRITER_FEATURES = frozenset(
    name for name, f in FEATURES.items() if any(f.cell(op).allowed for op in Operation if op not in READ_ONLY)
)

#: The column a commit of arbitrary actions (``op=None``) is checked against.
GENERIC_COMMIT = Operation.COMMIT_REQUEST

# Features implied by legacy (pre-table-features) protocol versions.
_LEGACY_WRITER = {
    2: ["appendOnly", "invariants"],
    3: ["checkConstraints"],
    4: ["changeDataFeed", "generatedColumns"],
    5: ["columnMapping"],
    6: ["identityColumns"],
}
_LEGACY_READER = {2: ["columnMapping"]}


def _effective(version: int, features_version: int, listed: tuple[str, ...] | None, legacy: dict) -> set[str]:
    """Explicit features from table-features versions on; before that, what the version implies."""
    if version >= features_version:
        return set(listed or ())
    return {f for v, feats in legacy.items() if version >= v for f in feats}


@dataclass(frozen=True)
class Protocol:
    """The ``protocol`` action."""

    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...] | None = None
    writer_features: tuple[str, ...] | None = None

    @classmethod
    def from_action(cls, action: dict[str, Any]) -> Protocol:
        rf = action.get("readerFeatures")
        wf = action.get("writerFeatures")
        return cls(
            int(action.get("minReaderVersion", 1)),
            int(action.get("minWriterVersion", 2)),
            tuple(rf) if rf is not None else None,
            tuple(wf) if wf is not None else None,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"minReaderVersion": self.min_reader_version, "minWriterVersion": self.min_writer_version}
        if self.reader_features is not None:
            out["readerFeatures"] = list(self.reader_features)
        if self.writer_features is not None:
            out["writerFeatures"] = list(self.writer_features)
        return out

    def effective_reader_features(self) -> set[str]:
        return _effective(self.min_reader_version, 3, self.reader_features, _LEGACY_READER)

    def effective_writer_features(self) -> set[str]:
        return _effective(self.min_writer_version, 7, self.writer_features, _LEGACY_WRITER)

    def has_feature(self, name: str) -> bool:
        return name in self.effective_reader_features() or name in self.effective_writer_features()


def check_readable(protocol: Protocol) -> None:
    """Raise UnsupportedProtocolError unless deltalog can read a table with this protocol."""
    if protocol.min_reader_version > MAX_READER_VERSION or protocol.min_reader_version < 1:
        raise UnsupportedProtocolError(
            f"minReaderVersion {protocol.min_reader_version} is not supported (deltalog reads up to {MAX_READER_VERSION})"
        )
    missing = sorted(protocol.effective_reader_features() - SUPPORTED_READER_FEATURES)
    if missing:
        raise UnsupportedProtocolError(
            f"the table needs reader feature(s) deltalog does not implement: {', '.join(missing)}", missing
        )


def commit_coordinator(configuration: dict[str, str] | None) -> str:
    """Who owns the commits of a catalog-managed table, as far as its properties tell."""
    config = configuration or {}
    for key in ("delta.coordinatedCommits.commitCoordinator-preview", "delta.coordinatedCommits.commitCoordinator"):
        if config.get(key):
            return f"commit coordinator {config[key]!r}"
    uc = config.get("io.unitycatalog.tableId")
    if uc:
        return f"Unity Catalog (table id {uc})"
    return "its managing catalog (not named in the table properties)"


def check_writable(
    protocol: Protocol,
    operation: str = "write",
    op: Operation | None = None,
    configuration: dict[str, str] | None = None,
) -> None:
    """Raise unless deltalog may run ``op`` (writing or deleting) on a table with this protocol.

    Every reader and writer feature of the protocol is looked up in the feature x
    operation table (:mod:`deltalog.protocol.features`); a refused cell, or a feature the
    table does not know, refuses the operation with the cell's reason. ``op=None``
    (a commit of arbitrary actions) is held to the commit request's column: it may add
    any file, as a commit request does.
    ``configuration`` (the table properties) names a catalog-managed table's
    coordinator in the refusal. Called before any change is made, so a refusal
    never leaves partial work; conditional cells are checked by the operation.
    """
    check_readable(protocol)
    if protocol.min_writer_version > MAX_WRITER_VERSION or protocol.min_writer_version < 1:
        raise UnsupportedProtocolError(
            f"refusing to {operation}: minWriterVersion {protocol.min_writer_version} is not supported "
            f"(deltalog writes up to {MAX_WRITER_VERSION})"
        )
    column = GENERIC_COMMIT if op is None else op
    features = sorted(protocol.effective_writer_features() | protocol.effective_reader_features())
    refused: dict[str, str] = {}
    for name in features:
        cell = feature_cell(name, column)
        if not cell.allowed:
            refused[name] = cell.reason
    if not refused:
        return
    catalog = sorted(set(refused) & CATALOG_FEATURES)
    if catalog:
        raise UnsupportedProtocolError(
            f"refusing to {operation}: the table is catalog-managed ({', '.join(catalog)}); its commits and "
            f"maintenance belong to {commit_coordinator(configuration)}, and deltalog does not talk to catalogs",
            sorted(refused),
        )
    unknown = [n for n in refused if n not in FEATURES]
    if unknown:
        raise UnsupportedProtocolError(
            f"refusing to {operation}: the table needs writer feature(s) deltalog does not implement: "
            f"{', '.join(unknown)}",
            sorted(refused),
        )
    name = sorted(refused)[0]
    more = f" (also: {', '.join(sorted(refused)[1:])})" if len(refused) > 1 else ""
    raise UnsupportedProtocolError(
        f"refusing to {operation}: the table uses {name}: {refused[name]}{more}", sorted(refused)
    )


def refuse_geospatial_writes(schema: dict[str, Any], operation: str, feature_operation: Operation) -> None:
    """Refuse to write data files for a schema with geometry/geography columns where ``feature_operation`` cannot.

    Local compaction writes top-level ones (:mod:`deltalog.protocol.geoarrow`, pyarrow 21 or
    later); nested ones and the Spark engine stay refused (the geospatial cells). Commit
    requests write no data file: their files' columns are checked by schema enforcement.
    """
    columns = geospatial_columns(schema)
    if not columns:
        return
    reason = feature_cell("geospatial", feature_operation).reason
    if feature_operation is Operation.COMPACTION_LOCAL:
        top = {f.get("name") for f in schema.get("fields") or [] if is_geospatial_type(f.get("type"))}
        nested = [c for c in columns if c not in top]
        if not nested and geospatial_writes_supported():
            return
        problem = (
            f"column {nested[0]!r} is a geospatial column inside a struct, array or map"
            if nested
            else f"column {columns[0]!r} is a geospatial column and this pyarrow ({pa.__version__}) is older than 21"
        )
    else:
        problem = f"column {columns[0]!r} is a geospatial column"
    raise UnsupportedProtocolError(f"refusing to {operation}: {problem}; {reason}", ["geospatial"])


@dataclass
class FeatureRequirements:
    """Accumulates what a new table needs, to choose the smallest protocol that covers it."""

    reader: set[str] = field(default_factory=set)
    writer: set[str] = field(default_factory=set)

    def to_protocol(self) -> Protocol:
        if not self.reader and not self.writer:
            return Protocol(1, 2)
        writer = set(self.writer) | set(self.reader)
        if self.reader:
            return Protocol(3, 7, tuple(sorted(self.reader)), tuple(sorted(writer)))
        return Protocol(1, 7, None, tuple(sorted(writer)))
