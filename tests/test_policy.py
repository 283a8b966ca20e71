"""Maintenance policies: settings inherited through fleet defaults, path rules, table properties and overrides.

Each effective value says where it came from (``deltalog policy``), and each operation's
due rule says why it is due or not, with the numbers.
"""

from __future__ import annotations

import json
import os

import pytest

from deltalog import FleetPolicy, fleet_health, settings_for
from deltalog.cli import main
from deltalog.errors import InvalidArgumentError
from deltalog.fleet.run import run_fleet
from fleet_helpers import long_log_table, small_files_table
from helpers import append, make_table, rows

LAYERED = {
    "defaults": {"target_file_size": "256m", "checkpoint_interval": 50, "vacuum_retention_hours": 240},
    "prefixes": {
        "s3://lake/raw": {"target_file_size": "64m", "zorder_by": ["day"]},
        "s3://lake/raw/events/": {"target_file_size": "32m"},
    },
    "tables": {"s3://lake/raw/events/clicks": {"zorder_by": ["user_id"]}, "orders": {"max_dv_hidden_share": 0.2}},
}


def _explained(settings) -> dict:
    return {e.name: e for e in settings.explained}


def test_each_layer_wins_over_the_ones_below_and_says_so():
    policy = FleetPolicy.parse(LAYERED)
    clicks = policy.resolve("s3://lake/raw/events/clicks/", {"delta.checkpointInterval": "5"})
    e = _explained(clicks)
    # The longest matching prefix beats the shorter one, which beats the fleet defaults.
    assert (e["target_file_size"].value, e["target_file_size"].source) == (32 << 20, "path rule")
    assert e["target_file_size"].detail == "prefixes['s3://lake/raw/events/']"
    assert [(o["source"], o["value"]) for o in e["target_file_size"].overridden] == [
        ("path rule", 64 << 20),
        ("fleet defaults", 256 << 20),
        ("default", 128 << 20),
    ]
    # The table's own property beats the fleet defaults; maintenance leaves it to the table (None).
    assert (e["checkpoint_interval"].value, e["checkpoint_interval"].source) == (5, "table property")
    assert e["checkpoint_interval"].detail == "delta.checkpointInterval = '5'" and clicks.checkpoint_interval is None
    # The per-table override beats a path rule.
    assert (e["zorder_by"].value, e["zorder_by"].source) == (["user_id"], "per-table override")
    assert clicks.zorder_by == ["user_id"] and clicks.target_file_size == 32 << 20
    assert clicks.vacuum_retention_hours == 240.0 and e["vacuum_retention_hours"].source == "fleet defaults"
    # Nothing sets a purge limit: the built-in default (none), and what only the table decides.
    assert e["max_dv_hidden_share"].source == "default" and clicks.max_dv_hidden_share is None
    assert (e["log_retention_hours"].value, e["log_retention_hours"].settable) == (720.0, False)


def test_a_table_property_beats_path_rules_and_an_override_beats_the_property():
    policy = FleetPolicy.parse(LAYERED)
    props = {"delta.targetFileSize": "1m", "delta.deletedFileRetentionDuration": "interval 2 days"}
    s = policy.resolve("s3://lake/raw/events/views", props)
    e = _explained(s)
    assert (e["target_file_size"].value, e["target_file_size"].source) == (1 << 20, "table property")
    assert s.target_file_size is None  # the table's own: compaction reads it
    assert (e["vacuum_retention_hours"].value, e["vacuum_retention_hours"].source) == (48.0, "table property")
    below = e["target_file_size"].overridden  # the path rules and the defaults the property won over
    assert [o["detail"] for o in below[:2]] == ["prefixes['s3://lake/raw/events/']", "prefixes['s3://lake/raw']"]
    mine = FleetPolicy.parse({"tables": {"views": {"target_file_size": 2048}}}).resolve("s3://x/views", props)
    assert (mine.target_file_size, _explained(mine)["target_file_size"].source) == (2048, "per-table override")
    assert _explained(mine)["target_file_size"].overridden[0]["source"] == "table property"


def test_prefixes_match_whole_folders_and_tables_match_by_uri_then_name(tmp_path):
    policy = FleetPolicy.parse(LAYERED)
    assert _explained(policy.resolve("s3://lake/rawdata/t"))["target_file_size"].source == "fleet defaults"
    assert _explained(policy.resolve("s3://lake/raw"))["target_file_size"].source == "path rule"
    assert policy.resolve("gs://elsewhere/orders").max_dv_hidden_share == 0.2  # by folder name
    local = FleetPolicy.parse({"prefixes": {str(tmp_path): {"checkpoint_interval": 3}}})
    assert local.resolve("file://" + str(tmp_path / "t")).checkpoint_interval == 3  # a path and its file:// URI


