"""Vacuum's commit scan reads the commits a batch at a time (lite vacuum with no earlier vacuum reads them all).

Memory was the raw bytes of every commit plus every unused line at once: 16.8 GiB for a
lite dry run of a 10-million-file table of 1,000 commits. The batched scan must find the
same references and refuse the same torn line, wherever the batch boundaries fall.
"""

from __future__ import annotations

import os

import pytest

from deltalog.errors import CorruptLogError
from deltalog.log.listing import list_log
from deltalog.storage.filesystem import Storage
from deltalog.vacuuming import retained
from test_vacuum import build_history


def _scan(path: str):
    storage = Storage(path)
    listing = list_log(storage)
    files = [listing.commits[v] for v in sorted(listing.commits)]
    return retained.scan_commits(storage, files, kinds=("add", "remove", "cdc"))


@pytest.mark.parametrize("batch_bytes", [1, 700, 10**9])
def test_batches_find_what_one_pass_finds(tmp_path, monkeypatch, batch_bytes):
    path = str(tmp_path / "t")
    build_history(path)
    whole = _scan(path)
    monkeypatch.setattr(retained, "SCAN_BATCH_BYTES", batch_bytes)
    batched = _scan(path)
    assert whole.commits == batched.commits == 5
    assert (batched.added, batched.removed, batched.cdc) == (whole.added, whole.removed, whole.cdc)
    assert batched.protocol == whole.protocol and batched.metadata == whole.metadata
    assert len(batched.added) >= 4 and len(batched.removed) >= 3


def test_a_torn_line_in_a_later_batch_is_refused(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    build_history(path)
    last = os.path.join(path, "_delta_log", f"{4:020d}.json")
    with open(last, "ab") as fh:
        fh.write(b'{"commitInfo":{"timestamp":1}{"add"\n')  # two actions merged on one line
    monkeypatch.setattr(retained, "SCAN_BATCH_BYTES", 1)  # a batch per commit: the bad one is the last
    with pytest.raises(CorruptLogError, match=f"{4:020d}.json"):
        _scan(path)
