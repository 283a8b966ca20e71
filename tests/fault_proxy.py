"""A fault-injecting HTTP proxy in front of a storage emulator (Azurite, fake-gcs-server).

Why at the HTTP level: on Azure and GCS deltalog talks through three clients at once
(obstore for reads and Azure's creates, adlfs or gcsfs for the rest), each with its own
retry policy. A proxy sees every request whichever client sends it, so a fault lands where
a real network would put it: between the client and the service.

Every request is counted by kind (``write``, ``delete``, ``list``, ``read``, ``stat``, from
the emulator fixture's classifier). A :class:`ProxyFault` hits the ``nth`` request of its
kind (whose path contains ``match``):

- ``fail``: answer 503 without forwarding (the service was busy; clients retry);
- ``fail_after``: forward, let the service act, then drop the connection without an answer
  (a lost response: the client cannot tell whether the request landed and retries);
- ``kill`` / ``kill_after``: SIGKILL the process ``kill_pid`` before forwarding, or after the
  service acted but before the answer reaches it (a worker dying mid-operation).
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

KINDS = ("write", "delete", "list", "read", "stat")
_KIND_OF = {"PUT": "write", "DELETE": "delete", "LIST": "list", "GET": "read", "HEAD": "stat"}
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


@dataclass
class ProxyFault:
    kind: str
    nth: int
    action: str = "fail"
    match: str | None = None

    def describe(self) -> str:
        return f"{self.action} at {self.kind} #{self.nth}" + (f" ({self.match})" if self.match else "")


@dataclass
class ProxyPlan:
    faults: list[ProxyFault] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    injected: list[str] = field(default_factory=list)
    kill_pid: int | None = None
    _seen: Counter = field(default_factory=Counter, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def hit(self, kind: str, path: str) -> ProxyFault | None:
        """Count one request; the fault it triggers, if any."""
        with self._lock:
            self.counts[kind] += 1
            chosen = None
            for i, f in enumerate(self.faults):
                if f.kind == kind and (not f.match or f.match in path):
                    self._seen[i] += 1
                    if chosen is None and self._seen[i] == f.nth:
                        chosen = f
            if chosen is not None:
                self.injected.append(f"{chosen.describe()}: {path}")
            return chosen


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up on a dropped connection: expected here, not worth a traceback


class FaultProxy:
    """Forward ``http://127.0.0.1:<port>`` to ``upstream``, counting requests and injecting the plan's faults."""

    def __init__(self, upstream: str, classify: Callable[[str, str, str], str]) -> None:
        target = urlparse(upstream)
        self.upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self.classify = classify
        self.plan = ProxyPlan()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                proxy.handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _any  # noqa: N815

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def reset(self, plan: ProxyPlan | None = None) -> ProxyPlan:
        self.plan = plan or ProxyPlan()
        return self.plan

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        path, _, query = h.path.partition("?")
        kind = _KIND_OF.get(self.classify(h.command, path, query), "other")
        plan = self.plan
        fault = plan.hit(kind, h.path) if kind in KINDS else None
        if fault is not None and fault.action == "kill":
            self._kill(plan)
            self._drop(h)
            return
        if fault is not None and fault.action == "fail":
            h.send_response(503, "Injected")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP_HEADERS and k.lower() != "host"}
        headers["Host"] = (
            f"{self.upstream[0]}:{self.upstream[1]}"  # fake-gcs-server reads a foreign host as a bucket name
        )
        conn.request(h.command, h.path, body=body if body or length else None, headers=headers)
        response = conn.getresponse()
        data = response.read()
        conn.close()
        if fault is not None and fault.action == "kill_after":
            self._kill(plan)
        if fault is not None and fault.action == "fail_after":
            self._drop(h)
            return
        h.send_response(response.status, response.reason)
        head = h.command == "HEAD"  # its Content-Length is the object's size: passed on as it came
        for k, v in response.getheaders():
            if k.lower() not in _HOP_HEADERS and (head or k.lower() != "content-length"):
                h.send_header(k, v)
        if not head:
            h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)

    @staticmethod
    def _drop(h: BaseHTTPRequestHandler) -> None:
        """Close the client's connection without an answer."""
        h.close_connection = True
        try:
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    @staticmethod
    def _kill(plan: ProxyPlan) -> None:
        if plan.kill_pid is not None:
            try:
                os.kill(plan.kill_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
