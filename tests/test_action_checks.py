"""Non-file actions are checked once, when the snapshot is loaded (issue 13, item 9).

A metaData whose schemaString does not parse, with an unknown type or a partition
column missing from the schema, was refused by some commands and accepted by others
(``snapshot --json``, ``health``, ``manifest``, ``vacuum``; ``checkpoint`` copied it into
a new checkpoint); a txn whose version is not an integer crashed ``checkpoint`` and an
idempotent ``commit`` (exit 3). Every command must now refuse such a log alike (a corrupt
log, exit 2, naming where the action is) and write nothing, whether the action is in a
commit or in a checkpoint, locally and on S3.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from corrupt_log_helpers import (
    assert_checkpoint_refused,
    assert_replay_paths_agree,
    base_table,
    checkpointed,
    cli_refusals,
    copy_to_s3,
    edit_action,
    fingerprint,
    refusals,
    rewrite_checkpoint_field,
    s3_fingerprint,
    write_request,
)
from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.errors import CorruptLogError
from deltalog.log.action_checks import check_action, check_table_metadata
from deltalog.log_maintenance import create_checkpoint

pytestmark = pytest.mark.timeout(600)


def with_schema(schema: dict) -> Callable[[dict[str, Any]], None]:
    return lambda body: body.update(schemaString=json.dumps(schema))


SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "value", "type": "string", "nullable": True, "metadata": {}},
        {"name": "part", "type": "string", "nullable": True, "metadata": {}},
    ],
}


def _field_type(t: Any) -> dict:
    return {**SCHEMA, "fields": [SCHEMA["fields"][0], {**SCHEMA["fields"][1], "type": t}, SCHEMA["fields"][2]]}


#: The issue's examples and their neighbours: (kind, edit, what the message must say).
EXAMPLES: dict[str, tuple[str, Callable[[dict[str, Any]], None], str]] = {
    "schemaString not JSON": ("metaData", lambda b: b.update(schemaString="{not json"), "not valid JSON"),
    "schema not a struct": ("metaData", with_schema({"type": "array"}), "not a struct"),
    "unknown type": ("metaData", with_schema(_field_type("uint128")), "unknown type 'uint128'"),
    "unknown nested type": (
        "metaData",
        with_schema(_field_type({"type": "array", "elementType": "text", "containsNull": True})),
        "unknown type 'text'",
    ),
    "decimal beyond 38 digits": ("metaData", with_schema(_field_type("decimal(40,2)")), "unknown type"),
    "partition column missing from the schema": (
        "metaData",
        lambda b: b.update(partitionColumns=["nope"]),
        "partition column 'nope'",
    ),
    "configuration value not a string": (
        "metaData",
        lambda b: b["configuration"].update({"delta.appendOnly": True}),
        "'configuration'",
    ),
    "format provider not a string": ("metaData", lambda b: b.update(format={"provider": 5}), "'format'"),
    "createdTime a string": ("metaData", lambda b: b.update(createdTime="yesterday"), "'createdTime'"),
    "txn version a string": ("txn", lambda b: b.update(version="7"), "'version' must be an integer"),
    "txn version a bool": ("txn", lambda b: b.update(version=True), "'version' must be an integer"),
    "txn version missing": ("txn", lambda b: b.pop("version"), "'version' must be an integer"),
    "txn appId a number": ("txn", lambda b: b.update(appId=5), "'appId'"),
    "txn lastUpdated a string": ("txn", lambda b: b.update(lastUpdated="now"), "'lastUpdated'"),
    "protocol version a string": ("protocol", lambda b: b.update(minReaderVersion="1"), "minReaderVersion"),
    "protocol version a float": ("protocol", lambda b: b.update(minWriterVersion=2.0), "minWriterVersion"),
    "protocol features not a list": ("protocol", lambda b: b.update(writerFeatures="appendOnly"), "writerFeatures"),
}


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_an_invalid_action_in_a_commit_stops_every_command_alike(tmp_path, example):
    kind, edit, needle = EXAMPLES[example]
    path = str(tmp_path / "t")
    base_table(path)
    name, lineno = edit_action(path, kind, edit)
    before = fingerprint(path)
    messages = refusals(path)
    assert len(set(messages.values())) == 1, messages
    message = next(iter(messages.values()))
    assert message.startswith(f"{name}: line {lineno}: the {kind} action is invalid") and needle in message, message
    assert fingerprint(path) == before, "a command wrote or deleted something"


def test_every_cli_command_exits_2_with_the_same_line(tmp_path, capsys):
    path = str(tmp_path / "t")
    base_table(path)
    edit_action(path, "txn", lambda b: b.update(version="7"))  # crashed checkpoint and commit with exit 3
    request = write_request(str(tmp_path / "request.json"))
    before = fingerprint(path)
    (line,) = cli_refusals(path, request, capsys)
    assert "the txn action is invalid: 'version' must be an integer, not '7'" in line
    assert fingerprint(path) == before


def test_the_per_line_path_and_the_arrow_path_agree(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    base_table(path)
    edit_action(path, "metaData", lambda b: b.update(partitionColumns=["nope"]))
    assert "partition column 'nope'" in assert_replay_paths_agree(path, monkeypatch)


def test_an_unknown_feature_is_reported_before_an_invalid_action(tmp_path):
    """A future feature may change what an action holds: the protocol refusal comes first."""
    path = str(tmp_path / "t")
    base_table(path)
    edit_action(path, "txn", lambda b: b.update(version="7"))
    edit_action(
        path,
        "protocol",
        lambda b: b.update(
            minReaderVersion=3, minWriterVersion=7, readerFeatures=["future"], writerFeatures=["future"]
        ),
    )
    with pytest.raises(Exception, match="reader feature") as info:
        DeltaTable(path).snapshot()
    assert not isinstance(info.value, CorruptLogError)


def test_a_superseded_invalid_metadata_makes_only_its_versions_unreadable(tmp_path):
    """Like Delta's readers: the table's schema is the newest metaData's; an older one governs older versions only."""
    path = str(tmp_path / "t")
    base_table(path)
    t = DeltaTable(path)
    snap = t.snapshot()
    txn = Transaction(t.storage, snap, operation="SET TBLPROPERTIES", run_hooks=False)
    txn.update_metadata(dataclasses.replace(snap.metadata, configuration={"delta.appendOnly": "false"}))
    txn.commit()
    edit_action(path, "metaData", lambda b: b.update(partitionColumns=["gone"]), "00000000000000000000.json")
    assert DeltaTable(path).snapshot().partition_columns == ["part"]
    edit_action(path, "metaData", lambda b: b.update(createdTime="x"), "00000000000000000000.json")
    assert DeltaTable(path).snapshot().version == 4
    with pytest.raises(CorruptLogError, match="00000000000000000000.json: line 3: the metaData action is invalid"):
        DeltaTable(path).snapshot(version=3)


