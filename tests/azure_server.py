"""A local Azure Blob Storage for tests: Azurite (npm ``azurite``, pinned in scripts/emulators/azurite).

Registered as a pytest plugin from ``conftest.py``. Fixtures:

- ``azure_server`` (session): Azurite's Blob service on a free 127.0.0.1 port, in memory,
  installed into ~/.cache/deltalog on first use (scripts/emulators.py); stopped at the end.
- ``azure_container``: a fresh, empty container per test; yields its name.
- ``azure_storage_options``: adlfs storage options for that server (a connection string:
  the only way adlfs reaches an ``http://`` endpoint).
- ``azure_deltalake_options``: the same account in the form deltalake (object_store) expects.
- ``azure_table_uri``: ``abfs://<fresh container>/table``.

Azurite differs from the real service in ways the tests and docs/azure-gcs.md name: no
hierarchical namespace (ADLS Gen2's DFS endpoint, directories, atomic rename), so the
Blob API is what is tested; one Node.js process answers every request.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from emulator_process import EmulatorProcess, installed, session_server, store_fixtures

#: Azurite's well-known development account (public, documented by Microsoft; not a secret).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def classify(method: str, path: str, query: str) -> str:
    """A request's kind, named as the S3 test server names them."""
    if method == "GET" and "comp=list" in query:
        return "LIST"
    if "restype=container" in query and method == "PUT":
        return "CREATE_CONTAINER"
    return method


def start_azurite() -> EmulatorProcess:
    """Azurite's Blob service on a free port (installed first if needed); ``stop()`` it when done."""
    command = installed("azurite")

    def argv(port: int, workdir: Path) -> list[str]:
        return [
            *command,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",  # the Python SDK may be newer than the emulator's API version
            "--disableTelemetry",
        ]

    # An unsigned request for the account's containers is refused (403): the server is up.
    return EmulatorProcess("azurite", argv, f"/{ACCOUNT}?comp=list", classify, ready_status=(200, 403))


def blob_endpoint(endpoint: str) -> str:
    return f"{endpoint}/{ACCOUNT}"


def connection_string(endpoint: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint={blob_endpoint(endpoint)};"
    )


def storage_options_for(endpoint: str) -> dict[str, Any]:
    """adlfs storage options for the emulator (usable from subprocesses too)."""
    return {"connection_string": connection_string(endpoint)}


def deltalake_options_for(endpoint: str) -> dict[str, str]:
    """deltalake (object_store) storage options for the emulator."""
    return {
        "account_name": ACCOUNT,
        "account_key": ACCOUNT_KEY,
        "endpoint": blob_endpoint(endpoint),
        "allow_http": "true",
    }


def create_container(endpoint: str, name: str | None = None) -> str:
    from azure.storage.blob import BlobServiceClient

    name = name or f"test-{uuid.uuid4().hex[:16]}"
    with BlobServiceClient.from_connection_string(connection_string(endpoint)) as client:
        client.create_container(name)
    return name


azure_emulator = session_server(start_azurite, "Azurite's Blob service for the session.")
azure_server, azure_container, azure_storage_options, azure_deltalake_options, azure_table_uri = store_fixtures(
    "azure", "abfs", create_container, storage_options_for, deltalake_options_for
)
