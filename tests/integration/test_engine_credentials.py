"""Credentials for engines, end to end: a fake llama.cpp server that requires an API key (as
``llama-server --api-key`` does), a provider naming the Secret that holds it
(``spec.authorization``), the real operator and the real gateway running as their own
ServiceAccounts (real tokens, the Roles ``xtask/manifests.py`` renders for the env), the real API
server. The token is never in a log, a status, an overlay or an Event."""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_operator import make_consumer, make_network, provider_status, states

from agn.credentials import SecretRef
from agn.kube import OVERLAYS, PROVIDERS, SHARDS, Forbidden, Kube
from agnprocs import AgnProcesses, http_json, wait_for
from kubetest import apply_identities, can_i, events, service_account_kubeconfig
from xtask.envdef import parse_env
from xtask.manifests import render

pytestmark = pytest.mark.integration

API = "agn.dev/v1alpha1"
SECRET, KEY = "engine-key", "token"
OTHER_SECRET = "other-engine-key"  # named by a provider of another network: not c1's gateway's


def env_definition(namespace: str) -> dict:
    """The test's env: c1 on network net with the keyed provider p1, and p2 on another network."""
    auth = {"credentials": {"name": SECRET, "key": KEY}}
    return {
        "apiVersion": "xtask.agn.dev/v1alpha1",
        "kind": "Environment",
        "name": "creds",
        "namespace": namespace,
        "networks": [
            {"name": "net", "providerSelector": {"matchLabels": {"agn.dev/net": "net"}}},
            {"name": "other", "providerSelector": {"matchLabels": {"agn.dev/net": "other"}}},
        ],
        "consumers": [{"name": "c1", "network": "net"}],
        "providers": [
            {"name": "p1", "selectionGroup": "g1", "rank": 0, "labels": {"agn.dev/net": "net"}, "authorization": auth},
            {
                "name": "p2",
                "selectionGroup": "g1",
                "rank": 0,
                "labels": {"agn.dev/net": "other"},
                "authorization": {"credentials": {"name": OTHER_SECRET, "key": KEY}},
            },
        ],
    }


def put_secret(kube: Kube, namespace: str, name: str, value: str) -> None:
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": {KEY: value},
        }
    )


class Rig:
    """The keyed fake provider, the identities, and the operator and gateway started as them."""

    def __init__(self, kube: Kube, namespace: str, control_plane, agn: AgnProcesses, tmp_path: Path) -> None:
        self.kube, self.ns, self.cp, self.agn, self.tmp = kube, namespace, control_plane, agn, tmp_path
        self.token = secrets.token_urlsafe(24)
        keys = tmp_path / "api-keys"
        keys.write_text(self.token + "\n")
        self.provider_url = agn.provider("p1", metrics_format="llamacpp", api_key_file=keys)
        envdef = parse_env(env_definition(namespace), source=tmp_path / "creds.yaml")
        identities = [o for o in render(envdef) if o["metadata"]["name"] in ("agn-operator", "agn-gateway-c1")]
        apply_identities(kube, namespace, identities)
        self.procs: dict[str, AgnProcesses] = {}
        make_network(kube, namespace)
        make_consumer(kube, namespace, "c1")

    def kubeconfig(self, account: str) -> Path:
        path = self.tmp / f"{account}.kubeconfig"
        return service_account_kubeconfig(self.kube, self.cp.kubeconfig, self.ns, account, path)

    def as_identity(self, account: str) -> AgnProcesses:
        """Processes started with ``account``'s ServiceAccount token (not the admin's certificate)."""
        procs = AgnProcesses(
            self.tmp / account,
            kubeconfig=self.kubeconfig(account),
            context=f"sa-{account}",
            namespace=self.ns,
            env=self.cp.env(),
        )
        self.procs[account] = procs
        return procs

    def start(self) -> str:
        self.as_identity("agn-operator").operator()
        return self.as_identity("agn-gateway-c1").gateway("c1")

    def add_provider(self, name: str = "p1", secret: str = SECRET, *, metrics_format: str = "llamacpp") -> None:
        spec = {
            "endpoint": self.provider_url,
            "selectionGroup": "g1",
            "rank": 0,
            "metrics": {"format": metrics_format},
            "authorization": SecretRef(secret, KEY).to_dict(),
        }
        body = {
            "apiVersion": API,
            "kind": "InferenceProvider",
            "metadata": {"name": name, "labels": {"agn.dev/net": "net"}},
        }
        self.kube.create(PROVIDERS, self.ns, {**body, "spec": spec})

    def stop(self) -> None:
        for procs in self.procs.values():
            procs.stop_all()

    def logs(self) -> str:
        """Every log the operator, the gateway and the fake provider wrote, whole."""
        folders = [p.sup.log_dir for p in (self.agn, *self.procs.values())]
        return "".join(f.read_text(errors="replace") for d in folders for f in sorted(d.glob("*.log")))

    def everything_written(self) -> str:
        """Every log line, provider status, overlay and Event of the test (where a leak would show)."""
        providers, _ = self.kube.list(PROVIDERS, self.ns)
        overlays, _ = self.kube.list(OVERLAYS, self.ns)
        shards, _ = self.kube.list(SHARDS, self.ns)
        written = [p.get("status") for p in providers] + overlays + shards + events(self.kube, self.ns)
        logs = self.logs()
        assert all(f'"component":"{c}"' in logs for c in ("operator", "gateway")), "the logs were read"
        assert events(self.kube, self.ns), "the Events were read"
        return logs + json.dumps(written)


