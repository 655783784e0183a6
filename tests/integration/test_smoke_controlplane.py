import pytest

from kubetest import server_version

pytestmark = pytest.mark.integration


def test_api_server_serves_agn_crds(kube, namespace):
    from agn.kube import PROVIDERS

    kube.create(
        PROVIDERS,
        namespace,
        {
            "apiVersion": "agn.dev/v1alpha1",
            "kind": "InferenceProvider",
            "metadata": {"name": "p1"},
            "spec": {"endpoint": "http://127.0.0.1:1"},
        },
    )
    items, rv = kube.list(PROVIDERS, namespace)
    assert [i["metadata"]["name"] for i in items] == ["p1"]
    assert rv
    assert server_version(kube) == "v1.37.2"
