"""Hypothesis-generated corruptions of real logs.

Every corrupted log must end in a specific deltalog error (a DeltaLogError
subclass with a message) or, where the protocol says the damage is ignorable
(a bad ``_last_checkpoint`` hint, stray or misnamed files, an incomplete
multi-part checkpoint), in a read equal to the undamaged one. Never another
exception, never a hang, and reading never writes anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil

import deltalake
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltalog import DeltaTable
from deltalog.errors import DeltaLogError
from helpers import append, make_table, rows

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A real table: 8 commits, a deltalake checkpoint at 6, a partitioned layout, a remove."""
    path = str(tmp_path_factory.mktemp("pristine") / "t")
    table = make_table(path, partition_by=["part"])
    for i in range(6):
        append(table, rows(3, start=i * 3, part=f"p{i % 2}"), partition={"part": f"p{i % 2}"})
    deltalake.DeltaTable(path).create_checkpoint()
    append(table, rows(3, start=100, part="p0"), partition={"part": "p0"})
    deltalake.DeltaTable(path).delete("id = 100")
    snap = DeltaTable(path).snapshot()
    return path, snap.version, sorted(snap.files.column("path").to_pylist())


def fingerprint(root: str) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, root)] = hashlib.md5(fh.read()).hexdigest()
    return out


def read(root: str):
    """Returns ('ok', version, paths) or ('error', exception)."""
    try:
        snap = DeltaTable(root).snapshot()
    except DeltaLogError as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        return ("error", exc)
    return ("ok", snap.version, sorted(snap.files.column("path").to_pylist()))


def commits(root: str) -> list[str]:
    log = os.path.join(root, "_delta_log")
    return sorted(n for n in os.listdir(log) if n.endswith(".json") and len(n) == 25)


# --- corruption strategies -------------------------------------------------------------


def truncate(root, data, rnd):
    name = rnd.choice(commits(root))
    path = os.path.join(root, "_delta_log", name)
    content = open(path, "rb").read()
    cut = rnd.randrange(1, max(2, len(content) - 1))
    open(path, "wb").write(content[:cut])


def garbage_line(root, data, rnd):
    name = rnd.choice(commits(root))
    path = os.path.join(root, "_delta_log", name)
    junk = data.draw(st.sampled_from([b"{", b"not json", b"[1,2,3]", b'{"add": 5}', b'"str"', b"{}", b'{"a":1,"b":2}']))
    sep = b"" if open(path, "rb").read().endswith(b"\n") else b"\n"
    with open(path, "ab") as fh:
        fh.write(sep + junk + b"\n")


def edit_random_action(root, rnd, edit):
    """Rewrite one random line of a random commit after ``edit`` changed its action body (when non-empty)."""
    name = rnd.choice(commits(root))
    path = os.path.join(root, "_delta_log", name)
    lines = open(path, "rb").read().splitlines()
    idx = rnd.randrange(len(lines))
    action = json.loads(lines[idx])
    ((kind, body),) = action.items()
    if isinstance(body, dict) and body:
        edit(body)
    lines[idx] = json.dumps(action).encode()
    open(path, "wb").write(b"\n".join(lines) + b"\n")


def wrong_type(root, data, rnd):
    def set_wrong_type(body):
        key = rnd.choice(sorted(body))
        body[key] = data.draw(st.sampled_from([None, 7, "x", [1], {"k": "v"}, True]))

    edit_random_action(root, rnd, set_wrong_type)


def drop_field(root, data, rnd):
    def drop(body):
        del body[rnd.choice(sorted(body))]

    edit_random_action(root, rnd, drop)


def gap(root, data, rnd):
    names = commits(root)
    os.unlink(os.path.join(root, "_delta_log", rnd.choice(names)))


