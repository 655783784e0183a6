"""Credentials over real loopback HTTP, in-process: the fake provider's API key check (as
llama.cpp's server does it), the operator's probe with a provider's token, and the gateway's
completion with it. The token never shows in an answer, an outcome or a log."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import urllib.error
import urllib.request

import pytest
from test_credentials import REF, TOKEN, Clock, FakeSecrets

from agn.credentials import DEFAULT_TTL, SecretRef, Tokens
from agn.gateway.server import GatewayApp, serve_app
from agn.gateway.table import RoutingTable
from agn.logs import JsonLog
from agn.model import ADMITTED, Candidate, Overlay, overlay_digest
from agn.operator.credentials import probe_provider
from agn.operator.probe_http import probe_session
from agn.provider.apikey import INVALID_API_KEY
from agn.provider.server import FakeProvider, serve_async


def start(server) -> str:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def keyed():
    """A fake llama.cpp server (its exposition and /health) that requires the key TOKEN."""
    state = FakeProvider(name="p1", metrics_format="llamacpp", api_keys=(TOKEN,))
    server = serve_async(state, port=0)
    yield state, start(server)
    server.shutdown()
    server.server_close()


def get(url: str, headers: dict | None = None, *, method: str = "GET", data: bytes | None = None):
    req = urllib.request.Request(url, headers=headers or {}, method=method, data=data)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


def test_the_fake_checks_the_key_as_llama_cpp_does(keyed):
    state, url = keyed
    assert get(f"{url}/health")[0] == 200  # public
    assert get(f"{url}/admin/state")[0] == 200  # the tests' loopback switch
    code, body, headers = get(f"{url}/metrics")
    assert code == 401 and json.loads(body) == INVALID_API_KEY
    assert headers["Content-Type"].startswith("application/json")
    assert get(f"{url}/metrics", {"Authorization": "Bearer wrong"})[0] == 401
    assert get(f"{url}/healthz")[0] == 401  # not a public path on a keyed engine (llama.cpp: no route, but keyed first)
    assert get(f"{url}/nowhere")[0] == 401
    for headers in ({"Authorization": f"Bearer {TOKEN}"}, {"Authorization": TOKEN}, {"X-Api-Key": TOKEN}):
        assert get(f"{url}/metrics", headers)[0] == 200, headers
    completion = get(f"{url}/v1/completions", method="POST", data=b"{}")
    assert completion[0] == 401
    assert json.loads(get(f"{url}/admin/state")[1])["apiKeyRequired"] is True
    assert TOKEN not in get(f"{url}/admin/state")[1].decode()
    pooled = get(f"{url}/pool/p9/metrics")
    assert pooled[0] == 401  # a pool's providers inherit the keys
    bad = get(f"{url}/admin/state", method="POST", data=b'{"apiKeys": "k", "waiting": 3}')
    assert bad[0] == 400 and state.snapshot()["waiting"] == 0  # refused whole
    assert get(f"{url}/admin/state", method="POST", data=b'{"apiKeys": []}')[0] == 200
    assert get(f"{url}/metrics")[0] == 200  # no key set: nothing required


def probe(url: str, spec_extra: dict, tokens: Tokens):
    spec = {"endpoint": url, **spec_extra}

    async def once():
        async with probe_session(concurrency=1) as session:
            return await probe_provider(session, spec, tokens=tokens, timeout=2, now=1.0)

    return asyncio.run(once())


def authorization(name: str = REF.name, key: str = REF.key) -> dict:
    return {"authorization": SecretRef(name, key).to_dict()}


def test_the_probe_sends_the_token_and_reads_the_load(keyed):
    _, url = keyed
    tokens = Tokens(FakeSecrets({REF.name: {REF.key: TOKEN.encode()}}))
    out = probe(url, {**authorization(), "metrics": {"format": "llamacpp"}}, tokens)
    assert (out.healthy, out.metrics_ok, out.metrics_error) == (True, True, None)
    # Unpinned, /healthz comes first: with the token it is a 404 (no such route), then /health.
    out = probe(url, authorization(), tokens)
    assert (out.healthy, out.metrics_ok, out.health_path) == (True, True, "/health")


def test_a_wrong_token_is_named_and_read_again_next_time(keyed):
    _, url = keyed
    secrets = FakeSecrets({REF.name: {REF.key: b"wrong"}})
    tokens = Tokens(secrets)
    out = probe(url, {**authorization(), "metrics": {"format": "llamacpp"}}, tokens)
    assert out.healthy is True  # llama.cpp's /health is public
    assert out.metrics_reason == "Unauthorized" and not out.metrics_ok
    assert out.metrics_error == (
        "GET /metrics: 401 Unauthorized; check spec.authorization.credentials secret engine-key key token"
    )
    secrets.secrets[REF.name] = {REF.key: TOKEN.encode()}  # rotated to the right one
    assert probe(url, {**authorization(), "metrics": {"format": "llamacpp"}}, tokens).metrics_ok
    assert secrets.reads == 2  # the 401 forgot the cached token
    # No credentials at all, unpinned: /healthz and /get_model_info are keyed too (a 401 is no
    # verdict on the server), /health is public: available, its load refused and named.
    unpinned = probe(url, {}, tokens)
    assert (unpinned.healthy, unpinned.health_path, unpinned.health_reason) == (True, "/health", None)
    assert (unpinned.metrics_reason, unpinned.metrics_error) == (
        "Unauthorized",
        "GET /metrics: 401 Unauthorized; the engine asks for credentials: set spec.authorization",
    )


def test_each_engine_format_guards_its_own_paths_with_its_own_401(keyed):
    state, url = keyed
    state.metrics_format = "sglang"
    assert get(f"{url}/metrics")[0] == 200  # SGLang leaves /health* and /metrics open
    code, body, _ = get(f"{url}/get_model_info")
    assert (code, json.loads(body)) == (401, {"error": "Unauthorized"})
    assert get(f"{url}/get_model_info", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
    # A wrong token on SGLang: up (its 401 there), its load read, the note naming the Secret key.
    tokens = Tokens(FakeSecrets({REF.name: {REF.key: b"wrong"}}))
    out = probe(url, {**authorization(), "metrics": {"format": "sglang"}}, tokens)
    assert (out.healthy, out.metrics_ok) == (True, True)
    assert out.health_note == (
        "HTTP 401: the server is up, behind sglang's --api-key; "
        "check spec.authorization.credentials secret engine-key key token"
    )
    state.metrics_format = "vllm"  # vLLM's key guards /v1/* only
    assert (get(f"{url}/health")[0], get(f"{url}/metrics")[0]) == (200, 200)
    assert get(f"{url}/v1/completions", method="POST", data=b"{}")[0] == 401


def test_a_missing_secret_or_key_is_not_dialled(keyed):
    state, url = keyed
    before = state.snapshot()["healthChecks"]
    out = probe(url, authorization(name="absent"), Tokens(FakeSecrets({})))
    assert (out.healthy, out.health_reason, out.metrics_reason) == (False, "SecretNotFound", "SecretNotFound")
    out = probe(url, authorization(key="nokey"), Tokens(FakeSecrets({REF.name: {REF.key: b"x"}})))
    assert out.health_reason == "SecretKeyNotFound" and "has no key nokey" in out.health_error
    assert state.snapshot()["healthChecks"] == before


@pytest.fixture
def gateway(keyed):
    _, provider = keyed
    secrets, clock = FakeSecrets({REF.name: {REF.key: TOKEN.encode()}}), Clock()
    logs = io.StringIO()
    table = RoutingTable()
    app = GatewayApp(
        table=table,
        consumer="c1",
        log=JsonLog(component="gateway", stream=logs, level="debug"),
        upstream_timeout=5,
        tokens=Tokens(secrets, clock=clock),
    )
    server = serve_app(app, port=0)
    url = start(server)
    yield table, url, provider, secrets, logs, clock
    server.shutdown()
    server.server_close()


def serve_candidate(table: RoutingTable, provider: str, ref: SecretRef | None, revision: int = 1) -> None:
    cand = Candidate("c-1", "p1", provider, "g", 0, ADMITTED, authorization=ref)
    table.swap(Overlay("net", "c1", revision, overlay_digest([cand]), (cand,)))


def complete(url: str):
    code, body, _ = get(f"{url}/v1/completions", {"Content-Type": "application/json"}, method="POST", data=b"{}")
    return code, json.loads(body)


def test_the_gateway_sends_the_token_it_reads_from_the_named_secret(gateway):
    table, url, provider, secrets, logs, clock = gateway
    serve_candidate(table, provider, REF)
    code, body = complete(url)
    assert code == 200 and body["provider"] == "p1"
    secrets.secrets[REF.name] = {REF.key: b"wrong"}
    assert complete(url)[0] == 200  # read at most once per TTL: the cached token
    clock.now += DEFAULT_TTL
    code, body = complete(url)
    assert code == 502 and body["error"] == (
        "provider refused the request (Unauthorized): POST /v1/completions: 401 Unauthorized; "
        "check spec.authorization.credentials secret engine-key key token"
    )
    secrets.secrets[REF.name] = {REF.key: TOKEN.encode()}  # rotated back: the 401 forgot the token
    assert complete(url)[0] == 200
    serve_candidate(table, provider, None, revision=2)  # no reference: no token sent
    code, body = complete(url)
    assert code == 502 and body["error"].endswith("the engine asks for credentials: set spec.authorization")
    serve_candidate(table, provider, SecretRef("absent", "token"), revision=3)
    code, body = complete(url)
    assert code == 502 and body["error"].startswith("credentials (SecretNotFound): secret absent not found")
    assert TOKEN not in logs.getvalue()
