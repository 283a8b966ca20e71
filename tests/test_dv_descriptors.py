"""Deletion-vector descriptors are checked when the log is read (issue 30, item 3).

A commit whose ``add`` carried a malformed descriptor (storage type ``'z'``, a ``'u'``
id too short to hold its Z85 UUID) loaded as a valid snapshot; compaction then
committed every other bin and failed at the one holding that file. Every command must
refuse such a log before writing anything (a corrupt log, exit 2, one line naming the
file or checkpoint, the action and the field), whether the descriptor is on an add or
a remove, in a commit or in a checkpoint. The rules are PROTOCOL.md's Deletion Vector
Descriptor Schema, written out here independently of the code.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corrupt_log_helpers import (
    assert_checkpoint_refused,
    assert_replay_paths_agree,
    base_table,
    checkpointed,
    cli_refusals,
    edit_action,
    fingerprint,
    refusals,
    rewrite_checkpoint_field,
    write_request,
)
from deltalog import DeltaTable
from deltalog.log.actions import DELETION_VECTOR
from deltalog.protocol.deletion_vectors import descriptor_problem, suspect_descriptors

pytestmark = pytest.mark.timeout(600)

UUID_Z85 = "^-aqEH.-t@S}K{vb[*k^"  # 20 Z85 characters: 16 bytes, a UUID
GOOD_U = {"storageType": "u", "pathOrInlineDv": "ab" + UUID_Z85, "offset": 1, "sizeInBytes": 40, "cardinality": 2}
GOOD_I = {
    "storageType": "i",
    "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
    "sizeInBytes": 40,
    "cardinality": 6,
}
GOOD_P = {
    "storageType": "p",
    "pathOrInlineDv": "s3://b/t/deletion_vector_x.bin",
    "offset": 1,
    "sizeInBytes": 40,
    "cardinality": 2,
}


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = {**base, **changes}
    return {k: v for k, v in out.items() if v is not _DROP}


_DROP = object()

#: Malformed descriptors and what the one-line error must name.
MALFORMED: dict[str, tuple[Any, str]] = {
    "storage type z": (_with(GOOD_U, storageType="z"), "'deletionVector.storageType' must be 'u', 'i' or 'p', not 'z'"),
    "storage type missing": (_with(GOOD_U, storageType=_DROP), "'deletionVector.storageType'"),
    "u too short for its UUID": (_with(GOOD_U, pathOrInlineDv="ab^-aq"), "too short to end in a Z85-encoded UUID"),
    "u not Z85": (_with(GOOD_U, pathOrInlineDv="ab" + "~" * 20), "does not end in a Z85-encoded UUID"),
    "u prefix leaves the table": (_with(GOOD_U, pathOrInlineDv="../" + UUID_Z85), "leads out of the table"),
    "u empty": (_with(GOOD_U, pathOrInlineDv=""), "'deletionVector.pathOrInlineDv' must be a non-empty string"),
    "i with an offset": (_with(GOOD_I, offset=0), "'deletionVector.offset' must be absent for an inline"),
    "i not a multiple of 5": (_with(GOOD_I, pathOrInlineDv="wi5b=0"), "is not Z85 text"),
    "i larger than its data": (_with(GOOD_I, sizeInBytes=41), "more than the 40 bytes its inline data holds"),
    "p relative": (_with(GOOD_P, pathOrInlineDv="dv/x.bin"), "must be an absolute path or URI"),
    "negative offset": (_with(GOOD_U, offset=-1), "'deletionVector.offset' must be a non-negative integer"),
    "offset a string": (_with(GOOD_U, offset="1"), "'deletionVector.offset' must be a non-negative integer"),
    "offset beyond Int": (_with(GOOD_U, offset=2**31), "'deletionVector.offset' must be a non-negative integer"),
    "size missing": (_with(GOOD_U, sizeInBytes=_DROP), "'deletionVector.sizeInBytes' must be a non-negative integer"),
    "size negative": (_with(GOOD_U, sizeInBytes=-4), "'deletionVector.sizeInBytes'"),
    "cardinality missing": (_with(GOOD_U, cardinality=_DROP), "'deletionVector.cardinality'"),
    "cardinality negative": (_with(GOOD_U, cardinality=-1), "'deletionVector.cardinality'"),
    "cardinality above numRecords": (_with(GOOD_U, cardinality=4), "'deletionVector.cardinality' 4 is more than"),
    "not an object": ("u" + UUID_Z85, "'deletionVector' must be an object"),
}


def _stats_with_records(body: dict[str, Any], n: int) -> None:
    stats = json.loads(body.get("stats") or "{}")
    body["stats"] = json.dumps({"numRecords": n, **{k: v for k, v in stats.items() if k != "numRecords"}})


def put_dv(dv: Any, records: int = 3) -> Any:
    def edit(body: dict[str, Any]) -> None:
        _stats_with_records(body, records)  # the base table's files hold 3 rows
        body["deletionVector"] = dv

    return edit


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_descriptor_on_an_add_stops_every_command(tmp_path, case):
    dv, needle = MALFORMED[case]
    path = str(tmp_path / "t")
    base_table(path)
    name, lineno = edit_action(path, "add", put_dv(dv))
    before = fingerprint(path)
    messages = refusals(path)
    assert len(set(messages.values())) == 1, messages
    message = next(iter(messages.values()))
    assert message.startswith(f"{name}: line {lineno}: the add action is invalid: "), message
    assert needle in message and "(file 'part=" in message, message
    assert fingerprint(path) == before, "a command wrote or deleted something"


def append_remove(path: str, dv: Any) -> tuple[str, int]:
    """A new commit removing a live file with ``dv`` as its descriptor; its name and the remove's line."""
    snap = DeltaTable(path).snapshot()
    name = f"{snap.version + 1:020d}.json"
    lines = [
        {"commitInfo": {"operation": "DELETE", "timestamp": 1}},
        {"remove": {"path": snap.file_paths()[0], "deletionTimestamp": 1, "dataChange": True, "deletionVector": dv}},
    ]
    with open(os.path.join(path, "_delta_log", name), "w") as fh:
        fh.write("\n".join(json.dumps(x) for x in lines) + "\n")
    return name, 2


