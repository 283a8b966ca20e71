"""The 90 golden tables written by Delta Spark (../shared/conformance), via the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys

from shared_data import REPO, shared_path


def test_golden_tables_conform():
    checker = shared_path("conformance", "check_snapshots.py")
    exe = os.path.join(os.path.dirname(sys.executable), "deltalog")
    p = subprocess.run(
        [sys.executable, checker, "--cmd", f"{exe} snapshot {{table}} --json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    last = p.stdout.strip().splitlines()[-1]
    assert p.returncode == 0, p.stdout[-3000:]
    assert last.endswith("0 failed") and last.startswith("90 passed"), last
