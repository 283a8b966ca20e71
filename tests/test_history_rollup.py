"""The history in aggregate (``deltalog.journal.rollup``, ``rollup_store``, ``summary``) and paged reads.

- What a rollup says agrees with the rows: per table (counts, sums, the newest row of each
  operation, the latest state, what is still due and why, as ``fleet_overview`` decides from
  every row) and per day.
- The store is incremental per history version (an append reads only its own files, a
  rewritten day is rolled up again from its new files), survives a restart without reading
  a history file, is a cache (deleted or corrupted rollups are made again, equal), and is
  shared safely by several processes building the same window at once.
- A history file that cannot be read as history rows is named and left out.
- A table's rows come a page at a time, newest first, every row once; a row by its id,
  its texts cut to the bound asked for. ``append_arrow`` refuses rows that do not fit.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import shutil
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from deltalog.errors import InvalidArgumentError
from deltalog.journal import (
    RollupStore,
    append_arrow,
    day_figures,
    fleet_overview,
    history_row,
    merge_rollups,
    read_history,
    table_rows,
    table_summaries,
)
from synthetic_history import append_as_another_writer, generate

TODAY = dt.datetime.now(dt.UTC).date()
SINCE = TODAY - dt.timedelta(days=13)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("rollup") / "history")
    generate(uri, rows=6_000, tables=60, days=14, seed=3)
    return uri


def _snapshot(uri: str) -> Any:
    from deltalog.log import snapshot_at
    from deltalog.storage import Storage

    return snapshot_at(Storage(uri))


def _by_table(store: RollupStore, uri: str) -> pa.Table:
    snapshot = _snapshot(uri)
    window = store.window(snapshot, SINCE, TODAY)
    return table_summaries(store.merged(window, snapshot, ("table_uri", "operation")))


def _rounded(value: Any) -> Any:
    """Sums of doubles depend on the order rows are added in (a rewritten file, another merge): equal to 9 digits."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _comparable(summaries: pa.Table) -> list[dict[str, Any]]:
    return _rounded(summaries.drop_columns(["lasts", "policy"]).sort_by("table_uri").to_pylist())


def test_table_summaries_agree_with_the_rows(history: str) -> None:
    rows = read_history(history, since=SINCE)
    summaries = {r["table_uri"]: r for r in _by_table(RollupStore(None), history).to_pylist()}
    expected: dict[str, dict[str, Any]] = defaultdict(lambda: defaultdict(float))
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows.to_pylist():  # oldest first: the last seen is the newest
        if r["operation"] == "fleet_run":  # the fleet run's own row: no table
            continue
        e = expected[r["table_uri"]]
        e["rows"] += 1
        e["failures"] += r["status"] == "failed"
        e["cpu_s"] += r["cpu_s"] or 0
        e["bytes_reclaimed"] += r["bytes_reclaimed"]
        e["bytes_compacted"] += r["bytes_read"] if r["operation"] in ("compaction", "purge") else 0
        newest[(r["table_uri"], r["operation"])] = r
    assert set(summaries) == set(expected) and len(summaries) == 60 and "s3://lake/" not in summaries
    for uri, e in expected.items():
        got = summaries[uri]
        assert got["rows"] == e["rows"] and got["failures"] == e["failures"]
        assert got["cpu_s"] == pytest.approx(e["cpu_s"]) and got["bytes_reclaimed"] == e["bytes_reclaimed"]
        assert (got["bytes_compacted"] or 0) == e["bytes_compacted"]
        lasts = {x["operation"]: x for x in got["lasts"]}
        for (table, op), r in newest.items():
            if table == uri:
                assert lasts[op]["id"] == r["row_id"] and lasts[op]["status"] == r["status"]
    overview = {o.table_uri: o for o in fleet_overview(rows)}
    for uri, o in overview.items():
        got = summaries[uri]
        assert got["due"] == o.due and got["why"] == o.why, uri
        assert got["live_files_after"] == (o.latest or {}).get("live_files_after")
        assert sorted(got["open_failed"]) == sorted(r["operation"] for r in o.failed), uri
        assert sorted(got["open_deferred"]) == sorted(r["operation"] for r in o.deferred), uri
    assert {s["status"] for s in summaries.values()} >= {"failed", "ok"}


def test_compliance_agrees_with_breached_since_of_the_rows(history: str) -> None:
    """Each table's objectives from rollups: its newest judgement, and each breach's start as
    ``deltalog.journal.breached_since`` finds it in the rows (the history's whole window read)."""
    from deltalog.journal import breached_since

    rows = read_history(history, since=SINCE)
    truth = {(r["table_uri"], r["objective"]): r for r in breached_since(rows).to_pylist()}
    summaries = _by_table(RollupStore(None), history).to_pylist()
    judged = [s for s in summaries if s["compliance"] != "none"]
    assert {s["compliance"] for s in judged} == {"breached", "at_risk", "met"} and len(judged) > 20
    for s in judged:
        for o in s["objectives"]:
            expected = truth[(s["table_uri"], o["name"])]
            assert (o["met"], o["breached_since"]) == (expected["met"], expected["breached_since"]), s["table_uri"]
        starts = [o["breached_since"] for o in s["objectives"] if o["met"] is False]
        assert s["breached_since"] == (min(starts) if starts else None)
    newest = {}
    for r in rows.filter(pc.equal(rows.column("operation"), "measure")).to_pylist():
        if r["status"] == "done":
            newest[r["table_uri"]] = r
    for s in summaries:
        r = newest.get(s["table_uri"])
        assert s["judged_id"] == (r["row_id"] if r else None)
        assert s["compliance"] == ("none" if r is None or r["objectives_met"] is None else s["compliance"])