@pytest.mark.parametrize("case", ["storage type z", "u too short for its UUID", "i with an offset", "not an object"])
def test_a_malformed_descriptor_on_a_remove_stops_every_command(tmp_path, case):
    dv, needle = MALFORMED[case]
    path = str(tmp_path / "t")
    base_table(path)
    name, lineno = append_remove(path, dv)
    before = fingerprint(path)
    messages = refusals(path)
    assert len(set(messages.values())) == 1, messages
    message = next(iter(messages.values()))
    assert message.startswith(f"{name}: line {lineno}: the remove action is invalid: ") and needle in message
    assert fingerprint(path) == before


def test_every_cli_command_exits_2_naming_the_file_and_the_field(tmp_path, capsys):
    path = str(tmp_path / "t")
    base_table(path)
    name, lineno = edit_action(path, "add", put_dv(MALFORMED["storage type z"][0]))
    request = write_request(str(tmp_path / "request.json"))
    before = fingerprint(path)
    (line,) = cli_refusals(path, request, capsys)
    assert line.startswith(f"error: {name}: line {lineno}: the add action is invalid: 'deletionVector.storageType'")
    assert fingerprint(path) == before


@pytest.mark.parametrize("case", ["storage type z", "u too short for its UUID", "cardinality above numRecords"])
def test_a_malformed_descriptor_in_the_only_checkpoint_stops_every_command(tmp_path, case):
    dv, needle = MALFORMED[case]
    path = str(tmp_path / "t")
    cp_path = checkpointed(path, drop_commits=True)
    rewrite_checkpoint_field(cp_path, "add", "deletionVector", dv)
    rewrite_checkpoint_field(cp_path, "add", "stats", json.dumps({"numRecords": 3}))
    assert_checkpoint_refused(path, cp_path, "add", needle)


