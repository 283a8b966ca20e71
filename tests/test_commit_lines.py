"""Every line of every commit is one complete JSON object with one action, for every reader (issue 13, item 1).

A reader that skipped a line unparsed (the snapshot skipped every ``{"commitInfo"``
line) read a commit truncated inside that line, or a line holding commitInfo *and* an
add, as a shorter valid commit: snapshot reported fewer files, checkpoint wrote that
state, vacuum deleted the lost add's data file and commit landed a new version on top.
Here every command must refuse such a log the same way (CorruptLogError naming the
file and line, exit 2) and write or delete nothing, on local files and on S3.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corrupt_log_helpers import (
    assert_replay_paths_agree,
    cli_refusals,
    copy_to_s3,
    fingerprint,
    put_data_file,
    refusals,
    s3_fingerprint,
    two_appends,
    write_request,
)
from deltalog import DeltaTable
from deltalog.commit.transaction import Transaction
from deltalog.errors import CorruptLogError
from deltalog.log.commit_lines import lines_pass, parse_action
from deltalog.storage.filesystem import Storage
from helpers import append, make_table, rows

pytestmark = pytest.mark.timeout(600)

V2 = "00000000000000000002.json"


# --- the rule itself ----------------------------------------------------------------------

GOOD_LINES = [
    b'{"commitInfo":{"timestamp":1,"operation":"WRITE"}}',
    b'{"add":{"path":"a.parquet","size":1,"stats":"{\\"numRecords\\":1}"}}',
    b'{ "txn" : {"appId":"x","version":1} }\r',
    b'{"futureAction":{}}',
]
BAD_LINES = {
    b'{"commitInfo":{"timestamp":1': "torn",
    b'{"commitInfo":{"timestamp":1},"add":{"path":"a","size":1}}': "commitInfo and an add",
    b'{"add":{"path":"a","size":1},"add":{"path":"b","size":1}}': "two adds (json.loads keeps only the second)",
    b'{"add":{"path":"a","size":1}}{"add":{"path":"b","size":1}}': "two objects",
    b'{"commitInfo":{}} x': "trailing garbage",
    b'{"commitInfo":{}}\x0c': "trailing non-JSON whitespace",
    b'[{"add":{}}]': "an array",
    b"null": "null",
    b'"add"': "a string",
    b"{}": "no action",
    b'{"commitInfo":5}': "an action that is not an object",
    b'{"commitInfo":null}': "a null action",
    b'{"commitInfo":{"operation":"\xff"}}': "invalid UTF-8",
    b'{"commitInfo":{"a":' + b"[" * 5000 + b"]" * 5000 + b"}}": "nested too deeply",
}


@pytest.mark.parametrize("line", GOOD_LINES)
def test_good_lines_parse(line):
    action = parse_action(line, "f.json", 3)
    assert len(action) == 1 and isinstance(next(iter(action.values())), dict)


@pytest.mark.parametrize("line", list(BAD_LINES), ids=list(BAD_LINES.values()))
def test_bad_lines_are_refused_with_file_and_line_and_never_cleared_in_bulk(line):
    with pytest.raises(CorruptLogError, match=r"^f\.json: line 3\b"):
        parse_action(line, "f.json", 3)
    # The vectorised check may decline a good line (then the exact rule runs), but
    # must never clear a bad one, alone or among good ones.
    assert not lines_pass([line])
    assert not lines_pass([GOOD_LINES[0], line, GOOD_LINES[1]])
    if line.startswith(b'{"commitInfo":'):
        assert not lines_pass([GOOD_LINES[0], line], prefix=b'{"commitInfo":')


def test_the_vectorised_check_clears_ordinary_lines():
    assert lines_pass(GOOD_LINES[:2] * 1000)
    assert lines_pass([GOOD_LINES[0]] * 10, prefix=b'{"commitInfo":')


def test_loading_a_snapshot_does_not_import_pandas(tmp_path):
    """pa.array of Python objects imports pandas (0.3 s, 40 MB): the line check must not cost that per process."""
    path = str(tmp_path / "t")
    three_versions(path)
    code = (
        "import sys; from deltalog import DeltaTable; "
        f"DeltaTable({path!r}).snapshot(); DeltaTable({path!r}).history(); "
        "print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --- the examples of the issue: every command refuses, nothing is written ---------------


def three_versions(path: str) -> str:
    """v0 create, v1 adds file A, v2 adds file B; returns B's table-relative path."""
    two_appends(path)
    (b_path,) = set(DeltaTable(path).snapshot().file_paths()) - set(DeltaTable(path).snapshot(1).file_paths())
    os.utime(os.path.join(path, b_path), (1_000_000, 1_000_000))  # old enough for any retention
    put_data_file(Storage(path))
    return b_path


def v2_lines(path: str) -> list[bytes]:
    with open(os.path.join(path, "_delta_log", V2), "rb") as fh:
        lines = fh.read().split(b"\n")
    assert lines[0].startswith(b'{"commitInfo":') and lines[1].startswith(b'{"add":')
    return [line for line in lines if line]


