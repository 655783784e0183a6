"""The operator's ``/healthz``: a tiny HTTP endpoint for liveness/readiness probes and
``env status``. It only reports; it never changes the operator's behaviour.

The body is one JSON object: ``ok``, ``detail`` and whatever else the check reports (the
operator adds its leadership — ``leader``, ``identity``, ``holder`` — and its write
counters). The status is 200 when ``ok``, else 503: a healthy follower answers 200.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def serve_health(check: Callable[[], tuple[bool, dict[str, Any]]], *, host: str, port: int) -> ThreadingHTTPServer:
    """Bind ``host:port``; the caller runs ``serve_forever`` in a thread and ``shutdown`` at stop."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            if self.path != "/healthz":
                self.send_error(404)
                return
            ok, report = check()
            body = (json.dumps(report, sort_keys=True, default=str) + "\n").encode()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
