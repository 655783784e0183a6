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
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from agn.httpserve import JSON, QuietHandler, threaded_server

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

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics" and metrics is not None:
                self.send_metrics(metrics)
                return
            if self.path != "/healthz":
                self.send_error(404)
                return
            ok, report = check()
            body = json.dumps(report, sort_keys=True, default=str) + "\n"
            self.send_body(200 if ok else 503, body.encode(), content_type=JSON)

    return threaded_server(Handler, host=host, port=port)
