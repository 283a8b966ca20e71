"""The maintenance history table (``deltalog.journal``): rows, appends, reads, races.

- Recording: a real compaction, checkpoint, vacuum and log cleanup each give one row
  whose figures match the table before and after; a refusal gives a ``refused`` row and
  the error still reaches the caller.
- Idempotency: an append repeated within a task try lands once (also when two processes
  race with the same app transaction, and then no stray file is left); a new try writes.
- Races: several processes create the table and append at once: no row is lost or
  doubled, and deltalake and DuckDB read exactly our rows.
- The schema is documented column by column (docs/history.md) and recorded as a property;
  Delta Spark reads the table with that schema and those properties.
- The history is maintained like any table (compaction, checkpoint, vacuum), rows unchanged.

The race workers are separate processes (multiprocessing, "spawn").
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import re
import time
from dataclasses import fields
from typing import Any

import pyarrow as pa
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- workers (separate processes, started with multiprocessing's "spawn") ------------------------


def worker_append(uri: str, worker: int, count: int, go: Any, same_app: bool, out: Any) -> None:
    """``count`` appends of two rows each, as task ``t<worker>`` (or all as one task try when ``same_app``)."""
    from deltalog.journal import OperationSpan, RunContext, append_rows, make_row

    task = "t" if same_app else f"t{worker}"
    context = RunContext(run_id=f"w{worker}", dag_id="d", airflow_run_id="r", task_id=task, try_number=1)
    go.wait(120)  # start together: every worker hits the log at the same moment
    results = []
    for i in range(count):
        now = dt.datetime.now(dt.UTC)
        spans = [OperationSpan(context, f"file:///lake/t{worker}", op, now, now) for op in ("compaction", "checkpoint")]
        rows = [make_row(span, "done", reason=f"w{worker} a{i}") for span in spans]
        result = append_rows(uri, rows, app_id=context.app_id(i + 1), app_version=context.app_version)
        results.append({"version": result.version, "noop": result.noop, "rows": [r.row_id for r in rows]})
    out.put(results)


def run_workers(uri: str, workers: int, count: int, same_app: bool) -> list[dict]:
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=worker_append, args=(uri, w, count, go, same_app, out)) for w in range(workers)]
    for p in procs:
        p.start()
    time.sleep(1.5)  # imports done
    go.set()
    results = [r for _ in procs for r in out.get(timeout=300)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return results


# --- helpers ---------------------------------------------------------------------------------


def small_files_table(path: str, files: int = 12):
    from helpers import append, make_table, rows

    table = make_table(path)
    for i in range(files):
        append(table, rows(5, i * 5), run_hooks=False)
    return table


def parquet_files(root: str) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, f), root)
        for d, _, names in os.walk(root)
        if "_delta_log" not in d
        for f in names
        if f.endswith(".parquet")
    }


def as_rows(table: pa.Table) -> list[dict]:
    """Rows comparable across readers: our schema's columns and types, sorted by row id."""
    from deltalog.journal.schema import HISTORY_SCHEMA

    table = table.select(HISTORY_SCHEMA.names).cast(HISTORY_SCHEMA)
    return sorted(table.to_pylist(), key=lambda r: r["row_id"])


# --- the schema --------------------------------------------------------------------------------


def test_row_fields_are_the_schema_and_the_docs_list_every_column():
    from deltalog.journal import COLUMNS, JournalRow
    from deltalog.journal.schema import SCHEMA_VERSION
    from deltalog.protocol.schema import arrow_field_to_delta

    assert [f.name for f in fields(JournalRow)] == [c[0] for c in COLUMNS]
    with open(os.path.join(REPO, "docs", "history.md"), encoding="utf-8") as fh:
        text = fh.read()
    documented = re.findall(r"^\| `([a-z_]+)` \| ([a-z<>]+) \| (yes|no) \|", text, flags=re.M)

    def delta_type(field: pa.Field) -> str:
        t = arrow_field_to_delta(field)["type"]
        return t if isinstance(t, str) else f"array<{t['elementType']}>"

    expected = [(name, delta_type(pa.field(name, typ)), "yes" if null else "no") for name, typ, null, _ in COLUMNS]
    assert documented == expected
    assert f"schema version {SCHEMA_VERSION}" in text.lower()


# --- recording operations ----------------------------------------------------------------------


