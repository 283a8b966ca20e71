"""Fleet maintenance: every table under a root (or in a list), only the work that is due, within a deadline.

Event-driven (``deltalog_fleet_watch`` "true", docs/events.md): every table discovered under
``deltalog_fleet_root`` (kept for ``deltalog_watch_refresh_minutes``) gets an Asset watching its own
log, and the DAG is scheduled on them too: any writer's commits to one of them start a run for the
tables whose commits started it (on Airflow 3.3 one polling loop watches the whole root).

1. ``find_tables`` takes the table list, first of: the tables whose commits (the log watchers'
   events) started the run; the events an upstream DAG emitted on the
   ``deltalog_fleet_tables`` asset (``deltalog://fleet/tables``) since the previous successful
   run started, with ``extra={"tables": [...]}`` and/or ``extra={"list_uri": ...}`` (a list
   file, one URI a line); the ``deltalog_fleet_tables`` Variable (a JSON list or one URI a
   line); every table discovered under the ``deltalog_fleet_root`` Variable (parallel
   listing, not descending into tables). The DAG runs on ``deltalog_fleet_schedule``
   (``@daily``) and whenever the asset gets an event.
2. ``measure`` computes every table's health and due verdict concurrently and orders the
   due tables by expected gain per second, using the compaction throughput the previous
   run's ``summary`` recorded (run results, never files in ``_delta_log``).
3. ``maintain`` is mapped (``expand``) over the due tables: each one runs the sequence of
   ``deltalog_maintenance`` (compaction, on Spark through the ``spark_conn_id`` connection's
   master from ``deltalog_spark_compaction_min_bytes`` of table size on, else local;
   checkpoint, vacuum, log cleanup, manifest where the table asks for one), only the due
   steps, under the table's maintenance lease
   (``_deltalog_maintenance.lease`` in the table root, see ``deltalog.fleet.lease``), so two
   runs never maintain one table at once, whichever DAG or process started them. Concurrency
   is bounded by ``max_active_tis_per_dagrun`` (``deltalog_fleet_max_parallel``) and the
   ``deltalog_fleet`` pool across runs. A broken or refused table fails its own mapped task;
   a table whose lease is held is reported as busy.
4. ``summary`` (runs whatever happened) logs a table of tables, returns it, and writes
   ``fleet-report.html`` (self-contained, small inline SVG charts, each table linked to its
   page in the fleet view at ``deltalog_fleet_view_url``, else to a query of the history) to
   ``deltalog_fleet_report_dir``. Each changed table gets an asset event through the
   ``deltalog:fleet`` alias.

Maintenance history: ``measure`` appends a ``measure`` row per table (its state, what is due
and why, the settings it was measured with) and each ``maintain`` task a row per operation it
ran, deferred, was refused or failed, to the Delta table at ``deltalog_history_uri`` (empty:
none), each naming its task instance. The history joins the fleet: it is measured and
maintained (compacted, checkpointed, its log cleaned) like the other tables.

Deadline: a Deadline Alert fires ``log_missed_deadline`` when a run is still going
``deltalog_fleet_deadline_minutes`` after it was queued; the work itself stops starting
new steps ``deltalog_fleet_deadline_margin_minutes`` before that (a running compaction stops
between bins, finished bins committed) and the summary lists what was deferred.

Service levels (docs/objectives.md): the settings set objectives (by default ``max_small_files``
200, ``max_versions_since_checkpoint`` 100, ``max_days_since_vacuum`` 7 for every table;
``finish_by`` in ``defaults`` caps the work like the deadline). ``measure`` judges them with the
history (since when a breach lasts, the trend), breached tables are maintained first, then those
predicted to breach before the next run, then by gain per second, and each breach gets the
operation that fixes it. ``objectives_alert`` (after ``summary``, with a history) judges the
tables again and sends one message per run (new, still-open and resolved breaches, a missed
``finish_by``) through the SMTP provider's ``SmtpNotifier`` to ``deltalog_alert_email`` (empty: the
message is only logged), comparing with the history, never with memory.

Per-table settings: the ``deltalog_fleet_table_settings`` Variable is the maintenance settings
file of docs/fleet.md (``defaults``, path ``prefixes``, per-table ``tables`` entries by URI or
folder name). A setting comes from the table's entry, else the table's own properties
(``delta.targetFileSize``, ``delta.checkpointInterval``, ``delta.deletedFileRetentionDuration``),
else the longest matching prefix, else the defaults. Layout keys: ``zorder_by`` (a list of
columns: a due compaction is a Z-order of the partitions) and ``max_dv_hidden_share`` (a
number: a deletion-vector purge is due once DVs hide more than that share of the table's
rows); a clustered table is always clustered by its own ``CLUSTER BY`` columns, and a
``zorder_by`` for it fails its task.
"""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Asset, AssetAlias, AssetAny, task

