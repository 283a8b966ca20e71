"""UniForm's Iceberg side: the Iceberg metadata beside a Delta table, for the readers we do not see.

A Delta table with UniForm (``delta.universalFormat.enabledFormats=iceberg``) is also read as an
Iceberg table through the metadata under ``metadata/``. This layer sits above the log readers and
below log maintenance, so that vacuum (what Iceberg snapshots still reference), the post-commit
hooks (the Iceberg metadata of each new Delta version) and log cleanup (expiring Iceberg
snapshots past the table's retention) can all reach it from above.
"""

from deltalog.uniform.iceberg_references import (
    ForeignIcebergMetadataError,
    IcebergMetadataError,
    IcebergReferences,
    MetadataFile,
    ReaderSnapshot,
    read_iceberg_references,
)

__all__ = [
    "ForeignIcebergMetadataError",
    "IcebergMetadataError",
    "IcebergReferences",
    "MetadataFile",
    "ReaderSnapshot",
    "read_iceberg_references",
]