def test_the_older_form_is_a_per_table_mapping():
    s = settings_for("s3://lake/orders", {"orders": {"target_file_size": "64m"}})
    assert s.target_file_size == 64 << 20 and s.sources()["target_file_size"] == "per-table override tables['orders']"


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"defaults": {"target_size": 1}}, "unknown setting"),
        ({"defaults": {"checkpoint_interval": 0}}, "checkpoint_interval in defaults must be a positive integer"),
        ({"prefixes": {"s3://x/": {"vacuum_retention_hours": -1}}}, "vacuum_retention_hours in prefixes"),
        ({"tables": {"t": {"log_retention_hours": 1}}}, "unknown setting"),
        ({"prefixes": ["s3://x/"]}, "must map locations"),
        ({"t": {"zorder_by": "a"}}, "zorder_by in tables"),
        (["t"], "must be a mapping"),
    ],
)
def test_a_bad_settings_file_is_refused_naming_the_entry(doc, message):
    with pytest.raises(InvalidArgumentError, match=message):
        FleetPolicy.parse(doc)


def test_the_fleet_measures_and_maintains_with_each_tables_policy(tmp_path):
    root = str(tmp_path / "lake")
    long_log_table(os.path.join(root, "raw", "logs"), commits=6)  # 7 commits, no checkpoint
    small = small_files_table(os.path.join(root, "gold", "orders"), n=3)
    settings = {
        "prefixes": {os.path.join(root, "raw"): {"checkpoint_interval": 5}},
        "defaults": {"target_file_size": 100},  # every file is above half of 100 bytes: nothing small
    }
    reports = {
        r.uri.rsplit("/", 1)[-1]: r
        for r in fleet_health([os.path.join(root, "raw", "logs"), small.uri], settings=settings)
    }
    assert reports["logs"].due.checkpoint and "interval 5" in reports["logs"].due.reasons[0]
    assert not reports["orders"].due.compaction
    assert not fleet_health([os.path.join(root, "raw", "logs")])[0].due.checkpoint  # the table's own interval: 10
    result = run_fleet([os.path.join(root, "raw", "logs"), small.uri], settings=settings)
    (logs,) = result.outcomes
    assert logs.ran == ["checkpoint"] and logs.settings["sources"]["checkpoint_interval"].startswith("path rule")


def test_cli_policy_shows_values_sources_and_due_rules(tmp_path, capsys):
    path = str(tmp_path / "orders")
    t = make_table(path, configuration={"delta.checkpointInterval": "4"})
    for i in range(5):
        append(t, rows(3, start=i * 3), run_hooks=False)
    settings = tmp_path / "settings.json"
    settings.write_text(
        json.dumps(
            {
                "defaults": {"vacuum_retention_hours": 24, "checkpoint_interval": 100},
                "tables": {"orders": {"max_dv_hidden_share": 0.1}},
            }
        )
    )
    assert main(["policy", path, "--settings", str(settings), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    explained = {e["name"]: e for e in doc["settings"]}
    assert (
        explained["checkpoint_interval"]["value"] == 4
        and explained["checkpoint_interval"]["source"] == "table property"
    )
    assert explained["checkpoint_interval"]["overridden"][0] == {"source": "fleet defaults", "detail": "", "value": 100}
    assert explained["vacuum_retention_hours"]["value"] == 24.0
    rules = {r["operation"]: r for r in doc["due"]}
    assert (
        rules["compaction"]["due"]
        and "5 of 5 live files are under the small-file threshold" in rules["compaction"]["why"]
    )
    assert rules["checkpoint"]["due"] and rules["checkpoint"]["why"].startswith(
        "6 commits since any checkpoint (interval 4)"
    )
    assert not rules["purge"]["due"] and "limit 10.00%" in rules["purge"]["why"]
    assert not rules["vacuum"]["due"] and "shorter than the table's 168" in rules["vacuum"]["why"]
    assert not rules["log_cleanup"]["due"] and "720 hours" in rules["log_cleanup"]["why"]
    assert main(["policy", path, "--settings", str(settings)]) == 0
    text = capsys.readouterr().out
    assert f"{'checkpoint_interval':<30} 4" in text and "table property delta.checkpointInterval = '4'" in text
    assert "over 100 from fleet defaults" in text and "compaction   DUE" in text and "purge        not due" in text
