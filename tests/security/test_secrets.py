"""Secrets stay in the env's state folder (issue 22, "Copies of the admin key in /tmp" and
"etcd is open on loopback").

- ``env up`` + a drain + ``env down``, with every process's ``TMPDIR`` pointed at a folder of
  the test: no file outside the state folder ever holds the admin key; the state folder and
  its certificates are readable by their owner only; components name the key by path.
- ``Kube.from_kubeconfig`` on a kubeconfig with ``*-data`` fields (or an ``exec`` plugin
  returning a certificate) writes no file: the key lives in an anonymous in-memory file.
- etcd serves mutual TLS with the env's CA: plain HTTP and TLS without a client certificate
  are refused on both ports; the env's apiserver-etcd-client certificate works. A state
  folder from before (no etcd certificates, a plain-HTTP etcd running) is repaired by the
  next start, keeping etcd's data.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import stat
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from agnprocs import wait_for
from envcli import Cli
from xtask.procs import ProcessRecord, Supervisor
from xtask.runtime.certs import CertPaths, ensure_certs
from xtask.runtime.controlplane import ControlPlane

CTX = "local-example"


def _key_line(pem: bytes) -> bytes:
    """A line of the key's base64 body: present in any copy of the PEM, never elsewhere."""
    return pem.splitlines()[1]


def _contains(path: Path, needle: bytes) -> bool:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 10_000_000:
            return False
        return needle in path.read_bytes()
    except OSError:
        return False


def _holding(root: Path, needle: bytes) -> set[Path]:
    """Regular files under ``root`` (not following links) whose bytes contain ``needle``."""
    return {p for p in _files(root) if _contains(p, needle)}


def _files(root: Path) -> set[Path]:
    out = set()
    for folder, _dirs, files in os.walk(root):
        out.update(Path(folder, f) for f in files)
    return out


@pytest.mark.e2e
def test_env_up_drain_and_down_leave_no_copy_of_the_admin_key(tmp_path):
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    cli = Cli(tmp_path)
    cli.env["TMPDIR"] = str(private_tmp)  # the CLI and every component it starts
    system_tmp = Path(tempfile.gettempdir())
    before = _files(system_tmp)
    state = tmp_path / "state" / "envs" / "example"
    try:
        up = cli("env", "up", "--env", "example", "--runtime", "local")
        assert up.returncode == 0, up.stdout + up.stderr
        key = (state / "certs" / "admin.key").read_bytes()
        drain = cli("env", "provider-drain", "--context", CTX, "--provider", "provider-one")
        assert drain.returncode == 0, drain.stdout + drain.stderr
        assert _holding(private_tmp, _key_line(key)) == set()

        # Only the owner can read the state folder and its certificates.
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        assert stat.S_IMODE((state / "certs").stat().st_mode) == 0o700
        for path in (state / "certs").iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        # Components are given the state folder's kubeconfig, which names the key by path.
        components = state / "kubeconfig"
        assert stat.S_IMODE(components.stat().st_mode) == 0o600
        config = yaml.safe_load(components.read_text())
        assert "-data" not in components.read_text()
        assert config["users"][0]["user"]["client-key"] == str(state / "certs" / "admin.key")
        supervisor = Supervisor(state / "run", state / "logs")
        for rec in supervisor.records():
            if rec.name == "operator" or rec.name.startswith("gateway-"):
                assert rec.argv[rec.argv.index("--kubeconfig") + 1] == str(components), rec.name
    finally:
        down = cli("env", "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert _holding(private_tmp, _key_line(key)) == set()
    # Nor did anything (the test process included) put one in the system's temporary folder.
    new = _files(system_tmp) - before
    assert {p for p in new if tmp_path not in p.parents and _contains(p, _key_line(key))} == set()


@pytest.mark.integration
def test_kube_client_keeps_key_material_in_memory(control_plane, tmp_path, monkeypatch):
    from agn.kube import Kube

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    assert "client-key-data" in control_plane.kubeconfig.read_text()
    kube = Kube.from_kubeconfig(
        kubeconfig=str(control_plane.kubeconfig), context=control_plane.context, field_manager="t"
    )
    try:
        assert kube.namespace_exists("default")  # the TLS material works
        cfg = kube.api_client.configuration
        assert cfg.key_file.startswith("/proc/self/fd/") and cfg.cert_file.startswith("/proc/self/fd/")
        assert cfg.ssl_ca_cert is None and "BEGIN CERTIFICATE" in cfg.ca_cert_data
        assert list(folder.iterdir()) == []
    finally:
        kube.close()


@pytest.mark.integration
def test_exec_plugin_certificates_are_not_left_in_a_file(control_plane, tmp_path, monkeypatch):
    from agn.kube import Kube

    certs = CertPaths.under(control_plane.state_dir / "certs")
    plugin = tmp_path / "plugin.py"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {
            "clientCertificateData": certs.admin_cert.read_text(),
            "clientKeyData": certs.admin_key.read_text(),
        },
    }
    plugin.write_text(f"import json\nprint(json.dumps({credential!r}))\n")
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    config["users"] = [
        {
            "name": control_plane.context,
            "user": {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "command": sys.executable,
                    "args": [str(plugin)],
                    "interactiveMode": "Never",
                }
            },
        }
    ]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    kube = Kube.from_kubeconfig(kubeconfig=str(path), context=control_plane.context, field_manager="t")
    try:
        assert kube.namespace_exists("default")
        assert kube.api_client.configuration.key_file.startswith("/proc/self/fd/")
        assert _files(folder) == set()
    finally:
        kube.close()


