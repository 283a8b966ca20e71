#!/usr/bin/env bash
# One-time set-up, safe to re-run; each step is a no-op once done and says in one line what it did.
#
#   bash scripts/bootstrap.sh          everything the tests need (scripts/test.sh runs this)
#   bash scripts/bootstrap.sh --main   what the main job needs: a JRE and .venv (scripts/main.sh)
#
# Steps that do not depend on each other run side by side; their output goes to a log each (the
# tail is shown when a step fails):
#   Debian packages  a JRE (openjdk-17-jre-headless) if `java` is missing; for the tests also Postgres
#                    (the system test) and Chromium + chromedriver (the fleet view's browser test):
#                    one apt-get for all that is missing
#   .venv            the pinned working set (requirements.lock) and this project, editable, by uv;
#                    re-installed only when the lock file or pyproject.toml changed
#   emulators        Azurite (npm) and fake-gcs-server (go install), cached by version (scripts/emulators.py)
#   Spark jars       by Maven coordinates from Maven Central, cached by version (scripts/spark_jars.py;
#                    after .venv, and after the JRE when it is being installed)
#   release venvs    a venv per Airflow release of airflow-releases.toml, cached by release and pins
#                    (tests/airflow_matrix.py prepare; after .venv)
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=tests
if [ "${1:-}" = "--main" ]; then MODE=main; fi

log() { echo "[bootstrap] $*" >&2; }
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/deltalog-bootstrap.XXXXXX")
STARTED=$SECONDS

# Compiled bytecode is kept (the machine's environment may say PYTHONDONTWRITEBYTECODE): every
# Python process of the set-up and the tests imports from it instead of compiling again.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$PWD/.venv/pycache}"

# step NAME COMMAND...: run COMMAND in the background, its output into $LOGS/NAME.log; the last line of
# that log (less a "[tool] " prefix) is its one-line summary.
declare -A PIDS=()
step() {
  local name=$1
  shift
  (
    began=$SECONDS
    if "$@" >"$LOGS/$name.log" 2>&1; then
      summary=$(grep -v '^[[:space:]]*$' "$LOGS/$name.log" | tail -n 1 | sed 's/^\[[a-z_ -]*\] //')
      log "$name: ${summary:-done} ($((SECONDS - began)) s)"
    else
      rc=$?
      log "$name FAILED (exit $rc, $((SECONDS - began)) s); the end of its log ($LOGS/$name.log):"
      tail -n 25 "$LOGS/$name.log" | sed 's/^/    /' >&2
      exit $rc
    fi
  ) &
  PIDS[$name]=$!
}
# finish NAME [warning]: wait for a step; a failure stops the set-up unless a warning is given.
finish() {
  local name=$1 warning=${2:-}
  [ -n "${PIDS[$name]:-}" ] || return 0
  if ! wait "${PIDS[$name]}"; then
    if [ -n "$warning" ]; then log "warning: $warning"; else exit 1; fi
  fi
  unset "PIDS[$name]"
}

# --- Debian packages ---------------------------------------------------------------------------
JAVA_MISSING=""
command -v java >/dev/null 2>&1 || JAVA_MISSING=1
debian=()
[ -z "$JAVA_MISSING" ] || debian+=(openjdk-17-jre-headless)
if [ "$MODE" = tests ]; then
  if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && ! command -v pg_ctl >/dev/null 2>&1; then
    debian+=(postgresql)
  fi
  if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    debian+=(chromium chromium-driver)
  fi