def test_recorder_rows_match_what_each_operation_did(tmp_path):
    import deltalake

    from deltalog import cleanup_log, compact, create_checkpoint, vacuum
    from deltalog.journal import HistoryRecorder, RunContext, read_history
    from deltalog.journal.schema import SCHEMA_VERSION, SCHEMA_VERSION_PROPERTY

    table = small_files_table(str(tmp_path / "t"))
    before = table.snapshot()
    input_bytes = sum(before.files.column("size").to_pylist())
    history = str(tmp_path / "history")
    context = RunContext(dag_id="fleet", airflow_run_id="manual__1", task_id="maintain", map_index=3, try_number=2)
    recorder = HistoryRecorder(history, context=context)

    with recorder.operation(table, "compaction", engine="local") as op:
        op.result = compact(table, run_hooks=False)
    with recorder.operation(table, "checkpoint") as op:
        op.result = create_checkpoint(table)
    tombstone_bytes = sum(table.snapshot().tombstones.column("size").to_pylist())
    with recorder.operation(table, "vacuum") as op:
        op.result = vacuum(table, retention_hours=0, allow_short_retention=True)
    with recorder.operation(table, "log_cleanup") as op:
        op.result = cleanup_log(table)

    got = {r["operation"]: r for r in read_history(history).to_pylist()}
    assert list(got) == ["compaction", "checkpoint", "vacuum", "log_cleanup"]
    c = got["compaction"]
    assert (c["status"], c["engine"], c["version_before"], c["version_after"]) == ("done", "local", 12, 13)
    assert (c["files_read"], c["bytes_read"], c["files_removed"]) == (12, input_bytes, 12)
    assert c["files_written"] == 1 and c["bytes_written"] == table.snapshot().files.column("size")[0].as_py()
    assert (c["live_files_before"], c["live_files_after"]) == (12, 1)
    assert (c["small_files_before"], c["small_files_after"]) == (12, 1)
    assert (c["table_bytes_before"], c["log_files_before"], c["log_files_after"]) == (input_bytes, 13, 14)
    assert c["versions_since_checkpoint_before"] == 13 and c["dv_share_before"] == 0.0
    assert c["table_id"] == before.metadata.id and c["table_uri"] == table.uri
    assert c["started_at"] <= c["ended_at"] and c["duration_s"] >= 0 and c["cpu_s"] >= 0
    assert c["run_date"] == c["started_at"].date()
    assert (c["airflow_dag_id"], c["airflow_run_id"], c["airflow_task_id"]) == ("fleet", "manual__1", "maintain")
    assert (c["airflow_map_index"], c["airflow_try_number"], c["run_id"]) == (3, 2, context.run_id)
    assert c["summary"].startswith("compacted ")
    k = got["checkpoint"]
    assert (k["status"], k["versions_since_checkpoint_after"], k["files_written"]) == ("done", 0, 1)
    assert k["bytes_written"] > 0
    v = got["vacuum"]
    assert (v["status"], v["files_removed"], v["bytes_reclaimed"]) == ("done", 12, tombstone_bytes)
    assert v["version_after"] > v["version_before"]  # VACUUM START/END commits
    lc = got["log_cleanup"]
    assert (lc["status"], lc["log_files_removed"], lc["bytes_reclaimed"]) == ("nothing_due", 0, 0)
    assert lc["reason"]

    # The table is a Delta table others read: the same rows, its schema version, the legacy protocol.
    other = deltalake.DeltaTable(history)
    assert other.metadata().configuration[SCHEMA_VERSION_PROPERTY] == str(SCHEMA_VERSION) == "3"
    assert other.metadata().partition_columns == ["run_date"]
    assert as_rows(other.to_pyarrow_table()) == as_rows(read_history(history))
    assert (other.protocol().min_reader_version, other.protocol().min_writer_version) == (1, 2)


def test_a_refusal_is_recorded_and_still_raised_and_results_that_change_nothing_are_not_rows(tmp_path):
    from deltalog import vacuum
    from deltalog.errors import InvalidArgumentError, OperationRefusedError
    from deltalog.journal import HistoryRecorder, read_history

    table = small_files_table(str(tmp_path / "t"), files=2)
    history = str(tmp_path / "history")
    recorder = HistoryRecorder(history)
    with pytest.raises(OperationRefusedError), recorder.operation(table, "vacuum") as op:
        op.result = vacuum(table, retention_hours=0)
    with pytest.raises(InvalidArgumentError, match="dry run"), recorder.operation(table, "vacuum") as op:
        op.result = vacuum(table, retention_hours=0, allow_short_retention=True, dry_run=True)
    rows = read_history(history).to_pylist()
    assert [(r["operation"], r["status"]) for r in rows] == [("vacuum", "refused")]  # the dry run: no row
    assert "OperationRefusedError: refusing to vacuum" in rows[0]["reason"]
    assert rows[0]["version_before"] == rows[0]["version_after"] == 2


