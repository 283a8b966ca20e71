"""Held-back conformance tables carrying ``variantShredding-preview`` (../shared/conformance), via the real CLI.

Extra check: skips when the reference material, or any such table in it, is absent. The repo's own
check is ``tests/test_features_delta_spark.py``, which builds an equivalent table with Delta Spark.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from shared_data import shared_path


def _tables_with(feature: str) -> list[tuple[str, dict]]:
    golden = shared_path("conformance", "golden")
    out = []
    for expected in sorted(glob.glob(os.path.join(golden, "*.expected.json"))):
        doc = json.load(open(expected))
        protocol = doc.get("protocol") or {}
        if feature in (protocol.get("readerFeatures") or []) + (protocol.get("writerFeatures") or []):
            out.append((expected[: -len(".expected.json")], doc))
    return out


def test_held_back_shredded_variant_tables_read_as_expected():
    tables = _tables_with("variantShredding-preview")
    if not tables:
        pytest.skip("shared/conformance holds no table carrying variantShredding-preview (extra check)")
    exe = os.path.join(os.path.dirname(sys.executable), "deltalog")
    for table, want in tables:
        p = subprocess.run([exe, "snapshot", table, "--json"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, (table, p.stderr[-2000:])
        got = json.loads(p.stdout)
        assert got["version"] == want["version"], table
        assert sorted(got["protocol"]["readerFeatures"]) == sorted(want["protocol"]["readerFeatures"]), table
        files = sorted((f["path"], f["size"]) for f in got["files"])
        assert files == sorted((f["path"], f["size"]) for f in want["files"]), table
