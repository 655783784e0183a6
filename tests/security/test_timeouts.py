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

from agn import kubeconfig
from agn.kube import READ_TIMEOUT, Kube, Unreachable
from envcli import REPO, run_xtask
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
    env = {"KUBECONFIG": str(kubeconfig_path), "AGN_XTASK_JOURNAL_DIR": str(kubeconfig_path.parent / "journal")}
    return run_xtask(*args, env=env, timeout=HANG)


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


def test_a_drain_waiting_on_an_api_server_that_went_away_says_so_and_ends(tmp_path: Path):
    """`env down` (or a crash) takes the API server away while a drain waits for convergence: the
    run names it while it waits, ends as ``unreachable`` (exit 1) instead of waiting out its
    --timeout, and its report says the change is stored but not confirmed.

    A private control plane of the test's own is stopped (by pid, TERM then KILL) the moment the
    run says it is waiting; no operator runs, so the wait could never converge by itself."""
    from reportschema import parse_report
    from xtask.crds import install_crds
    from xtask.drain.edges.waiter import UNREACHABLE_BOUND
    from xtask.reports import PROVIDER_DRAIN
    from xtask.runtime.assets import ensure_assets
    from xtask.runtime.controlplane import ControlPlane

    cp = ControlPlane(tmp_path / "cp", ensure_assets(build=False))
    cp.start()
    try:
        path = tmp_path / "kubeconfig"
        kubeconfig.add_context(
            path,
            cp.admin_context("gone", namespace="default"),
        )
        kube = Kube.from_kubeconfig(kubeconfig=str(path), context="gone", field_manager="agn-tests")
        install_crds(kube)
        from agn.kube import CONSUMERS, NETWORKS, PROVIDERS
        from kubetest import create, wait_crds_served

        wait_crds_served(kube, "default")
        create(kube, NETWORKS, "default", "net", {"providerSelector": {"matchLabels": {"net": "yes"}}})
        create(kube, CONSUMERS, "default", "c-a", {"network": "net"})
        spec = {"endpoint": "http://127.0.0.1:9/p", "selectionGroup": "chat", "rank": 0}
        create(kube, PROVIDERS, "default", "p-one", spec, labels={"net": "yes"})
        kube.close()
        proc = subprocess.Popen(
            [sys.executable, "-m", "xtask", "env", "provider-drain", "--provider", "p-one"]
            + ["--network", "net", "--consumer", "c-a", "--timeout", str(int(UNREACHABLE_BOUND * 10)), "-o", "json"],
            cwd=REPO,
            env={**os.environ, "KUBECONFIG": str(path), "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
            | {"AGN_XTASK_JOURNAL_DIR": str(tmp_path / "journal")},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # the wait begins after the write was stored
            seen.append(line)
            if "waiting for c-a" in line:
                break
        else:
            pytest.fail("the run never started waiting:\n" + "".join(seen))
    finally:
        cp.stop()
    # The run must end by itself, long before its --timeout (a hang would pass HANG and fail here).
    try:
        out, err = proc.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    err = "".join(seen) + err
    assert proc.returncode == 1, err
    assert "the API server has not answered for" in err, err
    report = parse_report(out, PROVIDER_DRAIN)
    assert report["convergence"]["state"] == "unreachable"
    assert report["convergence"]["apiServerError"]
    assert "stopped answering while waiting" in report["summary"]
    assert "Traceback" not in err
