"""The small HTTP servers of the fake provider, the operator (``/healthz``, ``/metrics``) and
the gateway: one handler base with the response helpers and no access log, and one way to
build the threaded server.

:class:`QuietHandler` writes a whole response at once (status, ``Content-Type``,
``Content-Length``, any extra headers, then the body), so every endpoint answers with an exact
length and keeps HTTP/1.1 connections usable. Routing, status codes, bodies and the HTTP
version stay with each server. :func:`threaded_server` binds 127.0.0.1 unless the caller is
told otherwise (``--host``: in a pod, ``0.0.0.0``), with daemon request threads.

It must not know any endpoint, and never logs requests: access logs would drown the useful
ones, and the gateway logs structured lines of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

LOOPBACK = "127.0.0.1"
TEXT = "text/plain; charset=utf-8"
JSON = "application/json"


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler without access logs, with helpers that send one whole response."""

    def log_message(self, fmt: str, *args: Any) -> None:
        return

    def send_body(
        self, code: int, body: bytes, *, content_type: str = TEXT, headers: Mapping[str, str] | None = None
    ) -> None:
        """Status ``code``, ``Content-Type``, ``Content-Length``, ``headers`` in order, then ``body``."""
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, code: int, data: Any, *, headers: Mapping[str, str] | None = None) -> None:
        """``data`` as compact-separator JSON (``json.dumps`` defaults), no trailing newline."""
        self.send_body(code, json.dumps(data).encode(), content_type=JSON, headers=headers)

    def send_metrics(self, registry: CollectorRegistry) -> None:
        """200 with ``registry`` in the Prometheus text format."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        self.send_body(200, generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a request in flight never holds the process open

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *, backlog: int) -> None:
        self.request_queue_size = backlog  # read by server_activate(), inside __init__
        super().__init__(address, handler)


def threaded_server(
    handler: type[BaseHTTPRequestHandler],
    *,
    port: int,
    host: str = LOOPBACK,
    backlog: int = ThreadingHTTPServer.request_queue_size,
) -> ThreadingHTTPServer:
    """A server bound to ``host:port`` (0 picks a port), one daemon thread per request.

    ``backlog`` is the listen queue (the standard library's 5 unless told). The caller runs
    ``serve_forever`` in a thread and ``shutdown`` plus ``server_close`` at stop."""
    return _Server((host, port), handler, backlog=backlog)