from deltalog_provider.callbacks import log_missed_deadline
from deltalog_provider.version_compat import (
    AssetOrTimeSchedule,
    CronTriggerTimetable,
    dag_folder_on_sys_path,
    deadline_kwargs,
    inlet_events_after,
)

# deltalog_example/ (the example DAGs' settings) sits beside this file in the DAGs folder.
dag_folder_on_sys_path(__file__)

from deltalog_example import (  # noqa: E402
    DEFAULT_TASK_ARGS,
    FLEET_POOL,
    bool_setting,
    int_setting,
    setting,
    spark_conf,
    spark_master,
    watch_settings,
)
from deltalog_example.alerts import alert_notifiers  # noqa: E402
from deltalog_example.history import history_uri as history_uri_setting  # noqa: E402
from deltalog_provider.operators import DeltaObjectivesAlertOperator  # noqa: E402

log = logging.getLogger(__name__)

CONN_ID = setting("deltalog_conn_id")
MAX_PARALLEL = int_setting("deltalog_fleet_max_parallel") or 4
#: 0 turns the deadline (and the time budget) off; ``airflow dags test`` needs 0 in Airflow 3.3.2
#: (apache/airflow#73428), as for deltalog_maintenance.
DEADLINE_MINUTES = int_setting("deltalog_fleet_deadline_minutes") or 0
FLEET_ALIAS = AssetAlias("deltalog:fleet")
#: Upstream DAGs publish the fleet's table list as events on this asset (see deltalog_example.fleet_tables).
TABLE_LIST = Asset(name="deltalog_fleet_tables", uri=setting("deltalog_fleet_tables_asset"))
#: The tables under the root, each Asset watching its own log (``deltalog_fleet_watch``): their commits start runs.
WATCHED: list[Any] = []
if bool_setting("deltalog_fleet_watch"):
    from deltalog_provider.assets import watched_tables_under

    WATCHED = watched_tables_under(
        setting("deltalog_fleet_root"),
        deltalog_conn_id=CONN_ID,
        refresh_seconds=60 * float(setting("deltalog_watch_refresh_minutes")),
        **watch_settings(),
    )
TRIGGERS: Any = AssetAny(TABLE_LIST, *WATCHED) if WATCHED else TABLE_LIST
CRON = setting("deltalog_fleet_schedule").strip()
SCHEDULE: Any = (
    AssetOrTimeSchedule(timetable=CronTriggerTimetable(CRON, timezone="UTC"), assets=TRIGGERS) if CRON else TRIGGERS
)
#: ``DAG(deadline=...)`` where the Airflow release has Deadline Alerts (3.1+); nothing on 3.0, where
#: the work still keeps to the deadline Variables (``_deadline`` below).
DEADLINE = deadline_kwargs(DEADLINE_MINUTES, log_missed_deadline, {"table": "the fleet", "minutes": DEADLINE_MINUTES})


def _hook() -> Any:
    from deltalog_provider.hooks.delta_table import DeltaTableHook

    return DeltaTableHook(deltalog_conn_id=CONN_ID)


def _policy() -> Any:
    from deltalog import FleetPolicy

    return FleetPolicy.parse(json.loads(setting("deltalog_fleet_table_settings") or "{}"))


