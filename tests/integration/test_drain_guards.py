"""A drain guard is an extension point: a guard defined here, in a test module, joins the
registry with one line and refuses a real drain against the real API server — exit 3, named in
the report, nothing written, no journal, the drain lock given back — without a change to the
conductor. Also: every guard looks once, under the drain lock, on one snapshot."""

from __future__ import annotations

import dataclasses

import pytest

from agn.kube import LEASES, NETWORKS, PROVIDERS
from kubetest import create
from xtask.drain import guards
from xtask.drain.core.progress import Said
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import Selector
from xtask.drain.guards.base import Look, Verdict
from xtask.drain.run import run_drain
from xtask.drain.snapshot import Snapshot
from xtask.errors import ExitCode

pytestmark = pytest.mark.integration


@dataclasses.dataclass
class FreezeGuard:
    """Refuses every drain of a provider labelled ``freeze: yes``; counts its looks."""

    name: str = "change-freeze"
    field: str | None = None
    looks: list[tuple[str, bool, int]] = dataclasses.field(default_factory=list)

    def check(self, snapshot: Snapshot, look: Look) -> Verdict:
        frozen = [
            p["metadata"]["name"]
            for p in snapshot.selected(look.changes)
            if p["metadata"].get("labels", {}).get("freeze") == "yes"
        ]
        self.looks.append((look.where, look.under_lock, len(snapshot.members)))
        return Verdict(self.name, refusals=tuple(f"change freeze: {n} is frozen" for n in frozen))


@pytest.fixture
def fleet(kube, namespace):
    spec = {"providerSelector": {"matchLabels": {"net": "yes"}}}
    create(kube, NETWORKS, namespace, "net", spec)
    for name, freeze in (("p-one", "yes"), ("p-two", "no"), ("p-three", "no")):
        provider = {"endpoint": "http://127.0.0.1:9/x", "providerGateway": "gw", "selectionGroup": "chat"}
        create(kube, PROVIDERS, namespace, name, provider, labels={"net": "yes", "freeze": freeze})
    return namespace


def drain(control_plane, namespace: str, tmp_path, provider: str | None, *, gateway: str | None = None):
    said: list[str] = []
    req = DrainRequest(
        selector=Selector(provider=provider, gateway=gateway),
        drain=True,
        context=control_plane.context,
        kubeconfig=str(control_plane.kubeconfig),
        namespace=namespace,
        journal_dir=tmp_path / "journal",
    )
    report = run_drain(req, progress=lambda e: said.append(e.text) if isinstance(e, Said) else None)
    return report, said


def test_a_guard_from_a_test_module_refuses_a_drain(kube, control_plane, fleet, tmp_path, monkeypatch):
    guard = FreezeGuard()
    monkeypatch.setattr(guards, "GUARDS", [*guards.GUARDS, guard])  # the one registry line

    report, _ = drain(control_plane, fleet, tmp_path, "p-one")
    assert report.exit_code is ExitCode.REFUSED == 3, report.summary
    assert report.refused == ["change freeze: p-one is frozen"]
    assert "change freeze: p-one is frozen" in report.summary
    named = {g["guard"]: g for g in report.to_dict()["guards"]}
    assert named["change-freeze"]["refused"] == ["change freeze: p-one is frozen"]
    assert set(named) >= {"holds", "budget", "capacity", "targets", "change-freeze"}
    # Nothing written, no journal, and the lock was given back.
    assert "trafficPolicy" not in kube.get(PROVIDERS, fleet, "p-one")["spec"]
    journals = tmp_path / "journal"
    assert report.journal is None and not (journals.exists() and any(journals.iterdir()))
    leases = [lease["metadata"]["name"] for lease in kube.list(LEASES, fleet)[0]]
    assert report.lock is not None and report.lock["acquisitions"], report.lock  # it was taken ...
    assert [n for n in leases if n.startswith("agn-drain")] == []  # ... and given back
    # One look, under the drain lock, on the provider's selection group (all three are in it).
    assert guard.looks == [("before writing", True, 3)]


def test_the_same_registry_lets_a_drain_through(kube, control_plane, fleet, tmp_path, monkeypatch):
    guard = FreezeGuard()
    monkeypatch.setattr(guards, "GUARDS", [*guards.GUARDS, guard])
    report, _ = drain(control_plane, fleet, tmp_path, "p-two")
    assert report.exit_code is ExitCode.OK, report.summary
    assert kube.get(PROVIDERS, fleet, "p-two")["spec"]["trafficPolicy"]["drain"] is True
    assert guard.looks == [("before writing", True, 3)]


def test_the_dry_run_is_sent_under_the_lock_after_the_look(kube, control_plane, fleet, tmp_path, monkeypatch):
    """A real drain in one wave reads before the drain lock only what names it; its server-side
    dry run (a fan-out's: one write is its own) is sent under the lock once every guard passed,
    so a refused drain sends none."""
    monkeypatch.setattr(guards, "GUARDS", [*guards.GUARDS, FreezeGuard()])
    refused, _ = drain(control_plane, fleet, tmp_path, "p-one")
    assert refused.exit_code is ExitCode.REFUSED, refused.summary
    assert refused.dry_run_outcomes == [] and refused.operation is None
    for name in ("p-four", "p-five"):  # a fan-out of two (the fleet's gateway holds frozen p-one)
        provider = {"endpoint": "http://127.0.0.1:9/x", "providerGateway": "gw-two", "selectionGroup": "other"}
        create(kube, PROVIDERS, fleet, name, provider, labels={"net": "yes", "freeze": "no"})
    passed, _ = drain(control_plane, fleet, tmp_path, None, gateway="gw-two")
    assert passed.exit_code is ExitCode.OK, passed.summary
    assert sorted(o["provider"] for o in passed.dry_run_outcomes) == ["p-five", "p-four"] and passed.operation
    single, _ = drain(control_plane, fleet, tmp_path, "p-two")  # one write: no dry run, the same operation
    assert single.exit_code is ExitCode.OK, single.summary
    assert single.dry_run_outcomes == [] and single.operation
