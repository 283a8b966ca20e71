"""UniForm tables for tests and benchmarks: a Delta table built from the protocol, and its Iceberg
metadata written by pyiceberg's own writer (a ``SqlCatalog`` over a sqlite file).

The Delta side follows the protocol for UniForm (``delta.universalFormat.enabledFormats=iceberg``,
``delta.enableIcebergCompatV2=true``, column mapping ``name``, the ``icebergCompatV2`` writer
feature); its data files carry the physical column names and the column-mapping ids as Parquet
field ids, as Delta Spark writes them. The Iceberg side is what a real Iceberg writer produces:
pyiceberg writes the metadata JSON, the manifest lists and the manifests, with the table's
location equal to the Delta table's root, so an Iceberg reader opens the same Parquet files.

``add_files`` of pyiceberg maps footer statistics by column *name*, which physical names defeat,
so :func:`data_file` builds each ``DataFile`` with pyiceberg's own footer-statistics code and a
mapping by physical name (what Delta's converter does from the column mapping), and the snapshots
are made by pyiceberg's snapshot producers (fast append, overwrite).

Kept free of pytest so benchmarks can import it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog.commit.transaction import Transaction
from deltalog.log.actions import Metadata
from deltalog.protocol.parquet_layout import iceberg_data_schema
from deltalog.protocol.table_protocol import Protocol
from deltalog.storage.filesystem import Storage

UNIFORM_PROTOCOL = Protocol(2, 7, None, ("columnMapping", "icebergCompatV2", "invariants", "appendOnly"))


def _field(name: str, dtype: str, cid: int) -> dict[str, Any]:
    meta = {"delta.columnMapping.id": cid, "delta.columnMapping.physicalName": f"col-{name}"}
    return {"name": name, "type": dtype, "nullable": True, "metadata": meta}


#: The UniForm test table's columns: logical name, Delta type, column-mapping id.
COLUMNS = (("id", "long", 1), ("name", "string", 2))
DELTA_SCHEMA = {"type": "struct", "fields": [_field(n, t, c) for n, t, c in COLUMNS]}


def uniform_configuration(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        "delta.columnMapping.mode": "name",
        "delta.columnMapping.maxColumnId": str(len(COLUMNS)),
        "delta.enableIcebergCompatV2": "true",
        "delta.universalFormat.enabledFormats": "iceberg",
        **(extra or {}),
    }


def make_uniform_table(path: str, configuration: dict[str, str] | None = None) -> str:
    """Version 0 of an unpartitioned UniForm (icebergCompatV2) table at ``path``; returns its table id."""
    table_id = str(uuid.uuid4())
    txn = Transaction(Storage(path), None, operation="CREATE TABLE", run_hooks=False)
    txn.update_protocol(UNIFORM_PROTOCOL)
    txn.update_metadata(
        Metadata(
            id=table_id,
            schema_string=json.dumps(DELTA_SCHEMA),
            partition_columns=[],
            configuration=dict(configuration if configuration is not None else uniform_configuration()),
            created_time=0,
        )
    )
    txn.commit()
    return table_id


def write_uniform_file(path: str, start: int, n: int = 2) -> str:
    """A data file as Delta Spark writes it for the table (physical names, field ids); its relative path."""
    schema = iceberg_data_schema(json.dumps(DELTA_SCHEMA), [])
    data = pa.table(
        {
            "col-id": pa.array(range(start, start + n), pa.int64()),
            "col-name": [f"n{i}" for i in range(start, start + n)],
        },
        schema=schema,
    )
    rel = f"part-{start:05d}-{uuid.uuid4().hex}.parquet"
    pq.write_table(data, os.path.join(path, rel))
    return rel


def append_uniform(path: str, start: int, n: int = 2) -> str:
    """One Delta commit adding one new data file (through a commit request: every writer rule checked)."""
    from deltalog.ingest import commit_request

    rel = write_uniform_file(path, start, n)
    commit_request(path, {"operation": "WRITE", "add": [{"path": rel}]}, run_hooks=False)
    return rel


# --- the Iceberg side, written by pyiceberg ----------------------------------------------


def iceberg_catalog(directory: str, name: str = "uniform") -> Any:
    """A pyiceberg ``SqlCatalog`` over a sqlite file in ``directory`` (one per test: parallel-safe)."""
    from pyiceberg.catalog.sql import SqlCatalog

    os.makedirs(directory, exist_ok=True)
    catalog = SqlCatalog(
        name, uri=f"sqlite:///{os.path.join(directory, 'catalog.db')}", warehouse=f"file://{directory}"
    )
    catalog.create_namespace_if_not_exists("delta")
    return catalog


def iceberg_schema() -> Any:
    """The Iceberg schema UniForm derives from :data:`DELTA_SCHEMA`: logical names, column-mapping ids."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    types = {"long": LongType(), "string": StringType()}
    return Schema(*[NestedField(cid, name, types[t], required=False) for name, t, cid in COLUMNS])


