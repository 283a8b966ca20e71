"""Every history row renders: any value of any column, of any shape or size, gives pages and JSON.

The history is a plain Delta table that other engines may append to, so the rows here are
written as another writer would (``append_as_another_writer``: no check of ours runs):
markup in every text, a ``policy`` that is JSON of another shape or no JSON at all,
nulls where our writer never writes one, NaN, infinities, the extremes of every integer and
timestamp, a status or operation we do not know, lists of anything. A property-based test
(hypothesis) draws such rows; for each history every page and JSON route answers 200,
the JSON parses, and no value became markup. The cases the issue names are tested by name.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import tempfile
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pytest
from fleet_view_client import Page, assert_no_markup_from_values, client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltalog.journal import HISTORY_SCHEMA, OperationSpan, RunContext, append_rows, make_row
from deltalog.journal.schema import OPERATIONS
from deltalog.journal.write import prepare_history
from synthetic_history import append_as_another_writer

# Our HTML and JSON over history rows, through a test client, with Airflow's auth replaced by a stand-in: no
# Airflow code runs, so the lock's release only; test_fleet_view_plugin.py serves the pages on every release.
pytestmark = [pytest.mark.lock_only]

TODAY = dt.datetime.now(dt.UTC).date()
MARKUP = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "javascript:alert(3)",
    "</td></tr></table><h1>x",
    "' onmouseover='alert(4)",
    "&lt;already&gt; &amp;",
    "\x00\x01\x1b[31m",
    "🙂 ünïcødé \u202e",
)
POLICIES = (
    "null",
    "[]",
    "[1, 2]",
    '"a string"',
    "42",
    "true",
    "{}",
    '{"target_file_size": {"value": 1, "source": 7}}',
    '{"target_file_size": {"value": [1, {"a": null}], "source": null, "detail": ["x"]}}',
    '{"target_file_size": 5, "x": null}',
    '{"<b>": {"value": "<img src=x onerror=alert(5)>", "source": "<i>"}}',
    "{not json",
    "[" * 5000 + "]" * 5000,
    '{"a": ' * 3000 + "1" + "}" * 3000,
)
STATUSES = ("done", "nothing_due", "deferred", "refused", "failed")
OBJECTIVE_NAMES = ("max_small_files", "max_versions_since_checkpoint", "max_days_since_vacuum", "max_dv_share")
#: An objective's source as anything may write it: markup, a megabyte, JSON, nothing.
SOURCES = (*MARKUP, "z" * 1_000_000, '{"source": 1}', "", "per-table override tables['<b>x</b>']")
#: The objectives' columns (schema version 2) as another writer may type them: each a value of another type.
RETYPED = {
    "objective_max_small_files_target": (pa.string(), ["five", "<b>5</b>", None]),
    "objective_max_small_files_value": (pa.list_(pa.int64()), [[1, 2], [], None]),
    "objective_max_days_since_vacuum_met": (pa.string(), ["yes", "<i>no</i>", None]),
    "objective_max_dv_share_target": (pa.bool_(), [True, False, None]),
    "objective_max_versions_since_checkpoint_source": (pa.int64(), [7, -1, None]),
    "objectives_at_risk": (pa.string(), ["max_small_files", "<script>", None]),
    "finish_by_met": (pa.string(), ["late", None, ""]),
    "finish_by_deadline": (pa.string(), ["tomorrow", None, "06:00"]),
}

texts = st.one_of(st.none(), st.sampled_from(MARKUP), st.text(max_size=40), st.just("y" * 30_000))
names = st.one_of(st.sampled_from(OPERATIONS), st.sampled_from(STATUSES), st.sampled_from(MARKUP), st.text(max_size=12))
integers = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 2**63 - 1, -(2**63)]))
doubles = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))
stamps = st.one_of(
    st.none(),
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31), timezones=st.just(dt.UTC)),
    st.just(dt.datetime.now(dt.UTC)),
)


@st.composite
def history_rows(draw: Any) -> dict[str, Any]:
    uri = draw(st.one_of(st.sampled_from(["s3://lake/a/t", "s3://lake/b/t", *MARKUP]), st.text(max_size=30)))
    row: dict[str, Any] = {}
    for f in HISTORY_SCHEMA:
        if f.name == "run_date":
            continue
        if f.name == "table_uri":
            row[f.name] = draw(st.one_of(st.none(), st.just(uri)))
        elif f.name in ("operation", "status"):
            row[f.name] = draw(names)
        elif f.name == "policy":
            row[f.name] = draw(st.one_of(st.none(), st.sampled_from(POLICIES), texts))
        elif pa.types.is_list(f.type):  # due_operations, objectives_breached, objectives_at_risk
            items = st.one_of(st.none(), names, texts, st.sampled_from(OBJECTIVE_NAMES))
            row[f.name] = draw(st.one_of(st.none(), st.lists(items, max_size=30)))
        elif pa.types.is_boolean(f.type):
            row[f.name] = draw(st.one_of(st.none(), st.booleans()))
        elif f.name == "row_id":
            row[f.name] = draw(st.one_of(st.none(), st.uuids().map(str), st.sampled_from(MARKUP), st.text(max_size=8)))
        elif f.name.startswith("objective_") and f.name.endswith("_source"):
            row[f.name] = draw(st.one_of(st.none(), st.sampled_from(SOURCES), texts))
        elif f.name == "finish_by":
            row[f.name] = draw(st.one_of(st.none(), st.just("06:00 Europe/Berlin"), texts))
        elif pa.types.is_string(f.type):
            row[f.name] = draw(texts)
        elif pa.types.is_timestamp(f.type):
            row[f.name] = draw(stamps)
        elif pa.types.is_floating(f.type):
            row[f.name] = draw(doubles)
        elif f.type == pa.int32():
            row[f.name] = draw(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)))
        else:
            row[f.name] = draw(integers)
    return row


def _write(uri: str, rows: list[dict[str, Any]], drop: list[str], day: dt.date, retyped: list[str] = ()) -> None:
    prepare_history(uri)
    fields = [pa.field(f.name, f.type) for f in HISTORY_SCHEMA if f.name != "run_date" and f.name not in drop]
    columns = {}
    for i, f in enumerate(fields):
        if f.name in retyped:  # another writer's type for the column: its values, one per row
            typ, values = RETYPED[f.name]
            fields[i] = pa.field(f.name, typ)
            columns[f.name] = pa.array([values[j % len(values)] for j in range(len(rows))], typ)
        else:
            columns[f.name] = pa.array([r[f.name] for r in rows], f.type)
    append_as_another_writer(uri, pa.table(columns, schema=pa.schema(fields)), day)


def _check_everything(c: Any, rows: list[dict[str, Any]], day: dt.date) -> None:
    pages = [
        "/",
        "/?status=problem&sort=cost&order=desc",
        "/?sort=live_files&order=desc",
        "/?sort=compliance&order=asc",
        "/?objectives=breached",
        "/?objectives=max_small_files&sort=compliance&order=desc",
    ]
    for row in rows:
        if isinstance(row.get("table_uri"), str) and row["table_uri"]:
            pages.append(f"/table?uri={quote(row['table_uri'], safe='')}")
        if isinstance(row.get("row_id"), str) and row["row_id"]:
            pages.append(f"/row?day={day.isoformat()}&id={quote(row['row_id'], safe='')}")
    for path in pages:
        response = c.get(path, headers={"accept": "text/html"})
        assert response.status_code == 200, (path, response.text[:300])
        assert_no_markup_from_values(response.text)
        json_path = "/api/" + path.lstrip("/") if path.startswith(("/table", "/row")) else "/api/fleet" + path[1:]
        response = c.get(json_path)
        assert response.status_code == 200, (json_path, response.text[:300])
        json.loads(response.text)  # valid JSON: no NaN, no Infinity


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    rows=st.lists(history_rows(), min_size=1, max_size=6),
    drop=st.lists(
        st.sampled_from(
            ["cpu_s", "policy", "due_operations", "live_files_after", "engine", "objectives_at_risk", "finish_by_met"]
        ),
        max_size=2,
    ),
    retyped=st.lists(st.sampled_from(sorted(RETYPED)), max_size=3, unique=True),
    days_ago=st.integers(0, 5),
)
def test_any_history_row_renders_on_every_page_and_in_json(rows, drop, retyped, days_ago):
    day = TODAY - dt.timedelta(days=days_ago)
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        uri = f"{tmp}/history"
        _write(uri, rows, drop, day, [r for r in retyped if r not in drop])
        _check_everything(client(monkeypatch, uri), rows, day)


# --- the cases the issue names ------------------------------------------------------------------


def _row(uri: str, op: str, status: str, **values: Any) -> Any:
    now = dt.datetime.now(dt.UTC)
    return make_row(OperationSpan(RunContext(), uri, op, now, now), status, **values)


@pytest.mark.parametrize("policy", POLICIES[:12])
def test_a_policy_of_another_shape_is_shown_as_unreadable(tmp_path, monkeypatch, policy):
    uri = "s3://lake/odd/settings"
    append_rows(str(tmp_path / "h"), [_row(uri, "measure", "done", policy=policy, due_operations=[])])
    page = client(monkeypatch, str(tmp_path / "h")).get(f"/table?uri={quote(uri, safe='')}")
    assert page.status_code == 200
    assert 'id="settings-unreadable"' in page.text or 'id="settings"' in page.text
    if not policy.startswith("{") or policy == "{not json":
        assert "not readable" in page.text


def test_a_megabyte_message_is_an_excerpt_with_the_whole_text_one_click_away(tmp_path, monkeypatch):
    message = "storage error: " + "x" * 1_000_000
    uri = "s3://lake/big/failure"
    failed = _row(uri, "vacuum", "failed", reason=message)
    append_rows(str(tmp_path / "h"), [_row(uri, "measure", "done", due_operations=["vacuum"]), failed])
    c = client(monkeypatch, str(tmp_path / "h"))
    fleet, table = c.get("/"), c.get(f"/table?uri={quote(uri, safe='')}")
    assert len(fleet.content) < 60_000 and len(table.content) < 100_000
    assert "all 1,000,015 characters" in fleet.text and "all 1,000,015 characters" in table.text
    assert len(c.get("/api/fleet").content) < 30_000
    href = re.search(r'href="(row\?[^"]+)" class="full"', fleet.text).group(1).replace("&amp;", "&")
    row = c.get("/" + href)
    assert row.status_code == 200 and message in row.text
    assert c.get("/api/" + href).json()["rows"][0]["reason"] == message


def test_an_unreadable_table_shows_as_failed_with_dashes_not_none(tmp_path, monkeypatch):
    uri = "s3://lake/broken/table"
    append_rows(str(tmp_path / "h"), [_row(uri, "measure", "failed", reason="cannot read _delta_log: gone")])
    c = client(monkeypatch, str(tmp_path / "h"))
    page = Page(c.get("/").text)
    cells = dict(page.rows)[uri]
    assert cells[1].startswith("failed") and cells[2] == "unreadable"
    assert all(cell in ("-", "") for cell in cells[4:10])  # version, files, small files, size, log, DV share
    text = c.get(f"/table?uri={quote(uri, safe='')}").text
    assert "unreadable" in text and "cannot read _delta_log: gone" in text
    body = re.sub(r"<[^>]+>", " ", text)
    assert "None" not in body.split() and "nan" not in body.split()
    assert c.get("/?status=failed").text.count('data-table="s3://lake/broken/table"') >= 1


def test_missing_and_non_finite_figures_are_dashes(tmp_path, monkeypatch):
    uri = "s3://lake/odd/figures"
    prepare_history(str(tmp_path / "h"))
    now = dt.datetime.now(dt.UTC)
    data = {f.name: [None] for f in HISTORY_SCHEMA if f.name != "run_date"}
    data.update(
        table_uri=[uri],
        operation=["measure"],
        status=["done"],
        row_id=["r1"],
        started_at=[now],
        ended_at=[now],
        duration_s=[math.nan],
        cpu_s=[math.inf],
        live_files_after=[7],
        dv_share_after=[math.nan],
    )
    fields = [pa.field(f.name, f.type) for f in HISTORY_SCHEMA if f.name != "run_date"]
    append_as_another_writer(str(tmp_path / "h"), pa.table(data, schema=pa.schema(fields)), TODAY)
    c = client(monkeypatch, str(tmp_path / "h"))
    cells = dict(Page(c.get("/").text).rows)[uri]
    assert cells[5] == "7" and cells[9] == "-"  # live files; DV share NaN
    text = c.get(f"/table?uri={quote(uri, safe='')}").text
    assert " nan" not in text.lower().replace("nan-", "") and ">None<" not in text
    assert json.loads(c.get(f"/api/table?uri={quote(uri, safe='')}").text)["rows"][0]["duration_s"] is None


# --- the objectives' columns, by name ---------------------------------------------------------------


def _objective_row(uri: str, **values: Any) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC)
    row = {f.name: None for f in HISTORY_SCHEMA if f.name != "run_date"}
    row.update(run_id="odd", row_id=f"r-{len(values)}-{abs(hash(str(values))) % 10**8}", table_uri=uri)
    row.update(operation="measure", status="done", started_at=now, ended_at=now, duration_s=1.0)
    row.update(values)
    return row


ODD_OBJECTIVES = [
    # NaN and infinite values and targets, a negative count, a share above one, a huge value
    {"objective_max_small_files_target": -5, "objective_max_small_files_value": 2**63 - 1,
     "objective_max_small_files_met": False, "objective_max_small_files_source": "z" * 1_000_000},
    {"objective_max_dv_share_target": math.nan, "objective_max_dv_share_value": math.inf,
     "objective_max_dv_share_met": False, "objective_max_dv_share_source": "<script>alert(1)</script>"},
    {"objective_max_days_since_vacuum_target": 7.0, "objective_max_days_since_vacuum_value": -math.inf,
     "objective_max_days_since_vacuum_met": None, "objectives_at_risk": ["<img src=x onerror=alert(1)>", None]},
    # met although the value is over the target (the row says so: shown as it says), at risk of nothing known
    {"objective_max_versions_since_checkpoint_target": 0, "objective_max_versions_since_checkpoint_value": 99,
     "objective_max_versions_since_checkpoint_met": True, "objectives_at_risk": ["max_versions_since_checkpoint"]},
    # a met without a target, a source without anything else
    {"objective_max_small_files_met": False, "objective_max_dv_share_source": "orphan"},
]  # fmt: skip


@pytest.mark.parametrize("values", ODD_OBJECTIVES)
def test_odd_objective_values_render_as_unknown_or_as_the_row_says(tmp_path, monkeypatch, values):
    uri = "s3://lake/odd/objectives"
    prepare_history(str(tmp_path / "h"))
    fields = [pa.field(f.name, f.type) for f in HISTORY_SCHEMA if f.name != "run_date"]
    row = _objective_row(uri, **values)
    append_as_another_writer(
        str(tmp_path / "h"),
        pa.table({f.name: pa.array([row[f.name]], f.type) for f in fields}, schema=pa.schema(fields)),
        TODAY,
    )
    c = client(monkeypatch, str(tmp_path / "h"))
    for path in ("/", "/?sort=compliance", f"/table?uri={quote(uri, safe='')}", "/?objectives=breached"):
        response = c.get(path, headers={"accept": "text/html"})
        assert response.status_code == 200 and len(response.content) < 200_000, path
        assert_no_markup_from_values(response.text)
        body = re.sub(r"<[^>]+>", " ", response.text)
        assert not {"None", "nan", "inf", "NaN"} & set(body.split()), path
    api = json.loads(c.get(f"/api/table?uri={quote(uri, safe='')}").text)
    compliance = api["table"]["compliance"]
    json.loads(c.get("/api/fleet").text)
    for o in compliance["objectives"]:
        assert o["target"] is None or math.isfinite(o["target"])
        assert o["value"] is None or math.isfinite(o["value"])
        assert o["source"] is None or len(o["source"]) <= 300  # an excerpt of the history's text


def test_objectives_columns_of_another_type_are_unknown_and_the_rows_still_count(tmp_path, monkeypatch):
    uri = "s3://lake/odd/types"
    rows = [_objective_row(uri, objective_max_small_files_met=True), _objective_row(uri + "2")]
    rows[1]["row_id"] = "r-other"
    _write(str(tmp_path / "h"), rows, [], TODAY, sorted(RETYPED))
    c = client(monkeypatch, str(tmp_path / "h"))
    page = c.get("/")
    assert page.status_code == 200 and "could not be read" not in page.text
    assert set(Page(page.text).tables()) == {uri, uri + "2"}  # the file is read: its rows are there
    body = c.get(f"/api/table?uri={quote(uri, safe='')}").json()
    # A target of another type that does not cast ("five") is unknown: that objective is not set; one that
    # casts (a boolean as a share: 1.0) is read as it casts.
    names = [o["name"] for o in body["table"]["compliance"]["objectives"]]
    assert "max_small_files" not in names and names == ["max_dv_share"]
    assert body["rows"][0]["objective_max_small_files_target"] is None
