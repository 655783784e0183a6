"""Drain holds belong to the caller's Kubernetes identity, enforced by the API server's
ValidatingAdmissionPolicy ``agn-drain-holds`` (``manifests/policy/drain-holds.yaml``).

Three real identities on the real kube-apiserver: client certificates for ``alice``, ``bob``
and ``carol`` issued from the control plane's CA (``tests/identities.py``), all bound to the
shipped drain Role, ``carol`` also to the ClusterRole ``agn-drain-releaser`` (verb
``release-holds``). The CLI runs as a subprocess; bob's raw writes go through the kubectl built
with the control plane."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from identities import grant, user_kubeconfig

from agn.holds import hold_key, owner_key
from agn.kube import PROVIDERS
from reportschema import parse_report
from xtask.drain.core.holds import holds_of
from xtask.reports import ENV_DRAINS, PROVIDER_DRAIN
from xtask.runtime.assets import ensure_assets

pytestmark = pytest.mark.integration

USERS = ("alice", "bob", "carol")


class As:
    """The CLI and kubectl as one user."""

    def __init__(self, control_plane, user: str, kubeconfig: Path, namespace: str, tmp: Path) -> None:
        self.cp, self.user, self.kubeconfig, self.ns, self.tmp = control_plane, user, kubeconfig, namespace, tmp

    def run(self, argv: list[str]) -> subprocess.CompletedProcess:
        env = self.cp.env()
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["NO_COLOR"] = "1"
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)

    def drain(self, *args: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "xtask", "env", "provider-drain", "--context", self.user, "-n", self.ns]
        return self.run([*argv, "--journal-dir", str(self.tmp / f"journal-{self.user}"), *args])

    def drain_json(self, *args: str) -> tuple[int, dict]:
        proc = self.drain(*args, "--output", "json")
        return proc.returncode, parse_report(proc.stdout, PROVIDER_DRAIN)

    def kubectl_patch(self, name: str, patch: dict) -> subprocess.CompletedProcess:
        kubectl = str(ensure_assets(build=False) / "kubectl")
        argv = [kubectl, "--context", self.user, "-n", self.ns, "patch", "inferenceproviders.agn.dev", name]
        return self.run([*argv, "--type", "merge", "-p", json.dumps(patch)])


@pytest.fixture
def users(control_plane, kube, namespace, tmp_path) -> dict[str, As]:
    grant(kube, namespace, drainers=["alice", "bob"], releasers=["carol"])
    out = {}
    for user in USERS:
        path = user_kubeconfig(control_plane, user, tmp_path / "identities", namespace=namespace)
        out[user] = As(control_plane, user, path, namespace, tmp_path)
    for name in ("p1", "p2"):
        kube.create(
            PROVIDERS,
            namespace,
            {
                "apiVersion": "agn.dev/v1alpha1",
                "kind": "InferenceProvider",
                "metadata": {"name": name},
                "spec": {"endpoint": f"http://127.0.0.1:9/{name}", "providerGateway": "gw", "selectionGroup": "chat"},
            },
        )
    return out


def drained(kube, namespace: str, name: str) -> bool:
    return bool((kube.get(PROVIDERS, namespace, name)["spec"].get("trafficPolicy") or {}).get("drain"))


def test_bob_cannot_release_alices_hold_alice_can(users, kube, namespace):
    alice, bob = users["alice"], users["bob"]
    code, report = alice.drain_json("--provider", "p1", "--holder", "alice on call", "--ticket", "CHG-7")
    assert code == 0, report["summary"]
    (hold,) = holds_of(kube.get(PROVIDERS, namespace, "p1"))
    assert (hold["owner"], hold["holder"], hold["key"]) == ("alice", "alice on call", hold_key("alice"))

    # bob's undrain, whatever --holder he types: refused before any write, naming alice.
    rv = kube.get(PROVIDERS, namespace, "p1")["metadata"]["resourceVersion"]
    for args in ((), ("--holder", "alice"), ("--holder", "alice on call")):
        proc = bob.drain("--provider", "p1", "--undrain", *args)
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert "held by alice" in proc.stdout + proc.stderr
    assert drained(kube, namespace, "p1")
    assert kube.get(PROVIDERS, namespace, "p1")["metadata"]["resourceVersion"] == rv

    # bob's raw writes: the API server refuses them, naming alice and the rule.
    proc = bob.kubectl_patch("p1", {"spec": {"trafficPolicy": {"drain": False}}})
    assert proc.returncode != 0 and "no-undrain-while-held" in proc.stderr and "held by alice" in proc.stderr
    key = hold_key("alice")
    proc = bob.kubectl_patch("p1", {"metadata": {"annotations": {key: None, owner_key(key): None}}})
    assert proc.returncode != 0 and "owner-only-release" in proc.stderr and "its owner is alice" in proc.stderr
    proc = bob.kubectl_patch("p1", {"metadata": {"annotations": {owner_key(key): "bob"}}})
    assert proc.returncode != 0 and "owner-only-release" in proc.stderr
    forged = hold_key("bob")
    proc = bob.kubectl_patch(
        "p2", {"metadata": {"annotations": {forged: '{"holder":"x"}', owner_key(forged): "alice"}}}
    )
    assert proc.returncode != 0 and "owner-is-requester" in proc.stderr
    assert drained(kube, namespace, "p1") and kube.get(PROVIDERS, namespace, "p1")["metadata"]["resourceVersion"] == rv

    # bob's --release-all without the verb: the server-side dry run is refused, nothing written.
    proc = bob.drain("--provider", "p1", "--undrain", "--release-all")
    assert proc.returncode == 3 and "its owner is alice" in proc.stdout + proc.stderr
    assert drained(kube, namespace, "p1")

    # bob joins, then leaves: his own hold is his to remove; alice's stays and keeps p1 drained.
    assert bob.drain("--provider", "p1").returncode == 0
    assert {h["owner"] for h in holds_of(kube.get(PROVIDERS, namespace, "p1"))} == {"alice", "bob"}
    code, report = bob.drain_json("--provider", "p1", "--undrain")
    assert code == 0 and report["stillHeld"] == {"p1": ["alice (holder alice on call)"]}
    assert drained(kube, namespace, "p1")

    # alice's own undrain works.
    code, report = alice.drain_json("--provider", "p1", "--undrain")
    assert code == 0, report["summary"]
    assert not drained(kube, namespace, "p1") and holds_of(kube.get(PROVIDERS, namespace, "p1")) == []


def test_a_releaser_removes_every_hold(users, kube, namespace):
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    assert alice.drain("--provider", "p2", "--expires-in", "1h").returncode == 0
    assert bob.drain("--provider", "p2").returncode == 0
    proc = carol.drain("--provider", "p2", "--undrain")  # carol holds nothing there: refused
    assert proc.returncode == 3 and "held by alice (holder " in proc.stdout and ", bob (holder " in proc.stdout
    code, report = carol.drain_json("--provider", "p2", "--undrain", "--release-all")
    assert code == 0, report["summary"]
    obj = kube.get(PROVIDERS, namespace, "p2")
    assert not drained(kube, namespace, "p2") and holds_of(obj) == []
    assert not [k for k in obj["metadata"].get("annotations") or {} if k.startswith("owners.drain.agn.dev/")]


def test_old_holds_without_owner_are_reported_and_only_a_releaser_removes_them(users, kube, namespace):
    legacy = "holds.drain.agn.dev/ann-host-a-12345678"
    kube.merge_patch(
        PROVIDERS,
        namespace,
        "p1",
        {
            "metadata": {"annotations": {legacy: '{"holder":"ann@host-a","since":"2026-01-01T00:00:00Z"}'}},
            "spec": {"trafficPolicy": {"drain": True}},
        },
    )
    argv = [sys.executable, "-m", "xtask", "env", "drains", "--context", "alice", "-n", namespace, "-o", "json"]
    proc = users["alice"].run(argv)
    (entry,) = parse_report(proc.stdout, ENV_DRAINS)["providers"]
    assert entry["holds"][0]["owner"] is None and entry["holds"][0]["holder"] == "ann@host-a"
    proc = users["alice"].drain("--provider", "p1", "--undrain")
    assert proc.returncode == 3 and "ann@host-a (owner unknown)" in proc.stdout
    proc = users["alice"].kubectl_patch("p1", {"metadata": {"annotations": {legacy: None}}})
    assert proc.returncode != 0 and "unknown (written before holds had owners)" in proc.stderr
    assert users["carol"].drain("--provider", "p1", "--undrain", "--release-all").returncode == 0
    assert not drained(kube, namespace, "p1")
