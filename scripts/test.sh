#!/usr/bin/env bash
# The test command (what CI runs, through .ci/run): set-up (scripts/bootstrap.sh), then the whole suite on
# parallel workers, slow suites (Spark, the Delta Spark oracle, the clouds' emulators, the Airflow release
# matrix, the deployment, the browser) included, with the type check (mypy) beside it. Extra arguments go
# to pytest, e.g. `scripts/test.sh -k vacuum` or `scripts/test.sh tests/test_cli.py` or
# `scripts/test.sh -m "not slow"`. How the suite is split and what each part costs: docs/DEVELOPING.md.
#
#   DELTALOG_TEST_WORKERS  parallel workers (default 3; 0 runs everything in this one process)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh

# Compiled bytecode is kept (outside the clone's sources): each of the suite's thousands of Python
# processes (workers, CLIs, Airflow commands, Spark's Python workers) imports it instead of compiling
# every module again. The machine's environment may say PYTHONDONTWRITEBYTECODE; it is undone here.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$PWD/.venv/pycache}"

# The type check runs beside the tests; its result is printed in pytest's summary (tests/parallel.py)
# and decides the exit code with pytest's.
TYPECHECK_LOG=$(mktemp "${TMPDIR:-/tmp}/deltalog-mypy.XXXXXX")
export DELTALOG_TYPECHECK_LOG=$TYPECHECK_LOG
(
  set +e
  .venv/bin/python -m mypy >"$TYPECHECK_LOG" 2>&1  # settings in pyproject.toml
  echo $? >"$TYPECHECK_LOG.rc"
) &
typecheck=$!

workers=${DELTALOG_TEST_WORKERS:-3}
parallel=()
if [ "$workers" != "0" ]; then parallel=(-n "$workers" --dist loadgroup); fi
set +e
.venv/bin/python -m pytest -p no:cacheprovider -q -rfE --durations=30 "${parallel[@]}" "$@"
rc=$?
wait "$typecheck"
set -e
typecheck_rc=$(cat "$TYPECHECK_LOG.rc" 2>/dev/null || echo 1)
if [ "$typecheck_rc" != "0" ]; then
  echo "error: the type check (mypy) failed (exit $typecheck_rc):" >&2
  tail -n 40 "$TYPECHECK_LOG" >&2
fi
rm -f "$TYPECHECK_LOG" "$TYPECHECK_LOG.rc"
if [ "$rc" = "5" ]; then echo "error: pytest collected no tests" >&2; exit 1; fi
if [ "$rc" = "0" ] && [ "$typecheck_rc" != "0" ]; then exit 1; fi
exit $rc
