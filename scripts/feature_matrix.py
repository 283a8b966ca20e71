"""Regenerate docs/feature-matrix.md: run the Delta Spark oracle tests and keep their report.

    .venv/bin/python scripts/feature_matrix.py

The report (every corpus table x deltalog operation: ok / refused with the reason)
is written by tests/test_delta_spark_oracle.py; this script only points it at
docs/ instead of build/. Exit status: pytest's.
"""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    env = dict(os.environ, DELTALOG_FEATURE_MATRIX=os.path.join(REPO, "docs", "feature-matrix.md"))
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/test_delta_spark_oracle.py"]
    return subprocess.run(cmd, cwd=REPO, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
