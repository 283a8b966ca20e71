"""DuckDB as the tests' third and fourth reader: ``delta_scan`` (its delta extension, built on delta-kernel-rs)
and ``iceberg_scan`` (its iceberg extension), in this process.

DuckDB would download an extension on first use; it cannot here, and a test must not depend on a
download anyway. The extensions come from their PyPI packages (``duckdb-extension-delta``,
``-iceberg``, ``-avro``: the iceberg extension reads manifests through avro), each built for one
DuckDB release and installed by the lock with exactly that ``duckdb``; this module loads each
package's file by path with autoloading and autoinstalling off, so a missing or mismatched
package is one clear error instead of an attempt to download.

Kept free of pytest (the oracle checks import it).
"""

from __future__ import annotations

import functools
import importlib.metadata
import threading
from pathlib import Path
from typing import Any

from table_rows import Rows, rows_of

__all__ = ["EXTENSIONS", "ExtensionMissingError", "connection", "duckdb_delta_rows", "duckdb_iceberg_rows"]

#: The extensions, in load order (iceberg needs avro loaded first).
EXTENSIONS = ("delta", "avro", "iceberg")


class ExtensionMissingError(RuntimeError):
    """The extension package for this DuckDB release is not installed (bootstrap installs the lock)."""


def extension_file(name: str) -> Path:
    """The ``<name>.duckdb_extension`` file the package ``duckdb-extension-<name>`` ships for this DuckDB."""
    import duckdb

    dist = f"duckdb-extension-{name}"
    wanted = f"extensions/v{duckdb.__version__}/{name}.duckdb_extension"
    try:
        files = importlib.metadata.distribution(dist).files or []
    except importlib.metadata.PackageNotFoundError:
        raise ExtensionMissingError(
            f"{dist} is not installed: DuckDB {duckdb.__version__} needs it to read {name} (requirements.lock)"
        ) from None
    for f in files:
        if str(f).replace("\\", "/").endswith(wanted):
            return Path(str(f.locate()))
    version = importlib.metadata.version(dist)
    raise ExtensionMissingError(f"{dist} {version} has no {name} extension for DuckDB {duckdb.__version__}")


_LOCK = threading.Lock()


@functools.cache
def _connection() -> Any:
    import duckdb

    con = duckdb.connect(
        config={
            # Never reach for the extension repository: the files come from the packages, by path.
            "autoload_known_extensions": False,
            "autoinstall_known_extensions": False,
            # Every read goes to the files as they are now: a test deletes and rewrites them between reads.
            "enable_external_file_cache": False,
        }
    )
    for name in EXTENSIONS:
        con.execute(f"LOAD '{extension_file(name)}'")
    # Timestamps with a zone come back in UTC whatever the machine's zone is (a setting of the built-in icu).
    con.execute("SET TimeZone = 'UTC'")
    return con


def connection() -> Any:
    """This process's DuckDB connection with the three extensions loaded (a cursor of it: one per call)."""
    with _LOCK:
        return _connection().cursor()


def _select(con: Any, scan: str) -> tuple[str, list[str]]:
    """``SELECT`` every column of ``scan``, VARIANT columns as JSON (DuckDB exports no VARIANT to Arrow)."""
    described = con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()
    columns = [
        f'CAST("{name}" AS JSON) AS "{name}"' if kind == "VARIANT" else f'"{name}"' for name, kind, *_ in described
    ]
    variants = [name for name, kind, *_ in described if kind == "VARIANT"]
    return f"SELECT {', '.join(columns) or '*'} FROM {scan}", variants


def _rows(scan: str) -> Rows:
    import json

    con = connection()
    try:
        sql, variants = _select(con, scan)
        data = con.execute(sql).arrow()
        table = data.read_all() if hasattr(data, "read_all") else data
    finally:
        con.close()
    return rows_of(table, {c: json.loads for c in variants})


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def duckdb_delta_rows(path: str, version: int) -> Rows:
    """What DuckDB's ``delta_scan`` reads at ``version`` of the Delta table at ``path`` (a local folder)."""
    return _rows(f"delta_scan({_literal(path)}, version => {int(version)})")


def duckdb_iceberg_rows(path: str, snapshot_id: int | None = None) -> Rows:
    """What DuckDB's ``iceberg_scan`` reads from the Iceberg metadata beside ``path`` (the snapshot its
    ``version-hint.text`` names as current, or ``snapshot_id``)."""
    at = "" if snapshot_id is None else f", snapshot_from_id => {int(snapshot_id)}"
    return _rows(f"iceberg_scan({_literal(path)}{at})")
