"""The Arrow replay path (pyarrow.json + hash kernels) must equal the exact per-line path.

Snapshot loading parses add/remove lines with pyarrow.json and reconciles them with
vectorised kernels; whenever that could differ from ``json.loads`` per line it must
decline, and the per-line path runs instead. These tests pin both halves: on the
inputs the fast path takes, the results are identical (rows, order, keys, the
other actions); on the inputs it must not take, it declines and the table read
fails with the per-line path's precise error.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltalog import DeltaTable
from deltalog.errors import CorruptLogError
from deltalog.log.actions import file_key
from deltalog.log.listing import list_log
from deltalog.log.replay import file_keys, newest_per_key
from deltalog.log.snapshot import _maps_as_dicts, _replay_commits_arrow, _replay_commits_python
from deltalog.storage.filesystem import FileInfo, Storage

PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
#: Deletion-vector ids of the shape PROTOCOL.md gives (a prefix and a Z85 UUID; 4 bytes of inline Z85).
U_AB = "ab^-aqEH.-t@S}K{vb[*k^"
U_CD = "cd^-aqEH.-t@S}K{vb[*k^"
INLINE = "wi5b="
SCHEMA = json.dumps({"type": "struct", "fields": [{"name": "a", "type": "long", "nullable": True, "metadata": {}}]})


def metadata(partition_columns: list[str] | None = None, mid: str = "m") -> dict:
    fields = json.loads(SCHEMA)["fields"] + [
        {"name": c, "type": "string", "nullable": True, "metadata": {}} for c in partition_columns or []
    ]
    return {
        "metaData": {
            "id": mid,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps({"type": "struct", "fields": fields}),  # partition columns are columns
            "partitionColumns": partition_columns or [],
            "configuration": {},
        }
    }


def add(path: str, size: int = 1, **extra) -> dict:
    return {"add": {"path": path, "size": size, "modificationTime": 1, "dataChange": True, **extra}}


def remove(path: str, **extra) -> dict:
    return {"remove": {"path": path, "deletionTimestamp": 5, "dataChange": True, **extra}}


def encode(commit: list) -> bytes:
    """A commit file: dicts become compact JSON lines, strings and bytes are taken as written."""
    lines = [
        a
        if isinstance(a, bytes)
        else (a if isinstance(a, str) else json.dumps(a, separators=(",", ":"), ensure_ascii=False)).encode()
        for a in commit
    ]
    return b"\n".join(lines) + b"\n"


def rows_of(table: pa.Table) -> list[dict]:
    """Rows with map columns as dicts: a map's entry order carries no meaning (JSON objects are unordered),
    and the Arrow path lists keys in first-seen order rather than each line's own order."""
    out = table.to_pylist()
    for row in out:
        for name in ("partitionValues", "tags"):
            if row.get(name) is not None:
                row[name] = dict(row[name])
    return out


def both(commits: list[list]) -> tuple:
    contents = [encode(c) for c in commits]
    files = [FileInfo(f"/log/{v:020d}.json", len(c), 0) for v, c in enumerate(contents)]
    return _replay_commits_arrow(list(contents)), _replay_commits_python(files, contents)


def assert_same(commits: list[list]) -> None:
    fast, slow = both(commits)
    assert fast is not None, "the Arrow path declined an input it is meant to handle"
    assert slow.error is None
    assert fast.adds.schema == slow.adds.schema
    assert rows_of(fast.adds) == rows_of(slow.adds)
    assert rows_of(fast.removes) == rows_of(slow.removes)
    assert sorted(fast.keys.to_pylist()) == sorted(slow.keys.to_pylist())
    assert (fast.protocol, fast.metadata, fast.txns, fast.domains) == (
        slow.protocol,
        slow.metadata,
        slow.txns,
        slow.domains,
    )


def write_log(root, commits: list[list]) -> str:
    log = root / "_delta_log"
    log.mkdir(parents=True)
    for v, c in enumerate(commits):
        (log / f"{v:020d}.json").write_bytes(encode(c))
    return str(root)


