"""`env status` reads an API server its runtime reports unhealthy with a short read timeout: with
etcd paused, each read would otherwise wait the client's full 20 s (found by the chaos soak)."""

from __future__ import annotations

from agn.kube import CONNECT_TIMEOUT
from xtask.cli.env.status import QUICK_READ_TIMEOUT, read_timeout


def component(name: str, healthy: bool) -> dict:
    return {"name": name, "pid": 1, "running": True, "healthy": healthy}


def test_a_healthy_env_is_read_with_the_clients_default():
    assert (
        read_timeout([component("etcd", True), component("kube-apiserver", True), component("operator", False)]) is None
    )


def test_an_unhealthy_etcd_or_api_server_shortens_the_reads():
    for name in ("etcd", "kube-apiserver"):
        assert read_timeout([component(name, False), component("operator", True)]) == (
            CONNECT_TIMEOUT,
            QUICK_READ_TIMEOUT,
        )