def _deadline(context: dict[str, Any]) -> float | None:
    """The run's deadline minus the margin, as a ``time.monotonic()`` value (None without a deadline).

    Counted from the run's queue time when the context has it, else from its start (the
    Task SDK's DagRun carries ``start_date``; the Deadline Alert counts from queuing, so a
    run that waited in the queue keeps a little less margin than configured). The settings'
    ``finish_by`` (a time of day in a named zone, counted from the run's start) caps it too.
    """
    from datetime import UTC

    minutes = int_setting("deltalog_fleet_deadline_minutes") or 0
    margin = int_setting("deltalog_fleet_deadline_margin_minutes") or 0
    dag_run = context["dag_run"]
    start = getattr(dag_run, "queued_at", None) or getattr(dag_run, "start_date", None)
    ends = []
    if minutes > 0 and start is not None:
        ends.append(start + timedelta(minutes=minutes - margin))
    finish_by = _policy().finish_by
    began = getattr(dag_run, "start_date", None) or start
    if finish_by is not None and began is not None:
        ends.append(finish_by.deadline_after(began))
    if not ends:
        return None
    return time.monotonic() + (min(ends) - datetime.now(UTC)).total_seconds()


with DAG(
    dag_id="deltalog_fleet_maintenance",
    description="Discover Delta tables, rank them by what maintenance gains, maintain the due ones within a deadline",
    schedule=SCHEDULE,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_TASK_ARGS,
    **DEADLINE,
    tags=["deltalog", "example", "maintenance", "fleet"],
    doc_md=__doc__,
) as dag:

    @task(execution_timeout=timedelta(minutes=15), inlets=[TABLE_LIST])
    def find_tables(**context: Any) -> list[str]:
        """The tables whose commits started the run, else the asset's table lists since the previous successful
        run, else the list Variable, else discovery."""
        from deltalog.fleet.discover import discover_tables, read_table_list
        from deltalog_example.fleet_tables import parse_table_list, tables_from_events, watched_tables_that_started

        hook = _hook()
        started = watched_tables_that_started(context, TABLE_LIST.uri)
        if started is not None:  # table assets' events started the run: their tables (the watchers' ranges) only
            log.info("%d tables whose commits started this run: %s", len(started), ", ".join(started) or "none")
            return [hook.resolve_uri(u) for u in started]
        events = context["inlet_events"][TABLE_LIST]
        previous = context.get("prev_start_date_success")  # a lazy proxy: None is falsy through it
        events = inlet_events_after(events, previous) if previous else list(events)
        if events:
            from deltalog_example.fleet_tables import TableListError
            from deltalog_provider.version_compat import AirflowFailException

            try:
                tables = tables_from_events(
                    [e.extra for e in events], lambda uri: read_table_list(uri, hook.storage_options_for(uri))
                )
            except TableListError as exc:  # a malformed event stays malformed: fail now, no retry
                raise AirflowFailException(str(exc)) from exc
            log.info("%d tables from %d event(s) on %s", len(tables), len(events), TABLE_LIST.uri)
            return [hook.resolve_uri(u) for u in tables]
        listed = setting("deltalog_fleet_tables")
        if listed.strip():
            return [hook.resolve_uri(u) for u in parse_table_list(listed)]
        found = discover_tables(hook.resolve_uri(setting("deltalog_fleet_root")), storage_options=hook.storage_options)
        for error in found.errors:
            log.warning("cannot read %s: %s", error["uri"], error["error"])
        log.info("discovered %d tables under %s", len(found.tables), found.root)
        return [t.uri for t in found.tables]

    @task(execution_timeout=timedelta(minutes=1))
    def with_history(tables: list[str]) -> list[str]:
        """The maintenance history joins the fleet: measured and maintained like the other tables."""
        from deltalog.storage.filesystem import canonical_uri
        from deltalog_example.history import history_uri

        history = history_uri()
        known = {canonical_uri(t) for t in tables}
        return tables if history is None or canonical_uri(history) in known else [*tables, history]

    @task(execution_timeout=timedelta(minutes=30), multiple_outputs=False)
    def measure(tables: list[str], **context: Any) -> dict[str, Any]:
        """Health and due verdict of every table; the due ones ordered by gain per second."""
        from deltalog import measurement_rows
        from deltalog.fleet.maintain import DEFAULT_THROUGHPUT, order_work
        from deltalog.fleet.ranking import fleet_health
        from deltalog.fleet.run import compliance_views, previous_throughput
        from deltalog.journal.record import utc_now
        from deltalog_example.history import history_recorder

        previous = context["ti"].xcom_pull(task_ids="summary", include_prior_dates=True)
        throughput = previous_throughput(previous if isinstance(previous, dict) else None) or DEFAULT_THROUGHPUT
        policy = _policy()
        history = history_recorder(context, _hook().storage_options)
        started = utc_now()
        # The history's view of each table: since when its objectives are breached, their trend.
        views = compliance_views(history, tables, now=started)
        reports = fleet_health(
            tables, storage_options=_hook().storage_options, settings=policy, history=views, now=started
        )
        if history is not None:  # a row per table: its state, what is due and why, its settings
            history.record(measurement_rows(reports, history, started))
        planned = order_work(reports, throughput)
        sizes = {r.uri: r.health.size_in_bytes for r in reports if r.health is not None}
        files = {r.uri: r.health.num_files for r in reports if r.health is not None}
        # Refused and unreadable tables get a mapped task too, which fails: visible per table.
        broken = [{"uri": r.uri} for r in reports if r.error is not None or (r.due and r.due.refused)]
        return {
            "due": [
                {**p.to_dict(), "size_in_bytes": sizes.get(p.uri, 0), "num_files": files.get(p.uri, 0)} for p in planned
            ]
            + broken,
            "healthy": [r.uri for r in reports if r.error is None and not r.any_due and not r.due.refused],
            "refused": [{"uri": r.uri, "error": r.due.refused} for r in reports if r.due and r.due.refused],
            "unreadable": [{"uri": r.uri, "error": r.error} for r in reports if r.error is not None],
            "throughput_bytes_per_second": throughput,
        }

    @task(execution_timeout=timedelta(minutes=1))
    def due_tables(measured: dict[str, Any]) -> list[dict[str, Any]]:
        return list(measured["due"])

    @task(
        pool=FLEET_POOL,
        max_active_tis_per_dagrun=MAX_PARALLEL,
        outlets=[FLEET_ALIAS],
        retries=0,
        execution_timeout=timedelta(hours=2),
        map_index_template="{{ task.op_kwargs['entry']['uri'].rstrip('/').rsplit('/', 1)[-1] }}",
        multiple_outputs=False,
    )
    def maintain(entry: dict[str, Any], **context: Any) -> dict[str, Any]:
        """The table's due steps under its lease; fails only this mapped task when the table is broken."""
        from dataclasses import fields

        from airflow.sdk import Asset

        from deltalog.fleet.maintain import PlannedTable, maintain_table, with_service
        from deltalog_example.history import history_recorder
        from deltalog_provider.version_compat import AirflowFailException, alias_event_extra

        ti = context["ti"]
        policy = _policy()
        # Compaction engine by size, as in deltalog_maintenance: Spark (the spark_conn_id connection's
        # master) from deltalog_spark_compaction_min_bytes on; the connection is only looked up then.
        threshold = int_setting("deltalog_spark_compaction_min_bytes")
        spark = threshold is not None and int(entry.get("size_in_bytes") or 0) >= threshold
        # Vacuum's engine by live files (deltalog_spark_vacuum_min_files), as in deltalog_maintenance.
        vacuum_files = int_setting("deltalog_spark_vacuum_min_files")
        spark_vacuum = vacuum_files is not None and int(entry.get("num_files") or 0) >= vacuum_files
        outcome = maintain_table(
            entry["uri"],
            storage_options=_hook().storage_options,
            settings=policy,
            deadline=_deadline(context),
            owner=f"{ti.dag_id}/{ti.run_id}/{ti.map_index}",
            spark_min_bytes=threshold if spark else None,
            vacuum_spark_min_files=vacuum_files if spark_vacuum else None,
            spark_options={"master": spark_master(), "conf": spark_conf()} if spark or spark_vacuum else None,
            history=history_recorder(context, _hook().storage_options),
            due_operations=[op for op, flag in (entry.get("due") or {}).items() if flag],
            objective_work=entry.get("objective_work") or {},
        )
        if "due" in entry:  # a measured table: say which objective put it first and which stay breached
            outcome = with_service(outcome, PlannedTable(**{f.name: entry[f.name] for f in fields(PlannedTable)}))
        doc = outcome.to_dict()
        ti.xcom_push(key="outcome", value=doc)  # the summary reads it even when this task fails
        if outcome.changed:
            context["outlet_events"][FLEET_ALIAS].add(
                Asset(uri=entry["uri"] if "://" in entry["uri"] else "file://" + entry["uri"]),
                extra=alias_event_extra(
                    {
                        "table": entry["uri"],
                        "version": outcome.version_after,
                        "operation": "FLEET MAINTENANCE",
                        "ran": outcome.ran,
                    }
                ),
            )
        if outcome.status in ("failed", "refused"):
            raise AirflowFailException(f"{entry['uri']}: {outcome.status}: {outcome.error}")
        if outcome.history_error:  # the work is done; the missing rows fail the task, visibly
            raise AirflowFailException(outcome.history_error)
        return doc

    # No retry: it reads what the run produced; when find_tables or measure failed there is nothing
    # to read (its input cannot resolve) and a retry would only hold the failed run open.
    @task(trigger_rule="all_done", retries=0, execution_timeout=timedelta(minutes=10), multiple_outputs=False)
    def summary(measured: dict[str, Any], **context: Any) -> dict[str, Any]:
        """Table of tables in the log, as the return value and as an HTML report next to the demo output."""
        from deltalog.fleet.maintain import TableOutcome, measured_throughput
        from deltalog.fleet.report import format_summary, render_html

        pulled = context["ti"].xcom_pull(task_ids="maintain", key="outcome") or []  # every map index
        if isinstance(pulled, dict):
            pulled = [pulled]
        tables = [o for o in pulled if isinstance(o, dict)]
        seen = {o["uri"] for o in tables}
        for entry in measured["due"]:  # a mapped task that died before pushing its outcome
            if entry["uri"] not in seen:
                tables.append(
                    TableOutcome(uri=entry["uri"], status="failed", error="the task ended without a result").to_dict()
                )
        outcomes = [TableOutcome(**{k: v for k, v in o.items() if k != "changed"}) for o in tables]
        counts: dict[str, int] = {}
        for o in tables:
            counts[o["status"]] = counts.get(o["status"], 0) + 1
        counts["healthy"] = counts.get("healthy", 0) + len(measured["healthy"])
        counts["unreadable"] = 0  # unreadable tables failed their own mapped task (status "failed")
        dag_run = context["dag_run"]
        started = getattr(dag_run, "start_date", None)
        doc = {
            "started_at": started.timestamp() if started else time.time(),
            "time_budget_seconds": None,
            "seconds": round(time.time() - (started.timestamp() if started else time.time()), 1),
            "counts": counts,
            "throughput_bytes_per_second": measured_throughput(outcomes, measured["throughput_bytes_per_second"]),
            "tables": tables,
            "healthy": measured["healthy"],
            "unreadable": [],
        }
        log.info("fleet summary\n%s", format_summary(doc))
        report_dir = setting("deltalog_fleet_report_dir")
        os.makedirs(report_dir, exist_ok=True)
        path = os.path.join(report_dir, "fleet-report.html")
        from deltalog_example.history import history_uri

        doc["history"] = history_uri()
        with open(path, "w", encoding="utf-8") as fh:
            title = f"deltalog fleet maintenance, run {context['run_id']}"
            fh.write(render_html(doc, title, view_url=setting("deltalog_fleet_view_url") or None))
        log.info("HTML report: %s", path)
        doc["report"] = path
        return doc

    # multiple_outputs=False on the tasks returning a dict: the whole dict is their XCom; Airflow
    # would otherwise also push each key, and 3.0 refuses a key whose value is None.
    fleet = with_history(find_tables())
    measured = measure(fleet)
    done = maintain.expand(entry=due_tables(measured))
    summarized = summary(measured)
    done >> summarized
    if history_uri_setting():
        # One message per run through the deployment's notifiers: new, still-open and resolved breaches
        # (compared with the history) and a missed finish_by; it records the tables' closing judgement.
        objectives_alert = DeltaObjectivesAlertOperator(
            task_id="objectives_alert",
            tables=fleet,
            settings=setting("deltalog_fleet_table_settings"),
            history_uri=history_uri_setting(),
            notifiers=alert_notifiers(),
            deltalog_conn_id=CONN_ID,
            trigger_rule="all_done",
            retries=1,
            execution_timeout=timedelta(minutes=15),
        )
        summarized >> objectives_alert