def register_iceberg_table(catalog: Any, location: str, name: str = "t") -> Any:
    """An Iceberg table in ``catalog`` whose location is the Delta table root ``location`` (a URI or path)."""
    return catalog.create_table(f"delta.{name}", iceberg_schema(), location=location)


def data_file(uri: str, *, footer: bool = True, size: int | None = None, records: int | None = None) -> Any:
    """A pyiceberg ``DataFile`` for the Parquet file at ``uri`` (absolute), its statistics from the footer.

    ``footer=False`` builds it without opening the file (``size`` and ``records`` given): the
    benchmark's hundred thousand empty files.
    """
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    if not footer:
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=uri,
            file_format=FileFormat.PARQUET,
            partition=Record(),
            file_size_in_bytes=size or 0,
            record_count=records or 0,
        )
    from pyiceberg.io.pyarrow import compute_statistics_plan, data_file_statistics_from_parquet_metadata

    local = uri.removeprefix("file://").removeprefix("file:")
    meta = pq.read_metadata(local)
    schema = iceberg_schema()
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=meta,
        stats_columns=compute_statistics_plan(schema, {}),
        parquet_column_mapping={f"col-{name}": cid for name, _, cid in COLUMNS},
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=uri,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        file_size_in_bytes=os.path.getsize(local),
        sort_order_id=None,
        spec_id=0,
        equality_ids=None,
        key_metadata=None,
        **stats.to_serialized_dict(),
    )


def append_iceberg(table: Any, files: list[Any]) -> Any:
    """A fast-append snapshot adding ``files`` (DataFiles); the table reloaded."""
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            for f in files:
                append.append_data_file(f)
    return table.refresh()


def replace_iceberg(table: Any, removed: list[str], added: list[Any]) -> Any:
    """An overwrite snapshot: the live files whose path is in ``removed`` go, ``added`` (DataFiles) come."""
    gone = set(removed)
    live = [task.file for task in table.scan().plan_files()]
    with table.transaction() as tx:
        with tx.update_snapshot().overwrite() as overwrite:
            for f in live:
                if f.file_path in gone:
                    overwrite.delete_data_file(f)
            for f in added:
                overwrite.append_data_file(f)
    return table.refresh()


def iceberg_rows(metadata_location: str) -> list[tuple[Any, ...]]:
    """Every row an Iceberg reader sees through the metadata file at ``metadata_location``, sorted."""
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_location).scan().to_arrow()
    return sorted(zip(*[table.column(n).to_pylist() for n, _, _ in COLUMNS]))


def delta_rows(path: str) -> list[tuple[Any, ...]]:
    """Every row deltalake (delta-rs) reads from the Delta side, sorted (logical names)."""
    import deltalake
    from deltalake import QueryBuilder

    # Through DataFusion (delta-kernel): it resolves the column mapping's physical names.
    table = pa.table(QueryBuilder().register("t", deltalake.DeltaTable(path)).execute("select * from t").read_all())
    return sorted(zip(*[table.column(n).to_pylist() for n, _, _ in COLUMNS]))


def newest_metadata(path: str) -> str:
    """The newest ``metadata/*.metadata.json`` under the table root (what a path-based reader takes)."""
    folder = os.path.join(path, "metadata")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".metadata.json"))
    return os.path.join(folder, names[-1])


def age(path: str, rel_paths: list[str], seconds: float) -> None:
    """Set the modification time of the table's files ``rel_paths`` ``seconds`` into the past."""
    then = time.time() - seconds
    for rel in rel_paths:
        os.utime(os.path.join(path, rel), (then, then))