def test_measure_rows_feed_the_fleet_overview(tmp_path):
    from deltalog import maintenance_due
    from deltalog.journal import OperationSpan, RunContext, append_rows, fleet_overview, read_history, table_state
    from deltalog.journal.record import row_for_deferred, row_for_measurement, utc_now

    table = small_files_table(str(tmp_path / "t"), files=11)
    snapshot = table.snapshot()
    due = maintenance_due(table, snapshot)
    context = RunContext()
    state = table_state(snapshot)
    now = utc_now()
    rows = [
        row_for_measurement(OperationSpan(context, table.uri, "measure", now, now, state, state), due),
        row_for_deferred(OperationSpan(context, table.uri, "compaction", now, now, state, state), "budget spent"),
        row_for_measurement(OperationSpan(context, "file:///lake/gone", "measure", now, now), error="gone"),
    ]
    history = str(tmp_path / "history")
    append_rows(history, rows)
    overview = {o.table_uri: o for o in fleet_overview(read_history(history))}
    mine = overview[table.uri]
    assert mine.due == ["compaction", "checkpoint"] == rows[0].due_operations
    assert "compaction: 11 small files" in mine.measured["reason"]
    assert [line.split(":")[0] for line in mine.why] == ["compaction", "checkpoint"]
    assert mine.measured["live_files_after"] == 11 and mine.measured["versions_since_checkpoint_after"] == 12
    assert [r["operation"] for r in mine.deferred] == ["compaction"] and mine.refused == []
    assert [r["reason"] for r in overview["file:///lake/gone"].failed] == ["gone"]
    # The reader keeps one table's rows, given as a path or as the URI the history records.
    assert read_history(history, table_uri=str(tmp_path / "t")).num_rows == 2


def test_read_history_prunes_by_day(tmp_path, monkeypatch):
    import deltalog.journal.read as read_mod
    from deltalog.journal import OperationSpan, RunContext, append_rows, make_row, read_history

    context = RunContext()
    days = [dt.datetime(2026, 3, d, 12, tzinfo=dt.UTC) for d in (1, 2, 3)]
    rows = [make_row(OperationSpan(context, "s3://lake/a", "measure", d, d), "done") for d in days]
    history = str(tmp_path / "history")
    append_rows(history, rows)
    opened: list[str] = []
    real = read_mod._read_file
    monkeypatch.setattr(read_mod, "_read_file", lambda snap, add: opened.append(add["path"]) or real(snap, add))
    got = read_history(history, since="2026-03-02", until=dt.date(2026, 3, 2))
    assert [r["started_at"] for r in got.to_pylist()] == [days[1]]
    assert opened == [p for p in opened if "run_date=2026-03-02/" in p] and len(opened) == 1
    assert read_history(history, since=days[1]).num_rows == 2


# --- appends: idempotency, refusals, races -------------------------------------------------------


def test_an_append_lands_once_per_task_try(tmp_path):
    from deltalog.journal import OperationSpan, RunContext, append_rows, make_row, read_history

    history = str(tmp_path / "history")

    def rows(context, n):
        now = dt.datetime.now(dt.UTC)
        return [make_row(OperationSpan(context, "s3://l/t", "vacuum", now, now), "done") for _ in range(n)]

    try1 = RunContext(run_id="a", dag_id="d", airflow_run_id="r", task_id="t", try_number=1)
    first = append_rows(history, rows(try1, 2), app_id=try1.app_id(1), app_version=try1.app_version)
    again = append_rows(history, rows(try1, 2), app_id=try1.app_id(1), app_version=try1.app_version)
    assert (first.rows, again.noop, again.rows) == (2, True, 0)
    try2 = RunContext(run_id="b", dag_id="d", airflow_run_id="r", task_id="t", try_number=2)
    assert try2.app_id(1) == try1.app_id(1)
    second = append_rows(history, rows(try2, 1), app_id=try2.app_id(1), app_version=try2.app_version)
    late = append_rows(history, rows(try1, 5), app_id=try1.app_id(1), app_version=try1.app_version)
    assert (second.rows, late.noop) == (1, True)  # a new try writes; an older try waking up late does not
    assert sorted(read_history(history).column("run_id").to_pylist()) == ["a", "a", "b"]
    assert len(parquet_files(history)) == 2  # the repeats wrote no file


def test_a_location_holding_another_table_is_refused_and_left_alone(tmp_path):
    from deltalog.errors import OperationRefusedError
    from deltalog.journal import OperationSpan, RunContext, append_rows, make_row

    table = small_files_table(str(tmp_path / "data"), files=1)
    now = dt.datetime.now(dt.UTC)
    row = make_row(OperationSpan(RunContext(), "x", "measure", now, now), "done")
    with pytest.raises(OperationRefusedError, match="not a|without deltalog.history.kind"):
        append_rows(table.uri, [row])
    assert table.snapshot().version == 1 and len(parquet_files(str(tmp_path / "data"))) == 1