def test_day_figures_agree_with_the_rows(history: str) -> None:
    rows = read_history(history, since=SINCE)
    store = RollupStore(None)
    snapshot = _snapshot(history)
    days = day_figures(store.merged(store.window(snapshot, SINCE, TODAY), snapshot, ("run_date", "operation")))
    per_day = rows.group_by("run_date").aggregate([("bytes_written", "sum"), ("row_id", "count")])
    expected = {r["run_date"]: r for r in per_day.to_pylist()}
    got = {r["run_date"]: r for r in days.to_pylist()}
    assert set(got) == set(expected)
    for day, e in expected.items():
        assert got[day]["rows"] == e["row_id_count"] and got[day]["bytes_written"] == e["bytes_written_sum"]


def _copy(history: str, tmp_path: Any) -> str:
    target = str(tmp_path / "history")
    shutil.copytree(history, target)
    return target


def _today_rows(uri: str, n: int, seed: int) -> pa.Table:
    rows = read_history(uri, since=SINCE).slice(seed * n, n)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    return (
        rows.set_column(rows.schema.get_field_index("run_date"), "run_date", pa.array([TODAY] * n, pa.date32()))
        .set_column(
            rows.schema.get_field_index("started_at"),
            "started_at",
            pa.array([now] * n, rows.schema.field("started_at").type),
        )
        .set_column(rows.schema.get_field_index("row_id"), "row_id", pa.array([f"new-{seed}-{i}" for i in range(n)]))
    )


def test_a_new_version_rolls_up_only_the_files_it_added(history: str, tmp_path: Any) -> None:
    uri = _copy(history, tmp_path)
    store = RollupStore(str(tmp_path / "rollups"))
    first = store.window(_snapshot(uri), SINCE, TODAY)
    assert first.built_days == len(first.days) and first.files_read == len(first.days)
    append_arrow(uri, _today_rows(uri, 40, 1))
    second = store.window(_snapshot(uri), SINCE, TODAY)
    assert (second.built_days, second.files_read) == (1, 1)  # today's new file alone
    assert second.key != first.key
    assert _comparable(_by_table(store, uri)) == _comparable(_by_table(RollupStore(None), uri))


def test_a_rewritten_day_is_rolled_up_again(history: str, tmp_path: Any) -> None:
    from deltalog import compact

    uri = _copy(history, tmp_path)
    # Three files of today's rows of its own: the generated history has rows of today only when the run is
    # more than an hour past midnight UTC (its rows end an hour before it was made).
    for seed in (2, 3, 4):
        append_arrow(uri, _today_rows(uri, 30, seed))
    store = RollupStore(str(tmp_path / "rollups"))
    before = _comparable(_by_table(store, uri))
    today = f"run_date={TODAY.isoformat()}/"
    files_today = [p for p in _snapshot(uri).files.column("path").to_pylist() if p.startswith(today)]
    assert len(files_today) >= 3
    result = compact(uri, target_size="64m")
    assert result.ok and result.commits
    assert len([p for p in _snapshot(uri).files.column("path").to_pylist() if p.startswith(today)]) == 1
    window = store.window(_snapshot(uri), SINCE, TODAY)
    assert window.built_days >= 1
    assert _comparable(_by_table(store, uri)) == before


