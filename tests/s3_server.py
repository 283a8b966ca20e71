"""A local S3-compatible server for tests: moto's server mode on 127.0.0.1.

Registered as a pytest plugin from ``conftest.py``. Fixtures:

- ``s3_server`` (session): starts the server once on a free port and yields its
  endpoint URL; requests go over real HTTP, so s3fs/aiobotocore, deltalake and
  subprocesses all talk to it like to S3.
- ``s3_bucket``: a fresh, empty bucket per test; yields its name.
- ``s3_storage_options``: fsspec/s3fs ``storage_options`` for that server
  (incl. ``endpoint_url``), to pass to ``DeltaTable``/``Storage``.
- ``s3_deltalake_options``: the same server in the form deltalake expects.
- ``s3_table_uri``: ``s3://<fresh bucket>/table``.

One fidelity fix: moto checks ``If-None-Match: *`` and then stores the object
in two steps, so two conditional PUTs of the same key racing on two server
threads can both succeed. Real S3 guarantees that exactly one wins (the other
gets 412, or 409 while the first is in flight). The server below serialises
PUTs so the conditional write is atomic, as it is on S3; everything else stays
concurrent.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"

_put_lock = threading.Lock()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _make_conditional_put_atomic() -> None:
    from moto.s3.responses import S3Response

    original = S3Response.put_object
    if getattr(original, "_deltalog_atomic", False):
        return

    @functools.wraps(original)
    def put_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _put_lock:
            return original(self, *args, **kwargs)

    put_object._deltalog_atomic = True  # type: ignore[attr-defined]
    S3Response.put_object = put_object  # type: ignore[method-assign]


def storage_options_for(endpoint: str) -> dict[str, Any]:
    """s3fs storage options for the test server (usable from subprocesses too)."""
    return {
        "key": ACCESS_KEY,
        "secret": SECRET_KEY,
        "endpoint_url": endpoint,
        "client_kwargs": {"region_name": REGION},
    }


def deltalake_options_for(endpoint: str) -> dict[str, str]:
    """deltalake (object_store) storage options for the test server."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
        "AWS_ALLOW_HTTP": "true",
    }


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """Start moto's S3 server on a free local port; yields the endpoint URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    _make_conditional_put_atomic()
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: str) -> str:
    """A new empty bucket on the test server."""
    import boto3

    name = f"test-{uuid.uuid4().hex[:16]}"
    client = boto3.client(
        "s3",
        endpoint_url=s3_server,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_storage_options(s3_server: str) -> dict[str, Any]:
    return storage_options_for(s3_server)


@pytest.fixture
def s3_deltalake_options(s3_server: str) -> dict[str, str]:
    return deltalake_options_for(s3_server)


@pytest.fixture
def s3_table_uri(s3_bucket: str) -> str:
    return f"s3://{s3_bucket}/table"
