"""The operator's network split (agn.operator.network_storage), planned by the change, against the
pure split (agn.netshards.split_network) of the same verdict; and which indexes are behind it."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from agn.model import ConsumerView, NetworkView, ProviderView, candidate_id, compute_candidates
from agn.netshards import consumer_index, index_over, split_network
from agn.operator.network_storage import indexes_behind, network_split, unused_network_shards
from agn.operator.reconcile import replan
from agn.operator.verdicts import Verdicts

NOW = 1_000_000.0
NET = NetworkView("net", match_labels={"pool": "a"}, metrics_max_age_seconds=45)
COUNT = 4


def view(i: int, *, drain: bool = False, healthy: bool = True) -> ProviderView:
    return ProviderView(
        name=f"p{i:02d}",
        endpoint=f"http://127.0.0.1:9000/pool/p{i}/",
        candidate_id=candidate_id(f"uid-{i}"),
        selection_group=f"g{i % 3}",
        rank=i % 2,
        labels={"pool": "a"},
        drain=drain,
        healthy=healthy,
        metrics_observed_at=NOW,
    )


steps = st.lists(st.tuples(st.integers(0, 24), st.sampled_from(["drain", "undrain", "fail", "heal"])), max_size=8)


@settings(max_examples=40, deadline=None)
@given(steps=steps, excluded=st.frozensets(st.integers(0, 24).map(lambda i: f"p{i:02d}")))
def test_the_network_split_follows_the_verdict_as_the_pure_split_does(steps, excluded):
    verdicts = Verdicts()
    state = {i: {"drain": False, "healthy": True} for i in range(25)}
    known = consumer_plan = None
    consumer = ConsumerView("c", "net", excluded)
    for i, what in [(0, "drain"), *steps]:
        state[i] = {**state[i], **{"drain": {"drain": True}, "undrain": {"drain": False}}.get(what, {})}
        state[i] = {**state[i], **{"fail": {"healthy": False}, "heal": {"healthy": True}}.get(what, {})}
        providers = tuple(view(n, **s) for n, s in state.items())
        judged = verdicts.evaluate(NET, providers, now=NOW)
        known = network_split(known, "net", judged, COUNT)
        pure = split_network("net", compute_candidates(providers, NET, ConsumerView("", "net"), now=NOW), COUNT)
        assert known[1].shards == pure.shards and known[1].entries == pure.entries
        consumer_plan = replan(consumer_plan, consumer, judged, None, COUNT)
        assert index_over(consumer_plan.sharded.index, known[1], excluded) == consumer_index(
            consumer_plan.overlay, pure
        )


def test_an_unchanged_verdict_keeps_the_split():
    verdicts = Verdicts()
    providers = tuple(view(n) for n in range(10))
    known = network_split(None, "net", verdicts.evaluate(NET, providers, now=NOW), COUNT)
    assert network_split(known, "net", verdicts.evaluate(NET, providers, now=NOW), COUNT) is known


def test_indexes_naming_other_digests_are_behind():
    verdicts = Verdicts()
    before = network_split(None, "net", verdicts.evaluate(NET, tuple(view(n) for n in range(10)), now=NOW), COUNT)
    after = network_split(
        before, "net", verdicts.evaluate(NET, tuple(view(n, drain=n == 3) for n in range(10)), now=NOW), COUNT
    )
    index = {"formatVersion": 2, "network": "net", "shards": before[1].entries}
    indexes = {
        "old": {"spec": index},
        "new": {"spec": {**index, "shards": after[1].entries}},
        "other-network": {"spec": {**index, "network": "elsewhere"}},
        "per-consumer-form": {"spec": {"network": "net", "shards": before[1].entries}},
    }
    assert indexes_behind(after[1], indexes) == ["old"]


def shard(name: str, network: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"formatVersion": 2, "network": network}}


def test_a_networks_shards_are_collected_when_it_is_gone_or_unused_and_no_index_names_them():
    shards = [
        shard(n, net)
        for net in ("used", "unused", "gone", "named")
        for n in (f"{net}-netshard-00", f"{net}-netshard-01")
    ]
    shards += [shard("c-shard-00", "unused"), shard("unused-netshard-02", "another")]  # not its network's shards
    consumers = [{"spec": {"network": "used"}}, {"spec": {"network": "gone"}}, {"spec": {"network": "moved-to"}}]
    moved = {"spec": {"formatVersion": 2, "network": "named", "shards": [{"name": "named-netshard-01"}]}}
    old_form = {"spec": {"network": "unused", "shards": [{"name": "unused-netshard-00"}]}}  # names no network shard
    out = unused_network_shards(shards, consumers, [moved, old_form], ["used", "unused", "named", "moved-to"])
    assert {net: [s["metadata"]["name"] for s in objs] for net, objs in out.items()} == {
        "unused": ["unused-netshard-00", "unused-netshard-01"],
        "gone": ["gone-netshard-00", "gone-netshard-01"],  # its consumer stays: the network is gone
        "named": ["named-netshard-00"],  # -01 is named by an index not rewritten yet
    }
    assert unused_network_shards(shards[:2], consumers, [], ["used"]) == {}
