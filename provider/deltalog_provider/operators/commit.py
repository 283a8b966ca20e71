"""``DeltaCommitOperator``: turn a commit request (from a Spark job) into one Delta commit, once per run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from deltalog import DeltaTable
from deltalog_provider.operators.base import DeltaTableOperator
from deltalog_provider.utils.coerce import first_count
from deltalog_provider.utils.commit_requests import app_transaction, load_request
from deltalog_provider.version_compat import AirflowFailException

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DeltaCommitOperator"]


class DeltaCommitOperator(DeltaTableOperator):
    """Commit the files of a commit request, exactly once per run (``utils/commit_requests.py``).

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

    def run_operation(self, table: DeltaTable, context: Context) -> Any:
        from deltalog import commit_request

        request = self.read(load_request, self.request, self.hook, table.uri)
        app_id, txn_version = app_transaction(self.app_id, self.txn_version, request, context)
        self.log.info("app transaction %s version %d", app_id, txn_version)
        # A request naming its own app transaction keeps it, unless the task names one too
        # (then the core checks both agree).
        own = request.get("appId") is not None and self.app_id is None and self.txn_version is None
        txn = {"app_id": None, "txn_version": None} if own else {"app_id": app_id, "txn_version": txn_version}
        result = self.call(commit_request, table, request, **txn)
        if result.noop:
            recorded = self.read(table.snapshot).app_transaction_version(app_id)
            if self.fail_if_superseded and recorded is not None and recorded > txn_version:
                raise AirflowFailException(
                    f"nothing committed: the table already records app transaction {app_id!r} at version "
                    f"{recorded}, newer than this run's {txn_version}; pass txn_version to commit anyway"
                )
            self.log.warning("nothing committed: %s", getattr(result, "reason", "already applied"))
        return result

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
            "file_count": first_count(m, "numFiles", "numAddedFiles"),
            "size": first_count(m, "numOutputBytes", "numAddedBytes"),
            "row_count": first_count(m, "numOutputRows"),
        }
