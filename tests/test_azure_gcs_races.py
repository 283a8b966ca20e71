"""Racing writers on Azure and GCS (their emulators): 8 processes x 20 blind appends, nothing lost.

The workers are ``test_commit_races.py``'s (``python test_commit_races.py append ...``): each
writes a Parquet file and commits it, retrying lost races. Afterwards every append has its own
version, the versions are contiguous, each holds its writer's ``txnId``, and deltalake reads
every version with exactly the rows committed up to it. ``azure-adlfs`` races through adlfs's
``If-None-Match: *`` (the fallback primitive) instead of obstore's.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pyarrow as pa
import pytest

from test_commit_races import finish, spawn

pytestmark = [pytest.mark.slow]

WORKERS, APPENDS = 8, 20


@pytest.mark.parametrize(
    "store",
    [
        pytest.param("azure", marks=pytest.mark.azure),
        pytest.param("azure-adlfs", marks=pytest.mark.azure),
        pytest.param("gcs", marks=pytest.mark.gcs),
    ],
)
def test_8_writers_x_20_appends_lose_nothing(request: pytest.FixtureRequest, tmp_path, store: str) -> None:
    import deltalake

    from deltalog import DeltaTable
    from deltalog.create import create_table
    from deltalog.log.commit_lines import parse_commit

    base = "gcs" if store == "gcs" else "azure"
    uri: str = request.getfixturevalue(f"{base}_table_uri")
    options: dict[str, Any] = dict(request.getfixturevalue(f"{base}_storage_options"))
    if store == "azure-adlfs":
        options["obstore"] = "false"
    dl_options = request.getfixturevalue(f"{base}_deltalake_options")
    create_table(uri, pa.schema([("id", pa.int64())]), storage_options=options)

    go = str(tmp_path / "go")
    procs = [spawn("append", uri, json.dumps(options), str(w), str(APPENDS), go) for w in range(WORKERS)]
    time.sleep(1.0)
    started = time.perf_counter()
    open(go, "w").close()
    results = [r for out in finish(procs) for r in out]
    elapsed = time.perf_counter() - started

    total = WORKERS * APPENDS
    assert len(results) == total, "every append returned"
    assert sorted(r["version"] for r in results) == list(range(1, total + 1)), "no version has two writers, no gaps"
    table = DeltaTable(uri, options)
    listing = table.list_log()
    assert sorted(listing.commits) == list(range(total + 1)), "versions are contiguous"
    by_version = {r["version"]: r for r in results}
    rows_at = [0]
    for v in range(1, total + 1):
        f = listing.commits[v]
        actions = parse_commit(table.storage.read_bytes(f.path), f.name)
        assert actions[0]["commitInfo"]["txnId"] == by_version[v]["txn_id"], f"version {v} holds its writer's commit"
        rows_at.append(rows_at[-1] + by_version[v]["rows"])
    assert table.snapshot().num_files == total
    for v in range(total + 1):  # deltalake reads every version, with the rows committed up to it
        dl = deltalake.DeltaTable(uri, storage_options=dl_options, version=v)
        assert dl.to_pyarrow_table().num_rows == rows_at[v], f"version {v}"
    mean = sum(r["attempts"] for r in results) / total
    print(f"{store} race: {total} appends in {elapsed:.1f}s, {mean:.2f} attempts on average")
