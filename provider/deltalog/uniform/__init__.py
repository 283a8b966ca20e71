"""UniForm's Iceberg side: the Iceberg metadata beside a Delta table, for the readers we do not see.

A Delta table with UniForm (``delta.universalFormat.enabledFormats=iceberg``) is also read as an
Iceberg table through the metadata under ``metadata/``. This layer sits above the log readers and
below log maintenance, so that vacuum (what Iceberg snapshots still reference), the post-commit
hooks (the Iceberg metadata of each new Delta version) and log cleanup (expiring Iceberg
snapshots past the table's retention) can all reach it from above.
"""

from importlib import import_module
from typing import Any

from deltalog.uniform.iceberg_references import (
    ForeignIcebergMetadataError,
    IcebergMetadataError,
    IcebergReferences,
    MetadataFile,
    ReaderSnapshot,
    read_iceberg_references,
)

#: The writing side's public names, loaded on first use: pyiceberg takes a second to import, which a commit
#: to a table without UniForm never pays.
_LAZY = {
    "ConvertedSnapshot": "deltalog.uniform.convert",
    "ExpiredSnapshot": "deltalog.uniform.expire",
    "IcebergExpiryResult": "deltalog.uniform.expire",
    "IcebergSyncResult": "deltalog.uniform.convert",
    "UniformConversionError": "deltalog.uniform.convert",
    "expire_iceberg_snapshots": "deltalog.uniform.expire",
    "sync_iceberg_metadata": "deltalog.uniform.convert",
}

__all__ = [
    "ConvertedSnapshot",
    "ExpiredSnapshot",
    "ForeignIcebergMetadataError",
    "IcebergExpiryResult",
    "IcebergMetadataError",
    "IcebergReferences",
    "IcebergSyncResult",
    "MetadataFile",
    "ReaderSnapshot",
    "UniformConversionError",
    "expire_iceberg_snapshots",
    "read_iceberg_references",
    "sync_iceberg_metadata",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'deltalog.uniform' has no attribute {name!r}")
    return getattr(import_module(module), name)