def test_a_restarted_reader_reads_no_history_file(history: str, tmp_path: Any, monkeypatch: Any) -> None:
    from deltalog.journal import rollup_store

    rollups = str(tmp_path / "rollups")
    expected = _comparable(_by_table(RollupStore(rollups), history))

    def no_reads(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a history file was read")

    monkeypatch.setattr(rollup_store, "read_file_batches", no_reads)
    again = RollupStore(rollups)  # a new process: nothing in memory
    window = again.window(_snapshot(history), SINCE, TODAY)
    assert (window.built_days, window.files_read) == (0, 0)
    assert _comparable(_by_table(again, history)) == expected


def test_the_store_is_a_cache_deleted_or_corrupted_it_is_made_again(history: str, tmp_path: Any) -> None:
    rollups = tmp_path / "rollups"
    expected = _comparable(_by_table(RollupStore(str(rollups)), history))
    files = sorted(rollups.rglob("*.parquet"))
    assert files
    files[0].write_bytes(b"not parquet")  # a torn or foreign file where a rollup was
    assert _comparable(_by_table(RollupStore(str(rollups)), history)) == expected
    shutil.rmtree(rollups)
    assert _comparable(_by_table(RollupStore(str(rollups)), history)) == expected


def test_a_store_that_cannot_be_written_keeps_its_rollups_in_memory(history: str, tmp_path: Any) -> None:
    import logging

    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("deltalog.journal.rollup_store")
    logger.addHandler(handler)
    try:
        blocked = tmp_path / "file"
        blocked.write_text("a file where the rollups' folder would be")
        store = RollupStore(str(blocked / "rollups"))
        assert _comparable(_by_table(store, history)) == _comparable(_by_table(RollupStore(None), history))
    finally:
        logger.removeHandler(handler)
    assert sum("kept in memory only" in m for m in said) == 1  # said once


def _build(history: str, rollups: str, out: Any) -> None:
    store = RollupStore(rollups)
    snapshot = _snapshot(history)
    window = store.window(snapshot, SINCE, TODAY)
    merged = store.merged(window, snapshot, ("table_uri", "operation"))
    out.put((window.key, _rounded(merged.drop_columns(["last", "state", "table_id", "policy"]).to_pylist())))


def test_processes_building_one_window_in_one_store_agree(history: str, tmp_path: Any) -> None:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_build, args=(history, str(tmp_path / "rollups"), out)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert all(r == results[0] for r in results[1:])
    assert len(list((tmp_path / "rollups").rglob("*.tmp*"))) == 0


def test_a_file_that_is_not_history_rows_is_named_and_left_out(history: str, tmp_path: Any) -> None:
    uri = _copy(history, tmp_path)
    good = read_history(uri, since=SINCE).slice(0, 3)
    bad = good.drop_columns(["files_read"]).append_column("files_read", pa.array(["many", "few", "none"]))
    append_as_another_writer(uri, bad.drop_columns(["run_date"]), TODAY)
    store = RollupStore(None)
    snapshot = _snapshot(uri)
    window = store.window(snapshot, SINCE, TODAY)
    assert len(window.unreadable) == 1 and "files_read" in window.unreadable[0]
    assert table_summaries(store.merged(window, snapshot, ("table_uri", "operation"))).num_rows == 60


def test_a_tables_rows_come_a_page_at_a_time_newest_first(history: str) -> None:
    snapshot = _snapshot(history)
    store = RollupStore(None)
    window = store.window(snapshot, SINCE, TODAY)
    busy = "s3://lake/sales/raw/orders"
    days = merge_rollups(store.tables(window, snapshot), by=("run_date", "table_uri"))
    days = days.filter(pc.equal(days.column("table_uri"), busy))
    counts = list(zip(days.column("run_date").to_pylist(), days.column("rows").to_pylist(), strict=True))
    total = sum(n for _, n in counts)
    assert total > 1000
    pages = []
    for offset in range(0, total, 97):
        page = table_rows(snapshot, busy, counts, offset=offset, limit=97, text_chars=50)
        assert page.num_rows == min(97, total - offset)
        pages += page.column("row_id").to_pylist()
    rows = read_history(history, since=SINCE, table_uri=busy)
    expected = rows.sort_by([("started_at", "descending"), ("row_id", "descending")]).column("row_id").to_pylist()
    assert pages == expected
    long = table_rows(snapshot, busy, counts, offset=0, limit=total, text_chars=50)
    assert max(long.column("reason_chars").to_pylist(), key=lambda v: v or 0) > 50
    assert max(len(r or "") for r in long.column("reason").to_pylist()) <= 50


def test_one_row_by_its_id_with_its_texts_cut(history: str) -> None:
    snapshot = _snapshot(history)
    rows = read_history(history, since=SINCE)
    longest = max(rows.to_pylist(), key=lambda r: len(r["reason"] or ""))
    found = history_row(snapshot, longest["run_date"], longest["row_id"], text_chars=1000).to_pylist()
    assert len(found) == 1 and found[0]["row_id"] == longest["row_id"]
    assert found[0]["reason"] == longest["reason"][:1000] and found[0]["reason_chars"] == len(longest["reason"]) > 1000
    assert history_row(snapshot, longest["run_date"], "no-such-row", text_chars=10).num_rows == 0


def test_append_arrow_refuses_rows_that_do_not_fit(history: str, tmp_path: Any) -> None:
    uri = _copy(history, tmp_path)
    version = _snapshot(uri).version
    rows = read_history(uri, since=SINCE).slice(0, 2)
    with pytest.raises(InvalidArgumentError, match="lack the column"):
        append_arrow(uri, rows.drop_columns(["status"]))
    with pytest.raises(InvalidArgumentError, match="unknown history status 'exploded'"):
        append_arrow(
            uri, rows.set_column(rows.schema.get_field_index("status"), "status", pa.array(["done", "exploded"]))
        )
    nulls = rows.set_column(rows.schema.get_field_index("table_uri"), "table_uri", pa.array([None, "x"], pa.string()))
    with pytest.raises(InvalidArgumentError, match="nulls in table_uri"):
        append_arrow(uri, nulls)
    assert _snapshot(uri).version == version  # nothing committed