def test_valid_actions_pass_the_checks():
    snapshot_types = ["string", "long", "integer", "short", "byte", "float", "double", "boolean", "binary"]
    schema = {
        "type": "struct",
        "fields": [{"name": f"c{i}", "type": t, "nullable": True, "metadata": {}} for i, t in enumerate(snapshot_types)]
        + [
            {"name": "d", "type": "decimal(38,38)", "nullable": False, "metadata": {"k": 1}},
            {"name": "ts", "type": "timestamp_ntz", "nullable": True, "metadata": {}},
            {"name": "m", "type": {"type": "map", "keyType": "string", "valueType": "date", "valueContainsNull": True}},
            {"name": "s", "type": {"type": "struct", "fields": [{"name": "x", "type": "timestamp"}]}},
        ],
    }
    meta = {
        "id": "x",
        "format": {"provider": "parquet", "options": []},  # a Parquet checkpoint's map: key/value pairs
        "schemaString": json.dumps(schema),
        "partitionColumns": ["C0"],  # Delta column names are case-insensitive
        "configuration": [("delta.appendOnly", "true")],
        "createdTime": None,
    }
    check_table_metadata(meta, "here")
    check_action("txn", {"appId": "a", "version": -1, "lastUpdated": None}, "here")
    check_action("protocol", {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": []}, "here")
    check_action("domainMetadata", {"domain": "d", "configuration": "{}", "removed": False}, "here")
    check_action("commitInfo", {"anything": [1, {"goes": None}]}, "here")


# --- actions from a checkpoint ---------------------------------------------------------------


CHECKPOINT_DAMAGE = [
    ("metaData", "schemaString", '{"type":"struct","fields":[{"name":"id","type":"uint128"}]}', "unknown type"),
    ("metaData", "schemaString", "not json", "not valid JSON"),
    ("metaData", "partitionColumns", ["nope"], "partition column 'nope'"),
    ("txn", "version", "7", "'version' must be an integer"),
    ("txn", "appId", None, "'appId' must be a string"),
    ("protocol", "minReaderVersion", "1", "minReaderVersion"),
]


@pytest.mark.parametrize(("kind", "field", "value", "needle"), CHECKPOINT_DAMAGE)
def test_an_invalid_action_in_the_only_checkpoint_stops_every_command(tmp_path, kind, field, value, needle):
    path = str(tmp_path / "t")
    cp_path = checkpointed(path, drop_commits=True)
    rewrite_checkpoint_field(cp_path, kind, field, value)
    assert_checkpoint_refused(path, cp_path, kind, needle)


def test_a_checkpoint_with_an_invalid_action_is_skipped_and_rewritten(tmp_path):
    """With the commits still there, the table reads as before, and a checkpoint rerun replaces the bad one."""
    path = str(tmp_path / "t")
    cp_path = checkpointed(path, drop_commits=False)
    expected = sorted(DeltaTable(path).snapshot().file_paths())
    rewrite_checkpoint_field(cp_path, "txn", "version", "7")
    snap = DeltaTable(path).snapshot()
    assert sorted(snap.file_paths()) == expected and snap.app_transaction_version("app") == 7
    result = create_checkpoint(DeltaTable(path))
    assert not result.already_existed  # the invalid one is not "verified" and reused
    assert pq.read_table(cp_path).column("txn").drop_null().to_pylist()[0]["version"] == 7
    import deltalake

    theirs = deltalake.DeltaTable(path)  # reads the rewritten checkpoint
    assert theirs.version() == 3 and len(theirs.file_uris()) == len(expected)


# --- the class: any known field of any non-file action, given a value of the wrong type ---------

WRONG_VALUES = [None, 7, -1, 0, 1.5, "x", "", True, [1], ["x"], {"k": "v"}, {"k": 1}]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _str_map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())


#: PROTOCOL.md's action schemas, written out independently of action_checks: field -> valid(value).
FIELDS: dict[str, dict[str, Callable[[Any], bool]]] = {
    "metaData": {
        "id": lambda v: isinstance(v, str) and v != "",
        "name": lambda v: v is None or isinstance(v, str),
        "description": lambda v: v is None or isinstance(v, str),
        "format": lambda v: v is None or (isinstance(v, dict) and isinstance(v.get("provider"), str)),
        "schemaString": lambda v: False,  # no drawn value is a schema holding the partition column
        "partitionColumns": lambda v: v is None,  # absent: unpartitioned; no drawn list names a column
        "configuration": lambda v: v is None or _str_map(v),
        "createdTime": lambda v: v is None or _is_int(v),
    },
    "protocol": {
        "minReaderVersion": lambda v: _is_int(v) and v >= 1,
        "minWriterVersion": lambda v: _is_int(v) and v >= 1,
        "readerFeatures": lambda v: v is None or (isinstance(v, list) and all(isinstance(f, str) for f in v)),
        "writerFeatures": lambda v: v is None or (isinstance(v, list) and all(isinstance(f, str) for f in v)),
    },
    "txn": {
        "appId": lambda v: isinstance(v, str),
        "version": _is_int,
        "lastUpdated": lambda v: v is None or _is_int(v),
    },
}


def damage_action(root: str, data, rnd: random.Random) -> tuple[str, int]:
    kind = data.draw(st.sampled_from(sorted(FIELDS)), label="kind")
    field = data.draw(st.sampled_from(sorted(FIELDS[kind])), label="field")
    value = data.draw(st.sampled_from(WRONG_VALUES), label="value")
    assume(not FIELDS[kind][field](value))
    return edit_action(root, kind, lambda body: body.update({field: value}))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("pristine") / "t")
    base_table(path)
    return path


