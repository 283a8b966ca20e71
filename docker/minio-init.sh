#!/bin/sh
# Waits for MinIO, then creates the bucket the example Delta table lives in.
# Idempotent: safe on every `docker compose up`.
set -eu
BUCKET="${DELTALOG_BUCKET:-deltalog}"
tries=0
until mc alias set local http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null 2>&1; do
  tries=$((tries + 1))
  if [ "$tries" -ge 60 ]; then
    echo "minio-init: MinIO did not come up within 60 s" >&2
    exit 1
  fi
  sleep 1
done
mc mb --ignore-existing "local/$BUCKET"
echo "minio-init: bucket $BUCKET ready"
