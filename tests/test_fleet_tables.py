"""The fleet DAG's table list from asset events (dags/deltalog_example/fleet_tables.py), no Airflow needed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dags"))

from deltalog_example.fleet_tables import TableListError, parse_table_list, tables_from_events  # noqa: E402


def _no_list(uri: str) -> list[str]:
    raise AssertionError(f"read {uri}")


def test_events_are_merged_in_order_each_table_once():
    lists = {"s3://b/l1.txt": ["s3://b/x", "s3://b/y"]}
    extras = [{"tables": ["s3://b/y", " s3://b/z "]}, {"list_uri": "s3://b/l1.txt", "tables": ["s3://b/z"]}]
    assert tables_from_events(extras, lists.__getitem__) == ["s3://b/y", "s3://b/z", "s3://b/x"]
    assert tables_from_events([], _no_list) == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (None, "carries no table list"),
        ({"tabels": ["s3://b/x"]}, "carries no table list"),
        ({"tables": "s3://b/x"}, "must be a list of table URIs"),
        ({"tables": ["s3://b/x", 3]}, "must be a list of table URIs"),
        ({"tables": [""]}, "must be a list of table URIs"),
        ({"list_uri": ""}, "must be a URI"),
        ({"list_uri": ["s3://b/l.txt"]}, "must be a URI"),
    ],
)
def test_a_malformed_event_is_an_error_naming_it(extra, message):
    with pytest.raises(TableListError, match=f"asset event 2.*{message}"):
        tables_from_events([{"tables": ["s3://b/ok"]}, extra], _no_list)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["s3://b/a", "s3://b/b", "/data/c", "t"]), max_size=4), max_size=4))
def test_merged_list_holds_every_named_table_once_in_first_seen_order(lists):
    got = tables_from_events([{"tables": t} for t in lists], _no_list)
    flat = [u for t in lists for u in t]
    assert got == list(dict.fromkeys(flat))


def test_variable_forms():
    assert parse_table_list('["s3://b/a", "s3://b/b"]') == ["s3://b/a", "s3://b/b"]
    assert parse_table_list("# lake\ns3://b/a\n\n  s3://b/b  \n") == ["s3://b/a", "s3://b/b"]
    with pytest.raises(TableListError, match="only non-empty strings"):
        parse_table_list('["s3://b/a", 1]')
