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

import dataclasses
import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import urlsplit

from agn.credentials import Tokens
from agn.gateway.credentials import credentials, named_refusal
from agn.gateway.metrics import BAD_REQUEST, NO_ROUTE, ROUTED, UPSTREAM_ERROR, GatewayMetrics
from agn.gateway.routing import AFFINITY, Decision
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class GatewayApp:
    """What the handler serves from: the routing table, this consumer's name, the upstream
    timeout, and where ``/healthz`` and ``/metrics`` come from (None: a plain ok, no metrics)."""

    table: RoutingTable
    consumer: str
    log: JsonLog
    upstream_timeout: float
    health: Health | None = None
    metrics: GatewayMetrics | None = None
    tokens: Tokens | None = None  # providers' credentials (agn.credentials); None: read no Secret

    def count(self, outcome: str, admission_state: str | None = None, *, sticky: bool = False) -> None:
        if self.metrics is not None:
            self.metrics.request(outcome, admission_state, sticky=sticky)


class GatewayHandler(QuietHandler):  # no access log: structured logs only
    """The gateway's requests, answered from :attr:`app` (a subclass per server sets it:
    :func:`make_handler`)."""

    server_version = "agn-gateway/0.1"
    protocol_version = "HTTP/1.1"
    app: ClassVar[GatewayApp]

    def do_GET(self) -> None:
        app, path = self.app, urlsplit(self.path).path
        if path == "/healthz":
            ok, report = app.health() if app.health is not None else (True, {"status": "ok"})
            self.send_json(200 if ok else 503, report)
        elif path == "/readyz":
            serving = app.table.serving
            self.send_json(200 if serving else 503, {"servingRevision": serving.revision if serving else None})
        elif path == "/routes":
            self.send_json(200, {"consumer": app.consumer, **app.table.snapshot()})
        elif path == "/metrics" and app.metrics is not None:
            self.send_metrics(app.metrics.registry)
        else:
            self.send_json(404, {"error": "not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self.app.count(BAD_REQUEST)
            self.send_json(413, {"error": "request body too large"})
            return
        body = self.rfile.read(length) if length else b"{}"
        if urlsplit(self.path).path != "/v1/completions":
            self.send_json(404, {"error": "not found"})
            return
        try:
            json.loads(body)
        except ValueError:
            self.app.count(BAD_REQUEST)
            self.send_json(400, {"error": "request body is not JSON", "routedBy": self.app.consumer})
            return
        self._complete(body)

    def _complete(self, body: bytes) -> None:
        app = self.app
        session = self.headers.get(SESSION_HEADER) or None
        group = self.headers.get(GROUP_HEADER) or None
        # The revision comes with the decision, under the table's lock: reading
        # ``table.serving`` afterwards could name a newer overlay than the one routed by.
        decision, revision = app.table.route_by(session, selection_group=group)
        routed_by = {REVISION_HEADER: str(revision)} if revision is not None else {}
        if decision.candidate is None:
            app.log.warning("no_route", session=session, selection_group=group, serving_revision=revision)
            app.count(NO_ROUTE)
            self.send_json(
                503,
                {
                    "error": "no admitted candidate",
                    "routedBy": app.consumer,
                    "reason": decision.reason,
                    "servingRevision": revision,
                    "selectionGroup": group,
                },
                headers=routed_by,
            )
            return
        self._proxy(body, decision, session=session, routed_by=routed_by)

    def _proxy(self, body: bytes, decision: Decision, *, session: str | None, routed_by: dict[str, str]) -> None:
        """Send the request to the chosen candidate's provider and its answer back (502 when it fails)."""
        app, cand = self.app, decision.candidate
        assert cand is not None, "only a decision with a candidate is proxied"
        app.log.debug(
            "routed",
            session=session,
            provider=cand.provider,
            candidate_id=cand.id,
            reason=decision.reason,
            previous_provider=decision.previous_provider,
        )
        sticky = decision.reason == AFFINITY
        try:
            headers = credentials(app.tokens, cand)
            reply = post_completion(cand.endpoint, body, session=session, timeout=app.upstream_timeout, headers=headers)
        except UpstreamError as exc:
            exc = named_refusal(app.tokens, cand, exc)
            app.log.warning("upstream_failed", provider=cand.provider, candidate_id=cand.id, error=str(exc))
            app.count(UPSTREAM_ERROR, cand.admission_state, sticky=sticky)
            self.send_json(
                502,
                {"error": str(exc), "routedBy": app.consumer, "provider": cand.provider, "candidateId": cand.id},
                headers={PROVIDER_HEADER: cand.provider, **routed_by},
            )
            return
        reply.update(
            {
                "routedBy": app.consumer,
                "candidateId": cand.id,
                "admission_state": cand.admission_state,
                "routing": decision.reason,
            }
        )
        app.count(ROUTED, cand.admission_state, sticky=sticky)
        self.send_json(200, reply, headers={PROVIDER_HEADER: cand.provider, **routed_by})


def make_handler(app: GatewayApp) -> type[BaseHTTPRequestHandler]:
    """A handler class serving ``app`` (one per server, so two servers in a process never share one)."""
    return type("Handler", (GatewayHandler,), {"app": app})


def serve_app(app: GatewayApp, *, port: int, host: str = LOOPBACK) -> ThreadingHTTPServer:
    """Bind ``host``:``port`` for ``app`` (loopback unless told otherwise; 0 picks a port). The
    caller runs ``serve_forever``."""
    return threaded_server(make_handler(app), host=host, port=port)