# --- inputs the Arrow path handles -----------------------------------------------------


def test_add_remove_readd_and_newest_first_order():
    assert_same(
        [
            [PROTOCOL, metadata(["p"])],
            [add("p=1/a", partitionValues={"p": "1"}), add("p=2/b", partitionValues={"p": "2"})],
            [remove("p=1/a", partitionValues={"p": "1"}, extendedFileMetadata=True, size=1)],
            [add("p=1/a", 7, partitionValues={"p": "1"}), add("p=3/c", partitionValues={"p": "3"})],
        ]
    )


def test_null_and_missing_partition_values_stay_distinct():
    fast, slow = both(
        [
            [PROTOCOL, metadata(["p", "q"])],
            [add("a", partitionValues={"p": None, "q": "x"}), add("b", partitionValues={"q": "y"})],
            [add("c", partitionValues={"p": "1", "q": "2"}), add("d", partitionValues={}), add("e")],
        ]
    )
    assert fast is not None
    assert fast.adds.to_pylist() == slow.adds.to_pylist()
    by_path = {r["path"]: r["partitionValues"] for r in fast.adds.to_pylist()}
    assert by_path["a"] == [("p", None), ("q", "x")]
    assert by_path["b"] == [("q", "y")]  # a missing key is not a null value
    assert by_path["d"] == [] and by_path["e"] is None


def test_timestamp_like_partition_values_keep_their_text():
    values = ["2021-01-01 00:00:00", "2021-01-01T00:00:00", "2021-01-01 00:00:00.123456", "1970-01-01"]
    commits = [[PROTOCOL, metadata(["ts"])], [add(f"f{i}", partitionValues={"ts": v}) for i, v in enumerate(values)]]
    assert_same(commits)
    fast, _ = both(commits)
    assert [dict(r["partitionValues"])["ts"] for r in fast.adds.to_pylist()][::-1] == values


def test_tags_stats_and_several_partition_columns():
    assert_same(
        [
            [PROTOCOL, metadata(["p", "q"])],
            [
                add("a", partitionValues={"p": "1", "q": "x"}, tags={"INSERTION_TIME": "1", "Z": "2"}, stats='{"n":1}'),
                add("b", partitionValues={"p": "2", "q": "y"}, stats=None),
            ],
            [remove("a", partitionValues={"p": "1", "q": "x"}), remove("zzz")],  # a remove with no partitionValues
        ]
    )


def test_deletion_vectors_are_part_of_the_key():
    dv1 = {"storageType": "u", "pathOrInlineDv": U_AB, "offset": 1, "sizeInBytes": 4, "cardinality": 1}
    dv2 = {"storageType": "i", "pathOrInlineDv": INLINE, "sizeInBytes": 4, "cardinality": 2}
    assert_same(
        [
            [PROTOCOL, metadata()],
            [add("a"), add("b", deletionVector=dv1)],
            [remove("a"), add("a", deletionVector=dv1), add("a", deletionVector=dv2), remove("b", deletionVector=dv1)],
        ]
    )


def test_escapes_crlf_key_order_and_other_actions():
    assert_same(
        [
            [PROTOCOL, metadata(), '{"commitInfo":{"operation":"WRITE","nested":{"x":[1,"y"]}}}'],
            [
                '{"add":{"size":3,"path":"caf\\u00e9 %20/\\"q\\".parquet","dataChange":false,"modificationTime":2}}\r',
                {"txn": {"appId": "app", "version": 3}},
                {"domainMetadata": {"domain": "d", "configuration": "{}", "removed": False}},
                "",
                "   ",
            ],
            [{"commitInfo": {"operation": "OPTIMIZE"}}],
            [{"txn": {"appId": "app", "version": 4}}, metadata(mid="newer"), add("x")],
        ]
    )


def test_lines_longer_than_a_parser_block():
    assert_same([[PROTOCOL, metadata()], [add("a" * 10, stats="x" * (3 << 20)), add("b")]])