def _refused(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as resp:
            resp.read()
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return True
    return False


def _ca_only(cp: ControlPlane) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cp.certs.ca_cert))


@pytest.mark.integration
def test_etcd_serves_mutual_tls_only(control_plane):
    cp = ControlPlane(control_plane.state_dir, control_plane.assets)
    ports = cp.ports()
    assert ports is not None
    for port in (ports.etcd_client, ports.etcd_peer):
        assert _refused(f"http://127.0.0.1:{port}/health"), port
        assert _refused(f"https://127.0.0.1:{port}/health", _ca_only(cp)), port
    with urllib.request.urlopen(
        f"https://127.0.0.1:{ports.etcd_client}/health", timeout=5, context=cp.etcd_ssl_context()
    ) as resp:
        assert json.loads(resp.read())["health"] == "true"
    apiserver = Supervisor(control_plane.state_dir / "run", control_plane.state_dir / "logs").record("kube-apiserver")
    assert apiserver is not None
    assert f"--etcd-servers=https://127.0.0.1:{ports.etcd_client}" in apiserver.argv
    assert f"--etcd-certfile={cp.certs.etcd_client_cert}" in apiserver.argv


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.integration
def test_a_state_folder_from_before_etcd_tls_is_repaired(control_plane, tmp_path):
    """Certificates of an older env (no etcd pairs) and its plain-HTTP etcd still running: the
    next start signs the missing pairs with the same CA and restarts etcd with TLS, data kept."""
    state = tmp_path / "env"
    certs = ensure_certs(state / "certs")
    ca_before = certs.ca_cert.read_bytes()
    for path in (certs.etcd_server_cert, certs.etcd_server_key, certs.etcd_peer_cert, certs.etcd_peer_key):
        path.unlink()
    certs.etcd_client_cert.unlink()
    certs.etcd_client_key.unlink()
    cp = ControlPlane(state, control_plane.assets)
    ports = cp._allocate_ports()
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    (state / "etcd").mkdir(mode=0o700)
    old = cp.supervisor.start(
        "etcd",
        [
            str(control_plane.assets / "etcd"),
            "--name=agn-local",
            f"--data-dir={state / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=agn-local={peer}",
            "--unsafe-no-fsync=true",
        ],
    )
    try:
        put = json.dumps({"key": _b64("agn-test"), "value": _b64("kept")}).encode()

        def stored() -> bool:
            try:
                with urllib.request.urlopen(urllib.request.Request(f"{client}/v3/kv/put", data=put), timeout=2):
                    return True
            except OSError:
                return False

        wait_for(stored, timeout=60, what="the plain-HTTP etcd to take a key")
        assert cp.start() == ["etcd", "kube-apiserver"]
        assert certs.complete() and certs.ca_cert.read_bytes() == ca_before
        assert cp.supervisor.running("etcd").pid != old.pid  # type: ignore[union-attr]
        assert _refused(f"{client}/health")
        query = urllib.request.Request(
            f"https://127.0.0.1:{ports.etcd_client}/v3/kv/range", data=json.dumps({"key": _b64("agn-test")}).encode()
        )
        with urllib.request.urlopen(query, timeout=5, context=cp.etcd_ssl_context()) as resp:
            assert base64.b64decode(json.loads(resp.read())["kvs"][0]["value"]) == b"kept"
        assert all(h.running and h.healthy for h in cp.health())
    finally:
        cp.stop()
        cp.supervisor.stop("etcd")
    assert not any(isinstance(r, ProcessRecord) for r in cp.supervisor.records())
