"""The fleet view's writer-conflicts column and JSON (issue 43, item 4), from a small history of rows.

A table whose newest measurement saw DELETE/UPDATE/MERGE commits overlap deltalog's rewrites
and whose compaction lost bins to them and left files to them; one with no writer; the column
shows what the history knows of each, sorts by it, and the JSON carries the figures. A fleet
whose history holds no writer figure does not show the column.
"""

from __future__ import annotations

import datetime as dt

import pytest
from fleet_view_client import Page, User, client

from deltalog.journal import OperationSpan, RunContext, append_rows, make_row

# Our HTML and JSON over history rows, through a test client, with Airflow's auth replaced by a stand-in: no
# Airflow code runs, so the lock's release only; test_fleet_view_plugin.py serves the pages on every release.
pytestmark = [pytest.mark.lock_only]

BUSY, QUIET = "s3://lake/busy", "s3://lake/quiet"


def _rows(now: dt.datetime, writers: bool = True) -> list:
    ctx = RunContext()
    out = []
    for uri, dml, overlaps, lost, left in ((BUSY, 12, 3, 2, 5), (QUIET, 0, 0, 0, 0)):
        measure = {"writer_dml_commits": dml, "writer_overlaps": overlaps + 1, "writer_dml_overlaps": overlaps}
        compaction = {"bins_lost_to_writers": lost, "files_deferred_for_writers": left, "bins_deferred_for_writers": 1}
        out.append(make_row(OperationSpan(ctx, uri, "measure", now, now), "done", **(measure if writers else {})))
        out.append(make_row(OperationSpan(ctx, uri, "compaction", now, now), "done", **(compaction if writers else {})))
    return out


def test_the_writer_conflicts_column_shows_sorts_and_the_json_carries_them(tmp_path, monkeypatch):
    now = dt.datetime.now(dt.UTC)
    history = str(tmp_path / "h")
    append_rows(history, _rows(now))
    c = client(monkeypatch, history, user=User("viewer"))
    page = c.get("/?sort=writer_conflicts&order=desc", headers={"accept": "text/html"})
    assert page.status_code == 200
    assert "writer conflicts" in page.text
    rows = Page(page.text).rows
    assert [uri for uri, _ in rows] == [BUSY, QUIET]  # the most conflicts first
    busy = dict(rows)[BUSY]
    assert "3 DML overlaps · 2 bins lost · 5 files left" in busy
    assert "-" in dict(rows)[QUIET]
    body = c.get("/api/fleet").json()
    by_uri = {t["table_uri"]: t for t in body["tables"]}
    w = by_uri[BUSY]["writers"]
    assert w["writer_conflicts"] == 5 and w["dml_commits"] == 12 and w["dml_overlaps"] == 3 and w["overlaps"] == 4
    assert w["bins_lost_to_writers"] == 2 and w["files_deferred_for_writers"] == 5
    assert by_uri[QUIET]["writers"]["writer_conflicts"] is None


def test_a_history_without_writer_figures_shows_no_such_column(tmp_path, monkeypatch):
    now = dt.datetime.now(dt.UTC)
    history = str(tmp_path / "h")
    append_rows(history, _rows(now, writers=False))
    page = client(monkeypatch, history, user=User("viewer")).get("/", headers={"accept": "text/html"})
    assert page.status_code == 200 and "writer conflicts" not in page.text


def test_extreme_or_odd_writer_figures_give_a_count_or_unknown_never_an_error():
    import pyarrow as pa

    from deltalog_provider.fleet_view.listing import with_writer_conflicts

    top = 2**63 - 1
    cases = [  # (writers, bins lost, files left) -> writer_conflicts
        (({"dml_commits": 12, "dml_overlaps": 3}, 2, 5), 5),
        (({"dml_commits": 1, "dml_overlaps": top}, top, None), top),  # the sum held at the int64 maximum
        (({"dml_commits": 1, "dml_overlaps": 1e308}, None, None), None),  # a double beyond any count: unknown
        (({"dml_commits": 1, "dml_overlaps": float("inf")}, None, None), None),
        (({"dml_commits": 1, "dml_overlaps": float("nan")}, None, None), None),
        (({"dml_commits": 1, "dml_overlaps": -5}, None, None), None),  # a negative count: unknown
        (({"dml_commits": 1, "dml_overlaps": 2.5}, None, None), None),
        (({"dml_commits": 1, "dml_overlaps": 4.0}, -(2**63), None), None),
        (({"dml_commits": 1, "dml_overlaps": 4.0}, None, None), 4),
        (({"dml_commits": -(2**63), "dml_overlaps": 0}, None, top), 0),
        (({"dml_commits": 0}, None, None), None),  # no writer in sight
        (({"dml_commits": 1e308}, 0, 0), None),
    ]
    for (w, lost, left), want in cases:  # one table each: the struct's fields typed as the values are (int64, double)
        listing = pa.table(
            {
                "writers": [w],
                "bins_lost_to_writers": pa.array([lost], pa.int64()),
                "files_deferred_for_writers": pa.array([left], pa.int64()),
            }
        )
        assert with_writer_conflicts(listing).column("writer_conflicts").to_pylist() == [want], (w, lost, left)