def test_many_parser_blocks(monkeypatch):
    """Chunk boundaries (one per parser block) must not change reconciliation or the re-read rows."""
    import deltalog.log.replay as arrow_replay

    monkeypatch.setattr(arrow_replay, "_BLOCK_SIZE", 400)
    dv = {"storageType": "u", "pathOrInlineDv": U_AB, "offset": 1, "sizeInBytes": 4, "cardinality": 1}
    commits: list[list] = [[PROTOCOL, metadata(["p"])]]
    for v in range(30):
        commit = [add(f"f{v}", partitionValues={"p": None if v % 7 == 0 else str(v % 3)})]
        if v % 4 == 3:
            commit.append(remove(f"f{v - 2}"))
        if v % 5 == 4:
            commit.append(add(f"f{v - 3}", deletionVector=dv, partitionValues={}))
        commits.append(commit)
    fast, _ = both(commits)
    assert fast is not None
    assert_same(commits)


def test_no_file_actions_at_all():
    assert_same([[PROTOCOL, metadata()], [{"commitInfo": {}}]])


PARTS = st.one_of(st.none(), st.dictionaries(st.sampled_from(["p", "q"]), st.one_of(st.none(), st.text(max_size=3))))
DVS = st.one_of(
    st.none(),
    st.builds(
        lambda t, p, o: {
            "storageType": t,
            "pathOrInlineDv": p if t == "u" else INLINE,
            "offset": o if t == "u" else None,
            "sizeInBytes": 1,
            "cardinality": 1,
        },
        st.sampled_from(["u", "i"]),
        st.sampled_from([U_AB, U_CD]),
        st.one_of(st.none(), st.integers(0, 3)),
    ),
)
ACTION = st.builds(
    lambda kind, path, parts, dv, tags: (add if kind else remove)(
        path,
        **({"partitionValues": parts} if parts is not None else {}),
        **({"deletionVector": dv} if dv is not None else {}),
        **({"tags": tags} if tags is not None else {}),
    ),
    st.booleans(),
    st.sampled_from(["a", "b", "c", "d/é"]),
    PARTS,
    DVS,
    st.one_of(st.none(), st.dictionaries(st.sampled_from(["t1", "t2"]), st.text(max_size=2))),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(ACTION, max_size=6), min_size=1, max_size=6))
def test_random_logs_reconcile_identically(commits):
    fast, slow = both([[PROTOCOL, metadata(["p", "q"])], *commits])
    assert fast is not None  # null/missing map keys, DVs, tags: all must stay on the fast path
    assert rows_of(fast.adds) == rows_of(slow.adds)
    assert rows_of(fast.removes) == rows_of(slow.removes)
    assert sorted(fast.keys.to_pylist()) == sorted(slow.keys.to_pylist())


# --- inputs the Arrow path must hand to the per-line path ------------------------------


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('{"add":{"path":"a","size":1}}{"add":{"path":"b","size":1}}', "line 2 is not a single Delta action"),
        ('{"add":{"path":"a","size":1,"partitionValues":{"p":1}}}', "wrong type"),
        ('{"add":{"path":"a"}}', "no integer 'size'"),
        ('{"add":{"path":"a","size":1', "line 2 is not valid JSON"),
        ('{"remove":{"size":1}}', "without a string 'path'"),
        ('{"add":{"path":"a","size":1},"remove":{"path":"a"}}', "not a single Delta action"),
        (b'{"add":{"path":"caf\xe9","size":1}}', "line 2 is not valid UTF-8"),  # Latin-1
    ],
)
def test_corrupt_lines_decline_and_fail_precisely(tmp_path, line, needle):
    commits = [[PROTOCOL, metadata(["p"])], [{"commitInfo": {}}, line]]
    assert _replay_commits_arrow([encode(c) for c in commits]) is None
    with pytest.raises(CorruptLogError, match=needle) as info:
        DeltaTable(write_log(tmp_path / "t", commits)).snapshot()
    if "line" in needle:
        assert "00000000000000000001.json" in str(info.value)


