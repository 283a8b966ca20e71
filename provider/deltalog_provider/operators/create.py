"""``DeltaCreateTableOperator``: create an empty Delta table (version 0), or keep the one there."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from deltalog import DeltaTable, arrow_schema_to_schema_string
from deltalog.errors import InvalidArgumentError, TableAlreadyExistsError
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import arrow_schema, optional_list, optional_mapping, optional_str

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DeltaCreateTableOperator"]

IF_EXISTS = ("error", "ignore")


class DeltaCreateTableOperator(DeltaTableOperator):
    """Create an empty Delta table: protocol and metadata at version 0, no data files.

    The protocol is the lowest one the schema and properties need (column mapping, timestamp
    without time zone, ...); a feature deltalog cannot write is refused before anything is
    written. The XCom value is the commit (``version`` 0) plus ``created``.

    :param table: table name, URI or path (templated).
    :param schema: a ``pyarrow.Schema`` (stored as its Delta schema JSON, checked when the task is
        defined), or a Delta schema as JSON text or dict (templated).
    :param partition_by: partition columns: a list, a JSON list or ``"a,b"`` (templated).
    :param configuration: table properties (``delta.*``), a dict or JSON object (templated).
    :param name: the table's ``name`` in its metadata.
    :param description: the table's ``description`` in its metadata.
    :param if_exists: ``"error"`` (default: a table already there fails the task, without
        retry) or ``"ignore"`` (keep it, return its version with ``created`` False, emit no
        asset event): the idempotent "create on first run" of an ingest DAG.
    """

    template_fields: Sequence[str] = (
        *DeltaTableOperator.template_fields,
        "schema",
        "partition_by",
        "configuration",
        "if_exists",
    )
    operation_name = "CREATE TABLE"
    lineage_lifecycle = "CREATE"

    def __init__(
        self,
        *,
        schema: pa.Schema | str | dict[str, Any],
        partition_by: list[str] | str | None = None,
        configuration: dict[str, Any] | str | None = None,
        name: str | None = None,
        description: str | None = None,
        if_exists: str = "error",
        **kwargs: Any,
    ) -> None:
        # Kept as Delta schema JSON text, never a pyarrow.Schema: the schema is a template field, and
        # Airflow stores template fields in the serialized DAG, which a pyarrow object (its metadata
        # buffers) cannot enter (the DAG processor then drops the whole DAG).
        self.schema = arrow_schema_to_schema_string(schema) if isinstance(schema, pa.Schema) else schema
        self.partition_by = partition_by
        self.configuration = configuration
        self.name = name
        self.description = description
        self.if_exists = if_exists
        super().__init__(**kwargs)

    def run_operation(self, table: DeltaTable, context: Context) -> Any:
        from deltalog import create_table

        if_exists = optional_str(self.if_exists) or "error"
        if if_exists not in IF_EXISTS:
            raise InvalidArgumentError(f"if_exists must be one of {', '.join(IF_EXISTS)}, got {if_exists!r}")
        try:
            result = self.call(
                create_table,
                table.uri,
                arrow_schema(self.schema, "schema"),
                partition_by=optional_list(self.partition_by, "partition_by"),
                configuration=optional_mapping(self.configuration, "configuration"),
                storage_options=self.hook.storage_options_for(table.uri) or None,
                name=self.name,
                description=self.description,
            )
        except TableAlreadyExistsError:
            if if_exists == "error":
                raise
            return {"table": table.uri, "created": False, "version": self.read(table.version)}
        return {"table": table.uri, "created": True, **result.to_dict()}

    def is_noop(self, metrics: dict[str, Any]) -> bool:
        return metrics.get("created") is False

    def summarize(self, result: Any, metrics: dict[str, Any]) -> str:
        if metrics.get("created") is False:
            return f"CREATE TABLE {self._table_uri}: a table is already there (version {metrics.get('version')}); kept"
        return f"CREATE TABLE {self._table_uri}: created at version {metrics.get('version')}"