def bad_checkpoint(root, data, rnd):
    log = os.path.join(root, "_delta_log")
    cps = [n for n in os.listdir(log) if ".checkpoint." in n]
    path = os.path.join(log, cps[0])
    content = open(path, "rb").read()
    mode = data.draw(st.sampled_from(["truncate", "zero", "flip"]))
    if mode == "truncate":
        content = content[: rnd.randrange(0, len(content))]
    elif mode == "zero":
        content = b""
    else:
        i = rnd.randrange(len(content))
        content = content[:i] + bytes([content[i] ^ 0xFF]) + content[i + 1 :]
    open(path, "wb").write(content)


def unknown_feature(root, data, rnd):
    log = os.path.join(root, "_delta_log")
    name = commits(root)[-1]
    feature = data.draw(st.sampled_from(["readerOnlyFuture", "readerWriterFuture"]))
    proto = {
        "protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": [feature],
            "writerFeatures": [feature],
        }
    }
    path = os.path.join(log, name)
    sep = b"" if open(path, "rb").read().endswith(b"\n") else b"\n"  # deltalake omits the final newline
    with open(path, "ab") as fh:
        fh.write(sep + json.dumps(proto).encode() + b"\n")


# Damage the protocol says readers must tolerate: the read must equal the pristine one.
def bad_hint(root, data, rnd):
    content = data.draw(
        st.sampled_from([b"", b"{", b'{"version": 1}', b'{"version": 99999, "size": 3}', b'{"version": "x"}', b"[]"])
    )
    open(os.path.join(root, "_delta_log", "_last_checkpoint"), "wb").write(content)


def stray_files(root, data, rnd):
    log = os.path.join(root, "_delta_log")
    name = data.draw(
        st.sampled_from(
            [
                "3.json",
                "00000000000000000003.json.tmp",
                ".00000000000000000009.json.crc",
                "0000000000000000003.json",
                "README",
            ]
        )
    )
    open(os.path.join(log, name), "wb").write(b"{garbage")


def incomplete_multipart(root, data, rnd):
    log = os.path.join(root, "_delta_log")
    latest = int(commits(root)[-1][:20])
    open(os.path.join(log, f"{latest:020d}.checkpoint.0000000001.0000000003.parquet"), "wb").write(b"PAR1junk")


#: Corrupted logs tried in this process, for the reliability report (tests/reliability/reliability_recorder.py).
CORRUPT_LOGS_TRIED = 0


def damaged_copy(pristine, tmp_path_factory, data, corruption, seed: int) -> str:
    global CORRUPT_LOGS_TRIED
    CORRUPT_LOGS_TRIED += 1
    root = str(tmp_path_factory.mktemp("bad") / "t")
    shutil.copytree(pristine[0], root)
    corruption(root, data, random.Random(seed))
    return root


FATAL_OR_OK = [truncate, garbage_line, wrong_type, drop_field, gap, bad_checkpoint, unknown_feature]
IGNORABLE = [bad_hint, stray_files, incomplete_multipart]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), corruption=st.sampled_from(FATAL_OR_OK), seed=st.integers(0, 2**32 - 1))
def test_corruptions_end_in_a_specific_error_or_a_read(pristine, tmp_path_factory, data, corruption, seed):
    _src, _version, _paths = pristine
    root = damaged_copy(pristine, tmp_path_factory, data, corruption, seed)
    before = fingerprint(root)
    outcome = read(root)  # anything but a DeltaLogError propagates and fails the test
    assert fingerprint(root) == before, "reading a damaged table wrote or deleted something"
    if corruption is unknown_feature:
        assert outcome[0] == "error" and "not implement" in str(outcome[1])
    if corruption is gap and outcome[0] == "ok":
        # Only a commit at or before the checkpoint, or the newest one (the table is then
        # simply one version older), may go missing without an error.
        assert outcome[1] in (_version, _version - 1)
        if outcome[1] == _version:
            assert outcome[2] == _paths


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), corruption=st.sampled_from(IGNORABLE), seed=st.integers(0, 2**32 - 1))
def test_ignorable_damage_reads_like_the_pristine_table(pristine, tmp_path_factory, data, corruption, seed):
    _src, version, paths = pristine
    root = damaged_copy(pristine, tmp_path_factory, data, corruption, seed)
    assert read(root) == ("ok", version, paths)
