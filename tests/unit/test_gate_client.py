"""The wave gates' one HTTP client (xtask/drain/gates/client.py): what it asks and what it reads,
against a loopback server."""

from __future__ import annotations

import http.server
import threading
import urllib.parse

import pytest

from xtask.drain.gates import client


@pytest.fixture
def server():
    seen: list[tuple[str, str, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, status: int, body: bytes, **headers: str) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802
            seen.append(("GET", self.path, b""))
            if self.path == "/moved":
                self._answer(302, b"", Location="/big")
            elif self.path == "/big":
                self._answer(200, b"x" * 100)
            else:
                self._answer(200, b"ok")

        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(("POST", self.path, body))
            self._answer(200, self.headers["Content-Type"].encode())

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_redirect_is_answered_not_followed(server):
    base, seen = server
    answer = client.get(f"{base}/moved", timeout=5, limit=1000)
    assert answer.status == 302
    assert [path for _, path, _ in seen] == ["/moved"]


def test_a_body_past_the_limit_is_cut_and_marked(server):
    base, _ = server
    assert client.get(f"{base}/big", timeout=5, limit=100) == client.Answer(200, b"x" * 100)
    cut = client.get(f"{base}/big", timeout=5, limit=10)
    assert cut.truncated and len(cut.body) == 11


def test_a_form_is_posted_in_the_body(server):
    base, seen = server
    expr = 'sum(rate(x{a="b"}[1m])) > 0 & ' + "y" * 3000  # too long for a URL some servers take
    answer = client.post_form(f"{base}/api/v1/query", {"query": expr}, timeout=5, limit=1000)
    assert answer.body == b"application/x-www-form-urlencoded"
    assert urllib.parse.parse_qs(seen[-1][2].decode()) == {"query": [expr]}


def test_no_proxy_is_asked_even_when_the_environment_names_one(server, monkeypatch):
    base, seen = server
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    assert client.get(f"{base}/plain", timeout=5, limit=100).body == b"ok"
    assert seen[-1][1] == "/plain"


def test_a_server_that_is_not_there_is_unanswered():
    from xtask.runtime.controlplane import free_port  # a loopback port nothing listens on

    with pytest.raises(client.Unanswered):
        client.get(f"http://127.0.0.1:{free_port()}/metrics", timeout=2, limit=100)
