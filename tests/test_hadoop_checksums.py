"""Hadoop's checksum sidecars stay true when deltalog replaces or creates a file of a local table.

Delta Spark verifies every local file against its ``.<name>.crc``; a stale one after deltalog's
``_last_checkpoint`` made every Delta Spark reader retry for three seconds (found while measuring
the oracle's time: a third of it was these sleeps). Delta Spark's own reading of our files is
checked in ``test_delta_spark_log_cleanup.py``; here the format and the write paths.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from corpus_store import STORE_ROOT
from deltalog import DeltaTable
from deltalog.storage.filesystem import Storage
from deltalog.storage.hadoop_checksums import checksum_sidecar, refresh_sidecar, sidecar_path


def _stored_sidecars() -> list[Path]:
    return sorted(STORE_ROOT.glob("*/table/**/.*.crc"))


def test_our_sidecar_is_byte_for_byte_what_hadoop_wrote_for_every_stored_corpus_file() -> None:
    sidecars = _stored_sidecars()
    assert len(sidecars) > 100, "the stored Delta Spark corpus should hold Hadoop's sidecars"
    for crc in sidecars:
        data_file = crc.with_name(crc.name[1 : -len(".crc")])
        assert checksum_sidecar(data_file.read_bytes()) == crc.read_bytes(), crc


def test_sidecar_of_empty_and_multi_chunk_files() -> None:
    assert checksum_sidecar(b"") == b"crc\x00" + struct.pack(">i", 512)
    body = checksum_sidecar(b"x" * 1025)[8:]
    assert len(body) == 12  # three chunks: 512, 512, 1
    assert checksum_sidecar(b"x" * 1025, 1024)[4:8] == struct.pack(">i", 1024)


def _stale_table(tmp_path: Path) -> Path:
    """A Delta Spark corpus table whose ``_last_checkpoint`` has Hadoop's sidecar."""
    source = STORE_ROOT / "plain" / "table"
    table = tmp_path / "plain"
    shutil.copytree(source, table)
    assert (table / "_delta_log" / "._last_checkpoint.crc").exists()
    return table


def test_checkpoint_rewrites_the_sidecar_of_last_checkpoint(tmp_path: Path) -> None:
    table = _stale_table(tmp_path)
    last = table / "_delta_log" / "_last_checkpoint"
    before = last.read_bytes()
    DeltaTable(str(table)).create_checkpoint()
    after = last.read_bytes()
    assert after != before and json.loads(after)["version"] > json.loads(before)["version"]
    assert (table / "_delta_log" / "._last_checkpoint.crc").read_bytes() == checksum_sidecar(after)


def test_write_atomic_keeps_the_chunk_size_and_adds_no_sidecar_where_there_was_none(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    with_sidecar = str(tmp_path / "hint")
    Path(with_sidecar).write_bytes(b"old")
    Path(sidecar_path(with_sidecar)).write_bytes(checksum_sidecar(b"old", 4))
    storage.write_atomic(with_sidecar, b"new content, longer than four bytes")
    assert Path(sidecar_path(with_sidecar)).read_bytes() == checksum_sidecar(b"new content, longer than four bytes", 4)

    without = str(tmp_path / "plain")
    storage.write_atomic(without, b"data")
    assert not os.path.exists(sidecar_path(without))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hint.crc", "hint", "plain"]  # no temp file left


def test_put_if_absent_replaces_a_sidecar_left_by_a_deleted_file_of_that_name(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    path = str(tmp_path / "00000000000000000007.json")
    Path(sidecar_path(path)).write_bytes(checksum_sidecar(b"what was here before"))
    storage.put_if_absent(path, b'{"commitInfo":{}}\n')
    assert Path(sidecar_path(path)).read_bytes() == checksum_sidecar(b'{"commitInfo":{}}\n')


def test_a_sidecar_that_is_not_hadoops_is_replaced_with_the_default_chunk(tmp_path: Path) -> None:
    path = str(tmp_path / "f")
    Path(path).write_bytes(b"abc")
    Path(sidecar_path(path)).write_bytes(b"junk")
    assert refresh_sidecar(path, b"abc")
    assert Path(sidecar_path(path)).read_bytes() == checksum_sidecar(b"abc")


@pytest.mark.parametrize("name", ["missing-dir/f", "f"])
def test_no_sidecar_no_write(tmp_path: Path, name: str) -> None:
    assert not refresh_sidecar(str(tmp_path / name), b"abc")
    assert list(tmp_path.iterdir()) == []
