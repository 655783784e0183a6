"""Probing one endpoint over real loopback HTTP: health, metrics, redirects, invalid endpoints."""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agn.engines import AUTO
from agn.operator.credentials import with_refusals_named
from agn.operator.probe_http import probe_endpoint_async, probe_session
from agn.operator.provider_status import ProbeOutcome
from agn.provider.server import FakeProvider, serve_async


def probe_endpoint(endpoint: str, *, timeout: float, now: float, metrics_format: str = AUTO) -> ProbeOutcome:
    """One probe round against ``endpoint`` on a client of its own (the prober shares one)."""

    async def once() -> ProbeOutcome:
        async with probe_session(concurrency=1) as session:
            return await probe_endpoint_async(
                session, endpoint, timeout=timeout, now=now, metrics_format=metrics_format
            )

    return asyncio.run(once())


@pytest.fixture
def fake_provider():
    state = FakeProvider(name="p1")
    server = serve_async(state, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def redirector(fake_provider):
    _, target = fake_provider

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            return

        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_healthy_provider_with_load(fake_provider):
    state, url = fake_provider
    state.update({"waiting": 4})
    out = probe_endpoint(url + "/", timeout=2, now=1.0)
    assert (out.probed, out.healthy, out.health_error, out.metrics_ok) == (True, True, None, True)
    assert (out.load.running, out.load.waiting) == (0, 4)


def test_unhealthy_and_metrics_off(fake_provider):
    state, url = fake_provider
    state.update({"healthy": False, "metrics": False})
    out = probe_endpoint(url, timeout=2, now=1.0)
    assert out.healthy is False and "503" in out.health_error
    assert not out.metrics_ok and "404" in out.metrics_error and out.load is None


def test_waiting_not_exported_is_absent(fake_provider):
    state, url = fake_provider
    state.update({"exportWaiting": False})
    out = probe_endpoint(url, timeout=2, now=1.0)
    assert out.metrics_ok and out.load.waiting is None and out.load.running == 0


def test_redirects_are_not_followed(redirector):
    out = probe_endpoint(redirector, timeout=2, now=1.0)
    assert out.healthy is False and "302" in out.health_error
    assert not out.metrics_ok and "302" in out.metrics_error


@pytest.mark.parametrize("endpoint", ["", "ftp://127.0.0.1:1", "http://", "127.0.0.1:80"])
def test_invalid_endpoint_is_not_probed(endpoint):
    out = probe_endpoint(endpoint, timeout=2, now=1.0)
    assert not out.probed and out.healthy is None and not out.metrics_ok


def test_connection_refused_is_unhealthy():
    from xtask.runtime.controlplane import free_port

    out = probe_endpoint(f"http://127.0.0.1:{free_port()}", timeout=1, now=1.0)
    assert out.healthy is False and out.health_error.startswith("GET /healthz:")
    assert not out.metrics_ok


def test_pool_paths_are_independent_providers(fake_provider):
    from agnprocs import http_json

    state, url = fake_provider
    http_json(f"{url}/pool/p7/admin/state", method="POST", body={"healthy": False, "waiting": 3})
    http_json(f"{url}/pool/p8/admin/state", method="POST", body={"waiting": 5})
    sick = probe_endpoint(f"{url}/pool/p7", timeout=2, now=1.0)
    assert sick.healthy is False and sick.load.waiting == 3
    well = probe_endpoint(f"{url}/pool/p8/", timeout=2, now=1.0)
    assert well.healthy is True and well.load.waiting == 5
    assert http_json(f"{url}/pool/p8/admin/state")["name"] == "p8"
    reply = http_json(f"{url}/pool/p8/v1/completions", method="POST", body={"prompt": "hi"})
    assert reply["provider"] == "p8"
    # The process's own provider is untouched by its pool.
    assert state.snapshot()["healthy"] is True and state.snapshot()["waiting"] == 0


def test_a_slow_provider_answers_late_and_a_bad_delay_is_refused(fake_provider):
    import time
    import urllib.error

    from agnprocs import http_json

    _, url = fake_provider
    http_json(f"{url}/pool/slow/admin/state", method="POST", body={"delaySeconds": 0.3})
    started = time.monotonic()
    assert probe_endpoint(f"{url}/pool/slow", timeout=2, now=1.0).healthy is True
    assert time.monotonic() - started >= 0.6  # /healthz and /metrics each took 0.3 s
    timed_out = probe_endpoint(f"{url}/pool/slow", timeout=0.1, now=1.0)
    assert timed_out.healthy is False and "timed out" in timed_out.health_error
    for bad in (-1, 31, "1", True):
        with pytest.raises(urllib.error.HTTPError) as err:
            http_json(f"{url}/pool/slow/admin/state", method="POST", body={"delaySeconds": bad})
        assert err.value.code == 400
    assert http_json(f"{url}/pool/slow/admin/state")["delaySeconds"] == 0.3


def test_failing_completions_answer_500_while_health_stays(fake_provider):
    import urllib.error

    from agnprocs import http_json

    _, url = fake_provider
    http_json(f"{url}/pool/bad/admin/state", method="POST", body={"failCompletions": True})
    with pytest.raises(urllib.error.HTTPError) as err:
        http_json(f"{url}/pool/bad/v1/completions", method="POST", body={"prompt": "hi"})
    assert err.value.code == 500
    assert probe_endpoint(f"{url}/pool/bad", timeout=2, now=1.0).healthy is True
    assert http_json(f"{url}/pool/bad/admin/state")["failed"] == 1


def test_a_name_that_does_not_resolve_is_reported_in_the_resolvers_words():
    # A resolver error's errno is an EAI_* code: os.strerror made it "Unknown error -2".
    out = probe_endpoint("http://agn-no-such-provider.invalid:8080", timeout=2, now=1.0)
    assert out.healthy is False
    assert out.health_error is not None and out.metrics_error is not None
    assert "Unknown error" not in out.health_error + out.metrics_error
    assert out.health_error.startswith("GET /healthz: ") and len(out.health_error) > len("GET /healthz: ")


def test_a_provider_trickling_its_answer_is_cut_off_by_the_request_deadline(monkeypatch):
    """A byte every 0.1 s never trips the socket read timeout (0.3 s); the request deadline ends
    the probe anyway, so no probe holds its provider's slot for as long as a provider likes."""
    import socket
    import time

    from agn.operator import probe_http

    monkeypatch.setattr(probe_http, "REQUEST_DEADLINE_SECONDS", 0.5)
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def trickle() -> None:
        listener.settimeout(5)
        try:
            while not done.is_set():
                conn, _ = listener.accept()
                with conn:
                    conn.recv(4096)
                    for byte in answer:  # 64 bytes over ~6 s unless the client hangs up
                        if done.is_set():
                            break
                        conn.sendall(bytes([byte]))
                        time.sleep(0.1)
        except OSError:
            pass  # the client hung up, or the test is over

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        out = probe_endpoint(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=0.3, now=1.0)
    finally:
        done.set()
        listener.close()
        thread.join(timeout=10)
    assert out.healthy is False
    assert out.health_error == "GET /healthz: timed out"


@pytest.mark.parametrize("engine", ["vllm", "tgi", "llamacpp"])
def test_an_engines_health_is_read_at_health_pinned_or_after_a_404(fake_provider, engine):
    state, url = fake_provider
    state.metrics_format = engine  # serves /health, and /healthz is 404 as on the engine
    state.update({"waiting": 2})
    auto = probe_endpoint(url, timeout=2, now=1.0)
    assert (auto.healthy, auto.health_path, auto.load.format, auto.load.waiting) == (True, "/health", engine, 2)
    checks = state.snapshot()["healthChecks"]
    pinned = probe_endpoint(url, timeout=2, now=1.0, metrics_format=engine)
    assert (pinned.healthy, pinned.health_path) == (True, "/health")
    assert state.snapshot()["healthChecks"] == checks + 1
    state.update({"healthy": False})
    sick = probe_endpoint(url, timeout=2, now=1.0)
    assert sick.healthy is False and sick.health_error == "GET /health: HTTP 503"
    wrong = probe_endpoint(url, timeout=2, now=1.0, metrics_format="agn")  # pinned to AGN's path: none here
    assert wrong.healthy is False and wrong.health_error == "GET /healthz: HTTP 404"


def test_auto_asks_health_only_after_a_404_not_after_a_503(fake_provider):
    state, url = fake_provider  # AGN's own format: /healthz
    state.update({"healthy": False})
    out = probe_endpoint(url, timeout=2, now=1.0)
    assert (out.healthy, out.health_error, out.health_path) == (False, "GET /healthz: HTTP 503", "/healthz")


def test_a_pool_provider_inherits_the_processes_format(fake_provider):
    state, url = fake_provider
    state.metrics_format = "tgi"
    out = probe_endpoint(f"{url}/pool/p9", timeout=2, now=1.0)
    assert (out.healthy, out.health_path, out.load.format) == (True, "/health", "tgi")


def test_sglang_is_probed_where_it_does_not_generate_a_token(fake_provider):
    # SGLang's /health runs a one-token generation (a second or more); pinned, the operator
    # asks /get_model_info, within a 1 s probe timeout, and never starts a generation.
    state, url = fake_provider
    state.metrics_format = "sglang"
    state.update({"healthGenerateSeconds": 1.5, "waiting": 1})
    out = probe_endpoint(url, timeout=1.0, now=1.0, metrics_format="sglang")
    assert (out.healthy, out.health_error, out.health_path) == (True, None, "/get_model_info")
    assert out.load.waiting == 1 and state.snapshot()["healthGenerations"] == 0
    state.update({"healthy": False})
    sick = probe_endpoint(url, timeout=1.0, now=1.0, metrics_format="sglang")
    assert sick.healthy is False and sick.health_error == "GET /get_model_info: HTTP 503"
    # Behind --api-key SGLang answers 401 there (only /health* is open): the server is up.
    state.update({"healthy": True, "apiKeys": ["engine-key"]})  # the probe sends no key
    keyed = probe_endpoint(url, timeout=1.0, now=1.0, metrics_format="sglang")
    assert (keyed.healthy, keyed.health_note) == (True, "HTTP 401: the server is up, behind sglang's --api-key")
    assert keyed.metrics_ok is True and state.snapshot()["healthGenerations"] == 0  # /metrics is open
    # Unpinned, SGLang's /get_model_info is asked before /health: no generation either.
    state.update({"apiKeys": []})
    auto = probe_endpoint(url, timeout=1.0, now=1.0)
    assert (auto.healthy, auto.health_path, auto.load.format) == (True, "/get_model_info", "sglang")
    assert state.snapshot()["healthGenerations"] == 0


def test_auto_asks_health_after_a_401_llama_server_api_key(fake_provider):
    # llama-server --api-key answers 401 on every path but /health: no verdict on the server.
    state, url = fake_provider
    state.metrics_format = "llamacpp"
    state.update({"apiKeys": ["engine-key"]})  # the probe sends no key
    out = probe_endpoint(url, timeout=2, now=1.0)
    assert (out.healthy, out.health_error, out.health_path) == (True, None, "/health")
    assert out.metrics_error == "GET /metrics: HTTP 401"  # bare: the provider's credentials name it
    named = with_refusals_named(out, None)
    assert (named.metrics_reason, named.metrics_error) == (
        "Unauthorized",
        "GET /metrics: 401 Unauthorized; the engine asks for credentials: set spec.authorization",
    )
    state.update({"apiKeys": [], "healthy": False})  # loading or sick: 503 is the verdict
    assert probe_endpoint(url, timeout=2, now=1.0).health_error == "GET /health: HTTP 503"


def test_a_llama_server_without_metrics_says_start_it_with_metrics(fake_provider):
    state, url = fake_provider
    state.metrics_format = "llamacpp"
    state.update({"metrics": False})
    for fmt in ("llamacpp", "auto"):
        out = probe_endpoint(url, timeout=2, now=1.0, metrics_format=fmt)
        assert out.healthy is True and not out.metrics_ok
        assert out.metrics_error == "GET /metrics: HTTP 501: metrics endpoint off (start llama-server with --metrics)"


def test_an_sglang_without_metrics_says_enable_metrics(fake_provider):
    state, url = fake_provider
    state.metrics_format = "sglang"
    state.update({"metrics": False})
    out = probe_endpoint(url, timeout=2, now=1.0, metrics_format="sglang")
    assert out.metrics_error == "GET /metrics: HTTP 404: no metrics endpoint (start SGLang with --enable-metrics)"


def test_a_provider_found_down_is_probed_next_on_a_new_connection():
    """The first connection reaches a server that answers every request 404 and keeps the
    connection alive (as an egress proxy answers a ClusterIP before its Service routes); later
    connections reach the provider. The probe after the failing one connects afresh and finds
    the provider up: reusing the first connection would keep it down for as long as quick
    re-checks keep that connection alive."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    done = threading.Event()
    connections: list[int] = []

    def answer(conn: socket.socket, first: bool) -> None:
        with conn:
            buffered = b""
            while not done.is_set():
                while b"\r\n\r\n" not in buffered:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    buffered += chunk
                head, buffered = buffered.split(b"\r\n\r\n", 1)
                ok = not first and head.split(b" ")[1] == b"/healthz"
                status, body = (b"200 OK", b"ok\n") if ok else (b"404 Not Found", b"")
                # A request that says "Connection: close" is answered so and closed, as HTTP/1.1
                # servers must (and the egress proxy answering unrouted addresses here does).
                close = b"\r\nconnection: close" in head.lower()
                extra = b"Connection: close\r\n" if close else b""
                conn.sendall(b"HTTP/1.1 " + status + b"\r\n" + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body)
                if close:
                    return

    def serve() -> None:
        try:
            while not done.is_set():
                conn, _ = listener.accept()
                connections.append(1)
                threading.Thread(target=answer, args=(conn, len(connections) == 1), daemon=True).start()
        except OSError:
            pass  # the test is over

    threading.Thread(target=serve, daemon=True).start()
    endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"

    async def twice() -> tuple[ProbeOutcome, ProbeOutcome]:
        async with probe_session(concurrency=1) as session:
            first = await probe_endpoint_async(session, endpoint, timeout=2.0, now=1.0)
            second = await probe_endpoint_async(session, endpoint, timeout=2.0, now=2.0)
            return first, second

    try:
        first, second = asyncio.run(twice())
    finally:
        done.set()
        listener.close()
    assert (first.healthy, first.health_error) == (False, "GET /health: HTTP 404")
    assert (second.healthy, second.health_path) == (True, "/healthz"), second
    assert len(connections) == 2
