#!/usr/bin/env bash
# One-time set-up, safe to re-run: a JRE (for Spark) if `java` is missing, the
# virtual environment at .venv with the pinned working set (requirements.lock)
# and this project installed in editable mode. Re-installs only when the lock
# file or pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[bootstrap] $*" >&2; }

if ! command -v java >/dev/null 2>&1; then
  log "java not found: installing a headless JRE (Debian package openjdk-17-jre-headless)"
  SUDO=""
  if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
  if command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null \
      || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq default-jre-headless >/dev/null
  else
    log "no apt-get on this machine: install a Java 17 runtime by hand for the Spark parts"
  fi
fi

# Postgres (Debian package postgresql) for the system test's Airflow metadata database
# (tests/test_system.py starts its own throw-away cluster with it; nothing else uses it).
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && ! command -v pg_ctl >/dev/null 2>&1; then
  log "Postgres not found: installing the Debian package postgresql"
  SUDO=""
  if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
  if command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null \
      || log "warning: postgresql could not be installed; the Airflow system test will fail"
  else
    log "no apt-get on this machine: install Postgres by hand for the Airflow system test"
  fi
fi

# Headless Chromium and its driver (Debian packages chromium, chromium-driver) for the fleet
# view's browser test (tests/provider/test_fleet_view_browser.py); nothing else uses them.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  log "Chromium not found: installing the Debian packages chromium and chromium-driver"
  SUDO=""
  if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
  if command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null \
      || log "warning: chromium could not be installed; the fleet view's browser test will fail"
  else
    log "no apt-get on this machine: install Chromium and chromedriver by hand for the browser test"
  fi
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi

# The installer: uv (PyPI package `uv`, pinned here), which fetches and unpacks the ~220
# pinned packages in parallel: 46 s on an empty cache against 5 min for pip (pyspark alone is
# a 400 MB source archive pip builds serially). The same pins give the same working set; pip
# stays the fallback when uv cannot be installed.
UV_VERSION=0.13.8
want=$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
stamp=.venv/.deltalog-installed
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "installing the pinned working set into .venv (a minute or two on a fresh machine)"
  if .venv/bin/python -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" && [ -x .venv/bin/uv ]; then
    .venv/bin/uv pip install -q --python .venv/bin/python "pip>=24" -r requirements.lock
    .venv/bin/uv pip install -q --python .venv/bin/python --no-deps -e .
  else
    log "uv could not be installed: installing with pip (several minutes on a fresh machine)"
    .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade "pip>=24"
    .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.lock
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
  fi
  echo "$want" > "$stamp"
fi

# Spark jars (Delta Spark for the oracle tests, hadoop-aws + AWS SDK for s3a), by
# Maven coordinates into ~/.cache/deltalog/ivy-<versions>; a no-op once cached.
if ! .venv/bin/python scripts/spark_jars.py; then
  log "warning: the Spark jars could not be fetched; the Delta Spark and s3a tests will fail"
fi

# Spark 4.1 with the Iceberg runtime, the UniForm tests' Iceberg reader (no Iceberg runtime loads on
# the lock's Spark 4.2): a venv with pyspark 4.1 and iceberg-spark-runtime-4.1 by Maven coordinates,
# cached by version in ~/.cache/deltalog/iceberg-spark<versions>; a no-op once cached.
if ! .venv/bin/python scripts/iceberg_spark.py; then
  log "warning: Spark with the Iceberg runtime could not be set up; the UniForm Spark test will fail"
fi

# Storage emulators for the Azure and GCS tests: Azurite (npm package azurite, the tree pinned in
# scripts/emulators/azurite) and fake-gcs-server (Go module, go install), cached by version in
# ~/.cache/deltalog; a no-op once cached.
if ! .venv/bin/python scripts/emulators.py; then
  log "warning: an emulator could not be installed; the Azure or GCS tests will fail"
fi
