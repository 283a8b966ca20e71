"""A local Google Cloud Storage for tests: fake-gcs-server (Go module, built by scripts/emulators.py).

Registered as a pytest plugin from ``conftest.py``. Fixtures:

- ``gcs_server`` (session): fake-gcs-server on a free 127.0.0.1 port, plain HTTP, in-memory
  backend (whose precondition check and write happen under one lock, so ``ifGenerationMatch=0``
  is atomic as on GCS); built into ~/.cache/deltalog on first use; stopped at the end.
- ``gcs_bucket``: a fresh, empty bucket per test; yields its name.
- ``gcs_storage_options``: gcsfs storage options for that server (anonymous, ``endpoint_url``).
- ``gcs_deltalake_options``: the same server in the form deltalake (object_store) expects, for reads.
- ``gcs_table_uri``: ``gs://<fresh bucket>/table``.

fake-gcs-server serves GCS's JSON API (what gcsfs speaks) but not the XML API's object
upload (``PUT /bucket/object``) that object_store, hence obstore and deltalake, use for
writes; reads (XML GET, JSON listing) work. docs/azure-gcs.md says what follows from that.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from emulator_process import EmulatorProcess, installed, session_server, store_fixtures

PROJECT = "deltalog-test"


def classify(method: str, path: str, query: str) -> str:
    """A request's kind, named as the S3 test server names them."""
    if path.startswith("/upload/"):
        return "PUT"  # an object upload (POST uploadType=multipart/media)
    if method == "GET" and ("list-type" in query or path.endswith("/o") or path.endswith("/o/")):
        return "LIST"
    if method == "GET" and (path.startswith("/download/") or "alt=media" in query):
        return "GET"
    if method == "GET" and "/o/" in path and path.startswith("/storage/v1/"):
        return "HEAD"  # object metadata (gcsfs's info)
    if path.startswith("/storage/v1/b") and method == "POST" and path.rstrip("/").endswith("/b"):
        return "CREATE_BUCKET"
    if path.startswith("/_internal/"):
        return ""
    return method


def start_fake_gcs_server() -> EmulatorProcess:
    """fake-gcs-server on a free port (built first if needed); ``stop()`` it when done."""
    binary = installed("fake-gcs-server")

    def argv(port: int, workdir: Path) -> list[str]:
        flags = {
            "-scheme": "http",
            "-host": "127.0.0.1",
            "-port": str(port),
            "-backend": "memory",
            # XML-API style requests (object_store's GETs: /bucket/object) are routed by this host.
            "-public-host": f"127.0.0.1:{port}",
            "-external-url": f"http://127.0.0.1:{port}",
            "-log-level": "info",
        }
        return [binary, *(part for pair in flags.items() for part in pair)]

    return EmulatorProcess("fake-gcs-server", argv, "/_internal/healthcheck", classify)


def storage_options_for(endpoint: str) -> dict[str, Any]:
    """gcsfs storage options for the emulator (usable from subprocesses too)."""
    return {"token": "anon", "endpoint_url": endpoint, "project": PROJECT}


def deltalake_options_for(endpoint: str) -> dict[str, str]:
    """deltalake (object_store) storage options for reading from the emulator."""
    return {"google_base_url": endpoint, "google_skip_signature": "true", "allow_http": "true"}


def create_bucket(endpoint: str, name: str | None = None) -> str:
    name = name or f"test-{uuid.uuid4().hex[:16]}"
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project={PROJECT}",
        data=json.dumps({"name": name}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200, resp.status
    return name


gcs_emulator = session_server(start_fake_gcs_server, "fake-gcs-server for the session.")
gcs_server, gcs_bucket, gcs_storage_options, gcs_deltalake_options, gcs_table_uri = store_fixtures(
    "gcs", "gs", create_bucket, storage_options_for, deltalake_options_for
)
