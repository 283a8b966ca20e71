"""The 90 golden tables written by Delta Spark (../shared/conformance), via the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared")
CHECKER = os.path.join(SHARED, "conformance", "check_snapshots.py")


@pytest.mark.skipif(not os.path.exists(CHECKER), reason="../shared/conformance is absent from this checkout")
def test_golden_tables_conform():
    exe = os.path.join(os.path.dirname(sys.executable), "deltalog")
    p = subprocess.run(
        [sys.executable, CHECKER, "--cmd", f"{exe} snapshot {{table}} --json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    last = p.stdout.strip().splitlines()[-1]
    assert p.returncode == 0, p.stdout[-3000:]
    assert last.endswith("0 failed") and last.startswith("90 passed"), last
