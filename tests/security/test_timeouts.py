"""Every request has a connect and a read timeout: an API server that accepts TCP connections and
never answers is an error naming it within ``--timeout`` (or the documented default), not a hang.

The "server" is a listening socket on 127.0.0.1 in a thread of the test that accepts every
connection and never writes a byte; the kubeconfig points at it with real TLS material.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agn.kube import READ_TIMEOUT, Kube, Unreachable
from envcli import REPO
from xtask.runtime import kubeconfig
from xtask.runtime.certs import ensure_certs

pytestmark = pytest.mark.e2e

HANG = 120  # seconds: far beyond any timeout here; only a hang gets near it


@pytest.fixture
def silent_server() -> Iterator[str]:
    """``https://127.0.0.1:PORT`` of a server that accepts and never answers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()
        for conn in accepted:
            conn.close()
        thread.join(timeout=10)


@pytest.fixture
def kubeconfig_file(tmp_path: Path, silent_server: str) -> Path:
    certs = ensure_certs(tmp_path / "certs")
    path = tmp_path / "kubeconfig"
    kubeconfig.add_context(
        path,
        kubeconfig.context_entries(
            name="silent",
            server=silent_server,
            ca_cert=certs.ca_cert,
            client_cert=certs.admin_cert,
            client_key=certs.admin_key,
            namespace="default",
        ),
    )
    return path


def xtask(*args: str, kubeconfig_path: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "NO_COLOR": "1",
        "KUBECONFIG": str(kubeconfig_path),
        "AGN_XTASK_JOURNAL_DIR": str(kubeconfig_path.parent / "journal"),
    }
    return subprocess.run(
        [sys.executable, "-m", "xtask", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=HANG
    )


def test_provider_drain_timeout_bounds_every_request(kubeconfig_file, silent_server):
    proc = xtask(
        "env", "provider-drain", "--provider", "p-one", "--dry-run", "--timeout", "3", kubeconfig_path=kubeconfig_file
    )
    assert proc.returncode == 1, proc.stderr
    assert f"error: API server {silent_server} (context 'silent') did not answer within 3 s" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_without_timeout_the_default_read_timeout_holds(kubeconfig_file, silent_server):
    proc = xtask("env", "provider-drain", "--provider", "p-one", "--dry-run", kubeconfig_path=kubeconfig_file)
    assert proc.returncode == 1, proc.stderr
    assert f"error: API server {silent_server} (context 'silent') did not answer within {READ_TIMEOUT:g} s" in (
        proc.stderr
    )


def test_every_kube_call_has_a_timeout(kubeconfig_file, silent_server):
    kube = Kube.from_kubeconfig(
        kubeconfig=str(kubeconfig_file), context="silent", field_manager="t", request_timeout=(1.0, 1.0)
    )
    try:
        for call in (
            lambda: kube.namespace_exists("default"),
            lambda: kube.list(kube_resource(), "default"),
            lambda: list(kube.watch(kube_resource(), "default", resource_version="1", timeout_seconds=1)),
        ):
            with pytest.raises(Unreachable, match=rf"^API server {silent_server} \(context 'silent'\) did not answer"):
                call()
    finally:
        kube.close()


def kube_resource():
    from agn.kube import PROVIDERS

    return PROVIDERS
