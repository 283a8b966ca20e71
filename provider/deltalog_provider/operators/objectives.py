"""Service-level objectives in a DAG: fail, branch or alert on a breach (docs/objectives.md).

* ``DeltaObjectivesCheckOperator``: every table's objectives judged now; the task fails (without
  retry) naming the breaches, or returns them (``fail_on_breach=False``).
* ``DeltaObjectivesBranchOperator``: follow one path when an objective is breached, another when
  all are met.
* ``DeltaObjectivesAlertOperator``: one message per run through the deployment's notifiers
  (``SmtpNotifier``, ``SlackNotifier``, ...): new breaches, still-open ones and resolved ones,
  compared with the maintenance history (never with memory), and the run's missed
  ``finish_by``. It records the tables' closing judgement (``measure`` rows) and, with
  ``finish_by``, the run's ``fleet_run`` row, after the message went out.

All three take the tables (names under the connection's root, URIs or paths; a list, a JSON
list or one a line), the maintenance settings file's content (``settings``: a mapping or its
JSON) and the history (``history_uri``, else the connection's extra ``history_uri``). Bad
settings fail the task before any table is read.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from deltalog import FleetPolicy, breach_alert, breach_message, check_objectives, finish_by_row
from deltalog.errors import InvalidArgumentError
from deltalog_provider.hooks.delta_table import DeltaTableHook
from deltalog_provider.hooks.retry_policy import (
    DEFAULT_RETRY_DELAY,
    DEFAULT_RETRY_LIMIT,
    deltalog_errors_as_task_failures,
)
from deltalog_provider.utils.alerts import check_notifiers, deliver
from deltalog_provider.utils.coerce import strict_bool
from deltalog_provider.utils.history import task_recorder
from deltalog_provider.utils.results import is_templated
from deltalog_provider.version_compat import AirflowFailException, BaseOperator, BranchMixIn

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DeltaObjectivesAlertOperator", "DeltaObjectivesBranchOperator", "DeltaObjectivesCheckOperator"]


def _tables(value: Any) -> list[str]:
    """Tables as given: a list, a JSON list, or one a line (``#`` comments)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                raise InvalidArgumentError(f"tables is not a JSON list: {text[:80]!r}") from None
        else:
            value = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not isinstance(value, list | tuple) or not all(isinstance(t, str) and t for t in value):
        raise InvalidArgumentError(f"tables must be a list of table names, URIs or paths, got {value!r}")
    if not value:
        raise InvalidArgumentError("tables is empty: name at least one table")
    return list(value)


def _settings(value: Any) -> FleetPolicy:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else None
        except ValueError:
            raise InvalidArgumentError(f"settings is not JSON: {value[:80]!r}") from None
    return FleetPolicy.parse(value)


class _ObjectivesOperator(BaseOperator):
    """What the objectives operators share: the tables, the settings, the history, the hook."""

    template_fields: Sequence[str] = ("tables", "settings", "history_uri", "deltalog_conn_id")
    ui_color = "#f6e3c5"

    def __init__(
        self,
        *,
        tables: Any,
        settings: Any = None,
        history_uri: str | None = None,
        deltalog_conn_id: str = DeltaTableHook.default_conn_name,
        deltalog_retry_limit: int = DEFAULT_RETRY_LIMIT,
        deltalog_retry_delay: float = DEFAULT_RETRY_DELAY,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tables = tables
        self.settings = settings
        self.history_uri = history_uri
        self.deltalog_conn_id = deltalog_conn_id
        self.deltalog_retry_limit = deltalog_retry_limit
        self.deltalog_retry_delay = deltalog_retry_delay
        if not is_templated(settings) and not hasattr(settings, "resolve") and not _is_xcom(settings):
            _settings(settings)  # a literal settings file is checked when the DAG is parsed

    @cached_property
    def hook(self) -> DeltaTableHook:
        return DeltaTableHook(
            self.deltalog_conn_id, retry_limit=self.deltalog_retry_limit, retry_delay=self.deltalog_retry_delay
        )

    def table_uris(self) -> list[str]:
        return [self.hook.resolve_uri(t) for t in _tables(self.tables)]

    def policy(self) -> FleetPolicy:
        return _settings(self.settings)

    def history(self) -> str | None:
        return self.history_uri or self.hook.settings.history_uri

    def judge(self) -> list[Any]:
        """Every table's objectives now (reads retried through storage blips)."""
        policy, tables, history = self.policy(), self.table_uris(), self.history()
        return self.hook.run(
            check_objectives,
            tables,
            storage_options=self.hook.storage_options,
            settings=policy,
            history=history,
        )

    def report(self, judged: list[Any]) -> dict[str, Any]:
        doc = {"tables": [t.to_dict() for t in judged]}
        breached = [t for t in judged if not t.met]
        for t in judged:
            self.log.info("%s", t.summary_line())
            for o in t.objectives:
                self.log.info("  %s [%s]", o.describe(), o.source)
        self.log.info("%d tables, %d breached or unreadable", len(judged), len(breached))
        return doc


def _is_xcom(value: Any) -> bool:
    return type(value).__name__.endswith("XComArg")


def _breach_line(judged: list[Any]) -> str:
    parts = []
    for t in judged:
        if t.error is not None:
            parts.append(f"{t.table_uri} (unreadable: {t.error})")
        elif t.breached:
            parts.append(f"{t.table_uri} ({'; '.join(o.describe() for o in t.breached)})")
    return ", ".join(parts)


class DeltaObjectivesCheckOperator(_ObjectivesOperator):
    """Judge every table's objectives; fail (no retry) when one is breached or a table is unreadable.

    :param fail_on_breach: False: return the report whatever it says (templated; a real bool
        or ``"true"``/``"false"``).

    Returns ``{"tables": [...]}``, the JSON of ``deltalog objectives``.
    """

    template_fields: Sequence[str] = (*_ObjectivesOperator.template_fields, "fail_on_breach")

    def __init__(self, *, fail_on_breach: bool | str = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not is_templated(fail_on_breach):
            strict_bool(fail_on_breach, "fail_on_breach")
        self.fail_on_breach = fail_on_breach

    def execute(self, context: Context) -> dict[str, Any]:
        with deltalog_errors_as_task_failures():
            judged = self.judge()
        doc = self.report(judged)
        if any(not t.met for t in judged) and strict_bool(self.fail_on_breach, "fail_on_breach"):
            raise AirflowFailException(f"service-level objectives breached: {_breach_line(judged)}")
        return doc


def _as_list(task_ids: str | Iterable[str] | None) -> list[str]:
    if task_ids is None:
        return []
    return [task_ids] if isinstance(task_ids, str) else list(task_ids)


class DeltaObjectivesBranchOperator(_ObjectivesOperator, BranchMixIn):
    """Branch on the objectives: ``follow_task_ids_if_breached`` when one is breached (or a table is
    unreadable), else ``follow_task_ids_if_met`` (default none: every downstream task is skipped).
    The report is returned to XCom."""

    inherits_from_skipmixin = True

    def __init__(
        self,
        *,
        follow_task_ids_if_breached: str | Iterable[str],
        follow_task_ids_if_met: str | Iterable[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.follow_task_ids_if_breached = follow_task_ids_if_breached
        self.follow_task_ids_if_met = follow_task_ids_if_met
        super().__init__(**kwargs)

    def execute(self, context: Context) -> dict[str, Any]:
        with deltalog_errors_as_task_failures():
            judged = self.judge()
        doc = self.report(judged)
        breached = any(not t.met for t in judged)
        if self.do_xcom_push:  # skipping ends the task through an exception: push the report first
            context["ti"].xcom_push(key="return_value", value=doc)
        chosen = _as_list(self.follow_task_ids_if_breached if breached else self.follow_task_ids_if_met)
        self.do_branch(context, chosen or None)
        return doc


class DeltaObjectivesAlertOperator(_ObjectivesOperator):
    """One alert per run: new, still-open and resolved breaches (and a missed ``finish_by``) through
    ``notifiers``, compared with the maintenance history (which it needs).

    :param notifiers: one ``BaseNotifier`` or a list (``SmtpNotifier(to=...)``, ...); the message
        fills the fields a notifier leaves empty, and its templates can read ``deltalog_alert``
        (``subject``, ``text``, ``html``, ``report``). None: the message is only logged.
    :param remind: send a message when the only breaches are still-open ones (default True: one
        reminder per run while they last); False: only when something changed.

    Returns the report, the message and whether it was sent. ``finish_by`` (the settings'
    ``defaults``): the run's start is the DAG run's start; its end is this task's end.
    """

    template_fields: Sequence[str] = (*_ObjectivesOperator.template_fields, "remind")

    def __init__(self, *, notifiers: Any = None, remind: bool | str = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.notifiers = check_notifiers(notifiers)
        if not is_templated(remind):
            strict_bool(remind, "remind")
        self.remind = remind

    def execute(self, context: Context) -> dict[str, Any]:
        with deltalog_errors_as_task_failures():
            return self._alert(context)

    def _alert(self, context: Context) -> dict[str, Any]:
        policy, tables, uri = self.policy(), self.table_uris(), self.history()
        if uri is None:
            raise InvalidArgumentError(
                "the objectives alert compares with the maintenance history: give history_uri (or the connection's "
                "extra history_uri)"
            )
        recorder = task_recorder(context, uri, self.hook.storage_options_for(uri))
        assert recorder is not None
        now = dt.datetime.now(dt.UTC)
        missed, late_row = None, None
        finish_by = policy.finish_by
        dag_run = context.get("dag_run")
        started = getattr(dag_run, "start_date", None)
        if finish_by is not None and started is not None:
            late_row = finish_by_row(recorder, finish_by, f"airflow:{context['ti'].dag_id}", started, now)
            if not late_row.finish_by_met:
                missed = {
                    "objective": finish_by.text,
                    "deadline": late_row.finish_by_deadline.isoformat() if late_row.finish_by_deadline else None,
                    "ended_at": now.isoformat(),
                }
        alert = self.hook.run(
            breach_alert,
            tables,
            history=recorder,
            storage_options=self.hook.storage_options,
            settings=policy,
            now=now,
            missed_finish_by=missed,
        )
        message = breach_message(alert, run=str(context.get("run_id") or ""))
        changed = bool(alert.report.new or alert.report.resolved or alert.report.unreadable or missed)
        send = alert.should_notify and (changed or strict_bool(self.remind, "remind"))
        self.log.info("%s", alert.summary_line())
        self.log.info("objectives alert (%s):\n%s", "sending" if send else "nothing to send", message.text)
        sent = 0
        if send and self.notifiers:
            sent = deliver(self.notifiers, context, {**message.to_dict(), "report": alert.report.to_dict()}, self.log)
        with recorder.batch():  # after delivery: a failed one is retried whole, with the same comparison
            recorder.record([*alert.rows, *([late_row] if late_row is not None else [])])
        return {
            "report": alert.report.to_dict(),
            "tables": [t.to_dict() for t in alert.tables],
            "missed_finish_by": missed,
            "message": message.to_dict(),
            "sent": sent,
        }
