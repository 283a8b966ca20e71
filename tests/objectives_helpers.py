"""A fleet with a service-level history: the issue's "Done means" scenario (tests, the SMTP test, the demo).

* ``orders``: twelve small files against ``max_small_files`` 5 (fleet defaults); the history's
  daily measurements show it met five and four days ago and breached the last three days.
* ``events``: vacuumed ten days ago (its log's ``VACUUM END``, dated back, and the history's
  vacuum row), against ``max_days_since_vacuum`` 7 (its table property
  ``deltalog.objective.maxDaysSinceVacuum``): breached since three days ago, by definition (the
  daily measurements only cross seven days two days ago).
* ``customers``: twenty small files, met through a per-table override (``max_small_files``
  50) that relaxes the fleet's 5. It has the most to gain, so by gain alone it would go first.

``breach_fleet(..., schema_version=1)``: the same fleet with a history written before objectives
existed (schema version 1: its columns only, its version property): ``orders``' daily
measurements carry ``small_files_after`` alone, ``events`` has no vacuum in its log (created twelve
days ago) and its history's ``vacuum`` row of ten days ago is its last vacuum.

Free of pytest so ``scripts/demo.py`` can import it.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass

from deltalog import DeltaTable
from deltalog.journal import HistoryRecorder, JournalRow, OperationSpan, RunContext, TableState, make_row
from deltalog.journal.row import objective_columns, rows_to_arrow
from deltalog.maintenance.objectives import ObjectiveState
from deltalog.storage.filesystem import canonical_uri
from deltalog.vacuuming import vacuum
from helpers import append, make_table, rows

SETTINGS = {
    "defaults": {"max_small_files": 5},
    "tables": {"customers": {"max_small_files": 50}},
}
DAY = dt.timedelta(days=1)


@dataclass(frozen=True)
class BreachFleet:
    root: str
    history: str
    settings: dict
    orders: str
    events: str
    customers: str
    #: When each breach began (what ``breached_since`` must say): by the history's measurements (orders), and
    #: by definition seven days after the last vacuum (events; the log's is a few seconds after the history's).
    orders_since: dt.datetime
    events_since: dt.datetime


def _backdate(path: str, when: dt.datetime) -> None:
    log_dir = os.path.join(path, "_delta_log")
    stamp = when.timestamp()
    for i, name in enumerate(sorted(n for n in os.listdir(log_dir) if n.endswith(".json"))):
        os.utime(os.path.join(log_dir, name), (stamp + i, stamp + i))


def _measured(
    history: HistoryRecorder, uri: str, when: dt.datetime, name: str, target: float, value: float, source: str
) -> None:
    assert history.context is not None
    state = ObjectiveState(name, target, value, value <= target, source)
    span = OperationSpan(history.context, canonical_uri(uri), "measure", when, when + dt.timedelta(seconds=1))
    history.record([make_row(span, "done", due_operations=[], **objective_columns([state]))])


def seed_measurements(
    history_uri: str,
    table: str,
    name: str,
    target: float,
    values: list[tuple[float, float]],
    source: str,
    now: dt.datetime | None = None,
) -> None:
    """Measure rows of one objective in the history: ``values`` as (days ago, value)."""
    now = now or dt.datetime.now(dt.UTC)
    recorder = HistoryRecorder(history_uri, context=RunContext(run_id="seeded-history"), measure=False)
    with recorder.batch():
        for days, value in values:
            _measured(recorder, table, now - days * DAY, name, target, value, source)


def write_version_1_history(uri: str, rows: list[JournalRow]) -> None:
    """A maintenance history as a deltalog of schema version 1 wrote it: created with that version's
    columns and version property, ``rows`` cut to those columns, one file per day."""
    from deltalog.create import create_table
    from deltalog.journal.schema import PARTITION_COLUMN, SCHEMA_VERSION_PROPERTY, TABLE_PROPERTIES, schema_of_version
    from synthetic_history import append_as_another_writer

    v1 = schema_of_version(1)
    create_table(
        uri, v1, partition_by=[PARTITION_COLUMN], configuration={**TABLE_PROPERTIES, SCHEMA_VERSION_PROPERTY: "1"}
    )
    data = rows_to_arrow(rows).select(v1.names).cast(v1)
    for day in sorted(set(data.column(PARTITION_COLUMN).to_pylist())):
        mask = [d == day for d in data.column(PARTITION_COLUMN).to_pylist()]
        append_as_another_writer(uri, data.filter(mask).drop_columns([PARTITION_COLUMN]), day)


def version_1_rows(
    context: RunContext,
    table: str,
    when: dt.datetime,
    small_files: list[tuple[float, int]],
    vacuumed_days: float | None,
) -> list[JournalRow]:
    """What a version 1 fleet run recorded of ``table``: a ``measure`` row per ``(days ago, small files)``
    (the table's state, no objective columns) and, ``vacuumed_days`` ago, a successful ``vacuum`` row."""
    table_id = DeltaTable(table).snapshot().metadata.id
    uri = canonical_uri(table)
    out = []
    for days, small in small_files:
        at = when - days * DAY
        state = TableState(1, small, small, small * 1000, 1, 0.0, 2, table_id)
        out.append(
            make_row(OperationSpan(context, uri, "measure", at, at + dt.timedelta(seconds=1), state, state), "done")
        )
    if vacuumed_days is not None:
        at = when - vacuumed_days * DAY
        state = TableState(1, 1, 1, 1000, 1, 0.0, 2, table_id)
        out.append(
            make_row(OperationSpan(context, uri, "vacuum", at, at, state, state), "done", summary="vacuum: 0 files")
        )
    return out


def breach_fleet(
    root: str, now: dt.datetime | None = None, history: str | None = None, schema_version: int = 2
) -> BreachFleet:
    """The scenario of the module docstring under ``root`` (history at ``root/_deltalog/history``, or
    ``history``: an existing one gets the rows added; ``schema_version`` 1: a new history as version 1
    wrote it)."""
    now = now or dt.datetime.now(dt.UTC)
    orders, events, customers = (os.path.join(root, n) for n in ("orders", "events", "customers"))
    table = make_table(orders)
    for i in range(12):
        append(table, rows(3, start=i * 3), run_hooks=False)
    table = make_table(customers)
    for i in range(20):
        append(table, rows(3, start=i * 3), run_hooks=False)
    table = make_table(events, configuration={"deltalog.objective.maxDaysSinceVacuum": "7"})
    append(table, rows(5), run_hooks=False)
    vacuumed = now - 10 * DAY
    history_uri = history or os.path.join(root, "_deltalog", "history")
    if schema_version == 1:
        _backdate(events, now - 12 * DAY)  # created twelve days ago, never vacuumed by its log
        context = RunContext(run_id="seeded-history")
        small = [(5, 3), (4, 4), (3, 8), (2, 10), (1, 12)]
        seeded = version_1_rows(context, orders, now, small, None) + version_1_rows(
            context, events, now, [(d, 1) for d in range(9, 0, -1)], 10
        )
        write_version_1_history(history_uri, seeded)
        return BreachFleet(root, history_uri, SETTINGS, orders, events, customers, now - 3 * DAY, vacuumed + 7 * DAY)
    vacuum(DeltaTable(events))  # VACUUM START/END (nothing to delete), dated ten days back below
    _backdate(events, vacuumed)

    recorder = HistoryRecorder(history_uri, context=RunContext(run_id="seeded-history"), measure=False)
    with recorder.batch():
        vac = OperationSpan(recorder.context, canonical_uri(events), "vacuum", vacuumed, vacuumed)  # type: ignore[arg-type]
        recorder.record([make_row(vac, "done", summary="vacuum: 0 files")])
        source = "fleet defaults"
        for days, value in ((5, 3), (4, 4), (3, 8), (2, 10), (1, 12)):
            _measured(recorder, orders, now - days * DAY, "max_small_files", 5, value, source)
        prop = "table property deltalog.objective.maxDaysSinceVacuum = '7'"
        for days in range(9, 0, -1):
            when = now - days * DAY
            _measured(recorder, events, when, "max_days_since_vacuum", 7.0, (when - vacuumed) / DAY, prop)
    return BreachFleet(
        root=root,
        history=history_uri,
        settings=SETTINGS,
        orders=orders,
        events=events,
        customers=customers,
        orders_since=now - 3 * DAY,
        events_since=vacuumed + 7 * DAY,  # the log's VACUUM END is a few seconds later (dated back one by one)
    )


def measure_now(lake: BreachFleet, run_id: str = "measured-now") -> None:
    """What a fleet run records first: each table measured now and judged against its objectives (breach
    start and trend from the history), one ``measure`` row each, appended to the history."""
    from deltalog import fleet_health, measurement_rows
    from deltalog.fleet.run import compliance_views

    recorder = HistoryRecorder(lake.history, context=RunContext(run_id=run_id), measure=False)
    tables = [lake.orders, lake.events, lake.customers]
    reports = fleet_health(tables, settings=lake.settings, history=compliance_views(recorder, tables))
    with recorder.batch():
        recorder.record(measurement_rows(reports, recorder))
