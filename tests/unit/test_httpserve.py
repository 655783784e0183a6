"""The three small HTTP servers (fake provider, operator health, gateway) share one way to be
built: loopback unless told, no request thread that outlives the process (the standard
library's daemon threads; the provider's one event loop), no access log on stderr."""

from __future__ import annotations

import io
import threading
import urllib.error
import urllib.request

import pytest

from agn.gateway.server import GatewayApp, serve_app
from agn.gateway.table import RoutingTable
from agn.logs import JsonLog
from agn.operator.health import serve_health
from agn.provider.server import FLEET_BACKLOG, FakeProvider
from agn.provider.server import serve_async as serve_provider


def servers():
    log = JsonLog(component="gateway", stream=io.StringIO())
    return {
        "provider": serve_provider(FakeProvider(name="p1"), port=0),
        "operator": serve_health(lambda: (True, {"ok": True}), host="127.0.0.1", port=0),
        "gateway": serve_app(GatewayApp(table=RoutingTable(), consumer="c1", log=log, upstream_timeout=1), port=0),
    }


@pytest.fixture
def running():
    started = servers()
    for server in started.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield started
    for server in started.values():
        server.shutdown()
        server.server_close()


def test_every_server_binds_loopback_with_daemon_request_threads(running):
    for name, server in running.items():
        assert server.server_address[0] == "127.0.0.1", name
        # The provider answers on one event loop (aiohttp): no request threads at all.
        assert name == "provider" or server.daemon_threads, name


def test_the_provider_pool_keeps_a_deep_listen_backlog(running):
    assert running["provider"].request_queue_size == FLEET_BACKLOG > 5
    assert running["gateway"].request_queue_size == 5


def test_requests_are_not_logged_to_stderr(running, capfd):
    for server in running.values():
        base = f"http://127.0.0.1:{server.server_address[1]}"
        for path in ("/healthz", "/no-such-path"):
            try:
                urllib.request.urlopen(base + path, timeout=5).close()
            except urllib.error.HTTPError as exc:
                assert exc.code == 404
                exc.close()
    assert capfd.readouterr().err == ""
