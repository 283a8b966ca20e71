"""``DeltaTableOperator``: what every deltalog operator does around its one core call.

A subclass only says which core function to call with which arguments
(``run_operation``), how to phrase the result for a human (``summarize``) and
which numbers describe its output for OpenLineage (``output_statistics``). This
base class owns the rest, identically for every operation:

* resolving the table (name under the connection root, URI or path) through the hook;
* turning deltalog's refusals (``retryable = False``) into failures Airflow does not
  retry, and everything else into ordinary, retryable failures;
* the XCom value (the result's ``to_dict()``), the asset event on the table's Asset
  with the version and metrics as extra, and the OpenLineage facets;
* cancellation: ``on_kill`` sets an event the core checks at safe points (compaction
  between bins, vacuum between delete chunks; see ``call_core``), so a killed task stops
  between steps instead of being cut off in the middle of a write.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.failures import deltalog_errors_as_task_failures
from deltalog_provider.hooks.delta_table import DeltaTableHook, is_absolute_location
from deltalog_provider.utils.coerce import strict_bool
from deltalog_provider.utils.lineage import build_operator_lineage
from deltalog_provider.utils.results import event_extra, is_templated, jsonable, table_asset_uri
from deltalog_provider.version_compat import AirflowException, Asset, AssetAlias, BaseOperator, alias_event_extra

if TYPE_CHECKING:
    from airflow.sdk import Context


class CancelEvent(threading.Event):
    """The operator's cancel flag: a ``threading.Event`` that Airflow can copy and pickle.

    Airflow deep-copies operators (``airflow dags test`` on 3.0, DAG subsets) and pickles
    them; a plain Event holds a lock that can be neither. A copy is the same event (the
    copied task is the same task: a kill of either stops the work), a pickle a new unset one.
    """

    def __copy__(self) -> CancelEvent:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> CancelEvent:
        return self

    def __reduce__(self) -> tuple[type[CancelEvent], tuple[()]]:
        return (CancelEvent, ())


def call_core(fn: Callable[..., Any], *args: Any, cancel: threading.Event | None = None, **kwargs: Any) -> Any:
    """Call a core entry point, passing the cancel event when it takes one (``cancel=``).

    Those that do stop at their safe points: ``compact`` between bins, ``vacuum`` /
    ``execute_vacuum`` between files and delete chunks. The others are short, or write
    once at the end, and run to completion.
    """
    if cancel is not None:
        try:
            accepts = "cancel" in inspect.signature(fn).parameters
        except (TypeError, ValueError):  # builtins without a signature
            accepts = False
        if accepts:
            kwargs["cancel"] = cancel
    return fn(*args, **kwargs)


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
    """

    template_fields: Sequence[str] = ("table", "deltalog_conn_id")
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.deltalog_conn_id = deltalog_conn_id
        self.emit_asset = emit_asset
        for name in self.bool_fields:
            value = getattr(self, name)
            if not is_templated(value):
                setattr(self, name, strict_bool(value, name))
        self._cancel = CancelEvent()
        self._table_uri: str | None = None
        self._metrics: dict[str, Any] | None = None
        self._version: int | None = None
        if emit_asset and self.changes_table():
            self._declare_outlet()

    def flag(self, name: str) -> bool | None:
        """A yes/no parameter, or None while it is a template not rendered yet."""
        value = getattr(self, name)
        return None if is_templated(value) else strict_bool(value, name)

    # --- what subclasses define ---------------------------------------------------------

    def changes_table(self) -> bool:
        """Whether this task (as configured) may write to the table; dry runs and plans do not."""
        return True

    def run_operation(self, hook: DeltaTableHook, table: DeltaTable, context: Context) -> Any:
        """Call the core operation; return its result object (anything with ``to_dict()``)."""
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

    # --- outlets --------------------------------------------------------------------

    def _declare_outlet(self) -> None:
        """Add the table's Asset (or an alias when the table is only known at run time) to outlets."""
        outlets = list(self.outlets or [])
        table = self.table
        if isinstance(table, str) and not is_templated(table) and is_absolute_location(table):
            uri = table_asset_uri(table)
            if not any(isinstance(o, Asset) and o.uri == uri for o in outlets):
                outlets.append(Asset(uri=uri))
        elif not any(isinstance(o, AssetAlias) for o in outlets):
            owner = f"{self.dag.dag_id}." if self.has_dag() else ""
            outlets.append(AssetAlias(f"deltalog:{owner}{self.task_id}"))
        self.outlets = outlets

    def _record_asset_event(self, context: Context, extra: dict[str, Any]) -> None:
        """Put ``extra`` on the event of the table's Asset (direct outlet, else through an alias)."""
        events = context.get("outlet_events") if hasattr(context, "get") else None
        if events is None or not self.outlets:
            return
        uri = extra["table"]
        for outlet in self.outlets:
            if isinstance(outlet, Asset) and outlet.uri == uri:
                events[outlet].extra = extra
                return
        for outlet in self.outlets:
            if isinstance(outlet, AssetAlias):
                events[outlet].add(Asset(uri=uri), extra=alias_event_extra(extra))
                return
        self.log.debug("no outlet matches table asset %s; no event extra recorded", uri)

    # --- execution ------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        hook = DeltaTableHook(deltalog_conn_id=self.deltalog_conn_id)
        with deltalog_errors_as_task_failures():
            for name in self.bool_fields:  # rendered by now: strict parse, never truthiness
                setattr(self, name, strict_bool(getattr(self, name), name))
            table = hook.get_table(self.table)
            self._table_uri = table.uri
            self.raise_if_cancelled()
            self.log.info("%s on %s", self.operation_name, self._table_uri)
            result = self.run_operation(hook, table, context)
            metrics = self.result_metrics(result)
            version = self.result_version(metrics)
            if version is None:
                version = table.version()
        self._metrics, self._version = metrics, version
        self.log.info("%s", self.summarize(result, metrics))
        if self.emit_asset and self.changes_table():
            if self.is_noop(metrics):
                self._drop_asset_outlets()
            else:
                self._record_asset_event(context, event_extra(self._table_uri, self.operation_name, version, metrics))
        return metrics

    def _drop_asset_outlets(self) -> None:
        """Emit no asset event for this run: Airflow records one per ``Asset`` outlet of a successful
        task, read after ``execute`` returns, so the concrete assets leave the outlets (an alias
        records only what was added to it, which is nothing)."""
        self.log.info("%s changed nothing on %s: no asset event", self.operation_name, self._table_uri)
        self.outlets = [o for o in self.outlets or [] if not isinstance(o, Asset)]

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call a core entry point with this task's cancel event (when the entry point takes one)."""
        return call_core(fn, *args, cancel=self._cancel, **kwargs)

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