@pytest.fixture
def rig(kube, namespace, control_plane, agn, tmp_path):
    rig = Rig(kube, namespace, control_plane, agn, tmp_path)
    yield rig
    rig.stop()


def condition(kube, ns: str, name: str, type_: str) -> dict:
    return next((c for c in provider_status(kube, ns, name).get("conditions") or () if c["type"] == type_), {})


def candidates(kube, ns: str) -> set[str]:
    """The providers in c1's overlay (index and shards assembled), in any admission state."""
    return set(states(kube, ns, "c1"))


def complete(gateway: str) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"{gateway}/v1/completions",
        data=b'{"prompt": "hi"}',
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_keyed_provider_is_admitted_its_load_read_and_served_and_a_rotation_takes_effect(rig: Rig):
    put_secret(rig.kube, rig.ns, SECRET, rig.token)
    rig.add_provider()
    gateway = rig.start()
    wait_for(lambda: "p1" in candidates(rig.kube, rig.ns), timeout=60, what="p1 admitted")
    probe = provider_status(rig.kube, rig.ns, "p1")["probe"]
    assert probe["healthy"] is True and probe["metricsFormat"] == "llamacpp" and "metricsError" not in probe
    assert condition(rig.kube, rig.ns, "p1", "MetricsFresh")["status"] == "True"
    code, body = wait_for(lambda: (r := complete(gateway))[0] == 200 and r, timeout=30, what="a completion")
    assert body["provider"] == "p1"
    # Rotation: the engine takes a new key, the Secret gets it; both readers follow (a 401 re-reads).
    rotated = secrets.token_urlsafe(24)
    http_json(f"{rig.provider_url}/admin/state", method="POST", body={"apiKeys": [rotated]})
    put_secret(rig.kube, rig.ns, SECRET, rotated)
    wait_for(lambda: complete(gateway)[0] == 200, timeout=60, what="completions with the rotated token")
    wait_for(
        lambda: (
            "metricsError" not in provider_status(rig.kube, rig.ns, "p1")["probe"]
            and "p1" in candidates(rig.kube, rig.ns)
        ),
        timeout=60,
        what="probes with the rotated token",
    )
    leaked = rig.everything_written()
    assert rig.token not in leaked and rotated not in leaked


