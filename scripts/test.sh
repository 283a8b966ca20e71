#!/usr/bin/env bash
# The test command: set-up (scripts/bootstrap.sh), the type check (mypy), then the whole suite, slow
# suites (Spark, S3 server, races, Airflow DAG runs) included. Extra arguments
# go to pytest, e.g. `scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PYTHONDONTWRITEBYTECODE=1
.venv/bin/python -m mypy  # type check (settings in pyproject.toml)
set +e
.venv/bin/python -m pytest -p no:cacheprovider -q --durations=25 "$@"
rc=$?
set -e
if [ "$rc" = "5" ]; then echo "error: pytest collected no tests" >&2; exit 1; fi
exit $rc
