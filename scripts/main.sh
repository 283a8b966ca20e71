#!/usr/bin/env bash
# The main job: set-up, then a demo table with many small files and its health.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python scripts/demo.py "$@"
