"""Exceptions raised by deltalog.

Every error a user can cause has its own class so callers (the CLI, the Airflow
operators) can map it to an exit code or a non-retryable task failure without
parsing messages. ``exit_code`` follows the CLI contract in docs/design.md: 2 for bad
input or an unreadable table, 1 for a refused or conflicting operation.
"""

from __future__ import annotations

__all__ = [
    "CommitFailedError",
    "CommitOutcomeUnknownError",
    "CorruptCheckpointError",
    "CorruptLogError",
    "DataFileMismatchError",
    "DeltaLogError",
    "EngineError",
    "ForeignHandoffError",
    "HistoryWriteError",
    "InvalidArgumentError",
    "InvalidCommitRequestError",
    "MaintenanceLeaseHeldError",
    "MissingCommitError",
    "MissingDataFileError",
    "NoMetadataError",
    "NoProtocolError",
    "NonAtomicStorageError",
    "NotADeltaTableError",
    "OperationCancelledError",
    "OperationRefusedError",
    "StorageError",
    "TableAlreadyExistsError",
    "TableNotFoundError",
    "UnreadableHistoryFileError",
    "UnsupportedFileNameError",
    "UnsupportedProtocolError",
    "VersionNotFoundError",
]


class DeltaLogError(Exception):
    """Base class of every error deltalog raises on purpose."""

    exit_code = 2
    #: Whether retrying the same call can succeed (used by the Airflow operators).
    retryable = False


# --- bad input / unreadable table (exit 2) -----------------------------------------


class InvalidArgumentError(DeltaLogError, ValueError):
    """A parameter given by the caller is malformed or out of range."""


class NotADeltaTableError(DeltaLogError):
    """The location exists but holds no ``_delta_log`` with commits or checkpoints."""


class TableNotFoundError(NotADeltaTableError):
    """The table location does not exist at all."""


class CorruptLogError(DeltaLogError):
    """A log file cannot be parsed or holds an action that breaks the protocol."""


class CorruptCheckpointError(CorruptLogError):
    """A checkpoint file cannot be read; an older checkpoint may still rebuild the table."""


class MissingCommitError(CorruptLogError):
    """A commit file is missing from the sequence needed to build a snapshot."""


class NoProtocolError(CorruptLogError):
    """No protocol action was found while reconstructing a snapshot."""


class NoMetadataError(CorruptLogError):
    """No metaData action was found while reconstructing a snapshot."""


class VersionNotFoundError(DeltaLogError):
    """The requested version or timestamp is outside the versions the log can build."""


class UnsupportedProtocolError(DeltaLogError):
    """The table needs a reader/writer version or table feature deltalog does not implement.

    A refusal (exit 1), not bad input: the table may be perfectly valid, deltalog
    declines to read or change what it cannot honour.
    """

    exit_code = 1

    def __init__(self, message: str, features: list[str] | None = None) -> None:
        super().__init__(message)
        self.features = features or []


class UnsupportedFileNameError(DeltaLogError):
    """A file or folder name under the table is not valid UTF-8.

    Delta logs hold paths as UTF-8 strings, so no log can reference such a file and
    deltalog will not guess what it is: vacuum, convert and manifests stop and name it.
    """


class UnreadableHistoryFileError(CorruptLogError):
    """A data file of the maintenance history cannot be read as history rows (a column of another
    type, a broken Parquet file): readers that summarise say which file and go on without it."""


class StorageError(DeltaLogError):
    """The storage layer failed in a way that is not a missing file (permissions, network)."""

    retryable = True


class HistoryWriteError(StorageError):
    """An operation's rows could not be appended to the maintenance history (the operation itself is done).

    The rows are kept by the recorder and sent again with its next flush, under the same
    app transaction, so a retry never writes them twice.
    """


# --- refused or conflicting operations (exit 1) ------------------------------------


class OperationRefusedError(DeltaLogError):
    """A safety check refused the operation; nothing was written or deleted."""

    exit_code = 1


class CommitFailedError(DeltaLogError):
    """A commit could not be made (conflict or attempts exhausted); nothing was written."""

    exit_code = 1


class MissingDataFileError(OperationRefusedError):
    """A data file the log references is not on storage: the table is missing a file.

    Compaction stops at the first bin whose input is missing (any further bin would most
    likely fail the same way); bins it committed before stay, and it says which.
    """


class ForeignHandoffError(OperationRefusedError):
    """A plan, commit request or other hand-off file was made for another table (its ``metaData.id``), at a
    version the table never had, or names files that were not the table's live files; refused before
    anything is read or written."""


class TableAlreadyExistsError(OperationRefusedError):
    """``create`` was asked for a location that already holds a Delta table."""


class NonAtomicStorageError(OperationRefusedError):
    """The filesystem has no atomic put-if-absent, so concurrent commits could overwrite each other."""


class MaintenanceLeaseHeldError(OperationRefusedError):
    """Another run holds the table's maintenance lease; nothing was done (retry later)."""

    retryable = True


class InvalidCommitRequestError(InvalidArgumentError):
    """A commit request (JSON document or dict) is malformed or does not match the table; nothing was written."""


class DataFileMismatchError(InvalidCommitRequestError):
    """A data file to commit does not fit the table (schema, nullability) or its claimed stats; nothing was written."""

    #: The mismatch alone (column, both types), without the file and request framing.
    detail: str = ""


class EngineError(DeltaLogError):
    """A data engine (e.g. the Spark compaction job) failed or is unavailable; nothing was committed."""

    exit_code = 1
    retryable = True


class OperationCancelledError(DeltaLogError):
    """The caller cancelled a long operation (its cancel event was set) before it committed anything.

    It stopped at a safe point: between vacuum delete chunks or compaction bins, never in
    the middle of a commit. Running it again continues the work.
    """

    exit_code = 1
    retryable = True


class CommitOutcomeUnknownError(StorageError):
    """Writing a version failed and reading it back failed too: the commit may or may not have landed.

    Callers must keep every file the commit would reference (a cleanup that deletes
    them could break a version that did land); reading the table again tells.
    """
