"""The one check every writing operation passes before it reads or writes any data.

Why one gate: an operation that finds out it may not commit only at its commit has
already done its work (a compaction rewrote and uploaded its files, a convert read every
footer) and must throw it away. So each operation calls :func:`check_can_write` as soon
as it knows the table's protocol (the log read, nothing else), and it checks:

- the protocol: deltalog supports every feature the table uses for this operation
  (``check_writable``, from the feature table of :mod:`deltalog.protocol.features`);
- the storage, when the operation commits: its create-if-absent is atomic
  (``Storage.check_atomic_create``: local disks, S3, Azure, GCS). There is no way around
  this one: a store without it can lose commits whenever two writers meet, and a promise
  that there is only one writer cannot be checked;
- UniForm (``delta.universalFormat.enabledFormats=iceberg``), when the operation changes data
  files: the table's state is one its Iceberg metadata can express
  (:func:`deltalog.protocol.uniform.uniform_iceberg_problem`), since deltalog writes that
  metadata after each commit and a state it cannot express would leave Iceberg readers behind.

The fleet's maintenance lease is a create-if-absent too: ``acquire_lease`` asks the
storage first, so a table on such a store is refused before a lease is written.
Operations that do not commit (dry runs, checkpoints, log cleanup, manifests) pass
``commits=False`` and get the protocol check alone.
"""

from __future__ import annotations

from deltalog.errors import OperationRefusedError
from deltalog.protocol.features import Operation
from deltalog.protocol.table_protocol import Protocol, check_writable
from deltalog.protocol.uniform import uniform_iceberg_problem
from deltalog.storage.filesystem import Storage

__all__ = ["DATA_OPERATIONS", "check_can_write", "check_uniform", "spark_reaches"]

#: The operations that add or remove data files (None: a commit of arbitrary actions): on a UniForm
#: table each must leave a state its Iceberg metadata can express.
DATA_OPERATIONS = frozenset(
    {None, Operation.COMMIT_REQUEST, Operation.COMPACTION_LOCAL, Operation.COMPACTION_SPARK, Operation.CREATE}
)


def check_can_write(
    storage: Storage,
    protocol: Protocol | None,
    verb: str,
    operation: Operation | None,
    configuration: dict[str, str] | None = None,
    *,
    commits: bool,
    schema_string: str | None = None,
    partition_columns: list[str] | None = None,
) -> None:
    """Refuse, before any data is read or written, an operation this table or its storage cannot take.

    ``verb`` names the operation in the error ("compact", "vacuum"); ``operation`` is its
    column of the feature table (None: a commit of arbitrary actions, checked as a commit
    request). ``protocol=None`` checks the storage alone, for a caller that checks the
    protocol itself as soon as it is known (convert picks it from the files' schema;
    ``vacuum`` leaves it to its planner, which checks it before listing anything). Raises
    UnsupportedProtocolError or NonAtomicStorageError (both refusals, exit code 1); nothing
    is written by the check. ``schema_string`` / ``partition_columns`` (the table's, or the
    commit's new ones) let the UniForm check name a column Iceberg cannot hold; without them it
    checks the properties alone.
    """
    if protocol is not None:
        check_writable(protocol, verb, operation, configuration)
        if commits and operation in DATA_OPERATIONS:
            check_uniform(protocol, verb, configuration or {}, schema_string, partition_columns)
    if commits:
        storage.check_atomic_create(verb)
        if operation is Operation.COMPACTION_SPARK and not spark_reaches(storage):
            raise OperationRefusedError(
                f"cannot {verb} {storage.uri} with the Spark engine: it runs on local, S3, GCS and Azure tables "
                "only, through their Hadoop connectors; the local engine compacts this table (engine='local', "
                "the default). Nothing was read or written"
            )


def spark_reaches(storage: Storage) -> bool:
    """Whether the Spark engine can run on this table: local paths, S3 (s3a), GCS (the GCS connector)
    and Azure (hadoop-azure's ABFS); every store deltalog commits on but the in-process memory one."""
    return storage.is_local or storage.protocol in ("s3", "s3a", "gs", "gcs", "abfs", "abfss", "az")


def check_uniform(
    protocol: Protocol,
    verb: str,
    configuration: dict[str, str],
    schema_string: str | None = None,
    partition_columns: list[str] | None = None,
) -> None:
    """Refuse (OperationRefusedError) a UniForm table whose Iceberg metadata could not follow this commit."""
    problem = uniform_iceberg_problem(
        protocol.effective_writer_features(), configuration, schema_string, partition_columns
    )
    if problem:
        raise OperationRefusedError(
            f"refusing to {verb}: the table keeps Iceberg metadata for its Iceberg readers (UniForm, "
            f"delta.universalFormat.enabledFormats=iceberg) and {problem}; deltalog would leave those readers behind "
            "(docs/uniform.md). Nothing was read or written"
        )
