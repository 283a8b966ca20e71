"""Log cleanup and Hadoop's checksum side files (``.<name>.crc``), as Delta Spark leaves them on local paths.

Found by the Delta Spark twin comparison (tests/test_delta_spark_log_cleanup.py): Hadoop's
local filesystem writes ``.<name>.crc`` beside every log file and sidecar, and deletes it
with its file. deltalog deleted the checksum of a sidecar a kept checkpoint still
references (Delta Spark keeps it) and left the checksums of the log files it deleted
behind as orphans (Delta Spark deletes them).
"""

from __future__ import annotations

import json
import os

from deltalog import DeltaTable
from deltalog.log_maintenance.log_cleanup import checksum_name, cleanup_log
from test_log_cleanup import V2, history_table, log_dir, now_ms, readable_versions_agree, set_mtime

DAY_MS = 86_400_000


def _add_checksums(directory: str, names: list[str], mtime: int) -> list[str]:
    made = []
    for name in names:
        side = os.path.join(directory, checksum_name(name))
        with open(side, "wb") as f:
            f.write(b"crc\x00")
        set_mtime(side, mtime)
        made.append(checksum_name(name))
    return made


def test_checksums_of_kept_sidecars_stay_and_those_of_deleted_files_go(table_path: str) -> None:
    history_table(table_path, protocol=V2, checkpoints=(3, 6), old_through=7)
    logd = log_dir(table_path)
    sidecars = os.path.join(logd, "_sidecars")
    listing = DeltaTable(table_path).list_log()
    (cp3,), (cp6,) = listing.checkpoints[3], listing.checkpoints[6]
    refs = {
        v: [json.loads(x)["sidecar"]["path"] for x in open(cp.files[0].path) if '"sidecar"' in x]
        for v, cp in ((3, cp3), (6, cp6))
    }
    old = now_ms() - 40 * DAY_MS
    for name in refs[3] + refs[6]:
        set_mtime(os.path.join(sidecars, name), old)
    kept_sidecar_sums = _add_checksums(sidecars, refs[6], old)
    gone_sidecar_sums = _add_checksums(sidecars, refs[3], old)
    top = sorted(n for n in os.listdir(logd) if n[0].isdigit())
    sums = _add_checksums(logd, top, old)

    result = cleanup_log(table_path)

    assert result.oldest_version_kept == 6
    left = set(os.listdir(sidecars))
    assert set(kept_sidecar_sums) <= left, "the checksum of a sidecar checkpoint 6 references was deleted"
    assert not set(gone_sidecar_sums) & left
    remaining = set(os.listdir(logd))
    for name, side in zip(top, sums):
        # A checksum goes exactly when its file goes (and before it, so a crash leaves no orphan).
        assert (name in remaining) == (side in remaining), name
        if name not in remaining:
            assert result.files.index(side) < result.files.index(name)
    assert result.by_kind["checksum"] == len(gone_sidecar_sums) + sum(n not in remaining for n in top)
    readable_versions_agree(table_path, [6, 12])
