"""Properties of vacuum under spellings, links and time units (issue 13, items 2, 3, 5), on local files.

Hypothesis draws, per class:

- spellings: how the table is opened (real path, a symlinked parent, ``..``,
  ``file:``/``file://``/``file://localhost``, a trailing slash) and how each
  file is named in the log (relative, percent-encoded, ``./``, absolute under
  any spelling of the root, or a spelling that is *not* the root: another case,
  another folder). Vacuum either refuses, because a referenced path cannot be
  relativised, deleting nothing; or deletes exactly the unreferenced files and
  never a live one.
- links: partition folders moved out of the table or into another folder of it
  and linked back, a file reached through a link, dangling links, a link to a
  folder of old junk outside, a removed file that is a link out of the root.
  No link is ever deleted, nothing outside the root changes, every file of the
  latest version still reads, and deltalake reads the table.
- units: an inventory whose integer ``modificationTime`` is in seconds, milli-,
  micro- or nanoseconds (or timestamps of any unit). Only milliseconds (and
  timestamps) are accepted, giving the same plan as a listing; every other
  scale is refused and nothing is deleted.

In every case the dry run plans exactly the files the real run deletes. The S3
counterparts are in ``test_vacuum_paths_s3.py``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from urllib.parse import quote

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltalog.commit.transaction import Transaction
from deltalog.errors import InvalidArgumentError, OperationRefusedError
from deltalog.vacuuming import vacuum
from helpers import rows, write_data_file
from vacuum_helpers import (
    DAY_MS,
    commit_at,
    commit_path,
    deltalake_ids,
    files_on_disk,
    make_table_at,
    new_file,
    now_ms,
    remove_of,
    set_mtime,
)

SETTINGS = settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def _vacuum_both(uri: str, **kw) -> tuple[set[str] | None, object]:
    """Dry run then real run; (planned paths, result) or (None, exception) when both refuse alike."""
    try:
        dry = vacuum(uri, retention_hours=0, allow_short_retention=True, dry_run=True, **kw)
    except (OperationRefusedError, InvalidArgumentError) as exc:
        with pytest.raises(type(exc)):
            vacuum(uri, retention_hours=0, allow_short_retention=True, **kw)
        return None, exc
    planned = set(dry.plan.files.column("path").to_pylist())
    return planned, vacuum(uri, retention_hours=0, allow_short_retention=True, **kw)


# --- spellings ---------------------------------------------------------------------------------

ROOT_SPELLINGS = ["real", "link", "dotdot", "file:", "file://", "file://localhost", "trailing"]
#: How a log path names a file; the last two are not the table root and must stop vacuum.
LOG_SPELLINGS = ["rel", "encoded", "dot", "abs", "abs-link", "uri", "uri-link", "uri-dotdot", "CASE", "other"]
BAD_SPELLINGS = {"CASE", "other"}


def _root_spelling(base: str, how: str) -> str:
    real, link = f"{base}/real/t", f"{base}/link/t"
    return {
        "real": real,
        "link": link,
        "dotdot": f"{base}/real/x/../t",
        "file:": f"file:{link}",
        "file://": f"file://{real}",
        "file://localhost": f"file://localhost{link}",
        "trailing": link + "/",
    }[how]


def _log_path(base: str, name: str, how: str) -> str:
    enc = quote(name, safe="/=")
    real, link = f"{base}/real/t", f"{base}/link/t"
    return {
        "rel": name,
        "encoded": enc,
        "dot": f"./{enc}",
        "abs": f"{real}/{enc}",
        "abs-link": f"{link}/{enc}",
        "uri": f"file://{real}/{enc}",
        "uri-link": f"file:{link}/{enc}",
        "uri-dotdot": f"file://{base}/link/x/../t/{enc}",
        "CASE": f"file://{real.upper()}/{enc}",
        "other": f"file://{base}/real/other/{enc}",
    }[how]


file_spec = st.tuples(st.sampled_from(LOG_SPELLINGS), st.booleans(), st.booleans())  # spelling, removed, odd name


@SETTINGS
@given(
    files=st.lists(file_spec, min_size=1, max_size=5),
    junk=st.integers(0, 2),
    opened=st.sampled_from(ROOT_SPELLINGS),
    mode=st.sampled_from(["full", "lite", "inventory"]),
)
def test_vacuum_never_deletes_a_live_file_whatever_the_spelling(files, junk, opened, mode):
    with tempfile.TemporaryDirectory() as base:
        base = os.path.realpath(base)
        real = f"{base}/real/t"
        os.makedirs(f"{base}/real/x")
        os.symlink(f"{base}/real", f"{base}/link")
        past = now_ms() - 20 * DAY_MS
        table = make_table_at(real, past)
        live, removed, adds = set(), set(), []
        for i, (how, is_removed, odd) in enumerate(files):
            add = new_file(table, rows(1, i))
            name = add["path"]
            if odd:  # a name that percent-encoding changes
                os.rename(f"{real}/{name}", f"{real}/{i} x%y.parquet")
                name = f"{i} x%y.parquet"
            set_mtime(f"{real}/{name}", past)
            add["path"] = _log_path(base, name, how)
            adds.append((add, name, is_removed, how))
        txn = Transaction(table.storage, table.snapshot(), operation="WRITE", run_hooks=False)
        txn.add([a for a, _, _, _ in adds])
        set_mtime(commit_path(real, txn.commit().version), past)
        gone = [a for a, _, r, _ in adds if r]
        if gone:
            txn = Transaction(table.storage, table.snapshot(), operation="DELETE", run_hooks=False)
            txn.remove([dict(remove_of(a), deletionTimestamp=past) for a in gone])
            set_mtime(commit_path(real, txn.commit().version), past)
        for _, name, is_removed, _ in adds:
            (removed if is_removed else live).add(name)
        junk_names = set()
        for j in range(junk):
            name = write_data_file(real, rows(1, 100 + j))["path"]
            set_mtime(f"{real}/{name}", past)
            junk_names.add(name)

        uri = _root_spelling(base, opened)
        kw: dict = {"mode": "lite"} if mode == "lite" else {}
        if mode == "inventory":
            kw["inventory"] = pa.table(
                {
                    "path": [f"file://{base}/link/t/{p}" for p in sorted(files_on_disk(real))],
                    "size": pa.array([os.path.getsize(f"{real}/{p}") for p in sorted(files_on_disk(real))], pa.int64()),
                    "modificationTime": pa.array([past] * len(files_on_disk(real)), pa.int64()),
                }
            )
        before = files_on_disk(real)
        planned, outcome = _vacuum_both(uri, **kw)
        after = files_on_disk(real)
        bad_live = any(how in BAD_SPELLINGS for _, _, r, how in adds if not r)
        bad_any = any(how in BAD_SPELLINGS for _, _, _, how in adds)
        if planned is None:
            assert isinstance(outcome, OperationRefusedError) and "relativised" in str(outcome)
            assert bad_live or (mode == "lite" and bad_any), outcome
            assert after == before
            return
        assert not bad_live, "a live file named by a path outside the root was not refused"
        assert live <= after, f"live files deleted: {live - after}"
        assert planned == before - after, "the dry run disagrees with the real run"
        if mode == "lite":
            expected = {n for _, n, r, how in adds if r}
            assert not bad_any, "lite vacuum read a removed path outside the root and did not refuse"
        else:  # a removed path naming another location leaves its physical file unreferenced: junk
            expected = removed | junk_names
        assert before - after == expected


# --- links ---------------------------------------------------------------------------------------

LAYOUTS = ["plain", "moved-out", "moved-in", "moved-hidden"]


def _tree_digest(top: str) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, names in os.walk(top):
        for n in names:
            full = os.path.join(dirpath, n)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, top)] = hashlib.sha1(fh.read()).hexdigest()
    return out


def _links(top: str) -> set[str]:
    out = set()
    for dirpath, dirs, names in os.walk(top):
        for n in dirs + names:
            if os.path.islink(os.path.join(dirpath, n)):
                out.add(os.path.relpath(os.path.join(dirpath, n), top))
    return out


def _followed_inventory(path: str, mtime_ms: int) -> pa.Table:
    """An inventory made by a tool that follows links: every link and every file behind one is a row."""
    rows_: list[tuple[str, int]] = []
    for dirpath, dirs, names in os.walk(path, followlinks=True):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        for n in names:
            full = os.path.join(dirpath, n)
            if os.path.exists(full):
                rows_.append((os.path.relpath(full, path), os.path.getsize(full)))
    return pa.table(
        {
            "path": [r for r, _ in rows_],
            "size": pa.array([s for _, s in rows_], pa.int64()),
            "modificationTime": pa.array([mtime_ms] * len(rows_), pa.int64()),
        }
    )


@SETTINGS
@given(
    layouts=st.fixed_dictionaries({p: st.sampled_from(LAYOUTS) for p in "abc"}),
    removed=st.sets(st.sampled_from(["a", "b", "c"])),
    file_alias=st.booleans(),
    dangling=st.booleans(),
    junk_link=st.booleans(),
    escaping_remove=st.booleans(),
    mode=st.sampled_from(["full", "lite", "inventory"]),
)
def test_vacuum_never_deletes_a_link_nor_through_one(
    layouts, removed, file_alias, dangling, junk_link, escaping_remove, mode
):
    with tempfile.TemporaryDirectory() as base:
        path, outside = f"{base}/t", f"{base}/outside"
        os.makedirs(outside)
        past = now_ms() - 20 * DAY_MS
        table = make_table_at(path, past, partition_by=["part"])
        adds = {
            p: [new_file(table, rows(1, 10 * i + k, p), {"part": p}) for k in range(2)] for i, p in enumerate("abc")
        }
        commit_at(table, past, adds=[a for files in adds.values() for a in files])
        if removed:
            commit_at(table, past + 1000, removes=[remove_of(adds[p][0]) for p in sorted(removed)])
        extra_adds = []
        if file_alias:  # a live file that is a link to another data file of the table (which may be removed)
            os.symlink(os.path.join(path, adds["a"][0]["path"]), os.path.join(path, "alias.parquet"))
            extra_adds.append(dict(adds["a"][0], path="alias.parquet", partitionValues={"part": "a"}))
        if escaping_remove:  # another writer added a path leading out of the root, then removed it
            os.makedirs(f"{outside}/esc")
            shutil.copy(os.path.join(path, adds["c"][1]["path"]), f"{outside}/esc/f.parquet")
            set_mtime(f"{outside}/esc/f.parquet", past)
            os.symlink(f"{outside}/esc", os.path.join(path, "part=esc"))
            esc = dict(adds["c"][1], path="part=esc/f.parquet", partitionValues={"part": "esc"})
            commit_at(table, past + 2000, adds=[esc])
            commit_at(table, past + 3000, removes=[remove_of(esc)])
        if extra_adds:
            txn = Transaction(table.storage, table.snapshot(), operation="WRITE", run_hooks=False)
            txn.add(extra_adds)
            set_mtime(commit_path(path, txn.commit().version), past + 4000)
        for p, layout in layouts.items():
            src = os.path.join(path, f"part={p}")
            dest = {"moved-out": f"{outside}/part={p}", "moved-in": f"{path}/store/part={p}"}.get(layout)
            if layout == "moved-hidden":
                dest = f"{path}/_store/part={p}"
            if dest:
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.move(src, dest)
                os.symlink(dest, src)
        if dangling:
            os.symlink(f"{base}/nowhere", os.path.join(path, "dangling.parquet"))
        if junk_link:
            os.makedirs(f"{outside}/junk")
            write_data_file(f"{outside}/junk", rows(1))
            for f in os.listdir(f"{outside}/junk"):
                set_mtime(f"{outside}/junk/{f}", past)
            os.symlink(f"{outside}/junk", os.path.join(path, "part=junk"))
        expected_ids = deltalake_ids(path)
        links_before, outside_before = _links(path), _tree_digest(outside)
        before = files_on_disk(path)

        kw: dict = {"inventory": _followed_inventory(path, past)} if mode == "inventory" else {"mode": mode}
        planned, result = _vacuum_both(path, **kw)
        assert planned is not None, result
        assert _links(path) == links_before, "a link was deleted"
        assert _tree_digest(outside) == outside_before, "something outside the root changed"
        assert planned == before - files_on_disk(path), "the dry run disagrees with the real run"
        for add in table.snapshot().files.to_pylist():
            assert os.path.isfile(os.path.join(path, add["path"])), f"{add['path']} no longer reads"
        assert deltalake_ids(path) == expected_ids


# --- units ---------------------------------------------------------------------------------------

SCALES = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


@SETTINGS
@given(
    unit=st.sampled_from(sorted(SCALES)),
    as_timestamp=st.booleans(),
    ages_h=st.lists(st.sampled_from([0.01, 1, 30, 400]), min_size=1, max_size=5),
)
def test_an_inventory_is_accepted_only_in_units_it_can_be_read_in(unit, as_timestamp, ages_h):
    with tempfile.TemporaryDirectory() as base:
        path = f"{base}/t"
        now = now_ms()
        table = make_table_at(path, now - 20 * DAY_MS)
        names, secs = [], []
        for i, age in enumerate(ages_h):
            name = write_data_file(path, rows(1, i))["path"]
            at = now - int(age * 3_600_000)
            set_mtime(f"{path}/{name}", at)
            names.append(name)
            secs.append(at / 1000)
        del table
        values = [int(s * SCALES[unit]) for s in secs]
        mtime = pa.array(values, pa.timestamp(unit, tz="UTC")) if as_timestamp else pa.array(values, pa.int64())
        inv = pa.table(
            {
                "path": names,
                "size": pa.array([os.path.getsize(f"{path}/{n}") for n in names], pa.int64()),
                "modificationTime": mtime,
            }
        )
        listed = vacuum(path, retention_hours=24, allow_short_retention=True, dry_run=True)
        before = files_on_disk(path)
        try:
            dry = vacuum(path, retention_hours=24, allow_short_retention=True, dry_run=True, inventory=inv)
        except InvalidArgumentError as exc:
            assert not as_timestamp and unit != "ms", exc
            assert "modificationTime" in str(exc) and any(str(v) in str(exc) for v in values)
            with pytest.raises(InvalidArgumentError):
                vacuum(path, retention_hours=24, allow_short_retention=True, inventory=inv)
            assert files_on_disk(path) == before
            return
        assert as_timestamp or unit == "ms", f"an inventory in {unit} was accepted"
        planned = dry.plan.files.column("path").to_pylist()
        assert planned == listed.plan.files.column("path").to_pylist()
        assert {n for n, s in zip(names, secs) if s * 1000 < now - 24 * 3_600_000} == set(planned)
        vacuum(path, retention_hours=24, allow_short_retention=True, inventory=inv)
        assert before - files_on_disk(path) == set(planned)
