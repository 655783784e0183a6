"""The manifest renderer: pure, complete (every consumer and provider), and faithful to the env definition."""

from __future__ import annotations

import copy
import dataclasses

import yaml
from click.testing import CliRunner

from agn.netshards import network_shard_names
from agn.operator.heartbeat import HEARTBEAT_LEASE
from agn.operator.lease import DEFAULT_LEASE_NAME
from agn.shards import DEFAULT_SHARD_COUNT, shard_names
from xtask.cli.env import env_group
from xtask.crds import crd_documents, policy_documents
from xtask.envdef import load_env, parse_env
from xtask.manifests import deployment_names, provider_endpoint, render

ENVDEF = load_env("example")


def by_kind(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def container(deployment):
    [c] = deployment["spec"]["template"]["spec"]["containers"]
    return c


def test_render_is_pure_and_deterministic():
    before = copy.deepcopy(ENVDEF)
    first = render(ENVDEF)
    first_copy = copy.deepcopy(first)
    first[0]["metadata"]["name"] = "mutated"  # callers own what they get back
    assert render(ENVDEF) == first_copy
    assert ENVDEF == before


def test_every_consumer_and_provider_has_its_workload():
    objects = render(ENVDEF)
    deployments, services = by_kind(objects, "Deployment"), by_kind(objects, "Service")
    for c in ENVDEF.consumers:
        name = f"agn-gateway-{c.name}"
        assert name in deployments and name in services
        args = container(deployments[name])["args"]
        assert args[:1] == ["agn.gateway"] and args[args.index("--consumer") + 1] == c.name
        assert deployments[name]["spec"]["template"]["spec"]["serviceAccountName"] == name
    for p in ENVDEF.providers:
        assert p.name in services  # the endpoint's host
        args = container(deployments[f"fake-{p.name}"])["args"]
        assert args[:1] == ["agn.provider"] and args[args.index("--name") + 1] == p.name
    assert "agn-operator" in deployments
    assert sorted(deployment_names(objects)) == sorted(
        [
            "agn-operator",
            *(f"agn-gateway-{c.name}" for c in ENVDEF.consumers),
            *(f"fake-{p.name}" for p in ENVDEF.providers),
        ]
    )


def test_services_select_their_pods_and_probes_use_healthz():
    objects = render(ENVDEF)
    deployments = by_kind(objects, "Deployment")
    pods = {name: d["spec"]["template"]["metadata"]["labels"] for name, d in deployments.items()}
    for svc in by_kind(objects, "Service").values():
        selector = svc["spec"]["selector"]
        assert [n for n, labels in pods.items() if selector.items() <= labels.items()], svc["metadata"]["name"]
    for name, d in deployments.items():
        c = container(d)
        assert c["image"] == "agn:dev" and c["resources"]["requests"]
        assert d["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
        if name.startswith("agn-gateway-"):
            assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        if name.startswith("fake-"):
            assert c["readinessProbe"]["httpGet"]["path"] == "/healthz"
            assert c["livenessProbe"]["tcpSocket"]["port"] == "http"  # unhealthy on purpose must not mean restarted
        if name != "agn-operator":
            assert "0.0.0.0" in c["args"]  # reachable through its Service, not only on the pod's loopback


def test_env_objects_are_exactly_the_env_definitions():
    objects = render(ENVDEF)
    agn = [o for o in objects if o["apiVersion"].startswith("agn.dev/")]
    endpoints = {p.name: provider_endpoint(p.name, ENVDEF.namespace) for p in ENVDEF.providers}
    assert agn == ENVDEF.network_objects() + ENVDEF.consumer_objects() + ENVDEF.provider_objects(endpoints)
    assert all(
        o["spec"]["endpoint"] == f"http://{o['metadata']['name']}.agn-example.svc:8080"
        for o in agn
        if o["kind"] == "InferenceProvider"
    )


def test_namespace_override_moves_every_object():
    objects = render(ENVDEF, namespace="t-123")
    assert objects[0]["kind"] == "Namespace" and objects[0]["metadata"]["name"] == "t-123"
    assert all(o["metadata"]["namespace"] == "t-123" for o in objects[1:])
    for binding in by_kind(objects, "RoleBinding").values():
        assert binding["subjects"][0]["namespace"] == "t-123"
    override = dataclasses.replace(ENVDEF, namespace="t-123")
    assert [o for o in objects if o["apiVersion"].startswith("agn.dev/")][
        -len(ENVDEF.providers) :
    ] == override.provider_objects({p.name: provider_endpoint(p.name, "t-123") for p in ENVDEF.providers})


def test_each_identity_is_bound_to_its_own_role_only():
    objects = render(ENVDEF)
    accounts = set(by_kind(objects, "ServiceAccount"))
    assert accounts == {"agn-operator", "agn-provider-drain", *(f"agn-gateway-{c.name}" for c in ENVDEF.consumers)}
    for name, binding in by_kind(objects, "RoleBinding").items():
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": ENVDEF.namespace}]
    gateway_rules = by_kind(objects, "Role")["agn-gateway-consumer-a"]["rules"]
    shard_rules = [rule for rule in gateway_rules if rule["resources"] == ["routingoverlayshards"]]
    assert all(rule["resourceNames"] == ["consumer-a"] for rule in gateway_rules if rule not in shard_rules)
    # Its own shards and its network's, by name, read-only: get is all the follower does with them.
    assert shard_rules == [
        {
            "apiGroups": ["agn.dev"],
            "resources": ["routingoverlayshards"],
            "resourceNames": shard_names("consumer-a", DEFAULT_SHARD_COUNT)
            + network_shard_names("production", DEFAULT_SHARD_COUNT),
            "verbs": ["get"],
        }
    ]
    operator_rules = by_kind(objects, "Role")["agn-operator"]["rules"]
    writes = {
        (res, verb)
        for rule in operator_rules
        for res in rule["resources"]
        for verb in rule["verbs"]
        if verb in ("create", "update", "patch", "delete")
    }
    assert not {w for w in writes if w[0] == "inferenceproviders"}
    assert ("routingoverlays", "delete") in writes  # orphaned overlays, where no garbage collector runs


def test_operator_may_hold_exactly_its_leases_and_nothing_else_in_coordination():
    rules = by_kind(render(ENVDEF), "Role")["agn-operator"]["rules"]
    coordination = [r for r in rules if "coordination.k8s.io" in r["apiGroups"]]
    assert all(r["apiGroups"] == ["coordination.k8s.io"] and r["resources"] == ["leases"] for r in coordination)
    assert {(tuple(r.get("resourceNames") or ()), tuple(r["verbs"])) for r in coordination} == {
        ((), ("create",)),
        ((DEFAULT_LEASE_NAME, HEARTBEAT_LEASE), ("get", "update")),
    }
    operator = by_kind(render(ENVDEF), "Deployment")["agn-operator"]
    args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--lease-name" not in args and "--no-leader-elect" not in args  # the default lease, elected


def test_external_providers_get_no_fake_and_keep_their_endpoint():
    data = yaml.safe_load(ENVDEF.source.read_text())
    data["providers"][0]["endpoint"] = "http://models.example.com"
    envdef = parse_env(data, source=ENVDEF.source)
    objects = render(envdef)
    assert f"fake-{envdef.providers[0].name}" not in by_kind(objects, "Deployment")
    provider = by_kind(objects, "InferenceProvider")[envdef.providers[0].name]
    assert provider["spec"]["endpoint"] == "http://models.example.com"


def test_image_id_annotation_rolls_pods_when_the_image_changes():
    a, b = render(ENVDEF, image_id="sha256:a"), render(ENVDEF, image_id="sha256:b")
    for da, db in zip(by_kind(a, "Deployment").values(), by_kind(b, "Deployment").values(), strict=False):
        assert da["spec"]["template"] != db["spec"]["template"]
    assert all(
        "agn.dev/image-id" not in (d["spec"]["template"]["metadata"].get("annotations") or {})
        for d in by_kind(render(ENVDEF), "Deployment").values()
    )


def test_operator_and_gateways_are_scraped_on_their_metrics_port_and_providers_are_not():
    deployments = by_kind(render(ENVDEF), "Deployment")
    for name, d in deployments.items():
        annotations = d["spec"]["template"]["metadata"].get("annotations") or {}
        if name == "agn-operator" or name.startswith("agn-gateway-"):
            assert annotations == {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "8080",
                "prometheus.io/path": "/metrics",
            }, name
            assert container(d)["ports"][0]["containerPort"] == 8080
        else:
            assert "prometheus.io/scrape" not in annotations, name
    assert "agn-operator" in by_kind(render(ENVDEF), "Service")  # a stable address for its /metrics


def test_render_command_prints_crds_then_every_object():
    result = CliRunner().invoke(env_group, ["render", "--env", "example", "--image", "agn:test"])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.output))
    crds = crd_documents() + policy_documents()  # the drain-hold admission policy with the CRDs
    assert docs[: len(crds)] == crds
    assert [d["kind"] for d in policy_documents()] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    assert docs[len(crds) :] == render(ENVDEF, image="agn:test")
    no_crds = CliRunner().invoke(env_group, ["render", "--no-crds", "--namespace", "other"])
    assert list(yaml.safe_load_all(no_crds.output)) == render(ENVDEF, namespace="other")


