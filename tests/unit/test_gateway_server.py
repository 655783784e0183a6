"""The gateway's HTTP surface in-process, routing to an in-process fake provider (loopback only)."""

from __future__ import annotations

import io
import json
import socket
import threading
import urllib.error
import urllib.request

import pytest

from agn.gateway.metrics import GatewayMetrics
from agn.gateway.server import GatewayApp, serve_app
from agn.gateway.table import RoutingTable
from agn.logs import JsonLog
from agn.model import ADMITTED, EXISTING_ONLY, Candidate, Overlay, overlay_digest
from agn.provider.server import FakeProvider
from agn.provider.server import serve_async as serve_provider


def overlay_of(revision: int, cands: list[Candidate]) -> Overlay:
    return Overlay("net", "c1", revision, overlay_digest(cands), tuple(sorted(cands)))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def rig():
    servers = []

    def start(server):
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    provider = start(serve_provider(FakeProvider(name="p1"), port=0))
    table = RoutingTable()
    metrics = GatewayMetrics(accepted=lambda: None, serving=lambda: o.revision if (o := table.serving) else None)
    gateway = start(
        serve_app(
            GatewayApp(
                table=table,
                consumer="c1",
                log=JsonLog(component="gateway", stream=io.StringIO()),
                upstream_timeout=5,
                metrics=metrics,
            ),
            port=0,
        )
    )
    yield table, gateway, provider
    for server in servers:
        server.shutdown()
        server.server_close()


def request(url: str, *, method: str = "GET", data: bytes | None = None, headers: dict | None = None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read()), resp.headers
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers


def test_health_and_readiness(rig):
    table, gateway, provider = rig
    assert request(f"{gateway}/healthz")[0] == 200
    assert request(f"{gateway}/readyz")[0] == 503
    table.swap(overlay_of(1, [Candidate("c-1", "p1", provider, "g", 0, ADMITTED)]))
    assert request(f"{gateway}/readyz")[:2] == (200, {"servingRevision": 1})


def test_completion_is_proxied_and_annotated(rig):
    table, gateway, provider = rig
    table.swap(overlay_of(1, [Candidate("c-1", "p1", provider, "g", 0, ADMITTED)]))
    code, body, headers = request(
        f"{gateway}/v1/completions", method="POST", data=b'{"prompt": "hi"}', headers={"x-session-id": "s1"}
    )
    assert code == 200 and headers["x-agn-provider"] == "p1" and headers["x-agn-overlay-revision"] == "1"
    assert body["provider"] == "p1" and body["session"] == "s1" and body["text"] == "[p1] hi"
    assert (body["routedBy"], body["candidateId"], body["admission_state"]) == ("c1", "c-1", ADMITTED)
    routes = request(f"{gateway}/routes")[1]
    assert routes["consumer"] == "c1" and routes["servingRevision"] == 1 and routes["affinities"] == {"s1": "p1"}


def test_no_admitted_candidate_is_503(rig):
    table, gateway, provider = rig
    code, _, headers = request(f"{gateway}/v1/completions", method="POST", data=b"{}")
    assert code == 503 and "x-agn-overlay-revision" not in headers  # nothing served yet
    table.swap(overlay_of(1, [Candidate("c-1", "p1", provider, "g", 0, EXISTING_ONLY)]))
    code, body, headers = request(
        f"{gateway}/v1/completions", method="POST", data=b"{}", headers={"x-session-id": "s9"}
    )
    assert code == 503 and body["error"] == "no admitted candidate" and body["servingRevision"] == 1
    assert headers["x-agn-overlay-revision"] == "1"


def test_unreachable_provider_is_502(rig):
    table, gateway, _ = rig
    table.swap(overlay_of(1, [Candidate("c-1", "p1", f"http://127.0.0.1:{closed_port()}", "g", 0, ADMITTED)]))
    code, body, headers = request(f"{gateway}/v1/completions", method="POST", data=b"{}")
    assert code == 502 and body["provider"] == "p1" and headers["x-agn-provider"] == "p1"
    assert headers["x-agn-overlay-revision"] == "1"


def test_bad_requests(rig):
    _, gateway, _ = rig
    assert request(f"{gateway}/v1/completions", method="POST", data=b"not json")[0] == 400
    assert request(f"{gateway}/nope", method="POST", data=b"{}")[0] == 404
    assert request(f"{gateway}/nope")[0] == 404


def scrape(gateway: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{gateway}/metrics", timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_count_every_outcome_and_revisions_are_absent_until_served(rig):
    table, gateway, provider = rig
    m = scrape(gateway)
    assert ("agn_gateway_serving_revision", ()) not in m and ("agn_gateway_accepted_revision", ()) not in m
    request(f"{gateway}/v1/completions", method="POST", data=b"{}")  # nothing served: no route
    request(f"{gateway}/v1/completions", method="POST", data=b"not json")
    table.swap(overlay_of(3, [Candidate("c-1", "p1", provider, "g", 0, ADMITTED)]))
    for _ in range(2):
        request(f"{gateway}/v1/completions", method="POST", data=b"{}", headers={"x-session-id": "s1"})
    table.swap(overlay_of(4, [Candidate("c-1", "p1", f"http://127.0.0.1:{closed_port()}", "g", 0, ADMITTED)]))
    request(f"{gateway}/v1/completions", method="POST", data=b"{}")
    m = scrape(gateway)
    assert m[("agn_gateway_serving_revision", ())] == 4
    assert m[("agn_gateway_requests_total", (("admission_state", "none"), ("outcome", "no_route")))] == 1
    assert m[("agn_gateway_requests_total", (("admission_state", "none"), ("outcome", "bad_request")))] == 1
    assert m[("agn_gateway_requests_total", (("admission_state", "admitted"), ("outcome", "routed")))] == 2
    assert m[("agn_gateway_requests_total", (("admission_state", "admitted"), ("outcome", "upstream_error")))] == 1
    assert m[("agn_gateway_sticky_hits_total", ())] == 1  # the second request of session s1
