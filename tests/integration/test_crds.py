"""The AGN CRDs' schemas, enforced by the real API server: bad objects are rejected, unknown
fields are pruned (or rejected under strict validation), status is a subresource."""

from __future__ import annotations

import copy

import pytest

from agn.engines import FORMAT_NAMES
from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS, Invalid

pytestmark = pytest.mark.integration

PROVIDER = {
    "apiVersion": "agn.dev/v1alpha1",
    "kind": "InferenceProvider",
    "metadata": {"name": "p"},
    "spec": {
        "endpoint": "http://127.0.0.1:1",
        "providerGateway": "gw",
        "selectionGroup": "chat",
        "rank": 0,
        "trafficPolicy": {"drain": False},
    },
}


def provider_with(**spec_changes):
    obj = copy.deepcopy(PROVIDER)
    for key, value in spec_changes.items():
        if value is None:
            obj["spec"].pop(key)
        else:
            obj["spec"][key] = value
    return obj


@pytest.mark.parametrize(
    "body, field",
    [
        (provider_with(endpoint=None), "spec.endpoint"),
        (provider_with(endpoint=""), "spec.endpoint"),
        (provider_with(trafficPolicy={"drain": "yes"}), "spec.trafficPolicy.drain"),
        (provider_with(rank=-1), "spec.rank"),
        (provider_with(rank="first"), "spec.rank"),
        (provider_with(metrics={"format": "triton"}), "spec.metrics.format"),
        (provider_with(metrics={"format": "VLLM"}), "spec.metrics.format"),
        (provider_with(metrics={"format": 3}), "spec.metrics.format"),
        (
            provider_with(authorization={"type": "Basic", "credentials": {"name": "s", "key": "k"}}),
            "spec.authorization.type",
        ),
        (
            provider_with(authorization={"credentials": {"name": "Bad_Secret", "key": "k"}}),
            "spec.authorization.credentials.name",
        ),
        (
            provider_with(authorization={"credentials": {"name": "s", "key": "a/b"}}),
            "spec.authorization.credentials.key",
        ),
        (provider_with(authorization={"credentials": {"name": "s"}}), "spec.authorization.credentials.key"),
        (provider_with(authorization={}), "spec.authorization.credentials"),
    ],
)
def test_invalid_providers_are_rejected_naming_the_field(kube, namespace, body, field):
    with pytest.raises(Invalid) as exc:
        kube.create(PROVIDERS, namespace, body)
    assert field in str(exc.value)


def test_valid_provider_is_accepted(kube, namespace):
    assert kube.create(PROVIDERS, namespace, PROVIDER)["spec"]["trafficPolicy"] == {"drain": False}


def test_authorization_type_defaults_to_bearer(kube, namespace):
    body = provider_with(authorization={"credentials": {"name": "engine.key-1", "key": "api_key.v2"}})
    created = kube.create(PROVIDERS, namespace, body)
    assert created["spec"]["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "engine.key-1", "key": "api_key.v2"},
    }


def test_a_bad_metrics_format_is_422_and_the_enum_is_the_operators(kube, namespace):
    with pytest.raises(Invalid) as exc:
        kube.create(PROVIDERS, namespace, provider_with(metrics={"format": "triton"}))
    assert exc.value.status == 422
    assert all(f'"{name}"' in str(exc.value) for name in FORMAT_NAMES), str(exc.value)


def test_metrics_format_defaults_to_auto_and_takes_every_engine(kube, namespace):
    stored = kube.create(PROVIDERS, namespace, provider_with(metrics={}))
    assert stored["spec"]["metrics"] == {"format": "auto"}
    for name in FORMAT_NAMES:
        body = provider_with(metrics={"format": name})
        body["metadata"]["name"] = f"p-{name}"
        assert kube.create(PROVIDERS, namespace, body)["spec"]["metrics"]["format"] == name


def test_status_kv_cache_usage_is_a_fraction(kube, namespace):
    kube.create(PROVIDERS, namespace, PROVIDER)
    ok = kube.merge_patch_status(PROVIDERS, namespace, "p", {"status": {"load": {"running": 1, "kvCacheUsage": 0.4}}})
    assert ok["status"]["load"]["kvCacheUsage"] == 0.4
    with pytest.raises(Invalid, match="kvCacheUsage") as exc:
        kube.merge_patch_status(PROVIDERS, namespace, "p", {"status": {"load": {"kvCacheUsage": 1.5}}})
    assert exc.value.status == 422


def test_unknown_fields_are_pruned_or_rejected_when_strict(kube, namespace):
    body = provider_with(colour="red")
    stored = kube.create(PROVIDERS, namespace, body)
    assert "colour" not in stored["spec"]
    strict = provider_with(colour="red")
    strict["metadata"]["name"] = "p-strict"
    with pytest.raises(Invalid, match="colour"):
        kube.create(PROVIDERS, namespace, strict, field_validation="Strict")


def test_status_is_a_subresource(kube, namespace):
    body = copy.deepcopy(PROVIDER)
    body["status"] = {"candidateId": "c-forged"}
    stored = kube.create(PROVIDERS, namespace, body)
    assert "status" not in stored  # status sent with the main resource is ignored
    patched = kube.merge_patch_status(PROVIDERS, namespace, "p", {"status": {"candidateId": "c-real"}})
    assert patched["status"]["candidateId"] == "c-real"
    assert patched["metadata"]["generation"] == stored["metadata"]["generation"]  # status writes don't bump it


def test_other_kinds_reject_bad_objects(kube, namespace):
    with pytest.raises(Invalid, match="spec.network"):
        kube.create(
            CONSUMERS,
            namespace,
            {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceConsumer", "metadata": {"name": "c"}, "spec": {}},
        )
    with pytest.raises(Invalid, match="metricsMaxAgeSeconds"):
        kube.create(
            NETWORKS,
            namespace,
            {
                "apiVersion": "agn.dev/v1alpha1",
                "kind": "InferenceNetwork",
                "metadata": {"name": "n"},
                "spec": {"metricsMaxAgeSeconds": 0},
            },
        )
    network = kube.create(
        NETWORKS,
        namespace,
        {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceNetwork", "metadata": {"name": "n2"}, "spec": {}},
    )
    assert network["spec"]["metricsMaxAgeSeconds"] == 45  # the documented default
    with pytest.raises(Invalid, match="admission_state"):
        kube.create(
            OVERLAYS,
            namespace,
            {
                "apiVersion": "agn.dev/v1alpha1",
                "kind": "RoutingOverlay",
                "metadata": {"name": "o"},
                "spec": {
                    "network": "n",
                    "consumer": "c",
                    "revision": 1,
                    "digest": "d",
                    "candidates": [{"id": "x", "provider": "p", "endpoint": "e", "admission_state": "maybe"}],
                },
            },
        )
