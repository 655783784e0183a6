"""The gateway's HTTP server (127.0.0.1 unless given ``--host``; in a pod ``0.0.0.0``).

- ``GET /healthz`` — JSON: the API server in use, whether the overlay watch is live, the
  serving and the newest seen overlay revision, an index revision still waiting for its
  shards (``pendingRevision``); 503 once the watch has failed past its bound
  (liveness: a restart reconnects).
- ``GET /readyz`` — 200 once an overlay is being served, else 503.
- ``GET /routes`` — JSON: consumer, serving revision, candidates, session affinities.
- ``GET /metrics`` — Prometheus text (:mod:`agn.gateway.metrics`): requests by outcome and
  admission state, sticky-session hits, accepted, serving and pending revisions, shard GETs.
- ``POST /v1/completions`` — route by :mod:`agn.gateway.routing` (headers ``x-session-id``
  and optionally ``x-selection-group``) and proxy the body to the provider; the provider's
  JSON plus ``routedBy``, ``candidateId``, ``admission_state``, and headers ``x-agn-provider``
  and ``x-agn-overlay-revision`` (the overlay revision the candidate was chosen from, taken
  with the decision under the table's lock; also on 502 and, once an overlay is served, 503).
  503 JSON when no admitted candidate exists, 502 JSON when the provider fails.

Handlers only read the routing table through :meth:`RoutingTable.route`/``snapshot``; they
never talk to the Kubernetes API.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from agn.gateway.metrics import BAD_REQUEST, NO_ROUTE, ROUTED, UPSTREAM_ERROR, GatewayMetrics
from agn.gateway.routing import AFFINITY
from agn.gateway.table import RoutingTable
from agn.gateway.upstream import UpstreamError, post_completion
from agn.httpserve import LOOPBACK, QuietHandler, threaded_server
from agn.logs import JsonLog

MAX_BODY_BYTES = 1 << 20
SESSION_HEADER = "x-session-id"
GROUP_HEADER = "x-selection-group"
PROVIDER_HEADER = "x-agn-provider"
REVISION_HEADER = "x-agn-overlay-revision"  # the overlay revision the request was routed by


Health = Callable[[], tuple[bool, dict[str, Any]]]


def make_handler(
    table: RoutingTable,
    *,
    consumer: str,
    log: JsonLog,
    upstream_timeout: float,
    health: Health | None = None,
    metrics: GatewayMetrics | None = None,
) -> type[BaseHTTPRequestHandler]:
    def count(outcome: str, admission_state: str | None = None, *, sticky: bool = False) -> None:
        if metrics is not None:
            metrics.request(outcome, admission_state, sticky=sticky)

    class Handler(QuietHandler):  # no access log: structured logs only
        server_version = "agn-gateway/0.1"
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/healthz":
                ok, report = health() if health is not None else (True, {"status": "ok"})
                self.send_json(200 if ok else 503, report)
            elif path == "/readyz":
                serving = table.serving
                self.send_json(200 if serving else 503, {"servingRevision": serving.revision if serving else None})
            elif path == "/routes":
                self.send_json(200, {"consumer": consumer, **table.snapshot()})
            elif path == "/metrics" and metrics is not None:
                self.send_metrics(metrics.registry)
            else:
                self.send_json(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self.close_connection = True
                count(BAD_REQUEST)
                self.send_json(413, {"error": "request body too large"})
                return
            body = self.rfile.read(length) if length else b"{}"
            if urlsplit(self.path).path != "/v1/completions":
                self.send_json(404, {"error": "not found"})
                return
            try:
                json.loads(body)
            except ValueError:
                count(BAD_REQUEST)
                self.send_json(400, {"error": "request body is not JSON", "routedBy": consumer})
                return
            self._complete(body)

        def _complete(self, body: bytes) -> None:
            session = self.headers.get(SESSION_HEADER) or None
            group = self.headers.get(GROUP_HEADER) or None
            # The revision comes with the decision, under the table's lock: reading
            # ``table.serving`` afterwards could name a newer overlay than the one routed by.
            decision, revision = table.route_by(session, selection_group=group)
            routed_by = {REVISION_HEADER: str(revision)} if revision is not None else {}
            if decision.candidate is None:
                log.warning("no_route", session=session, selection_group=group, serving_revision=revision)
                count(NO_ROUTE)
                self.send_json(
                    503,
                    {
                        "error": "no admitted candidate",
                        "routedBy": consumer,
                        "reason": decision.reason,
                        "servingRevision": revision,
                        "selectionGroup": group,
                    },
                    headers=routed_by,
                )
                return
            cand = decision.candidate
            log.debug(
                "routed",
                session=session,
                provider=cand.provider,
                candidate_id=cand.id,
                reason=decision.reason,
                previous_provider=decision.previous_provider,
            )
            sticky = decision.reason == AFFINITY
            try:
                reply = post_completion(cand.endpoint, body, session=session, timeout=upstream_timeout)
            except UpstreamError as exc:
                log.warning("upstream_failed", provider=cand.provider, candidate_id=cand.id, error=str(exc))
                count(UPSTREAM_ERROR, cand.admission_state, sticky=sticky)
                self.send_json(
                    502,
                    {"error": str(exc), "routedBy": consumer, "provider": cand.provider, "candidateId": cand.id},
                    headers={PROVIDER_HEADER: cand.provider, **routed_by},
                )
                return
            reply.update(
                {
                    "routedBy": consumer,
                    "candidateId": cand.id,
                    "admission_state": cand.admission_state,
                    "routing": decision.reason,
                }
            )
            count(ROUTED, cand.admission_state, sticky=sticky)
            self.send_json(200, reply, headers={PROVIDER_HEADER: cand.provider, **routed_by})

    return Handler


def serve(
    table: RoutingTable,
    *,
    consumer: str,
    log: JsonLog,
    port: int,
    upstream_timeout: float,
    host: str = LOOPBACK,
    health: Health | None = None,
    metrics: GatewayMetrics | None = None,
) -> ThreadingHTTPServer:
    """Bind ``host``:``port`` (loopback unless told otherwise; 0 picks a port). The caller runs ``serve_forever``."""
    handler = make_handler(
        table, consumer=consumer, log=log, upstream_timeout=upstream_timeout, health=health, metrics=metrics
    )
    return threaded_server(handler, host=host, port=port)
