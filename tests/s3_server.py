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
concurrent. The same server answers DynamoDB (moto routes by the request's
signing scope), whose conditional PutItem moto also checks then stores: it is
serialised the same way (``_make_conditional_put_atomic``).
"""

from __future__ import annotations

import functools
import json
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
_dynamodb_put_lock = threading.Lock()

#: A path no S3 client requests: the counting server answers it with its request counts.
COUNTS_PATH = "/__deltalog_request_counts"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serialise(cls: Any, method: str, lock: Any) -> None:
    """Make ``cls.method`` hold ``lock`` (once: a second call finds it wrapped)."""
    original = getattr(cls, method)
    if getattr(original, "_deltalog_atomic", False):
        return

    @functools.wraps(original)
    def serialised(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, *args, **kwargs)

    serialised._deltalog_atomic = True  # type: ignore[attr-defined]
    setattr(cls, method, serialised)


def _make_conditional_put_atomic() -> None:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.s3.responses import S3Response

    _serialise(S3Response, "put_object", _put_lock)
    _serialise(DynamoDBBackend, "put_item", _dynamodb_put_lock)


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


class RequestCounter:
    """Requests the server answered, by kind (GET, HEAD, LIST, PUT, DELETE, ...): what a client costs.

    Counted at the server, so deltalog and deltalake are measured the same way.
    ``snapshot()`` then ``since(before)`` gives the requests of one operation.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def record(self, environ: dict[str, Any]) -> None:
        method = environ.get("REQUEST_METHOD", "?")
        query = environ.get("QUERY_STRING", "")
        path = environ.get("PATH_INFO", "")
        kind = method
        if method == "GET" and ("list-type" in query or "delimiter" in query or path.count("/") <= 1):
            kind = "LIST"
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def since(self, before: dict[str, int]) -> dict[str, int]:
        now = self.snapshot()
        return {k: now[k] - before.get(k, 0) for k in sorted(now) if now[k] - before.get(k, 0)}


def start_s3_server(counter: RequestCounter | None = None, port: int | None = None) -> tuple[str, Any]:
    """Start moto's S3 server on a free local port (requests counted into ``counter`` if given).

    Returns (endpoint URL, server); call ``server.stop()`` when done. Used by the
    fixture below and by the benchmarks.
    """
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    _make_conditional_put_atomic()

    class _Server(ThreadedMotoServer):
        def _server_entry(self) -> None:
            from moto.moto_server.werkzeug_app import (
                DomainDispatcherApplication,
                MotoRequestHandler,
                create_backend_app,
            )
            from werkzeug.serving import make_server

            app = DomainDispatcherApplication(create_backend_app)

            def counted(environ: dict[str, Any], start_response: Any) -> Any:
                if environ.get("PATH_INFO") == COUNTS_PATH:  # the request counts, for a client in another process
                    body = json.dumps(counter.snapshot() if counter is not None else {}).encode()
                    start_response("200 OK", [("Content-Type", "application/json")])
                    return [body]
                if counter is not None:
                    counter.record(environ)
                return app(environ, start_response)

            self._server = make_server(self._ip_address, self._port, counted, True, request_handler=MotoRequestHandler)
            self._server_ready_event.set()
            self._server.serve_forever()

    port = port or _free_port()
    server = _Server(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return f"http://127.0.0.1:{port}", server


class RemoteCounter:
    """The counts of a server running in another process (``python tests/s3_server.py``)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def snapshot(self) -> dict[str, int]:
        import urllib.request

        with urllib.request.urlopen(self.endpoint + COUNTS_PATH, timeout=10) as resp:
            return {k: int(v) for k, v in json.loads(resp.read()).items()}

    def since(self, before: dict[str, int]) -> dict[str, int]:
        now = self.snapshot()
        return {k: now[k] - before.get(k, 0) for k in sorted(now) if now[k] - before.get(k, 0)}


def start_s3_server_process() -> tuple[str, RemoteCounter, Any]:
    """The counting server in its own process (as S3 is: it then takes no CPU from the client's
    interpreter). Returns (endpoint, counter, process); terminate the process when done."""
    import subprocess
    import sys
    import time
    import urllib.request

    port = _free_port()
    proc = subprocess.Popen([sys.executable, __file__, str(port)], stdout=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(endpoint + COUNTS_PATH, timeout=1).read()
            return endpoint, RemoteCounter(endpoint), proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"the S3 test server exited with {proc.returncode}") from None
            time.sleep(0.05)
    proc.terminate()
    raise RuntimeError("the S3 test server did not start within 10 s")


@pytest.fixture(scope="session")
def s3_request_counter() -> RequestCounter:
    """Every request the session's S3 test server answers, by kind."""
    return RequestCounter()


@pytest.fixture(scope="session")
def s3_server(s3_request_counter: RequestCounter) -> Iterator[str]:
    """Start moto's S3 server on a free local port; yields the endpoint URL."""
    endpoint, server = start_s3_server(s3_request_counter)
    try:
        yield endpoint
    finally:
        server.stop()


def create_bucket(endpoint: str, name: str | None = None) -> str:
    """A new empty bucket on the server at ``endpoint`` (a fresh name unless given); returns its name."""
    import boto3

    name = name or f"test-{uuid.uuid4().hex[:16]}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_bucket(s3_server: str) -> str:
    """A new empty bucket on the test server."""
    return create_bucket(s3_server)


@pytest.fixture
def s3_storage_options(s3_server: str) -> dict[str, Any]:
    return storage_options_for(s3_server)


@pytest.fixture
def s3_deltalake_options(s3_server: str) -> dict[str, str]:
    return deltalake_options_for(s3_server)


@pytest.fixture
def s3_table_uri(s3_bucket: str) -> str:
    return f"s3://{s3_bucket}/table"


if __name__ == "__main__":  # python tests/s3_server.py PORT: a counting server until terminated
    import sys

    start_s3_server(RequestCounter(), port=int(sys.argv[1]))
    threading.Event().wait()
