"""What every operation accepts as its table: a ``DeltaTable``, a path/URI string, or a ``Storage``.

The operations work on a table's ``Storage`` (and a snapshot they load from it), as
delta-rs's planners take a log store and a snapshot, never the table facade. So they
need only this: ``table_storage`` turns any of the three into the ``Storage``, and
rejects anything else with the same clear sentence everywhere. A ``Storage`` is what
the post-commit work and one operation calling another pass. ``DeltaTable`` (the
facade at the top of the package) is recognised by what it carries, a ``storage``
attribute, so nothing here, or in the operations, imports it.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeAlias

from deltalog.errors import InvalidArgumentError
from deltalog.storage.filesystem import Storage

__all__ = ["HasStorage", "TableRef", "table_storage"]


class HasStorage(Protocol):
    """A table handle carrying its ``Storage``: ``deltalog.DeltaTable``."""

    storage: Storage


#: A table as the operations take it: a ``DeltaTable``, a path/URI string or a ``Storage``.
TableRef: TypeAlias = HasStorage | Storage | str


def table_storage(table: TableRef, storage_options: dict[str, Any] | None = None) -> Storage:
    """``table``'s ``Storage``: itself, a ``DeltaTable``'s own, or a new one for the path/URI.

    ``storage_options`` only apply to a string (a DeltaTable or Storage already carries its own).
    """
    if isinstance(table, str):
        return Storage(table, storage_options)
    if isinstance(table, Storage):
        return table
    storage = getattr(table, "storage", None)
    if isinstance(storage, Storage):
        return storage
    raise InvalidArgumentError(f"table must be a DeltaTable or a path/URI string, got {type(table).__name__}")
