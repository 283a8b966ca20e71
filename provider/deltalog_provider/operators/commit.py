"""``DeltaCommitOperator``: turn a commit request (from a Spark job) into one Delta commit.

The commit carries an application transaction (``txn``) whose id names the task and the
run (its logical date, else its run id), so an Airflow retry after a lost response (the
commit landed, the task did not hear back) or a cleared run commits nothing the second
time, while every other run, older dates (backfills) included, commits its own data once.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog.errors import InvalidArgumentError
from deltalog_provider.hooks.delta_table import DeltaTableHook, is_absolute_location
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import first_number, optional_int, optional_str
from deltalog_provider.version_compat import AirflowFailException

if TYPE_CHECKING:
    from airflow.sdk import Context


def run_key(context: Context) -> str:
    """What identifies the run's data: its logical date (ISO 8601) when it has one, else its run id.

    Keyed by the logical date, a cleared, re-triggered or backfilled run of the same date
    is recognised as the same run; a run without a logical date (the Airflow 3 default for
    manual and REST triggers) is identified by its run id, the same for every try.
    """
    moment = context.get("logical_date")
    if moment is not None:
        return moment.isoformat()
    dag_run = context.get("dag_run")
    run_id = context.get("run_id") or getattr(dag_run, "run_id", None)
    if not run_id:
        raise InvalidArgumentError("the run has neither a logical date nor a run id: pass app_id explicitly")
    return str(run_id)


def derive_app_id(context: Context) -> str:
    """``airflow:<dag_id>:<task_id>[:<map_index>]:<run key>``: one app transaction per run.

    Stable across retries of a run, and distinct between runs, so each run commits its own
    data exactly once in whatever order runs happen (a backfill of an older date after
    newer runs included). One app id for all runs would make an older run look superseded.
    """
    ti = context["ti"]
    app_id = f"airflow:{ti.dag_id}:{ti.task_id}"
    map_index = getattr(ti, "map_index", -1)
    if map_index is not None and map_index >= 0:
        app_id += f":{map_index}"
    return f"{app_id}:{run_key(context)}"


def derive_txn_version(context: Context) -> int:
    """Milliseconds since the epoch of the run's logical date (its ``run_after`` when it has none).

    The same for every try of a run (so a retry is recognised).
    """
    moment = context.get("logical_date")
    if moment is None:
        dag_run = context.get("dag_run")
        moment = getattr(dag_run, "run_after", None) or getattr(dag_run, "start_date", None)
    if moment is None:
        raise InvalidArgumentError("the run has neither a logical date nor run_after: pass txn_version explicitly")
    return int(moment.timestamp() * 1000)


def load_request(request: Any, hook: DeltaTableHook, table_uri: str) -> dict[str, Any]:
    """The commit request as a dict, from a dict, a JSON string, or a file path/URI.

    A relative path is read relative to the table root (where Spark jobs write their
    requests); URIs are read with the connection's storage options.
    """
    if isinstance(request, dict):
        return request
    if not isinstance(request, str) or not request.strip():
        raise InvalidArgumentError(f"request must be a dict, a JSON object or a file path, got {request!r}")
    text = request.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except RecursionError:
            raise InvalidArgumentError("request is nested too deeply to be a commit request") from None
        except ValueError:
            try:  # a dict rendered by Jinja without render_template_as_native_obj
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError, RecursionError, MemoryError):
                raise InvalidArgumentError("request looks like JSON but cannot be parsed") from None
        if not isinstance(value, dict):
            raise InvalidArgumentError("request JSON must be an object")
        return value
    import fsspec

    location = text if is_absolute_location(text) else table_uri.rstrip("/") + "/" + text
    options = hook.storage_options_for(location)
    try:
        with fsspec.open(location, "rb", **options) as fh:
            value = json.loads(fh.read())
    except FileNotFoundError:
        raise InvalidArgumentError(f"commit request file not found: {location}") from None
    except (ValueError, RecursionError):
        raise InvalidArgumentError(f"commit request file is not valid JSON: {location}") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"commit request file must hold a JSON object: {location}")
    return value


class DeltaCommitOperator(DeltaTableOperator):
    """Commit the files of a commit request, exactly once per run.

    :param table: table name, URI or path (templated).
    :param request: the commit request: a dict (e.g. ``spark_task.output``, an XComArg), a
        JSON string, or the path/URI of a JSON file, relative paths being relative to the
        table root (templated).
    :param app_id: application transaction id (templated; default
        ``airflow:<dag_id>:<task_id>[:<map_index>]:<logical date or run id>``). Give one id
        per unit of data (e.g. ``events:{{ ds }}``) with a fixed ``txn_version`` to commit
        each unit once across runs.
    :param txn_version: application transaction version (templated; default the run's
        logical date, else its ``run_after``, in epoch milliseconds).
    :param fail_if_superseded: fail (without retry) when the table already records a *higher*
        version for ``app_id``, i.e. a newer run sharing an explicit ``app_id`` committed
        first: the request of this older run is then not committed, and silently succeeding
        would lose it.
    """

    template_fields: Sequence[str] = (
        *DeltaTableOperator.template_fields,
        "request",
        "app_id",
        "txn_version",
        "fail_if_superseded",
    )
    bool_fields: Sequence[str] = (*DeltaTableOperator.bool_fields, "fail_if_superseded")
    template_fields_renderers = {"request": "json"}
    operation_name = "COMMIT"

    def __init__(
        self,
        *,
        request: dict[str, Any] | str,
        app_id: str | None = None,
        txn_version: int | str | None = None,
        fail_if_superseded: bool = True,
        **kwargs: Any,
    ) -> None:
        self.request = request
        self.app_id = app_id
        self.txn_version = txn_version
        self.fail_if_superseded = fail_if_superseded
        super().__init__(**kwargs)

    def run_operation(self, hook: DeltaTableHook, table: DeltaTable, context: Context) -> Any:
        from deltalog.ingest import commit_request

        request = load_request(self.request, hook, table.uri)
        app_id, txn_version = self._app_transaction(request, context)
        self.log.info("app transaction %s version %d", app_id, txn_version)
        # A request naming its own app transaction keeps it, unless the task names one too
        # (then the core checks both agree).
        own = request.get("appId") is not None and self.app_id is None and self.txn_version is None
        result = self.call(
            commit_request,
            table,
            request,
            app_id=None if own else app_id,
            txn_version=None if own else txn_version,
        )
        if getattr(result, "noop", False):
            recorded = table.snapshot().app_transaction_version(app_id)
            if self.fail_if_superseded and recorded is not None and recorded > txn_version:
                raise AirflowFailException(
                    f"nothing committed: the table already records app transaction {app_id!r} at version "
                    f"{recorded}, newer than this run's {txn_version}; pass txn_version to commit anyway"
                )
            self.log.warning("nothing committed: %s", getattr(result, "reason", "already applied"))
        return result

    def _app_transaction(self, request: dict[str, Any], context: Context) -> tuple[str, int]:
        """Explicit parameters, else the request's own ``appId``/``txnVersion``, else derived from the run."""
        app_id = optional_str(self.app_id)
        txn_version = optional_int(self.txn_version, "txn_version")
        if app_id is None and txn_version is None and request.get("appId") is not None:
            return str(request["appId"]), optional_int(request.get("txnVersion"), "txnVersion") or 0
        return app_id or derive_app_id(context), txn_version if txn_version is not None else derive_txn_version(context)

    def summarize(self, result: Any, metrics: dict[str, Any]) -> str:
        """The commit's own summary line; a no-op says it is a retry's (the data landed earlier)."""
        if metrics.get("noop"):
            return (
                f"COMMIT {self._table_uri}: already committed by an earlier try ({result.summary_line()}), "
                f"table at version {self._version}"
            )
        return super().summarize(result, metrics)

    def is_noop(self, metrics: dict[str, Any]) -> bool:
        """A re-run that found its app transaction already recorded committed nothing."""
        return bool(metrics.get("noop"))

    def output_statistics(self, metrics: dict[str, Any]) -> dict[str, int | None]:
        m = metrics.get("operation_metrics") or {}
        return {
            "file_count": _as_int(first_number(m, "numFiles", "numAddedFiles")),
            "size": _as_int(first_number(m, "numOutputBytes", "numAddedBytes")),
            "row_count": _as_int(first_number(m, "numOutputRows")),
        }


def _as_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None
