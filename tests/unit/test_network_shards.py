"""The network-shard form (agn.netshards) against the unsharded model (agn.model), with hypothesis:
every consumer's overlay assembles exactly from its network's shards minus its own exclusions."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from agn.model import (
    ConsumerView,
    NetworkView,
    Overlay,
    ProviderView,
    candidate_id,
    compute_candidates,
    next_overlay,
)
from agn.netshards import (
    consumer_index,
    index_over,
    network_of_shard,
    network_shard_labels,
    network_shard_name,
    network_shard_names,
    split_network,
)
from agn.provider.fleet import provider_views
from agn.shards import Incomplete, assemble, consumer_of_shard, shard_of, shards_holding
from agn.shards import split as split_overlay

NOW = 1_000_000.0
NET = NetworkView("net")
COUNT = 4


def fleet(n: int, *, drained=frozenset(), unhealthy=frozenset()) -> list[ProviderView]:
    return provider_views(n, now=NOW, drained=drained, unhealthy=unhealthy)


def publish(providers, consumers: dict[str, frozenset[str]], previous: dict[str, Overlay] | None = None):
    """The network split and each consumer's (overlay, index), as the operator stores them."""
    split = split_network("net", compute_candidates(providers, NET, ConsumerView("", "net"), now=NOW), COUNT)
    out = {}
    for name, excluded in consumers.items():
        cands = compute_candidates(providers, NET, ConsumerView(name, "net", excluded), now=NOW)
        overlay = next_overlay((previous or {}).get(name), cands, network="net", consumer=name)
        out[name] = (overlay, consumer_index(overlay, split))
    return split, out


def test_network_shard_names_are_never_consumer_shard_names():
    assert network_shard_name("production", 7) == "production-netshard-07"
    assert network_shard_names("n", 2) == ["n-netshard-00", "n-netshard-01"]
    assert network_of_shard("production-netshard-07") == "production"
    assert consumer_of_shard("production-netshard-07") is None  # an older gateway rejects the name
    assert network_of_shard("production-shard-07") is None
    assert network_shard_labels("production") == {"agn.dev/network": "production"}
    assert network_shard_labels("n" * 64) == {}


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 40),
    drained=st.frozensets(st.integers(0, 39)),
    unhealthy=st.frozensets(st.integers(0, 39)),
    excluded=st.lists(st.frozensets(st.integers(0, 39).map(lambda i: f"p{i}")), min_size=1, max_size=4),
)
def test_each_consumer_assembles_its_own_overlay_from_the_shared_shards(n, drained, unhealthy, excluded):
    consumers = {f"c{i}": ex for i, ex in enumerate(excluded)}
    split, out = publish(fleet(n, drained=drained, unhealthy=unhealthy), consumers)
    for overlay, index in out.values():
        assert index["formatVersion"] == 2 and index["digest"] == overlay.digest
        assert index["candidateCount"] == len(overlay.candidates)
        assert Overlay.from_spec(assemble(index, split.shards)) == overlay
        ids = {c.id for c in overlay.candidates}
        assert set(index["excluded"]) == {c.id for c in split.by_provider.values()} - ids
        assert not any("consumer" in s for s in split.shards.values())  # nothing consumer-specific


def test_a_drain_rewrites_one_network_shard_for_every_consumer():
    consumers = {"a": frozenset(), "b": frozenset({"p3"}), "c": frozenset({"p7"})}
    before, old = publish(fleet(30), consumers)
    after, new = publish(fleet(30, drained={7}), consumers, {k: v[0] for k, v in old.items()})
    changed = [n for n, s in after.shards.items() if before.shards.get(n) != s]
    assert changed == [network_shard_name("net", shard_of(candidate_id("uid-7"), COUNT))]
    assert [new[k][0].revision for k in "abc"] == [2, 2, 1]  # c excludes p7: its overlay is unchanged
    assert new["c"][1]["digest"] == old["c"][1]["digest"]
    assert new["c"][1]["shards"] != old["c"][1]["shards"]  # its index names the shard's new digest


def test_a_shared_shard_ahead_of_an_index_is_not_read_with_it():
    consumers = {"a": frozenset(), "b": frozenset()}
    before, old = publish(fleet(30), consumers)
    after, _ = publish(fleet(30, drained={7}), consumers, {k: v[0] for k, v in old.items()})
    shards = {**before.shards, **after.shards}  # the shard is rewritten, b's index is not yet
    with pytest.raises(Incomplete) as raised:
        assemble(old["b"][1], shards)
    assert raised.value.mismatched == [network_shard_name("net", shard_of(candidate_id("uid-7"), COUNT))]
    assert Overlay.from_spec(assemble(old["b"][1], before.shards)) == old["b"][0]


def test_a_consumer_shard_of_the_same_digest_is_not_a_network_shard():
    split, out = publish(fleet(5), {"net": frozenset()})  # a consumer named like its network
    index = out["net"][1]
    posing = {n: {**s, "consumer": "net"} for n, s in split.shards.items()}
    with pytest.raises(Incomplete):
        assemble(index, posing)


def test_partial_readers_read_the_network_shards_holding_their_providers():
    split, out = publish(fleet(30), {"a": frozenset({"p2"})})
    index = out["a"][1]
    want = network_shard_name("net", shard_of(candidate_id("uid-2"), COUNT))
    assert shards_holding(index, [candidate_id("uid-2")]) == [want]
    partial = assemble(index, split.shards, only=[want])
    assert candidate_id("uid-2") not in {c["id"] for c in partial["candidates"]}  # excluded for a


@settings(max_examples=40, deadline=None)
@given(
    drained=st.frozensets(st.integers(0, 19)),
    excluded=st.frozensets(st.integers(0, 25).map(lambda i: f"p{i}")),
)
def test_the_operators_index_over_a_split_is_the_checked_one(drained, excluded):
    split, out = publish(fleet(20, drained=drained), {"c": excluded})
    overlay, checked = out["c"]
    per_consumer = split_overlay(overlay, COUNT).index
    assert index_over(per_consumer, split, excluded) == checked


def test_an_overlay_that_is_not_part_of_the_network_is_refused():
    split, out = publish(fleet(5), {"a": frozenset()})
    _, other = publish(fleet(5, drained={1}), {"a": frozenset()})
    with pytest.raises(ValueError, match="not a part of network 'net'"):
        consumer_index(other["a"][0], split)