@pytest.mark.slow
def test_concurrent_appends_from_processes_lose_nothing_and_readers_agree(tmp_path):
    import deltalake
    import duckdb

    from deltalog import DeltaTable
    from deltalog.journal import read_history

    history = str(tmp_path / "history")  # does not exist yet: the workers race to create it too
    workers, count = 4, 8
    results = run_workers(history, workers, count, same_app=False)
    assert not any(r["noop"] for r in results)
    written = sorted(i for r in results for i in r["rows"])
    ours = read_history(history)
    assert sorted(ours.column("row_id").to_pylist()) == written  # every row, once
    assert ours.num_rows == workers * count * 2
    listing = DeltaTable(history).list_log()
    assert sorted(listing.commits) == list(range(workers * count + 1))  # one create, one commit per append
    assert listing.checkpoints, "the standard post-commit hook checkpoints the history"
    expected = as_rows(ours)
    other = deltalake.DeltaTable(history)
    assert as_rows(other.to_pyarrow_table()) == expected
    # DuckDB over the table as delta-rs resolves it (DuckDB's own delta extension is not
    # published for the DuckDB release we pin): same rows, and SQL over the columns works.
    dataset = other.to_pyarrow_dataset()  # noqa: F841 - read by name in the SQL below
    con = duckdb.connect()
    assert as_rows(con.sql("SELECT * FROM dataset").to_arrow_table()) == expected
    per_task = dict(con.sql("SELECT airflow_task_id, count(*) FROM dataset GROUP BY 1").fetchall())
    assert per_task == {f"t{w}": count * 2 for w in range(workers)}


@pytest.mark.slow
def test_the_same_append_from_two_processes_lands_once_and_leaves_no_stray_file(tmp_path):
    from deltalog.journal import read_history

    history = str(tmp_path / "history")
    results = run_workers(history, 3, 4, same_app=True)
    landed = [r for r in results if not r["noop"]]
    assert len(landed) == 4  # each of the 4 appends of the one task try, once
    assert read_history(history).num_rows == 8
    assert sorted(read_history(history).column("row_id").to_pylist()) == sorted(i for r in landed for i in r["rows"])
    assert len(parquet_files(history)) == 4


# --- the history is maintained like any table, and Delta Spark reads it ----------------------------


def _history_with_appends(path: str, appends: int) -> None:
    from deltalog.journal import OperationSpan, RunContext, append_rows, make_row

    context = RunContext()
    for i in range(appends):
        now = dt.datetime.now(dt.UTC)
        span = OperationSpan(context, f"s3://lake/t{i % 3}", "measure", now, now)
        append_rows(path, [make_row(span, "done", due_operations=["compaction"], reason=f"append {i}")])


def test_the_history_is_compacted_checkpointed_and_vacuumed_like_any_table_rows_unchanged(tmp_path):
    import deltalake

    from deltalog import compact, create_checkpoint, vacuum
    from deltalog.journal import read_history

    history = str(tmp_path / "history")
    _history_with_appends(history, 12)
    before = as_rows(read_history(history))
    result = compact(history)  # append-only, yet compaction may: its commits change no data
    assert result.ok and result.to_dict()["num_files_removed"] == 12
    create_checkpoint(history)
    removed = vacuum(history, retention_hours=0, allow_short_retention=True)
    assert removed.num_deleted_files == 12
    assert as_rows(read_history(history)) == before
    assert as_rows(deltalake.DeltaTable(history).to_pyarrow_table()) == before
    assert len(parquet_files(history)) == 1


@pytest.mark.spark
@pytest.mark.slow
def test_delta_spark_reads_the_history_with_its_schema_and_properties(delta_spark, tmp_path):
    from deltalog.journal import COLUMNS, read_history
    from deltalog.journal.schema import SCHEMA_VERSION_PROPERTY

    history = str(tmp_path / "history")
    _history_with_appends(history, 4)
    ours = read_history(history).to_pylist()
    df = delta_spark.read.format("delta").load(history)
    assert df.columns == [c[0] for c in COLUMNS]
    spark_rows = {
        (r.row_id, r.operation, r.status, str(r.run_date), r.table_uri, tuple(r.due_operations), r.reason)
        for r in df.collect()
    }
    assert spark_rows == {
        (
            r["row_id"],
            r["operation"],
            r["status"],
            str(r["run_date"]),
            r["table_uri"],
            tuple(r["due_operations"]),
            r["reason"],
        )
        for r in ours
    }
    props = dict(delta_spark.sql(f"SHOW TBLPROPERTIES delta.`{history}`").collect())
    assert props[SCHEMA_VERSION_PROPERTY] == "3" and props["delta.appendOnly"] == "true"