def test_the_overlay_shard_count_reaches_the_operator_and_every_gateway_role():
    """The operator writes ``overlayShards`` shards per consumer and each gateway may read exactly
    those names: both come from the env file, so they cannot disagree."""
    objects = render(dataclasses.replace(ENVDEF, overlay_shards=40))
    args = by_kind(objects, "Deployment")["agn-operator"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--overlay-shards") + 1] == "40"
    for c in ENVDEF.consumers:
        rules = by_kind(objects, "Role")[f"agn-gateway-{c.name}"]["rules"]
        (names,) = [r["resourceNames"] for r in rules if r["resources"] == ["routingoverlayshards"]]
        assert names == shard_names(c.name, 40) + network_shard_names(c.network, 40)


def secret_rules(role: dict) -> list[dict]:
    return [r for r in role["rules"] if "secrets" in r["resources"]]


def test_operator_and_gateways_may_get_only_the_secrets_their_providers_name():
    data = yaml.safe_load(ENVDEF.source.read_text())
    data["networks"].append({"name": "staging", "providerSelector": {"matchLabels": {"agn.dev/network": "staging"}}})
    data["consumers"][1]["network"] = "staging"  # consumer-b
    auth = {"credentials": {"name": "engine-a", "key": "token"}}
    data["providers"][0]["authorization"] = auth
    data["providers"][1]["authorization"] = {"type": "Bearer", "credentials": {"name": "engine-b", "key": "k"}}
    data["providers"][1]["labels"] = {"agn.dev/network": "staging"}
    objects = render(parse_env(data, source=ENVDEF.source))
    roles = by_kind(objects, "Role")
    secret_rule = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    assert secret_rules(roles["agn-operator"]) == [{**secret_rule, "resourceNames": ["engine-a", "engine-b"]}]
    assert secret_rules(roles["agn-gateway-consumer-a"]) == [{**secret_rule, "resourceNames": ["engine-a"]}]
    assert secret_rules(roles["agn-gateway-consumer-b"]) == [{**secret_rule, "resourceNames": ["engine-b"]}]
    provider = by_kind(objects, "InferenceProvider")[data["providers"][0]["name"]]
    assert provider["spec"]["authorization"] == {"type": "Bearer", **auth}
    # No provider names a Secret: no Secret rule at all (an empty resourceNames would grant every one).
    plain = by_kind(render(ENVDEF), "Role")
    assert not any(secret_rules(role) for role in plain.values())
    assert "{provider_secrets}" not in str(render(ENVDEF)) and "{consumer_secrets}" not in str(render(ENVDEF))
