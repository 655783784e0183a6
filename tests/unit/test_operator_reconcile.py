"""The overlay plan: the same revision while admission is unchanged, +1 when it changes, and a
recheck when a reading is about to go stale."""

from __future__ import annotations

import dataclasses

from agn.model import EXISTING_ONLY, ConsumerView, NetworkView, ProviderView, candidate_id
from agn.operator.reconcile import plan_overlay
from agn.operator.verdicts import Verdicts

NOW = 1_700_000_000.0
NET = NetworkView("net", metrics_max_age_seconds=10)
CONSUMER = ConsumerView("c1", "net")


def prov(name: str, **changes) -> ProviderView:
    base = ProviderView(name, f"http://{name}:1", candidate_id(name), "g", 1, healthy=True, metrics_observed_at=NOW - 1)
    return dataclasses.replace(base, **changes)


def test_first_plan_is_revision_one_and_rechecks_when_the_reading_goes_stale():
    judged = Verdicts().evaluate(NET, [prov("a")], now=NOW)
    assert plan_overlay(CONSUMER, judged, previous=None).revision == 1
    assert judged.recheck_at == NOW - 1 + 10


def test_unchanged_admission_keeps_the_overlay():
    verdicts = Verdicts()
    first = plan_overlay(CONSUMER, verdicts.evaluate(NET, [prov("a"), prov("b")], now=NOW), previous=None)
    refreshed = [prov("b", metrics_observed_at=NOW), prov("a")]
    assert plan_overlay(CONSUMER, verdicts.evaluate(NET, refreshed, now=NOW + 3), previous=first) == first


def test_drain_is_the_next_revision():
    verdicts = Verdicts()
    first = plan_overlay(CONSUMER, verdicts.evaluate(NET, [prov("a")], now=NOW), previous=None)
    drained = plan_overlay(CONSUMER, verdicts.evaluate(NET, [prov("a", drain=True)], now=NOW), previous=first)
    assert drained.revision == 2 and drained.candidates[0].admission_state == EXISTING_ONLY


def test_a_consumers_exclusion_is_applied_after_the_network_verdict():
    judged = Verdicts().evaluate(NET, [prov("a"), prov("b")], now=NOW)
    picky = ConsumerView("c2", "net", excluded_providers=frozenset({"a"}))
    assert [c.provider for c in plan_overlay(picky, judged, previous=None).candidates] == ["b"]


def test_no_recheck_without_a_fresh_reading():
    judged = Verdicts().evaluate(NET, [prov("a", healthy=False)], now=NOW)
    assert plan_overlay(CONSUMER, judged, previous=None).candidates == () and judged.recheck_at is None