def write_v2(path: str, content: bytes) -> None:
    with open(os.path.join(path, "_delta_log", V2), "wb") as fh:
        fh.write(content)


def torn_inside_commit_info(path: str) -> None:
    """The commit ends inside its first (commitInfo) line: read as an empty commit before."""
    write_v2(path, v2_lines(path)[0][:40])


def commit_info_merged_with_the_add(path: str) -> None:
    """One line holding commitInfo and the add: the add was skipped with the commitInfo."""
    info, add = v2_lines(path)[:2]
    write_v2(path, info[:-1] + b"," + add[1:] + b"\n")


def commit_info_last_and_torn(path: str) -> None:
    """deltalake's layout (commitInfo last), cut inside the commitInfo line."""
    info, add = v2_lines(path)[:2]
    write_v2(path, add + b"\n" + info[: len(info) // 2])


def commit_info_with_trailing_garbage(path: str) -> None:
    info, add = v2_lines(path)[:2]
    write_v2(path, info + b' {"add":' + b"\n" + add + b"\n")


def commit_info_not_an_object(path: str) -> None:
    _info, add = v2_lines(path)[:2]
    write_v2(path, b'{"commitInfo":"WRITE"}\n' + add + b"\n")


EXAMPLES = [
    torn_inside_commit_info,
    commit_info_merged_with_the_add,
    commit_info_last_and_torn,
    commit_info_with_trailing_garbage,
    commit_info_not_an_object,
]


@pytest.mark.parametrize("damage", EXAMPLES, ids=[f.__name__ for f in EXAMPLES])
def test_a_damaged_commit_info_line_stops_every_command(tmp_path, damage):
    path = str(tmp_path / "t")
    b_path = three_versions(path)
    damage(path)
    before = fingerprint(path)
    messages = refusals(path)
    assert len(set(messages.values())) == 1, messages  # one rule, one message
    assert next(iter(messages.values())).startswith(f"{V2}: line ")
    after = fingerprint(path)
    assert after == before, "a command wrote or deleted something on a corrupt log"
    assert os.path.exists(os.path.join(path, b_path)), "vacuum deleted the file of the skipped add"
    assert not [n for n in os.listdir(os.path.join(path, "_delta_log")) if "checkpoint" in n]


def test_every_cli_command_exits_2_with_one_line(tmp_path, capsys):
    path = str(tmp_path / "t")
    three_versions(path)
    commit_info_merged_with_the_add(path)
    request = write_request(str(tmp_path / "request.json"))
    before = fingerprint(path)
    (line,) = cli_refusals(path, request, capsys)  # one message, from every command
    assert line.startswith(f"error: {V2}: line 1 ")
    assert fingerprint(path) == before


def test_no_traceback_from_a_fresh_process(tmp_path):
    path = str(tmp_path / "t")
    three_versions(path)
    torn_inside_commit_info(path)
    for argv in (["snapshot", path, "--json"], ["vacuum", path, "--retention-hours", "0", "--allow-short-retention"]):
        p = subprocess.run([sys.executable, "-m", "deltalog", *argv], capture_output=True, text=True)
        assert p.returncode == 2, p.stderr
        assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr and V2 in p.stderr


def test_the_per_line_path_and_the_arrow_path_agree(tmp_path, monkeypatch):
    """The exact per-line replay (taken for unusual logs) refuses the same line with the same message."""
    path = str(tmp_path / "t")
    three_versions(path)
    commit_info_merged_with_the_add(path)
    assert_replay_paths_agree(path, monkeypatch)


def test_a_winning_commit_with_a_torn_line_fails_the_conflict_check(tmp_path):
    """A writer that lost the race reads the winner's commit: a torn line there is corrupt, not ignored."""
    path = str(tmp_path / "t")
    three_versions(path)
    table = DeltaTable(path)
    txn = Transaction(table.storage, table.snapshot(), operation="WRITE", run_hooks=False)
    txn.set_app_transaction("app", 1)
    winner = os.path.join(path, "_delta_log", "00000000000000000003.json")
    with open(winner, "wb") as fh:
        # json.loads keeps only the second of two "add" keys: the first add would go unseen.
        fh.write(b'{"commitInfo":{"timestamp":1,"operation":"WRITE"}}\n')
        fh.write(b'{"add":{"path":"x","size":1},"add":{"path":"y","size":1}}\n')
    with pytest.raises(CorruptLogError, match="00000000000000000003.json: line 2"):
        txn.commit()
    assert not os.path.exists(os.path.join(path, "_delta_log", "00000000000000000004.json"))


# --- the class: generated damage of any line, local and S3 ---------------------------------


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """Commits of several layouts: ours (commitInfo first), deltalake's (commitInfo last), a txn, a remove."""
    import deltalake

    path = str(tmp_path_factory.mktemp("pristine") / "t")
    table = make_table(path, partition_by=["part"])
    for i in range(3):
        append(table, rows(3, start=i * 3, part=f"p{i % 2}"), partition={"part": f"p{i % 2}"})
    deltalake.write_deltalake(path, rows(2, start=50, part="p1"), mode="append", partition_by=["part"])
    deltalake.DeltaTable(path).delete("id = 0")
    t = DeltaTable(path)
    txn = Transaction(t.storage, t.snapshot(), operation="WRITE", run_hooks=False)
    txn.set_app_transaction("app", 7)
    txn.commit()
    put_data_file(Storage(path))
    return path


def commit_files(root: str) -> list[str]:
    return sorted(n for n in os.listdir(os.path.join(root, "_delta_log")) if n.endswith(".json") and len(n) == 25)


def _pick_line(root: str, rnd: random.Random, need_next: bool = False) -> tuple[str, list[bytes], int]:
    candidates = []
    for name in commit_files(root):
        with open(os.path.join(root, "_delta_log", name), "rb") as fh:
            lines = fh.read().split(b"\n")
        while lines and not lines[-1]:
            lines.pop()
        for i in range(len(lines) - (1 if need_next else 0)):
            candidates.append((name, lines, i))
    return rnd.choice(candidates)


def _write(root: str, name: str, lines: list[bytes]) -> None:
    with open(os.path.join(root, "_delta_log", name), "wb") as fh:
        fh.write(b"\n".join(lines) + b"\n")


def tear(root, data, rnd):
    """Cut a line strictly inside; keep or drop everything after it (a torn write)."""
    name, lines, i = _pick_line(root, rnd)
    cut = rnd.randrange(1, len(lines[i]))
    lines[i] = lines[i][:cut]
    if data.draw(st.booleans(), label="drop the rest"):
        del lines[i + 1 :]
    _write(root, name, lines)
    return name, i + 1


def merge(root, data, rnd):
    """Two lines become one: the newline lost, or the objects spliced into one with two keys."""
    name, lines, i = _pick_line(root, rnd, need_next=True)
    if data.draw(st.booleans(), label="splice"):
        merged = lines[i][:-1] + b"," + lines[i + 1][1:]
    else:
        merged = lines[i] + lines[i + 1]
    lines[i : i + 2] = [merged]
    _write(root, name, lines)
    return name, i + 1


def trailing(root, data, rnd):
    name, lines, i = _pick_line(root, rnd)
    junk = data.draw(st.sampled_from([b"x", b"}", b",", b"{}", b' {"add":{}}', b"]", b"\x00", b"\x0c"]))
    lines[i] += junk
    _write(root, name, lines)
    return name, i + 1


def not_an_object(root, data, rnd):
    name, lines, i = _pick_line(root, rnd)
    if data.draw(st.booleans(), label="whole line"):
        lines[i] = data.draw(st.sampled_from([b"[]", b'"s"', b"5", b"null", b"true", b"{}", b"[" + lines[i] + b"]"]))
    else:
        (kind,) = json.loads(lines[i])
        value = data.draw(st.sampled_from([5, "s", None, [], True]))
        lines[i] = json.dumps({kind: value}).encode()
    _write(root, name, lines)
    return name, i + 1


def bad_utf8(root, data, rnd):
    name, lines, i = _pick_line(root, rnd)
    at = rnd.randrange(2, len(lines[i]) - 1)
    lines[i] = lines[i][:at] + data.draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])) + lines[i][at:]
    _write(root, name, lines)
    return name, i + 1