def test_duplicate_keys_decline_and_json_semantics_win():
    # json.loads keeps the last of two equal keys; pyarrow.json refuses the line.
    fast, slow = both([[PROTOCOL, metadata()], ['{"add":{"path":"a","size":1,"path":"b"}}']])
    assert fast is None
    assert slow.adds.column("path").to_pylist() == ["b"]


def test_differently_spaced_file_action_declines_but_reads_the_same():
    commits = [[PROTOCOL, metadata()], [add("a")], ['{ "add": {"path": "b", "size": 2}}', remove("a")]]
    fast, slow = both(commits)
    assert fast is None
    assert slow.adds.column("path").to_pylist() == ["b"]


# --- vectorised helpers ----------------------------------------------------------------


def test_file_keys_match_the_scalar_definition():
    dvs = [
        None,
        {"storageType": "u", "pathOrInlineDv": U_AB, "offset": 7, "sizeInBytes": 1, "cardinality": 1},
        {"storageType": "i", "pathOrInlineDv": INLINE, "offset": None, "sizeInBytes": 1, "cardinality": 1},
    ]
    paths = ["p1", "p2", "p3"]
    from deltalog.log.actions import DELETION_VECTOR

    got = file_keys(pa.array(paths), pa.array(dvs, DELETION_VECTOR)).to_pylist()
    assert got == [file_key(p, dv) for p, dv in zip(paths, dvs)]


def test_newest_per_key_returns_last_occurrences_newest_first():
    rows, distinct = newest_per_key(pa.array(["a", "b", "a", "c", "b", "a"]))
    assert rows.to_pylist() == [5, 4, 3]
    assert sorted(distinct.to_pylist()) == ["a", "b", "c"]
    rows, _ = newest_per_key(pa.array(["x", "y"]))
    assert rows.to_pylist() == [1, 0]


def test_maps_as_dicts_handles_nulls_and_slices():
    m = pa.array([[("a", "1")], None, [("b", "2"), ("c", None)], []], pa.map_(pa.string(), pa.string()))
    expected = [{"a": "1"}, {}, {"b": "2", "c": None}, {}]
    assert _maps_as_dicts(pa.chunked_array([m])) == expected
    assert _maps_as_dicts(pa.chunked_array([m.slice(1, 2), m.slice(3)])) == expected[1:]


def test_lazy_local_listing_reports_real_sizes_and_times(tmp_path):
    root = write_log(tmp_path / "t", [[PROTOCOL, metadata()], [add("a")]])
    listing = list_log(Storage(root))
    for f in listing.commits.values():
        st_ = os.stat(f.path)
        assert (f.size, f.modification_time) == (st_.st_size, int(st_.st_mtime * 1000))
        assert f == FileInfo(f.path, st_.st_size, int(st_.st_mtime * 1000))


def test_loading_a_checkpointed_table_never_imports_pandas(tmp_path):
    """pyarrow imports pandas on its first Python-object conversion (0.2-0.4 s, 40 MB per process)."""
    import subprocess
    import sys

    import deltalake

    schema = {"type": "struct", "fields": [{"name": "p", "type": "string", "nullable": True, "metadata": {}}]}
    meta = metadata(["p"])
    meta["metaData"]["schemaString"] = json.dumps(schema)
    commits = [[PROTOCOL, meta]]
    commits += [[add(f"p={i % 2}/f{i}", partitionValues={"p": str(i % 2)})] for i in range(4)]
    root = write_log(tmp_path / "t", commits)
    deltalake.DeltaTable(root).create_checkpoint()
    with open(os.path.join(root, "_delta_log", f"{len(commits):020d}.json"), "wb") as fh:
        fh.write(encode([remove("p=0/f0"), add("p=1/f9", partitionValues={"p": "1"})]))
    code = (
        "import sys, json\n"
        "from deltalog import DeltaTable\n"
        f"s = DeltaTable({root!r}).snapshot()\n"
        "json.dumps(s.to_dict())\n"
        "print(s.segment.checkpoint is not None, sorted(s.file_paths()), 'pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "True"  # the checkpoint path ran
    assert "'p=0/f0'," not in out and "'p=1/f9']" in out
    assert out[-1] == "False"
