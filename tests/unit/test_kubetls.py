"""``agn.kubetls``: which TLS fields are taken out of the kubeconfig handed to the client's loader,
and how the material is put back into the client configuration without a file on disk."""

from __future__ import annotations

import base64
import os
import types

import pytest

from agn.kubetls import without_tls_data

CA, CERT, KEY = b"-----BEGIN CERTIFICATE-----\nca\n", b"-----BEGIN CERTIFICATE-----\nc\n", b"-----BEGIN KEY-----\nk\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def config(cluster: dict, user: dict) -> dict:
    return {
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", **cluster}}, {"name": "other"}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    }


def test_data_fields_are_taken_out_and_win_over_file_fields():
    original = config(
        {"certificate-authority-data": b64(CA), "certificate-authority": "/ca.crt"},
        {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY), "client-key": "/k", "token": "t"},
    )
    loadable, tls = without_tls_data(original, "ctx")
    assert loadable["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:6443"}
    assert loadable["clusters"][1] == {"name": "other"}
    assert loadable["users"][0]["user"] == {"token": "t"}
    assert (tls.ca, tls.cert, tls.key) == (CA, CERT, KEY)
    assert "client-key-data" in original["users"][0]["user"]  # the caller's dict is not changed


def test_file_fields_alone_and_half_pairs_are_left_to_the_loader():
    original = config({"certificate-authority": "/ca.crt"}, {"client-certificate-data": b64(CERT)})
    loadable, tls = without_tls_data(original, "ctx")
    assert loadable == original
    assert (tls.ca, tls.cert, tls.key) == (None, None, None)


def test_bad_base64_names_the_field():
    with pytest.raises(ValueError, match="client-key-data of user 'u' is not valid base64"):
        without_tls_data(config({}, {"client-certificate-data": b64(CERT), "client-key-data": "%%%"}), "ctx")


def test_base64_with_line_breaks_is_accepted():
    wrapped = b64(CA)[:8] + "\n" + b64(CA)[8:]
    _, tls = without_tls_data(config({"certificate-authority-data": wrapped}, {}), "ctx")
    assert tls.ca == CA


def test_apply_uses_data_and_anonymous_in_memory_files():
    _, tls = without_tls_data(
        config(
            {"certificate-authority-data": b64(CA)},
            {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)},
        ),
        "ctx",
    )
    cfg = types.SimpleNamespace(host="https://127.0.0.1:6443", ssl_ca_cert=None, ca_cert_data=None, cert_file=None)
    try:
        tls.apply(cfg)
        assert cfg.ca_cert_data == CA.decode() and cfg.ssl_ca_cert is None
        for path, data in ((cfg.cert_file, CERT), (cfg.key_file, KEY)):
            assert path.startswith("/proc/self/fd/")
            assert os.readlink(path).startswith("/memfd:")  # never linked into a folder
            with open(path, "rb") as f:
                assert f.read() == data
    finally:
        tls.close()


def test_plain_http_gets_no_tls_material():
    _, tls = without_tls_data(config({"certificate-authority-data": b64(CA)}, {}), "ctx")
    cfg = types.SimpleNamespace(host="http://127.0.0.1:8080", ssl_ca_cert=None, ca_cert_data=None, cert_file=None)
    tls.apply(cfg)
    assert cfg.ca_cert_data is None


def test_a_kubeconfig_with_data_fields_needs_no_temporary_folder(tmp_path, monkeypatch):
    """A container with a read-only root has no usable temporary folder: connecting with a
    kubeconfig whose key material is inline must not ask for one (only an exec plugin's
    certificates pass through a private folder)."""
    import tempfile

    import yaml

    from agn.kube import Kube
    from xtask.runtime.certs import ensure_certs

    certs = ensure_certs(tmp_path / "certs")
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            config(
                {"certificate-authority-data": b64(certs.ca_cert.read_bytes())},
                {
                    "client-certificate-data": b64(certs.admin_cert.read_bytes()),
                    "client-key-data": b64(certs.admin_key.read_bytes()),
                },
            )
        )
    )

    def no_temporary_folder(*args, **kwargs):
        raise FileNotFoundError("No usable temporary directory found")

    monkeypatch.setattr(tempfile, "mkdtemp", no_temporary_folder)
    monkeypatch.setattr(tempfile, "mkstemp", no_temporary_folder)
    kube = Kube.from_kubeconfig(kubeconfig=str(path), context="ctx", field_manager="t")
    kube.close()
