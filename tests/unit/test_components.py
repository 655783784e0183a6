"""Components described once (xtask/components.py): every command line a runtime makes is one
the program's own parser accepts, with the values the env definition asks for."""

from __future__ import annotations

import dataclasses

import pytest

from agn.gateway.settings import parse_settings as gateway_settings
from agn.operator.settings import parse_settings as operator_settings
from agn.provider.settings import parse_settings as provider_settings
from xtask import components
from xtask.envdef import load_env
from xtask.manifests import render

ENVDEF = dataclasses.replace(load_env("example"), overlay_shards=4)
LOCAL = components.Placement(kubeconfig="/state/kubeconfig", context="local-x")
POD = components.Placement(bind="0.0.0.0")
PORTS = {"gateway-consumer-a": 4101, "gateway-consumer-b": 4102}


def port_for(name: str) -> int:
    return PORTS.get(name, 4200)


def test_the_operator_runs_with_the_envs_namespace_and_shards():
    op = components.env_operator(ENVDEF, port=4100, placement=LOCAL)
    s = operator_settings(list(op.args))
    assert (s.namespace, s.overlay_shards, s.health_port, s.health_host) == (ENVDEF.namespace, 4, 4100, "127.0.0.1")
    assert (s.kubeconfig, s.context) == ("/state/kubeconfig", "local-x")
    assert op.url(op.ready_path) == "http://127.0.0.1:4100/healthz"
    in_pod = operator_settings(list(components.env_operator(ENVDEF, port=8080, placement=POD).args))
    assert (in_pod.health_host, in_pod.kubeconfig, in_pod.context) == ("0.0.0.0", None, None)


def test_one_gateway_per_consumer_on_its_own_port():
    gateways = components.env_gateways(ENVDEF, port_for=port_for, placement=LOCAL)
    assert [g.serves for g in gateways] == [c.name for c in ENVDEF.consumers]
    for g in gateways:
        s = gateway_settings(list(g.args))
        assert (s.consumer, s.namespace, s.port, s.host) == (g.serves, ENVDEF.namespace, PORTS[g.name], "127.0.0.1")
        assert (g.name, g.ready_path, g.metrics_path) == (f"gateway-{g.serves}", "/readyz", "/metrics")


def test_a_fake_for_each_provider_without_an_external_endpoint():
    fakes = components.env_fake_providers(ENVDEF, port_for=port_for, placement=POD)
    assert [f.serves for f in fakes] == [p.name for p in ENVDEF.providers if not p.endpoint]
    for f in fakes:
        s = provider_settings(list(f.args))
        assert (s.name, s.port, s.host, s.unhealthy) == (f.serves, 4200, "0.0.0.0", False)
        assert f.metrics_path is None  # its /metrics is the provider's load report, not the component's own


def test_the_pods_run_the_same_components():
    deployments = {o["metadata"]["name"]: o for o in render(ENVDEF) if o["kind"] == "Deployment"}
    pod = components.Placement(bind="0.0.0.0")
    expected = {
        "agn-operator": components.env_operator(ENVDEF, port=8080, placement=pod),
        **{
            f"agn-gateway-{g.serves}": g
            for g in components.env_gateways(ENVDEF, port_for=lambda name: 8080, placement=pod)
        },
        **{
            f"fake-{f.serves}": f
            for f in components.env_fake_providers(ENVDEF, port_for=lambda name: 8080, placement=pod)
        },
    }
    assert sorted(deployments) == sorted(expected)
    for name, component in expected.items():
        container = deployments[name]["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] + container["args"] == ["python", "-m", *component.module_args]
        assert container["readinessProbe"]["httpGet"]["path"] == component.ready_path


def test_a_value_the_program_would_refuse_fails_before_anything_starts():
    with pytest.raises(ValueError, match="--overlay-shards 0: shard count must be between 1 and 100"):
        components.operator(namespace="ns", overlay_shards=0)
    with pytest.raises(TypeError, match="no setting 'probe_intervall'"):
        components.operator(namespace="ns", probe_intervall=2)


def test_tests_and_benches_pass_settings_by_field_name():
    op = components.operator(namespace="ns", placement=LOCAL, coalesce_window=0.0, max_batch_wait=1.0)
    s = operator_settings(list(op.args))
    assert (s.coalesce_window, s.max_batch_wait, s.health_port) == (0.0, 1.0, None)
    with_extra = components.operator(namespace="ns", port=9, extra=("--probe-jitter", "0"))
    assert with_extra.args[-4:] == ("--health-port", "9", "--probe-jitter", "0")


@pytest.mark.parametrize("fmt", ["vllm", "sglang", "tgi", "llamacpp"])
def test_a_fake_serving_an_engines_format_is_checked_where_that_engine_serves_health(fmt):
    fake = components.fake_provider("p", port=8080, metrics_format=fmt)
    assert provider_settings(list(fake.args)).metrics_format == fmt
    health = "/get_model_info" if fmt == "sglang" else "/health"  # SGLang's /health generates a token
    assert (fake.health_path, fake.ready_path) == (health, health)
    agn = components.fake_provider("p", port=8080)
    assert "--metrics-format" not in agn.args and agn.health_path == "/healthz"


def test_the_fakes_metrics_format_flag_refuses_a_format_it_does_not_serve(capsys):
    with pytest.raises(SystemExit) as exc:
        provider_settings(["--name", "p", "--metrics-format", "triton"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--metrics-format" in err and "invalid choice: 'triton'" in err and "llamacpp" in err
    with pytest.raises(ValueError, match="--metrics-format"):
        components.fake_provider("p", port=8080, metrics_format="triton")