def damaged_copy(pristine: str, dest: str, data, seed: int) -> tuple[str, int]:
    shutil.copytree(pristine, dest)
    return damage_action(dest, data, random.Random(seed))


def assert_refused_alike(messages: dict[str, str], name: str, lineno: int) -> None:
    assert len(set(messages.values())) == 1, messages
    message = next(iter(messages.values()))
    assert message.startswith(f"{name}: line {lineno}: the "), message


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_any_invalid_field_stops_every_command_alike(pristine, tmp_path_factory, data, seed):
    root = str(tmp_path_factory.mktemp("bad") / "t")
    name, lineno = damaged_copy(pristine, root, data, seed)
    before = fingerprint(root)
    assert_refused_alike(refusals(root), name, lineno)
    assert fingerprint(root) == before


@pytest.mark.slow
@pytest.mark.s3
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_any_invalid_field_stops_every_command_alike_on_s3(
    pristine, tmp_path_factory, s3_bucket, s3_storage_options, data, seed
):
    local = str(tmp_path_factory.mktemp("bad") / "t")
    name, lineno = damaged_copy(pristine, local, data, seed)
    uri = f"s3://{s3_bucket}/{uuid.uuid4().hex}"
    fs = copy_to_s3(local, uri, s3_storage_options)
    before = s3_fingerprint(fs, uri)
    assert_refused_alike(refusals(uri, s3_storage_options), name, lineno)
    assert s3_fingerprint(fs, uri) == before