fi
debian_packages() {
  local sudo=""
  [ "$(id -u)" = "0" ] || sudo="sudo"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "no apt-get on this machine: install by hand: $*"
    return 1
  fi
  $sudo apt-get update -qq
  if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@"; then
    [ -n "$JAVA_MISSING" ] || return 1
    echo "retrying with the distribution's default JRE"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${@/openjdk-17-jre-headless/default-jre-headless}"
  fi
  echo "installed $*"
}
if [ ${#debian[@]} -gt 0 ]; then
  step "Debian packages" debian_packages "${debian[@]}"
fi

# --- the storage emulators (stdlib only: they start before .venv exists) ------------------------
if [ "$MODE" = tests ]; then
  PYTHON_FOR_SCRIPTS=${PYTHON:-python3}
  step "Azure emulator" "$PYTHON_FOR_SCRIPTS" scripts/emulators.py azurite
  step "GCS emulator" "$PYTHON_FOR_SCRIPTS" scripts/emulators.py fake-gcs-server
fi

# --- .venv -------------------------------------------------------------------------------------
# The installer: uv (PyPI package `uv`, pinned here), which fetches and unpacks the ~220 pinned packages
# in parallel: 46 s on an empty cache against 5 min for pip (pyspark alone is a 400 MB source archive
# pip builds serially). The same pins give the same working set; pip stays the fallback.
#
# The package registry this machine reaches lets no download be cached: uv finds every cached file stale,
# asks again and gets it whole again, and pip kept no HTTP cache here. So a fresh clone fetched all
# ~220 packages again (and pyspark's 400 MB source archive, built again): 47 s to 3 min for the .venv
# step. uv installs from its cache alone first (`--offline`: the pins are exact, so the cached index
# pages give the same versions; 5 s), and from the registry only when something is not in the cache
# (a changed lock); uv's own wheel is kept by version (13 s of download each clone before).
UV_VERSION=0.13.8
UV_WHEELS="${DELTALOG_CACHE:-$HOME/.cache/deltalog}/wheels"
PYTHON=${PYTHON:-python3}
install_uv() {
  if ! ls "$UV_WHEELS/uv-$UV_VERSION-"*.whl >/dev/null 2>&1; then
    local partial
    mkdir -p "$UV_WHEELS"
    partial=$(mktemp -d "$UV_WHEELS/.partial.XXXXXX")
    .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps -d "$partial" "uv==$UV_VERSION" &&
      mv -f "$partial"/uv-"$UV_VERSION"-*.whl "$UV_WHEELS"/
    rm -rf "$partial"
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-index --find-links "$UV_WHEELS" "uv==$UV_VERSION" ||
    .venv/bin/python -m pip install -q --disable-pip-version-check "uv==$UV_VERSION"
}
uv_install() {
  if ! .venv/bin/uv pip install -q --offline --python .venv/bin/python "$@" 2>"$LOGS/uv-offline.log"; then
    echo "not all in uv's cache ($(tail -n 1 "$LOGS/uv-offline.log")): from the registry"
    .venv/bin/uv pip install -q --python .venv/bin/python "$@"
  fi
}
python_venv() {
  if [ ! -x .venv/bin/python ]; then
    echo "creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
  fi
  local want stamp
  want=$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
  stamp=.venv/.deltalog-installed
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "up to date ($(.venv/bin/python --version), requirements.lock)"
    return 0
  fi
  if install_uv && [ -x .venv/bin/uv ]; then
    uv_install "pip>=24" -r requirements.lock
    uv_install --no-deps -e .
  else
    echo "uv could not be installed: installing with pip (several minutes on a fresh machine)"
    .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade "pip>=24"
    .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.lock
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
  fi
  echo "$want" >"$stamp"
  echo "installed the pinned working set of requirements.lock and this project, editable ($(.venv/bin/python --version))"
}
step ".venv" python_venv
finish ".venv"

# --- after .venv: the release venvs; the Spark jars (after the JRE when it is being installed) ----
if [ "$MODE" = tests ]; then
  step "release venvs" .venv/bin/python tests/airflow_matrix.py prepare
  if [ -n "$JAVA_MISSING" ]; then finish "Debian packages" "no JRE: the Spark parts will fail"; fi
  step "Spark jars" .venv/bin/python scripts/spark_jars.py
  # Spark 4.1 with the Iceberg runtime, the UniForm tests' Iceberg reader (no Iceberg runtime loads on
  # the lock's Spark 4.2): its own venv and jars, cached by version (scripts/iceberg_spark.py).
  step "Iceberg Spark" .venv/bin/python scripts/iceberg_spark.py
fi

finish "Debian packages" "a Debian package could not be installed: the tests that need it will fail"
finish "Azure emulator" "Azurite could not be installed: the Azure tests will fail"
finish "GCS emulator" "fake-gcs-server could not be installed: the GCS tests will fail"
finish "Spark jars" "the Spark jars could not be fetched: the Delta Spark, s3a, Azure and GCS Spark tests will fail"
finish "Iceberg Spark" "Spark with the Iceberg runtime could not be set up: the UniForm Spark test will fail"
finish "release venvs" "a release venv could not be made: the release matrix will try again and fail with the reason"
log "set-up done in $((SECONDS - STARTED)) s"
rm -rf "$LOGS"