def test_a_wrong_token_is_a_named_authorization_error_and_the_provider_is_not_admitted(rig: Rig):
    put_secret(rig.kube, rig.ns, SECRET, "not-" + rig.token)
    rig.add_provider()
    gateway = rig.start()
    fresh = wait_for(
        lambda: (c := condition(rig.kube, rig.ns, "p1", "MetricsFresh")).get("reason") == "Unauthorized" and c,
        timeout=60,
        what="p1 MetricsFresh Unauthorized",
    )
    message = f"GET /metrics: 401 Unauthorized; check spec.authorization.credentials secret {SECRET} key {KEY}"
    assert fresh["status"] == "False" and fresh["message"].endswith(message)
    assert provider_status(rig.kube, rig.ns, "p1")["probe"]["metricsError"] == message
    assert condition(rig.kube, rig.ns, "p1", "Available")["status"] == "True"  # llama.cpp's /health is public
    assert "p1" not in candidates(rig.kube, rig.ns)
    assert complete(gateway)[0] == 503  # nothing admitted
    put_secret(rig.kube, rig.ns, SECRET, rig.token)  # fixed: admitted within the cache's bound
    wait_for(lambda: "p1" in candidates(rig.kube, rig.ns), timeout=60, what="p1 admitted once the Secret is right")
    assert "not-" + rig.token not in rig.everything_written() and rig.token not in rig.everything_written()


def test_a_missing_or_unlisted_secret_is_a_named_error_until_it_is_there(rig: Rig):
    rig.add_provider()  # its Secret does not exist yet
    put_secret(rig.kube, rig.ns, "unlisted", rig.token)
    rig.add_provider("p3", secret="unlisted")  # exists, but no env provider names it: not in the Role
    rig.start()
    available = wait_for(
        lambda: (c := condition(rig.kube, rig.ns, "p1", "Available")).get("reason") == "SecretNotFound" and c,
        timeout=60,
        what="p1 Available SecretNotFound",
    )
    assert available["status"] == "False"
    assert available["message"] == f"credentials: secret {SECRET} not found (spec.authorization.credentials)"
    forbidden = wait_for(
        lambda: (c := condition(rig.kube, rig.ns, "p3", "Available")).get("reason") == "SecretForbidden" and c,
        timeout=60,
        what="p3 Available SecretForbidden",
    )
    assert "secret unlisted: reading it is forbidden" in forbidden["message"]
    assert candidates(rig.kube, rig.ns) == set()
    put_secret(rig.kube, rig.ns, SECRET, rig.token)
    wait_for(lambda: "p1" in candidates(rig.kube, rig.ns), timeout=60, what="p1 admitted once its Secret exists")
    assert "p3" not in candidates(rig.kube, rig.ns)
    assert rig.token not in rig.everything_written()


def sa(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def test_each_identity_reads_only_the_secrets_its_providers_name(rig: Rig):
    for name in (SECRET, OTHER_SECRET, "unrelated"):
        put_secret(rig.kube, rig.ns, name, rig.token)
    operator, gateway = sa(rig.ns, "agn-operator"), sa(rig.ns, "agn-gateway-c1")

    def may(user: str, verb: str, name: str | None = None) -> bool:
        return can_i(rig.kube, user, verb, "secrets", rig.ns, name=name, group="")

    assert may(operator, "get", SECRET) and may(operator, "get", OTHER_SECRET)
    assert may(gateway, "get", SECRET)
    assert not may(gateway, "get", OTHER_SECRET)  # a provider of another network
    for user in (operator, gateway):
        assert not may(user, "get", "unrelated")
        assert not any(may(user, verb) for verb in ("list", "watch", "create", "update", "delete"))
    # The decisive ones as real requests with the ServiceAccounts' own tokens.
    for account, allowed in (("agn-operator", OTHER_SECRET), ("agn-gateway-c1", SECRET)):
        config = rig.kubeconfig(account)
        as_account = Kube.from_kubeconfig(kubeconfig=str(config), context=f"sa-{account}", field_manager="t")
        try:
            assert as_account.secret_data(rig.ns, allowed) == {KEY: rig.token.encode()}
            with pytest.raises(Forbidden):
                as_account.secret_data(rig.ns, "unrelated")
        finally:
            as_account.close()
