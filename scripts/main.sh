#!/usr/bin/env bash
# The main job: set-up, then the example DAGs end to end on a demo table (scripts/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python scripts/demo.py "$@"
