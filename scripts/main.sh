#!/usr/bin/env bash
# The main job: set-up (what it needs: a JRE and .venv), then the example DAGs end to end on a demo table
# (scripts/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh --main
# Compiled bytecode is kept (see scripts/test.sh): the Airflow commands of the demo import it.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$PWD/.venv/pycache}"
exec .venv/bin/python scripts/demo.py "$@"
