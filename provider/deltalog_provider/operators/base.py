"""``DeltaTableOperator``: what every deltalog operator does around its one core call.

A subclass only says which core function to call with which arguments
(``run_operation``), how to phrase the result for a human (``summarize``) and
which numbers describe its output for OpenLineage (``output_statistics``). This
base class owns the rest, identically for every operation:

* the hook, kept for the task (``hook``, a cached property): the connection is fetched
  and logged once; the table is resolved through it (a name under the connection root,
  a URI or a path);
* the transient-error policy of the hook: reads (``read``: planning, checks, dry runs)
  are retried in place through storage blips; writes (``call``) are tried once. Refusals
  (``retryable = False``) fail the task without Airflow's retries, everything else fails it
  as an ordinary, retryable failure;
* the maintenance history row and metrics of the run (``utils/history.py``);
* the XCom value (the result's ``to_dict()``), the asset event on the table's Asset
  with the version and metrics as extra (``outlets.py``), and the OpenLineage facets;
* cancellation: ``on_kill`` sets an event the core checks at safe points (``cancel.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.hooks.retry_policy import (
    DEFAULT_RETRY_DELAY,
    DEFAULT_RETRY_LIMIT,
    deltalog_errors_as_task_failures,
)
from deltalog_provider.operators.cancel import CancelEvent, with_cancel
from deltalog_provider.operators.outlets import declare_table_outlet, record_table_event, without_assets
from deltalog_provider.utils.coerce import strict_bool
from deltalog_provider.utils.history import operation_record
from deltalog_provider.utils.lineage import build_operator_lineage
from deltalog_provider.utils.results import event_extra, is_templated, jsonable
from deltalog_provider.version_compat import AirflowException, BaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DeltaTableOperator"]


class DeltaTableOperator(BaseOperator):
    """Run one deltalog operation on one table and report it to Airflow.

    :param table: a table name (joined to the connection's table root), a URI or an
        absolute path. Templated.
    :param deltalog_conn_id: connection holding storage options and the table root.
    :param emit_asset: declare the table's Asset as an outlet (when the operation changes
        the table) and attach the new version and metrics to its event. A table given as
        a literal URI/path becomes ``Asset(uri)``; a templated one or a bare name (only known
        at run time) is declared through an ``AssetAlias`` named ``deltalog:<dag>.<task>``,
        which still produces the event on the concrete ``Asset(uri)``.
    :param deltalog_retry_limit: transient failures in a row a read of the table is retried
        through in place (the hook's policy; the task's own ``retries`` come after).
    :param deltalog_retry_delay: seconds before the first of those retries; each next one
        waits twice as long.
    :param history_uri: the maintenance history the operation appends its row to (default:
        the connection's extra ``history_uri``; none: nothing recorded). Templated.
    """

    template_fields: Sequence[str] = ("table", "deltalog_conn_id", "history_uri")
    ui_color = "#c7e9f1"

    #: The name used in logs and in the asset-event extra (``"VACUUM"``, ...).
    operation_name: str = "DELTA"
    #: The OpenLineage lifecycle change this operation makes to the table, or None.
    lineage_lifecycle: str | None = "ALTER"
    #: Yes/no parameters: checked when the task is defined (unless templated) and turned into
    #: real bools after rendering, before the core is called (see ``strict_bool``).
    bool_fields: Sequence[str] = ("emit_asset",)
    #: The ``dry_run`` parameter of deleting operators; as an attribute it shadows
    #: BaseOperator.dry_run() (a template-rendering check nothing in Airflow calls).
    dry_run: bool | str  # type: ignore[assignment]

    def __init__(
        self,
        *,
        table: str,
        deltalog_conn_id: str = DeltaTableHook.default_conn_name,
        emit_asset: bool = True,
        deltalog_retry_limit: int = DEFAULT_RETRY_LIMIT,
        deltalog_retry_delay: float = DEFAULT_RETRY_DELAY,
        history_uri: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.deltalog_conn_id = deltalog_conn_id
        self.emit_asset = emit_asset
        self.deltalog_retry_limit = deltalog_retry_limit
        self.deltalog_retry_delay = deltalog_retry_delay
        self.history_uri = history_uri
        for name in self.bool_fields:
            value = getattr(self, name)
            if not is_templated(value):
                setattr(self, name, strict_bool(value, name))
        self._cancel = CancelEvent()
        self._table_uri: str | None = None
        self._metrics: dict[str, Any] | None = None
        self._version: int | None = None
        if emit_asset and self.changes_table():
            owner = f"{self.dag.dag_id}." if self.has_dag() else ""
            self.outlets = declare_table_outlet(list(self.outlets or []), self.table, f"deltalog:{owner}{self.task_id}")

    @cached_property
    def hook(self) -> DeltaTableHook:
        """The task's hook, made on first use (after templates are rendered) and kept for the task."""
        return DeltaTableHook(
            self.deltalog_conn_id, retry_limit=self.deltalog_retry_limit, retry_delay=self.deltalog_retry_delay
        )

    def flag(self, name: str) -> bool | None:
        """A yes/no parameter, or None while it is a template not rendered yet."""
        value = getattr(self, name)
        return None if is_templated(value) else strict_bool(value, name)

    # --- what subclasses define ---------------------------------------------------------

    def changes_table(self) -> bool:
        """Whether this task (as configured) may write to the table; dry runs and plans do not."""
        return True

    def run_operation(self, table: DeltaTable, context: Context) -> Any:
        """Call the core operation (``self.read`` / ``self.call``); return its result (anything with ``to_dict()``)."""
        raise NotImplementedError

    def result_metrics(self, result: Any) -> dict[str, Any]:
        """The XCom value: the result's ``to_dict()``, JSON-safe (override to trim large parts)."""
        return jsonable(result)

    def result_version(self, metrics: dict[str, Any]) -> int | None:
        """The table version after the operation, when the result says (else the table is listed)."""
        version = metrics.get("version")
        return version if isinstance(version, int) and not isinstance(version, bool) else None

    def summarize(self, result: Any, metrics: dict[str, Any]) -> str:
        """One human line: the core result's own ``summary_line()`` (the one the CLI prints), else the metrics."""
        line = result.summary_line() if callable(getattr(result, "summary_line", None)) else metrics
        return f"{self.operation_name} {self._table_uri}: {line}"

    def output_statistics(self, metrics: dict[str, Any]) -> dict[str, int | None]:
        """``row_count``/``size``/``file_count`` of what the operation wrote, for OpenLineage."""
        return {}

    def is_noop(self, metrics: dict[str, Any]) -> bool:
        """Whether the run left the table as it was; a no-op emits no asset event (nothing changed
        for a DAG scheduled on the table to react to)."""
        return False

    # --- execution ------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        with deltalog_errors_as_task_failures():
            for name in self.bool_fields:  # rendered by now: strict parse, never truthiness
                setattr(self, name, strict_bool(getattr(self, name), name))
            table = self.hook.get_table(self.table)
            self._table_uri = table.uri
            self.raise_if_cancelled()
            self.log.info("%s on %s", self.operation_name, self._table_uri)
            with operation_record(self, self.hook, table, context) as record:  # history row and metrics
                result = record.result = self.run_operation(table, context)
            metrics = self.result_metrics(result)
            version = self.result_version(metrics)
            if version is None:
                version = self.read(table.version)
        self._metrics, self._version = metrics, version
        self.log.info("%s", self.summarize(result, metrics))
        if self.emit_asset and self.changes_table():
            self._report_asset_event(context, metrics, version)
        return metrics

    def _report_asset_event(self, context: Context, metrics: dict[str, Any], version: int | None) -> None:
        """The run's event on the table's Asset, or none at all when the run changed nothing."""
        if self.is_noop(metrics):
            self.log.info("%s changed nothing on %s: no asset event", self.operation_name, self._table_uri)
            self.outlets = without_assets(list(self.outlets or []))
            return
        extra = event_extra(self._table_uri or "", self.operation_name, version, metrics)
        events = context.get("outlet_events") if hasattr(context, "get") else None
        if events is not None and self.outlets and not record_table_event(list(self.outlets), events, extra):
            self.log.debug("no outlet matches table asset %s; no event extra recorded", extra["table"])

    def read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A core entry point that only reads (planning, checks, dry runs): retried through transient failures."""
        return self.hook.run(with_cancel(fn, self._cancel), *args, **kwargs)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A core entry point that writes: tried once (a transient failure goes to the task's retries,
        which plan again from the table's state), with this task's cancel event when it takes one."""
        return with_cancel(fn, self._cancel)(*args, **kwargs)

    def raise_if_cancelled(self) -> None:
        if self._cancel.is_set():
            raise AirflowException(f"{self.operation_name} on {self._table_uri or self.table} was cancelled")

    def on_kill(self) -> None:
        """Ask the running core operation to stop at its next safe point."""
        self.log.warning("kill requested: asking %s to stop at the next safe point", self.operation_name)
        self._cancel.set()

    # --- lineage --------------------------------------------------------------------

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any | None:
        """The table as output dataset with version, lifecycle and output statistics (None without OL)."""
        if self._table_uri is None or self._metrics is None:
            return None
        if not self.changes_table():  # dry runs, plans and checks only read the table
            return build_operator_lineage(self._table_uri, version=self._version, lifecycle=None, as_input=True)
        stats = self.output_statistics(self._metrics)
        return build_operator_lineage(
            self._table_uri,
            version=self._version,
            lifecycle=self.lineage_lifecycle,
            row_count=stats.get("row_count"),
            size=stats.get("size"),
            file_count=stats.get("file_count"),
        )
