"""Drain holds belong to the identity that wrote them, on the real API server with the admission
policy ``agn-drain-holds`` installed (``manifests/policy/drain-holds.yaml``).

Three real identities (client certificates from the control plane's CA, ``tests/identities.py``):
alice and bob have the drain Role; carol has it and the release verb (``agn-drain-releaser``).
bob cannot release alice's hold through the CLI (refused before writing, exit 3, naming alice)
nor with a raw ``kubectl patch`` (the API server denies it, naming alice and the rule); carol can
release every hold; alice releases her own.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from identities import grant, users_kubeconfig

from agn.holds import HOLD_PREFIX, hold_key, owner_key
from agn.kube import PROVIDERS
from reportschema import parse_report
from xtask.drain.core.holds import holds_of
from xtask.reports import PROVIDER_DRAIN
from xtask.runtime.assets import ensure_assets

pytestmark = pytest.mark.integration

ALICE, BOB, CAROL = "alice", "bob", "carol"


class Identities:
    def __init__(self, control_plane, namespace, tmp_path) -> None:
        self.cp, self.ns, self.tmp = control_plane, namespace, tmp_path
        self.kubeconfig = users_kubeconfig(control_plane, [ALICE, BOB, CAROL], tmp_path / "ids", namespace=namespace)

    def env(self) -> dict[str, str]:
        env = self.cp.env()
        env.update(KUBECONFIG=str(self.kubeconfig), NO_COLOR="1")
        return env

    def drain(self, user: str, *args: str) -> tuple[int, dict, str]:
        argv = [sys.executable, "-m", "xtask", "env", "provider-drain", "--context", user, "-n", self.ns]
        argv += ["--journal-dir", str(self.tmp / "journal"), *args, "--output", "json"]
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env(), timeout=120)
        return proc.returncode, parse_report(proc.stdout, PROVIDER_DRAIN), proc.stderr

    def kubectl_patch(self, user: str, name: str, patch: dict) -> subprocess.CompletedProcess:
        kubectl = str(ensure_assets(build=False) / "kubectl")
        argv = [kubectl, "--context", user, "-n", self.ns, "patch", "inferenceproviders.agn.dev", name]
        argv += ["--type", "merge", "-p", json.dumps(patch)]
        return subprocess.run(argv, capture_output=True, text=True, env=self.env(), timeout=60)


@pytest.fixture
def ids(control_plane, kube, namespace, tmp_path) -> Identities:
    grant(kube, namespace, drainers=[ALICE, BOB], releasers=[CAROL])
    kube.create(
        PROVIDERS,
        namespace,
        {
            "apiVersion": "agn.dev/v1alpha1",
            "kind": "InferenceProvider",
            "metadata": {"name": "p1"},
            "spec": {"endpoint": "http://127.0.0.1:9/p1", "providerGateway": "gw", "selectionGroup": "chat"},
        },
    )
    return Identities(control_plane, namespace, tmp_path)


def state(kube, namespace: str) -> tuple[bool | None, list[tuple[str | None, str | None]]]:
    obj = kube.get(PROVIDERS, namespace, "p1")
    holds = [(h["owner"], h["holder"]) for h in holds_of(obj)]
    return (obj["spec"].get("trafficPolicy") or {}).get("drain"), holds


def test_only_the_owner_or_a_releaser_removes_a_hold(ids, kube, namespace):
    code, report, err = ids.drain(ALICE, "--provider", "p1", "--holder", "alice (on call)", "--reason", "disk")
    assert code == 0, (report["summary"], err)
    assert state(kube, namespace) == (True, [(ALICE, "alice (on call)")])
    key = hold_key(ALICE)
    assert kube.get(PROVIDERS, namespace, "p1")["metadata"]["annotations"][owner_key(key)] == ALICE
    rv = kube.get(PROVIDERS, namespace, "p1")["metadata"]["resourceVersion"]

    # bob's undrain, whatever --holder he types: refused before writing, naming alice; exit 3.
    for holder in ([], ["--holder", "alice"], ["--holder", "alice (on call)"]):
        code, report, err = ids.drain(BOB, "--provider", "p1", "--undrain", *holder)
        assert code == 3, (holder, report["summary"], err)
        assert "p1: held by alice" in report["refused"][0] and "not by you" in report["refused"][0]
    # bob's --release-all: the API server refuses it in the server-side dry run (he lacks the verb),
    # reported per provider, naming alice and the rule; exit 3, nothing written.
    code, report, err = ids.drain(BOB, "--provider", "p1", "--undrain", "--release-all")
    assert code == 3 and "Traceback" not in err
    (rejected,) = report["dryRunOutcomes"]
    assert (rejected["provider"], rejected["outcome"], rejected["status"]) == ("p1", "dry-run-rejected", 422)
    assert "rule owner-only-release: bob" in rejected["error"] and "its owner is alice" in rejected["error"]
    assert kube.get(PROVIDERS, namespace, "p1")["metadata"]["resourceVersion"] == rv

    # bob with kubectl: the API server denies clearing the flag and removing or forging a hold.
    denied = {
        "no-undrain-while-held": {"spec": {"trafficPolicy": {"drain": False}}},
        "owner-only-release": {"metadata": {"annotations": {key: None, owner_key(key): None}}},
    }
    for rule, patch in denied.items():
        proc = ids.kubectl_patch(BOB, "p1", patch)
        assert proc.returncode != 0, proc.stdout
        assert f"rule {rule}" in proc.stderr and "alice" in proc.stderr and "agn-drain-holds" in proc.stderr, (
            proc.stderr
        )
    bk = hold_key(BOB)
    proc = ids.kubectl_patch(BOB, "p1", {"metadata": {"annotations": {bk: '{"holder":"x"}', owner_key(bk): ALICE}}})
    assert proc.returncode != 0 and "rule owner-is-requester" in proc.stderr, proc.stderr
    assert kube.get(PROVIDERS, namespace, "p1")["metadata"]["resourceVersion"] == rv

    # carol, allowed the release verb, removes every hold and clears the flag.
    code, report, err = ids.drain(CAROL, "--provider", "p1", "--undrain", "--release-all")
    assert code == 0, (report["summary"], err)
    assert state(kube, namespace) == (False, [])

    # alice drains again, bob joins; bob's own undrain leaves alice's; alice's own undrain clears.
    assert ids.drain(ALICE, "--provider", "p1")[0] == 0
    assert ids.drain(BOB, "--provider", "p1")[0] == 0
    drained, holds = state(kube, namespace)
    assert drained is True and sorted(owner for owner, _ in holds) == [ALICE, BOB]
    assert ids.drain(BOB, "--provider", "p1", "--undrain")[0] == 0
    code, report, err = ids.drain(ALICE, "--provider", "p1", "--undrain")
    assert code == 0, (report["summary"], err)
    assert state(kube, namespace) == (False, [])


def test_a_hold_written_before_owners_is_released_only_by_a_releaser(ids, kube, namespace):
    # The old format: a hold keyed by holder, no owner annotation (the admin may write it).
    old = HOLD_PREFIX + "ann-host-a-70db235d"
    value = {"holder": "ann@host-a", "reason": "old", "since": "2026-01-01T00:00:00Z", "operation": "op-old"}
    kube.merge_patch(
        PROVIDERS,
        namespace,
        "p1",
        {"metadata": {"annotations": {old: json.dumps(value)}}, "spec": {"trafficPolicy": {"drain": True}}},
    )
    code, report, _ = ids.drain(ALICE, "--provider", "p1", "--undrain")
    assert code == 3 and "ann@host-a (owner unknown)" in report["refused"][0]
    proc = ids.kubectl_patch(ALICE, "p1", {"metadata": {"annotations": {old: None}}})
    assert proc.returncode != 0 and "unknown (written before holds had owners)" in proc.stderr, proc.stderr
    code, report, err = ids.drain(CAROL, "--provider", "p1", "--undrain", "--release-all")
    assert code == 0, (report["summary"], err)
    assert state(kube, namespace) == (False, [])
