"""The overlay plan: write only on change, recheck when metrics are about to go stale."""

from __future__ import annotations

import dataclasses

from agn.model import EXISTING_ONLY, ConsumerView, NetworkView, ProviderView, candidate_id
from agn.operator.reconcile import plan_overlay

NOW = 1_700_000_000.0
NET = NetworkView("net", metrics_max_age_seconds=10)
CONSUMER = ConsumerView("c1", "net")


def prov(name: str, **changes) -> ProviderView:
    base = ProviderView(name, f"http://{name}:1", candidate_id(name), "g", 1, healthy=True, metrics_observed_at=NOW - 1)
    return dataclasses.replace(base, **changes)


def test_first_plan_writes_revision_one():
    plan = plan_overlay(CONSUMER, NET, [prov("a")], previous=None, now=NOW)
    assert plan.write and plan.overlay.revision == 1
    assert plan.recheck_at == NOW - 1 + 10


def test_unchanged_admission_does_not_write():
    first = plan_overlay(CONSUMER, NET, [prov("a"), prov("b")], previous=None, now=NOW).overlay
    again = plan_overlay(CONSUMER, NET, [prov("b", metrics_observed_at=NOW), prov("a")], previous=first, now=NOW + 3)
    assert not again.write and again.overlay == first


def test_drain_writes_next_revision():
    first = plan_overlay(CONSUMER, NET, [prov("a")], previous=None, now=NOW).overlay
    plan = plan_overlay(CONSUMER, NET, [prov("a", drain=True)], previous=first, now=NOW)
    assert plan.write and plan.overlay.revision == 2
    assert plan.overlay.candidates[0].admission_state == EXISTING_ONLY


def test_no_recheck_without_candidates():
    plan = plan_overlay(CONSUMER, NET, [prov("a", healthy=False)], previous=None, now=NOW)
    assert plan.overlay.candidates == () and plan.recheck_at is None
