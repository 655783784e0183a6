"""The operator's ``/healthz`` and ``/metrics``: a tiny HTTP endpoint for liveness/readiness
probes, ``env status`` and Prometheus. It only reports; it never changes the operator's behaviour.

The ``/healthz`` body is one JSON object: ``ok``, ``detail`` and whatever else the check
reports (the operator adds its leadership — ``leader``, ``identity``, ``holder`` — and its
write counters). The status is 200 when ``ok``, else 503: a healthy follower answers 200.
``/metrics`` is the Prometheus text format of the given registry (:mod:`.metrics`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


def serve_health(
    check: Callable[[], tuple[bool, dict[str, Any]]],
    *,
    host: str,
    port: int,
    metrics: CollectorRegistry | None = None,
) -> ThreadingHTTPServer:
    """Bind ``host:port``; the caller runs ``serve_forever`` in a thread and ``shutdown`` at stop."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            if self.path == "/metrics" and metrics is not None:
                from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

                self._send(200, CONTENT_TYPE_LATEST, generate_latest(metrics))
                return
            if self.path != "/healthz":
                self.send_error(404)
                return
            ok, report = check()
            self._send(
                200 if ok else 503,
                "application/json",
                (json.dumps(report, sort_keys=True, default=str) + "\n").encode(),
            )

        def _send(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
