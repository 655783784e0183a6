"""A context that cannot work is refused before any request, naming the field and the context:
a server that is not a URL, TLS material that is not PEM (or a file that is missing), a client
key that does not match its certificate, an ``exec`` credential plugin that fails (the client
would log it and send every request anonymously)."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agn.kube import ConfigError, Kube
from xtask.runtime.certs import ensure_certs


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return ensure_certs(tmp_path_factory.mktemp("certs"))


def write(tmp_path: Path, certs, *, cluster: dict | None = None, user: dict | None = None) -> Path:
    body = {"server": "https://127.0.0.1:6443", "certificate-authority-data": b64(certs.ca_cert), **(cluster or {})}
    who = user or {"client-certificate-data": b64(certs.admin_cert), "client-key-data": b64(certs.admin_key)}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {k: v for k, v in body.items() if v is not None}}],
        "users": [{"name": "u", "user": who}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def refused(path: Path) -> str:
    with pytest.raises(ConfigError) as exc:
        Kube.from_kubeconfig(kubeconfig=str(path), field_manager="t")
    return str(exc.value)


@pytest.mark.parametrize("server", ["127.0.0.1:6443", "localhost", "ftp://127.0.0.1:6443", "https://"])
def test_a_server_without_a_scheme_or_host_is_named(tmp_path, certs, server):
    path = write(tmp_path, certs, cluster={"server": server})
    assert refused(path) == (
        f"cluster 'c' of context 'ctx' in kubeconfig {path}: server {server!r} is not a URL with a scheme "
        "and a host (kubectl's form: https://HOST:PORT)"
    )


@pytest.mark.parametrize("server", ["https://[::1:6443", "https://\x1b[31mhost:1"])
def test_a_server_that_cannot_be_split_is_named_not_a_traceback(tmp_path, certs, server):
    path = write(tmp_path, certs, cluster={"server": server})
    assert refused(path).startswith(
        f"cluster 'c' of context 'ctx' in kubeconfig {path}: server {server!r} is not a URL"
    )


def test_bad_client_key_data_names_the_field_and_the_context(tmp_path, certs):
    path = write(tmp_path, certs, user={"client-certificate-data": b64(certs.admin_cert), "client-key-data": "aGk="})
    assert (
        refused(path)
        == f"user 'u' of context 'ctx' in kubeconfig {path}: client-key-data does not hold a PEM private key"
    )


def test_a_missing_ca_file_names_the_field_and_the_file(tmp_path, certs):
    missing = tmp_path / "nope" / "ca.crt"
    path = write(tmp_path, certs, cluster={"certificate-authority-data": None, "certificate-authority": str(missing)})
    assert refused(path) == (
        f"cluster 'c' of context 'ctx' in kubeconfig {path}: certificate-authority {missing}: No such file or directory"
    )


def test_a_client_key_of_another_certificate(tmp_path, certs):
    path = write(
        tmp_path, certs, user={"client-certificate-data": b64(certs.ca_cert), "client-key-data": b64(certs.admin_key)}
    )
    assert "client-key does not belong to client-certificate" in refused(path)


def test_a_failing_exec_plugin_is_an_error_not_an_anonymous_request(tmp_path, certs):
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": "sh",
        "args": ["-c", "echo denied >&2; exit 3"],
    }
    path = write(tmp_path, certs, user={"exec": plugin})
    assert refused(path) == (
        f"the exec credential plugin 'sh' of context 'ctx' failed: exec: process returned 3. denied (kubeconfig {path})"
    )


def test_discovery_that_cannot_reach_the_server_is_unreachable_not_a_raw_urllib3_error(tmp_path, certs):
    """``env up`` once printed a urllib3 traceback here (found by tests/harness/chaos.py, seed 21: a
    kube-apiserver shutting down after SIGTERM answered the discovery client's start, then refused
    the lookup ``apply`` makes next, which was outside the translation every other call has)."""
    import urllib3

    from agn.kube import Unreachable

    class RefusingDiscovery:
        class resources:  # noqa: N801 - the attribute DynamicClient has
            @staticmethod
            def get(**_: str):
                refused = urllib3.exceptions.NewConnectionError(None, "Connection refused")
                raise urllib3.exceptions.MaxRetryError(None, "/apis", refused)

    path = write(tmp_path, certs, cluster={"server": "https://127.0.0.1:6443"})
    kube = Kube.from_kubeconfig(kubeconfig=str(path), context="ctx", field_manager="t")
    kube._dynamic = RefusingDiscovery()  # discovery already ran, while the server still answered
    try:
        with pytest.raises(Unreachable, match="127.0.0.1:6443"):
            kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}})
    finally:
        kube.close()


CHECK_ONLY = """
import sys
from agn.kubeconfig import load, usable_context
print(usable_context(load(sys.argv[1]), None)[0], "cryptography" in sys.modules)
"""


def test_usable_tls_material_is_checked_by_the_clients_openssl_without_loading_cryptography(tmp_path, certs):
    # The careful check (cryptography: tens of ms before the first request) runs only when the
    # standard library's OpenSSL refuses the material, to name what is wrong.
    path = write(tmp_path, certs)
    out = subprocess.run([sys.executable, "-c", CHECK_ONLY, str(path)], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["ctx", "False"], out.stderr
    mismatched = write(
        tmp_path, certs, user={"client-certificate-data": b64(certs.ca_cert), "client-key-data": b64(certs.admin_key)}
    )
    out = subprocess.run([sys.executable, "-c", CHECK_ONLY, str(mismatched)], capture_output=True, text=True)
    assert "client-key does not belong to client-certificate" in out.stderr


def test_an_encrypted_client_key_is_named_never_prompted_for(tmp_path, certs):
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(certs.admin_key.read_bytes(), password=None)
    locked = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    user = {"client-certificate-data": b64(certs.admin_cert), "client-key-data": base64.b64encode(locked).decode()}
    path = write(tmp_path, certs, user=user)
    assert (
        refused(path)
        == f"user 'u' of context 'ctx' in kubeconfig {path}: client-key-data does not hold a PEM private key"
    )