def test_a_checkpoint_with_a_malformed_descriptor_is_skipped_when_the_commits_rebuild_the_version(tmp_path):
    path = str(tmp_path / "t")
    cp_path = checkpointed(path, drop_commits=False)
    expected = sorted(DeltaTable(path).snapshot().file_paths())
    rewrite_checkpoint_field(cp_path, "add", "deletionVector", MALFORMED["storage type z"][0])
    assert sorted(DeltaTable(path).snapshot().file_paths()) == expected


def test_the_per_line_path_and_the_arrow_path_agree(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    base_table(path)
    edit_action(path, "add", put_dv(MALFORMED["u too short for its UUID"][0]))
    assert "too short to end in a Z85-encoded UUID" in assert_replay_paths_agree(path, monkeypatch)


@pytest.mark.parametrize(
    "dv", [GOOD_U, GOOD_I, GOOD_P, _with(GOOD_U, offset=None), _with(GOOD_U, pathOrInlineDv=UUID_Z85)]
)
def test_well_formed_descriptors_load(tmp_path, dv):
    path = str(tmp_path / "t")
    base_table(path)
    edit_action(path, "add", put_dv(dv, records=10))
    snap = DeltaTable(path).snapshot()
    assert [d for d in snap.files.column("deletionVector").to_pylist() if d] != []


# --- the class: the vectorised pre-check never clears what the rule refuses -------------------

#: PROTOCOL.md's rules, independently: storage type, shape per type, offset, size, cardinality.
Z85 = set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")


def protocol_says_valid(dv: dict[str, Any], num_records: int | None) -> bool:
    kind, payload = dv.get("storageType"), dv.get("pathOrInlineDv")
    offset, size, card = dv.get("offset"), dv.get("sizeInBytes"), dv.get("cardinality")
    if kind not in ("u", "i", "p") or not isinstance(payload, str) or not payload:
        return False
    if size is None or size < 0 or card is None or card < 0 or (offset is not None and offset < 0):
        return False
    if num_records is not None and card > num_records:
        return False
    if kind == "u":
        prefix = payload[:-20]
        return (
            len(payload) >= 20
            and set(payload[-20:]) <= Z85
            and not prefix.startswith("/")
            and ".." not in prefix.split("/")
        )
    if kind == "i":
        return offset is None and len(payload) % 5 == 0 and set(payload) <= Z85 and size <= len(payload) // 5 * 4
    return bool(re.match(r"^([A-Za-z][A-Za-z0-9+.-]*:|/)", payload))


DESCRIPTORS = st.fixed_dictionaries(
    {
        "storageType": st.sampled_from(["u", "i", "p", "z", "", "U"]),
        "pathOrInlineDv": st.one_of(
            st.sampled_from(
                ["ab" + UUID_Z85, UUID_Z85, GOOD_I["pathOrInlineDv"], "/abs/dv.bin", "s3://b/dv", "x/../" + UUID_Z85]
            ),
            st.text(alphabet="ab/.:~ " + "".join(sorted(Z85))[:20], max_size=30),
        ),
        "offset": st.one_of(st.none(), st.integers(-2, 5)),
        "sizeInBytes": st.one_of(st.none(), st.integers(-2, 60)),
        "cardinality": st.one_of(st.none(), st.integers(-2, 9)),
    }
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(DESCRIPTORS, st.one_of(st.none(), st.integers(0, 9))), min_size=1, max_size=8))
def test_the_rule_is_the_protocols_and_the_pre_check_never_clears_an_invalid_descriptor(rows):
    dvs = [dv for dv, _ in rows]
    stats = [None if n is None else json.dumps({"numRecords": n, "minValues": {}}) for _, n in rows]
    suspect = suspect_descriptors(pa.array(dvs, DELETION_VECTOR), pa.array(stats, pa.string())).to_pylist()
    for dv, s, n, flagged in zip(dvs, stats, [n for _, n in rows], suspect):
        valid = protocol_says_valid(dv, n)
        assert (descriptor_problem(dv, s) is None) == valid, (dv, n)
        if not valid:
            assert flagged, (dv, n)