LINE_DAMAGE = [tear, merge, trailing, not_an_object, bad_utf8]


def damaged_copy(pristine: str, dest: str, data, damage, seed: int) -> tuple[str, int]:
    shutil.copytree(pristine, dest)
    return damage(dest, data, random.Random(seed))


def assert_refused_alike(messages: dict[str, str], name: str, lineno: int) -> None:
    assert len(set(messages.values())) == 1, messages
    message = next(iter(messages.values()))
    assert re.match(rf"{name}: line {lineno}\b", message), message


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), damage=st.sampled_from(LINE_DAMAGE), seed=st.integers(0, 2**32 - 1))
def test_any_damaged_line_stops_every_command_alike(pristine, tmp_path_factory, data, damage, seed):
    root = str(tmp_path_factory.mktemp("bad") / "t")
    name, lineno = damaged_copy(pristine, root, data, damage, seed)
    before = fingerprint(root)
    assert_refused_alike(refusals(root), name, lineno)
    assert fingerprint(root) == before


@pytest.mark.slow
@pytest.mark.s3
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), damage=st.sampled_from(LINE_DAMAGE), seed=st.integers(0, 2**32 - 1))
def test_any_damaged_line_stops_every_command_alike_on_s3(
    pristine, tmp_path_factory, s3_bucket, s3_storage_options, data, damage, seed
):
    local = str(tmp_path_factory.mktemp("bad") / "t")
    name, lineno = damaged_copy(pristine, local, data, damage, seed)
    uri = f"s3://{s3_bucket}/{uuid.uuid4().hex}"
    fs = copy_to_s3(local, uri, s3_storage_options)
    before = s3_fingerprint(fs, uri)
    assert_refused_alike(refusals(uri, s3_storage_options), name, lineno)
    assert s3_fingerprint(fs, uri) == before