# --- the class, from a checkpoint: the same fields, rewritten in the only checkpoint -----------


@pytest.fixture(scope="module")
def checkpointed_pristine(tmp_path_factory):
    """``base_table`` with a checkpoint at v3 and the commits before it gone: the checkpoint is the only source."""
    path = str(tmp_path_factory.mktemp("cp-pristine") / "t")
    checkpointed(path, drop_commits=True)
    return path


def damaged_checkpoint_copy(pristine: str, dest: str, data) -> str:
    kind = data.draw(st.sampled_from(sorted(FIELDS)), label="kind")
    field = data.draw(st.sampled_from(sorted(FIELDS[kind])), label="field")
    value = data.draw(st.sampled_from(WRONG_VALUES), label="value")
    assume(not FIELDS[kind][field](value))
    shutil.copytree(pristine, dest)
    log = os.path.join(dest, "_delta_log")
    (cp,) = [n for n in os.listdir(log) if ".checkpoint." in n]
    rewrite_checkpoint_field(os.path.join(log, cp), kind, field, value)
    return cp


def assert_checkpoint_refused_alike(messages: dict[str, str], cp: str) -> None:
    assert len(set(messages.values())) == 1, messages
    message = next(iter(messages.values()))
    assert message.startswith(f"checkpoint {cp}: the "), message


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_invalid_field_in_a_checkpoint_stops_every_command_alike(checkpointed_pristine, tmp_path_factory, data):
    root = str(tmp_path_factory.mktemp("bad-cp") / "t")
    cp = damaged_checkpoint_copy(checkpointed_pristine, root, data)
    before = fingerprint(root)
    assert_checkpoint_refused_alike(refusals(root), cp)
    assert fingerprint(root) == before


@pytest.mark.slow
@pytest.mark.s3
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_invalid_field_in_a_checkpoint_stops_every_command_alike_on_s3(
    checkpointed_pristine, tmp_path_factory, s3_bucket, s3_storage_options, data
):
    local = str(tmp_path_factory.mktemp("bad-cp") / "t")
    cp = damaged_checkpoint_copy(checkpointed_pristine, local, data)
    uri = f"s3://{s3_bucket}/{uuid.uuid4().hex}"
    fs = copy_to_s3(local, uri, s3_storage_options)
    before = s3_fingerprint(fs, uri)
    assert_checkpoint_refused_alike(refusals(uri, s3_storage_options), cp)
    assert s3_fingerprint(fs, uri) == before
