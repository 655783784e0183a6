"""A network-form publication diffed from the network shards that changed (agn.operator.diffing.
network_diff) says what comparing the whole overlays says, and declines when it cannot tell."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from agn.model import ConsumerView, NetworkView
from agn.netshards import index_over
from agn.operator.diffing import diff_candidates, network_diff
from agn.operator.network_storage import network_split
from agn.operator.reconcile import replan
from agn.operator.verdicts import Verdicts
from agn.provider.fleet import provider_views

NOW = 1_000_000.0
NET = NetworkView("net", metrics_max_age_seconds=45)
COUNT = 4
FLEET = 30

steps = st.lists(
    st.tuples(st.integers(0, FLEET - 1), st.sampled_from(["drain", "undrain", "fail", "heal"])), max_size=6
)


class Published:
    """One consumer's publications over the network shards, with every shard content seen."""

    def __init__(self, excluded: frozenset[str]) -> None:
        self.verdicts = Verdicts()
        self.consumer = ConsumerView("c", "net", excluded)
        self.known = self.planned = None
        self.specs: dict[tuple[str, str], dict] = {}

    def publish(self, drained: frozenset[int], unhealthy: frozenset[int]):
        providers = tuple(provider_views(FLEET, now=NOW, drained=drained, unhealthy=unhealthy))
        judged = self.verdicts.evaluate(NET, providers, now=NOW)
        previous = self.planned.overlay if self.planned else None
        self.known = network_split(self.known, "net", judged, COUNT)
        self.planned = replan(self.planned, self.consumer, judged, previous, COUNT)
        split = self.known[1]
        self.specs.update(((name, spec["digest"]), spec) for name, spec in split.shards.items())
        return split, index_over(self.planned.sharded.index, split, self.consumer.excluded_providers)

    def spec_at(self, name: str, digest: str):
        return self.specs.get((name, digest))


@settings(max_examples=40, deadline=None)
@given(steps=steps, excluded=st.frozensets(st.integers(0, FLEET - 1).map(lambda i: f"p{i}"), max_size=4))
def test_the_network_diff_is_the_whole_overlays_diff(steps, excluded):
    pub = Published(excluded)
    drained: set[int] = set()
    unhealthy: set[int] = set()
    _, index = pub.publish(frozenset(), frozenset())
    overlay = pub.planned.overlay
    for i, what in steps:
        {"drain": drained.add, "undrain": drained.discard, "fail": unhealthy.add, "heal": unhealthy.discard}[what](i)
        split, new_index = pub.publish(frozenset(drained), frozenset(unhealthy))
        change = network_diff(new_index, split, {"spec": index}, pub.spec_at)
        assert change is not None
        assert change.previous_revision == overlay.revision
        assert change.diff == diff_candidates(overlay.candidates, pub.planned.overlay.candidates)
        index, overlay = new_index, pub.planned.overlay


def test_a_drain_reads_only_the_shard_that_changed():
    pub = Published(frozenset())
    _, index = pub.publish(frozenset(), frozenset())
    split, new_index = pub.publish(frozenset({3}), frozenset())
    read = []

    def spec_at(name, digest):
        read.append(name)
        return pub.spec_at(name, digest)

    change = network_diff(new_index, split, {"spec": index}, spec_at)
    assert change is not None and change.shards_compared == 1 and len(read) == 1
    assert [(old.provider, new.admission_state) for old, new in change.diff.changed] == [("p3", "existing_only")]


def test_it_declines_what_it_cannot_tell():
    pub = Published(frozenset({"p1"}))
    _, index = pub.publish(frozenset(), frozenset())
    split, new_index = pub.publish(frozenset({3}), frozenset())
    # The stored content of the changed shard is not known at the stored index's digest.
    assert network_diff(new_index, split, {"spec": index}, lambda name, digest: None) is None
    # Another network, another shard count, no stored index, the per-consumer form.
    assert network_diff(new_index, split, {"spec": {**index, "shardCount": COUNT + 1}}, pub.spec_at) is None
    assert network_diff(new_index, split, {"spec": {**index, "network": "other"}}, pub.spec_at) is None
    assert network_diff(new_index, split, None, pub.spec_at) is None
    assert network_diff(new_index, split, {"spec": {**index, "formatVersion": 1}}, pub.spec_at) is None


def test_a_new_exclusion_is_found_in_a_shard_that_did_not_change():
    pub = Published(frozenset())
    _, index = pub.publish(frozenset(), frozenset())
    overlay = pub.planned.overlay
    pub.consumer = ConsumerView("c", "net", frozenset({"p5"}))
    split, new_index = pub.publish(frozenset(), frozenset())
    assert [e["digest"] for e in new_index["shards"]] == [e["digest"] for e in index["shards"]]
    change = network_diff(new_index, split, {"spec": index}, pub.spec_at)
    assert change is not None and change.shards_compared == 1
    assert change.diff == diff_candidates(overlay.candidates, pub.planned.overlay.candidates)
    assert [c.provider for c in change.diff.removed] == ["p5"]
