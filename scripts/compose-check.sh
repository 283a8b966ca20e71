#!/usr/bin/env bash
# End-to-end check of the docker-compose stack, for a machine with Docker (CI here has
# none; tests/test_system.py runs the same stack without Docker):
#
#   1. up: build the image, start the stack, wait for the REST API;
#   2. trigger through the REST API, as a user's UI or CLI trigger does:
#      deltalog_ingest without a logical date, a backfill of an older day, the same
#      day again; then deltalog_maintenance (each DAG is unpaused first);
#   3. wait for every run; assert every run succeeded, the ingest tasks succeeded,
#      and the table holds each ingested day exactly once;
#   4. down: stop the stack and delete its volumes (also on failure).
#
# Usage: bash scripts/compose-check.sh     (KEEP=1 leaves the stack running)
# Needs docker with the compose plugin and curl; everything else runs in the containers.
set -euo pipefail
cd "$(dirname "$0")/.."

PROJECT=${COMPOSE_PROJECT_NAME:-deltalog-check}
API=${AIRFLOW_API:-http://localhost:8080}
TIMEOUT=${TIMEOUT:-1200}
compose() { docker compose -f docker-compose.yml -p "$PROJECT" "$@"; }
log() { echo "[compose-check] $*" >&2; }

down() {
  if [ "${KEEP:-0}" = "1" ]; then
    log "KEEP=1: leaving the stack up (docker compose -p $PROJECT down -v to remove it)"
  else
    compose down -v --remove-orphans >/dev/null 2>&1 || true
  fi
}
trap down EXIT

log "up (first build: several minutes)"
compose up -d --build

log "waiting for the REST API at $API"
waited=0
until curl -fsS "$API/api/v2/version" >/dev/null 2>&1; do
  waited=$((waited + 5))
  if [ "$waited" -ge 600 ]; then
    log "the api-server did not answer within 600 s"
    compose ps
    compose logs --tail 50 airflow-init airflow-apiserver
    exit 1
  fi
  sleep 5
done

# Trigger, wait and assert from inside the scheduler container: it has Python, the
# provider, the connections and the REST API on the compose network.
log "triggering the example DAGs and waiting (up to $TIMEOUT s)"
compose exec -T -e CHECK_TIMEOUT="$TIMEOUT" airflow-scheduler python - <<'PY'
import datetime as dt
import json
import os
import sys
import time
import urllib.error
import urllib.request

API = "http://airflow-apiserver:8080"
TIMEOUT = float(os.environ["CHECK_TIMEOUT"])


def call(method, path, body=None, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(API + path, data=data, headers=headers, method=method)
    with urllib.request.urlopen(req, timeout=60) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


token = call("GET", "/auth/token")["access_token"]
api = lambda method, path, body=None: call(method, path, body, token)  # noqa: E731

started = time.monotonic()
for dag_id in ("deltalog_ingest", "deltalog_maintenance", "deltalog_maintenance_on_change"):
    while True:
        try:
            api("GET", f"/api/v2/dags/{dag_id}")
            break
        except urllib.error.HTTPError:
            if time.monotonic() - started > 300:
                sys.exit(f"{dag_id} was not parsed within 300 s")
            time.sleep(5)
    api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})


def trigger(dag_id, logical_date=None):
    return api("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": logical_date})["dag_run_id"]


def wait(dag_id, run_id):
    quoted = urllib.request.quote(run_id, safe="")
    while time.monotonic() - started < TIMEOUT:
        run = api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quoted}")
        if run["state"] in ("success", "failed"):
            tis = api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quoted}/taskInstances")["task_instances"]
            return run, {ti["task_id"]: ti["state"] for ti in tis}
        time.sleep(5)
    sys.exit(f"{dag_id} {run_id} not finished within {TIMEOUT} s")


today_run = trigger("deltalog_ingest")
run, states = wait("deltalog_ingest", today_run)
assert run["state"] == "success", (today_run, states)
assert states == {"ensure_table": "success", "ingest_events": "success", "commit": "success"}, states
today = dt.date.fromisoformat(run["run_after"][:10])
backfill_day = today - dt.timedelta(days=3)
runs = [trigger("deltalog_ingest", f"{backfill_day}T00:00:00Z"), trigger("deltalog_ingest")]
for run_id in runs:
    run, states = wait("deltalog_ingest", run_id)
    assert run["state"] == "success", (run_id, states)
maintenance = trigger("deltalog_maintenance")
run, states = wait("deltalog_maintenance", maintenance)
assert run["state"] == "success", (maintenance, states)
assert states["health_check"] == "success" and states["summary"] == "success", states

import pyarrow.parquet as pq  # noqa: E402
from deltalog_provider.hooks.delta_table import DeltaTableHook  # noqa: E402

table = DeltaTableHook().get_table(os.environ["AIRFLOW_VAR_DELTALOG_TABLE_URI"])
snapshot = table.snapshot()
rows = {}
for path, values in zip(snapshot.files.column("path").to_pylist(), snapshot.files.column("partitionValues").to_pylist()):
    day = dict(values)["event_date"]
    with table.storage.fs.open(table.storage.join(path), "rb") as f:
        rows[day] = rows.get(day, 0) + pq.ParquetFile(f).metadata.num_rows
expected = int(os.environ.get("AIRFLOW_VAR_DELTALOG_INGEST_ROWS", "20000"))
assert rows == {str(today): expected, str(backfill_day): expected}, rows
print(f"[compose-check] ok: {rows} (each day once) at version {snapshot.version}, {time.monotonic() - started:.0f} s")
PY
log "passed"
