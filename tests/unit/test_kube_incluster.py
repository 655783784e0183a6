"""``Kube.from_kubeconfig`` falls back to the pod's service account only inside a pod with no kubeconfig."""

from __future__ import annotations

import kubernetes.config
import pytest

from agn.kube import ConfigError, Kube


@pytest.fixture
def fake_incluster(monkeypatch):
    calls = []

    def load_incluster_config(*, client_configuration):
        calls.append(client_configuration)
        client_configuration.host = "https://10.96.0.1:443"

    monkeypatch.setattr(kubernetes.config, "load_incluster_config", load_incluster_config)
    return calls


def test_in_a_pod_without_kubeconfig_the_service_account_is_used(tmp_path, monkeypatch, fake_incluster):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    kube = Kube.from_kubeconfig(field_manager="t")
    try:
        assert kube.host == "https://10.96.0.1:443" and len(fake_incluster) == 1
    finally:
        kube.close()


def test_outside_a_pod_a_missing_kubeconfig_is_still_an_error(tmp_path, monkeypatch, fake_incluster):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError):
        Kube.from_kubeconfig(field_manager="t")
    assert fake_incluster == []


def test_an_explicit_kubeconfig_or_context_is_never_replaced(tmp_path, monkeypatch, fake_incluster):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    with pytest.raises(ConfigError):
        Kube.from_kubeconfig(kubeconfig=str(tmp_path / "missing"), field_manager="t")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(ConfigError):
        Kube.from_kubeconfig(context="kind-example", field_manager="t")
    assert fake_incluster == []
