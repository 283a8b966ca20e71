"""A plan or request file belongs to one table: its id and the version it was made at, checked first.

Work is handed between processes as files: a compaction plan (``deltalog compact --plan-only
--json``, ``write_compaction_plan``) run later or by a Spark job, the commit request a Spark job
writes for the commit task, the Spark jobs' specs and reports. A file meant for one table can be
given to another (a wrong path in a DAG, a copied folder, a re-created table at the same
location); run there, a plan rewrites files of another table's name, a request commits files
another table's writer left. So every such file carries the ``metaData.id`` of the table it was
made for and the version it was made at, and each consumer checks them against the table
before it reads or writes anything: another id, a version the table never reached, or a
missing or malformed field is refused in one sentence naming the file's field.

A table id names a table across its locations (a table opened under another spelling of its
URI, or moved, keeps its id); a copy of a table keeps it too, which is why consumers that act on
files also check that the files are the table's own (compaction: its inputs were live at the
plan's version).
"""

from __future__ import annotations

from typing import Any

from deltalog.errors import ForeignHandoffError, InvalidArgumentError

__all__ = ["check_made_at", "check_table_id"]


def check_table_id(what: str, field: str, given: Any, table_id: str, location: str) -> None:
    """``given`` (the hand-off's ``field``) must be ``table_id``, the table's ``metaData.id``.

    InvalidArgumentError when it is missing or not a non-empty string (a malformed or older
    file), ForeignHandoffError when it names another table.
    """
    if given is None:
        raise InvalidArgumentError(
            f"{what} names no table ('{field}' is missing): it was made by an older writer, or not for a table; "
            "make it again for this table. Nothing was read or written"
        )
    if not isinstance(given, str) or not given.strip():
        raise InvalidArgumentError(
            f"{what}: '{field}' must be the table id it was made for (a non-empty string), got {given!r}; nothing "
            "was read or written"
        )
    if given != table_id:
        raise ForeignHandoffError(
            f"{what} was made for table {given}, not for {location} (table id {table_id}); nothing was read or written"
        )


def check_made_at(what: str, field: str, given: Any, version: int, location: str) -> int:
    """``given`` (the hand-off's ``field``: the version it was made at) must be a version the table has reached.

    Returns it. InvalidArgumentError when it is not a non-negative integer, ForeignHandoffError when
    it lies beyond the table's newest version (another table's history, or a table re-created since).
    """
    if isinstance(given, bool) or not isinstance(given, int) or given < 0:
        raise InvalidArgumentError(
            f"{what}: '{field}' must be the table version it was made at (a non-negative integer), got {given!r}; "
            "nothing was read or written"
        )
    if given > version:
        raise ForeignHandoffError(
            f"{what} was made at version {given}, but {location} is at version {version}: it was made from "
            "another history of this table id (a copy, or a table re-created since). Nothing was read or written"
        )
    return given
