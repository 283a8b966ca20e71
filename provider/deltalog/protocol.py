"""Table features: what a table's protocol asks for and what deltalog implements.

Reading a snapshot needs every reader feature; any operation that writes or
deletes needs every reader *and* writer feature. The check runs before anything
is touched so a refused operation never leaves half a change behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deltalog.errors import UnsupportedProtocolError

MAX_READER_VERSION = 3
MAX_WRITER_VERSION = 7

#: Reader features whose effect on log replay and file selection deltalog implements.
SUPPORTED_READER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "typeWidening",
        "typeWidening-preview",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "variantType",
        "variantType-preview",
    }
)

#: Writer features whose rules deltalog's writers (commit, maintenance) honour: every
#: reader-writer feature above (PROTOCOL.md lists those in writerFeatures too, and a
#: writer must read what it writes) plus the writer-only ones.
SUPPORTED_WRITER_FEATURES = SUPPORTED_READER_FEATURES | frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "domainMetadata",
        "inCommitTimestamp",
        "checkpointProtection",
    }
)

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


def check_writable(protocol: Protocol, operation: str = "write") -> None:
    """Raise unless deltalog may write to (or delete from) a table with this protocol.

    Called before any change is made, so a refusal never leaves partial work.
    """
    check_readable(protocol)
    if protocol.min_writer_version > MAX_WRITER_VERSION or protocol.min_writer_version < 1:
        raise UnsupportedProtocolError(
            f"refusing to {operation}: minWriterVersion {protocol.min_writer_version} is not supported "
            f"(deltalog writes up to {MAX_WRITER_VERSION})"
        )
    missing = sorted(protocol.effective_writer_features() - SUPPORTED_WRITER_FEATURES)
    if missing:
        raise UnsupportedProtocolError(
            f"refusing to {operation}: the table needs writer feature(s) deltalog does not implement: "
            f"{', '.join(missing)}",
            missing,
        )


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
