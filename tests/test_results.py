"""The one result contract (``deltalog.result_contract``), checked on every result class there is.

Every dataclass with ``to_dict()`` in ``deltalog`` is found by walking the package, so a
new one is held to the contract without anyone listing it: it must be frozen, its
``to_dict()`` (of a real instance, made by running the operations on real tables) must
use snake_case keys everywhere but under the declared protocol-data keys, and every
class a public entry point returns must have ``summary_line()``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import inspect
import os
import pkgutil
import re
import time
import typing
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow.parquet as pq
import pytest

import deltalog
from deltalog import DeltaTable
from deltalog.result_contract import PROTOCOL_DATA_CLASSES, VERBATIM_KEYS
from helpers import append, make_table, rows

SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


def _modules() -> list[Any]:
    names = [m.name for m in pkgutil.walk_packages(deltalog.__path__, "deltalog.")]
    return [importlib.import_module(n) for n in names if not n.endswith("__main__")]  # __main__ runs the CLI


def _classes_with_to_dict() -> dict[str, type]:
    out = {}
    for module in _modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and "to_dict" in cls.__dict__:
                out[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return out


CLASSES = _classes_with_to_dict()
RESULT_CLASSES = {name: cls for name, cls in CLASSES.items() if name not in PROTOCOL_DATA_CLASSES}


def bad_keys(value: Any, where: str) -> Iterator[str]:
    """Paths of keys that are not snake_case, not descending into protocol or user data."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if not isinstance(key, str) or not SNAKE.match(key):
                yield f"{where}.{key}"
            elif key not in VERBATIM_KEYS:
                yield from bad_keys(inner, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for i, inner in enumerate(value):
            yield from bad_keys(inner, f"{where}[{i}]")


def _instances_in(value: Any, seen: dict[type, Any], depth: int = 0) -> None:
    """Every result-class instance reachable from ``value`` (results nest their parts)."""
    if depth > 6:
        return
    if isinstance(value, list | tuple):
        for v in value:
            _instances_in(v, seen, depth + 1)
    elif isinstance(value, dict):
        for v in value.values():
            _instances_in(v, seen, depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        seen.setdefault(type(value), value)
        for f in dataclasses.fields(value):
            _instances_in(getattr(value, f.name), seen, depth + 1)


def _hook(storage: Any, result: Any) -> dict[str, Any]:
    return {"version": result.version}


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> dict[type, Any]:
    """One real instance of every result class: the operations run on small real tables."""
    from deltalog.commit.post_commit import PostCommitHook
    from deltalog.commit.transaction import Transaction
    from deltalog.compaction import compact, plan_compaction
    from deltalog.compaction.purge import deletion_vector_health
    from deltalog.convert import convert_to_delta
    from deltalog.engines.spark.ingest import IngestResult, WrittenFile
    from deltalog.fleet.discover import discover_tables
    from deltalog.fleet.ranking import fleet_health
    from deltalog.fleet.run import run_fleet
    from deltalog.journal import HistoryRecorder, RunContext, fleet_overview, read_history, table_state
    from deltalog.log.activity import find_new_commit
    from deltalog.log_maintenance import create_checkpoint
    from deltalog.log_maintenance.log_cleanup import cleanup_log
    from deltalog.log_maintenance.manifest import generate_manifest
    from deltalog.maintenance.due import maintenance_due
    from deltalog.maintenance.policy import due_rules, settings_for
    from deltalog.protocol.features import FEATURES
    from deltalog.vacuuming import plan_vacuum, vacuum
    from test_compaction_clustering import clustered

    root = tmp_path_factory.mktemp("results")
    path = str(root / "fleet" / "t")
    table = make_table(path, partition_by=["part"])
    produced: list[Any] = []
    for i in range(4):
        produced.append(append(table, rows(3, i * 3, "a"), {"part": "a"}))
    produced.append(plan_compaction(table))
    produced.append(compact(table, deadline=time.monotonic() - 1))  # every bin deferred: BinSkipped
    # Writers beside compaction: a gate (its cadence), the wait at it, files left to back-to-back writers.
    from deltalog.compaction.quiet_moment import wait_for_quiet_moment
    from deltalog.log.writer_activity import activity_from_commits, read_recent_commits
    from deltalog.storage.filesystem import Storage
    from writer_helpers import partitioned

    gated_path = partitioned(root / "gated", cycle_ms=10_000, ran_ms=6_000, last_ago_ms=15_000)
    gated = plan_compaction(gated_path)
    produced += [
        gated,
        wait_for_quiet_moment(Storage(gated_path), gated, gated.writers.gates['partition {"part": "b"}']),
    ]
    produced.append(plan_compaction(partitioned(root / "busy", cycle_ms=10_000, ran_ms=10_000, last_ago_ms=1_000)))
    from deltalog.log.listing import list_log
    from deltalog.log.writer_activity import recent_commit
    from handmade_logs import commit_info, file_action

    storage = Storage(gated_path)
    log = read_recent_commits(storage, list_log(storage))
    rewrite = [
        commit_info("OPTIMIZE", read_version=11, engine="deltalog/x"),
        file_action("add", "b", data_change=False),
    ]
    late = [commit_info("DELETE", read_version=11), file_action("remove", "part=b/x", {"part": "b"})]
    log += [recent_commit(12, 1, rewrite), recent_commit(13, 2, late)]  # a DML that checked itself against ours
    produced.append(activity_from_commits(log, ["part"], ["id", "value", "part"]))
    produced.append(compact(table))  # commits, outputs, hooks
    produced.append(create_checkpoint(table))
    produced.append(cleanup_log(table, dry_run=True))
    produced.append(generate_manifest(table, dry_run=True))
    produced.append(plan_vacuum(table, retention_hours=0, allow_short_retention=True))
    produced.append(vacuum(table, retention_hours=0, allow_short_retention=True, dry_run=True))
    snapshot = table.snapshot()
    produced += [snapshot, table.health(), maintenance_due(table, snapshot), deletion_vector_health(snapshot)]
    produced.append(find_new_commit(table.storage, 0))
    # The log watcher: a poll's tail (positions, commit summaries), its decision, a logged problem.
    from deltalog.journal import TriggeredBy
    from deltalog.log import CommitWatch, LogPosition, WatchSettings, access_problem, read_tail

    tail = read_tail(table.storage, LogPosition(0))
    watch = CommitWatch(table.uri, WatchSettings(quiet_seconds=0, grace_seconds=0), LogPosition(0))
    watch.observe(tail, 0.0)
    event = watch.ready(0.0)
    assert event is not None
    problem = access_problem(ConnectionError("down"))
    produced += [tail, watch.settings, event, problem, *watch.failed(problem, 1.0), TriggeredBy.of_ranges([event])]
    produced += list(FEATURES.values())
    due = make_table(str(root / "fleet" / "due"))
    for i in range(4):
        append(due, rows(3, i * 3))
    hooked = Transaction(due.storage, due.snapshot(), operation="WRITE", post_commit_hooks=[PostCommitHook("n", _hook)])
    produced.append(hooked.commit())
    resolved = settings_for(due.uri, {"defaults": {"target_file_size": "1m"}}, due.snapshot().metadata.configuration)
    produced += [resolved, *resolved.explained]
    reports = fleet_health([due.uri])
    assert reports[0].health is not None and reports[0].due is not None
    produced += list(due_rules(reports[0].due, reports[0].health, resolved))
    found = discover_tables(str(root / "fleet"))
    produced += [found, *fleet_health(found.tables)]
    produced.append(run_fleet(found.tables, dry_run=True))
    produced.append(run_fleet(found.tables))
    plain = root / "plain"
    plain.mkdir()
    pq.write_table(rows(3), str(plain / "a.parquet"))
    produced.append(convert_to_delta(str(plain)))
    produced.append(plan_compaction(clustered(str(root / "clustered"), ["x", "y"], files=3, rows=20)))
    produced.append(IngestResult("t", "t/_requests/r.json", "r", [WrittenFile("a.parquet", 1, {"part": "a"}, 0)]))
    recorder = HistoryRecorder(str(root / "history"), context=RunContext(dag_id="d", airflow_run_id="r", task_id="t"))
    with recorder.operation(table, "checkpoint") as op:
        op.result = create_checkpoint(table)
    produced += [*recorder.appends, *recorder.recorded, recorder.context, table_state(table.snapshot())]
    produced += fleet_overview(read_history(str(root / "history")))
    # Service-level objectives: a breached table, its report, the alert and its message.
    from deltalog import breach_alert, breach_message, check_objectives, parse_finish_by
    from deltalog.log.activity import last_vacuum

    objectives = {"defaults": {"max_small_files": 0, "max_days_since_vacuum": 7}}
    produced += check_objectives([due.uri, str(root / "missing")], settings=objectives)
    produced.append(last_vacuum(due.storage, due.snapshot().segment.listing, {}))
    produced.append(parse_finish_by("06:00 Europe/Berlin"))
    alert = breach_alert([due.uri], history=recorder, settings=objectives)
    produced += [alert, breach_message(alert), *alert.report.new, alert.report]
    produced.append(run_fleet([due.uri], settings=objectives, dry_run=True))
    from deltalog.journal import FIGURES, MEASURES, RollupStore
    from deltalog.log import snapshot_at
    from deltalog.storage import Storage

    history = snapshot_at(Storage(str(root / "history")))
    today = dt.datetime.now(dt.UTC).date()
    produced += [RollupStore(None).window(history, today - dt.timedelta(days=1), today), MEASURES[0], FIGURES[0]]
    produced.append(_uniform_vacuum_plan(root / "uniform"))
    from deltalog.uniform import expire_iceberg_snapshots, sync_iceberg_metadata
    from uniform_tables import append as uniform_append
    from uniform_tables import create_uniform
    from uniform_tables import rows as uniform_rows

    uniform = create_uniform(str(root / "uniform_sync"))
    uniform_append(uniform, uniform_rows(0, 3, "a"), run_hooks=False)
    uniform_append(uniform, uniform_rows(3, 3, "a"), run_hooks=False)
    produced.append(sync_iceberg_metadata(uniform))  # two snapshots: ConvertedSnapshot
    config = uniform.snapshot().metadata.configuration
    produced.append(expire_iceberg_snapshots(uniform, config, dry_run=True, now_ms=int(time.time() * 1000) + 10**10))
    seen: dict[type, Any] = {}
    for value in produced:
        _instances_in(value, seen)
    return seen


def _uniform_vacuum_plan(folder: Any) -> Any:
    """A vacuum plan of a UniForm table whose Iceberg metadata pyiceberg wrote: its Iceberg side (guard,
    metadata files, snapshots) is part of the plan's result."""
    from deltalog.vacuuming import plan_vacuum
    from iceberg_helpers import (
        append_iceberg,
        append_uniform,
        data_file,
        iceberg_catalog,
        make_uniform_table,
        register_iceberg_table,
    )

    path = str(folder / "t")
    os.makedirs(path)
    make_uniform_table(path)
    rel = append_uniform(path, 0)
    table = register_iceberg_table(iceberg_catalog(str(folder / "catalog")), "file://" + path)
    append_iceberg(table, [data_file(f"file://{path}/{rel}")])
    return plan_vacuum(path)


def test_every_class_with_to_dict_is_a_dataclass():
    assert len(RESULT_CLASSES) > 25, sorted(RESULT_CLASSES)  # the walk found the package's results
    assert [name for name, cls in CLASSES.items() if not dataclasses.is_dataclass(cls)] == []


@pytest.mark.parametrize("name", sorted(RESULT_CLASSES))
def test_result_is_frozen(name):
    params = RESULT_CLASSES[name].__dataclass_params__  # type: ignore[attr-defined]
    assert params.frozen, f"{name} must be a frozen dataclass (build a mutable draft, freeze at the end)"


@pytest.mark.parametrize("name", sorted(RESULT_CLASSES))
def test_to_dict_keys_are_snake_case(name, examples):
    cls = RESULT_CLASSES[name]
    assert cls in examples, f"no example of {name}: add one to the examples fixture (run the operation)"
    doc = examples[cls].to_dict()
    assert isinstance(doc, dict) and doc
    assert list(bad_keys(doc, name)) == []


def test_the_key_check_catches_camel_case():
    doc = {"num_files": 1, "plan": {"numBins": 2}, "operation_metrics": {"numAddedFiles": 1}, "rows": [{"bytesIn": 1}]}
    assert list(bad_keys(doc, "r")) == ["r.plan.numBins", "r.rows[0].bytesIn"]


def _entry_points() -> list[tuple[str, Callable[..., Any]]]:
    """The public functions and DeltaTable methods that return results."""
    from deltalog import ingest as commit_request
    from deltalog import journal
    from deltalog.compaction import commit_outputs, purge
    from deltalog.compaction.spark.commit import commit_spark_result
    from deltalog.engines.spark.ingest import write_ingest
    from deltalog.fleet import discover, maintain, run
    from deltalog.fleet import ranking as fleet_health
    from deltalog.log import activity
    from deltalog.maintenance import due, health
    from deltalog.vacuuming import vacuum

    out = [(f"deltalog.{name}", getattr(deltalog, name)) for name in deltalog.__all__]
    out += [(f"DeltaTable.{n}", f) for n, f in inspect.getmembers(DeltaTable, inspect.isfunction) if n[0] != "_"]
    out += [
        ("vacuum", vacuum),
        ("commit_request", commit_request.commit_request),
        ("commit_outputs", commit_outputs),
        ("commit_spark_result", commit_spark_result),
        ("write_ingest", write_ingest),
        ("maintenance_due", due.maintenance_due),
        ("compute_health", health.compute_health),
        ("deletion_vector_health", purge.deletion_vector_health),
        ("find_new_commit", activity.find_new_commit),
        ("discover_tables", discover.discover_tables),
        ("fleet_health", fleet_health.fleet_health),
        ("maintain_table", maintain.maintain_table),
        ("run_fleet", run.run_fleet),
        ("append_rows", journal.append_rows),
        ("table_state", journal.table_state),
        ("fleet_overview", journal.fleet_overview),
    ]
    return [(n, f) for n, f in out if inspect.isfunction(f)]


def _returned_classes(fn: Callable[..., Any]) -> set[type]:
    names = {cls.__name__: cls for cls in CLASSES.values()}
    from deltalog.commit.transaction import Transaction

    hint = inspect.signature(fn).return_annotation  # a string (postponed annotations): only it is resolved
    if isinstance(hint, str):
        hint = eval(hint, {**fn.__globals__, **names, "Transaction": Transaction})  # noqa: S307
    stack, out = [hint], set()
    while stack:
        h = stack.pop()
        if isinstance(h, type) and h in CLASSES.values():
            out.add(h)
        stack += list(typing.get_args(h))
    return out


def test_every_returned_result_has_a_summary_line():
    returned = {cls: name for name, fn in _entry_points() for cls in _returned_classes(fn)}
    assert len(returned) >= 15, returned  # the walk over the entry points found the results
    missing = [
        f"{cls.__name__} (returned by {by})"
        for cls, by in returned.items()
        if f"{cls.__module__}.{cls.__qualname__}" not in PROTOCOL_DATA_CLASSES and "summary_line" not in dir(cls)
    ]
    assert missing == []


def test_summary_lines_of_real_results_are_one_line(examples):
    lines = {cls.__name__: ex.summary_line() for cls, ex in examples.items() if hasattr(ex, "summary_line")}
    assert len(lines) >= 15
    assert {name: line for name, line in lines.items() if not line or "\n" in line} == {}


def test_verbatim_keys_and_protocol_classes_are_real():
    """The exemptions name keys and classes that exist (a stale entry would hide nothing, or everything)."""
    assert PROTOCOL_DATA_CLASSES <= set(CLASSES)
    assert all(SNAKE.match(k) for k in VERBATIM_KEYS)
    assert os.path.basename(deltalog.result_contract.__file__) == "result_contract.py"
