"""The "overlay published" log line carries a diff sized by the change, not the whole overlay."""

from __future__ import annotations

import dataclasses
import json

from agn.model import ADMITTED, EXISTING_ONLY, ConsumerView, NetworkView, ProviderView, candidate_id
from agn.operator.diffing import CHANGE_LOG_LIMIT, overlay_changes
from agn.operator.reconcile import plan_overlay
from agn.operator.verdicts import Verdicts

NOW = 1_700_000_000.0
NET = NetworkView("net", metrics_max_age_seconds=10)
CONSUMER = ConsumerView("c1", "net")


def fleet(n: int, *, drained: frozenset[str] = frozenset()) -> list[ProviderView]:
    return [
        ProviderView(
            f"p{i}",
            f"http://p{i}:1",
            candidate_id(f"uid-p{i}"),
            "g",
            1,
            healthy=True,
            metrics_observed_at=NOW - 1,
            drain=f"p{i}" in drained,
        )
        for i in range(n)
    ]


def plan(providers, previous=None):
    return plan_overlay(CONSUMER, Verdicts().evaluate(NET, providers, now=NOW), previous=previous)


def log_size(previous, overlay) -> int:
    return len(json.dumps(overlay_changes(previous, overlay)))


def test_one_drain_logs_one_change_whatever_the_fleet_size():
    sizes = []
    for n in (10, 1000, 5000):
        before = plan(fleet(n))
        after = plan(fleet(n, drained=frozenset({"p3"})), previous=before)
        changes = overlay_changes(before, after)
        assert changes["changed"] == {"count": 1, "providers": [{"p3": {"admission_state": [ADMITTED, EXISTING_ONLY]}}]}
        assert changes["added"] == {"count": 0} and changes["removed"] == {"count": 0}
        assert changes["states"] == {ADMITTED: n - 1, EXISTING_ONLY: 1}
        sizes.append(log_size(before, after))
    # O(changed): the line for 5,000 providers is the line for 10, but for the digits of the counts.
    assert max(sizes) - min(sizes) <= 8


def test_added_and_removed_candidates_are_named_with_their_state():
    before = plan(fleet(3))
    providers = fleet(5)
    after = plan([p for p in providers if p.name != "p0"], previous=before)
    changes = overlay_changes(before, after)
    assert changes["added"] == {"count": 2, "providers": [{"p3": ADMITTED}, {"p4": ADMITTED}]}
    assert changes["removed"] == {"count": 1, "providers": [{"p0": ADMITTED}]}
    assert changes["changed"] == {"count": 0}


def test_other_field_changes_are_shown_old_and_new():
    before = plan(fleet(2))
    moved = [dataclasses.replace(p, rank=7) if p.name == "p1" else p for p in fleet(2)]
    changes = overlay_changes(before, plan(moved, previous=before))
    assert changes["changed"]["providers"] == [{"p1": {"rank": [1, 7]}}]


def test_a_first_publication_of_a_fleet_names_a_bounded_number_of_providers():
    overlay = plan(fleet(5000))
    changes = overlay_changes(None, overlay)
    assert changes["added"]["count"] == 5000
    assert len(changes["added"]["providers"]) == CHANGE_LOG_LIMIT
    assert changes["added"]["more"] == 5000 - CHANGE_LOG_LIMIT
    assert log_size(None, overlay) < 4096
