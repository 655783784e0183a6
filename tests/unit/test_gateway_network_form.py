"""The gateway's follower on an index in the network-shard form (agn.netshards): it reads its
network's shards, leaves out its own excluded candidates, keeps what it serves while a shared
shard is ahead of its index, and refuses a form it does not understand."""

from __future__ import annotations

import pytest
from test_gateway_follower import ShardKube, drain, rig  # noqa: F401 (rig is a fixture)

from agn.model import ADMITTED, EXISTING_ONLY, Candidate, Overlay, next_overlay
from agn.netshards import consumer_index, split_network
from agn.shards import shard_of


def cand(i: int, state: str = ADMITTED) -> Candidate:
    return Candidate(f"c-{i:02d}", f"p{i}", f"http://127.0.0.1:1/{i}", "g", 0, state)


def publish(network_cands, excluded: set[int], previous: Overlay | None = None):
    """The network split and c1's overlay and index (c1 excludes the candidates numbered ``excluded``)."""
    split = split_network("net", network_cands, 4)
    mine = [c for c in network_cands if int(c.id[2:]) not in excluded]
    overlay = next_overlay(previous, mine, network="net", consumer="c1")
    return split, overlay, {"metadata": {"name": "c1"}, "spec": consumer_index(overlay, split)}


@pytest.fixture
def net_rig(rig):  # noqa: F811
    table, make, _ = rig
    kube, status, follower = make(kube=ShardKube(table), pending_report_after=0.0)
    return table, kube, status, follower


def test_gateway_serves_the_network_shards_minus_its_exclusions(net_rig):
    table, kube, status, follower = net_rig
    split, overlay, index = publish([cand(i) for i in range(12)], {3, 5})
    kube.shards.update(split.shards)
    follower.observe(index)
    assert table.serving == overlay and len(overlay.candidates) == 10
    assert sorted(kube.gets) == sorted(split.shards) and all("-netshard-" in n for n in kube.gets)


def test_gateway_keeps_serving_while_a_shared_shard_is_ahead_of_its_index(net_rig):
    table, kube, status, follower = net_rig
    split, one, index = publish([cand(i) for i in range(12)], {3})
    kube.shards.update(split.shards)
    follower.observe(index)
    # Another consumer's publication drained c-07: the shared shard is rewritten first.
    drained = [cand(i, EXISTING_ONLY if i == 7 else ADMITTED) for i in range(12)]
    split2, two, index2 = publish(drained, {3}, one)
    home = f"net-netshard-{shard_of('c-07', 4):02d}"
    kube.shards.update(split2.shards)
    follower.observe({"metadata": {"name": "c1"}, "spec": {**index["spec"], "candidateCount": 11}})  # same shards
    assert table.serving == one  # held shards at the old index's digests serve on
    kube.gets.clear()
    follower.observe(index2)
    drain(status)
    assert table.serving == two and two.revision == 2 and kube.gets == [home]


def test_gateway_new_index_before_its_shared_shard_waits(net_rig):
    table, kube, status, follower = net_rig
    split, one, index = publish([cand(i) for i in range(8)], set())
    kube.shards.update(split.shards)
    follower.observe(index)
    _, _, index2 = publish([cand(i, EXISTING_ONLY if i == 2 else ADMITTED) for i in range(8)], set(), one)
    follower.observe(index2)
    drain(status)
    assert table.serving == one and follower.pending_revision == 2


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda s: s.update(formatVersion=3), "spec.formatVersion 3 is not one this gateway understands"),
        (lambda s: s.update(excluded="c-01"), "spec.excluded must be a list of candidate ids"),
        (lambda s: s.update(shards=[dict(e, name="other-netshard-00") for e in s["shards"]]), "not a shard of network"),
        (lambda s: s.update(shards=[dict(e, name="c1-shard-00") for e in s["shards"]]), "not a shard of network"),
    ],
)
def test_gateway_refuses_an_index_it_cannot_read_before_any_get(net_rig, mutate, problem):
    table, kube, status, follower = net_rig
    _, _, index = publish([cand(i) for i in range(6)], {1})
    mutate(index["spec"])
    follower.observe(index)
    drain(status)
    assert table.serving is None and kube.gets == []
    assert problem in kube.patches[-1][0]["message"]


def test_gateway_refuses_exclusions_that_do_not_make_its_digest(net_rig):
    table, kube, status, follower = net_rig
    split, _, index = publish([cand(i) for i in range(6)], {1})
    kube.shards.update(split.shards)
    index["spec"]["excluded"] = []  # would serve c-01, which this consumer must not get
    follower.observe(index)
    drain(status)
    assert table.serving is None
    assert "minus spec.excluded digest to" in kube.patches[-1][0]["message"]


def test_gateway_does_not_take_a_consumer_shard_for_a_network_shard(net_rig):
    table, kube, status, follower = net_rig
    split, _, index = publish([cand(i) for i in range(6)], set())
    kube.shards.update({n: {**s, "consumer": "c1"} for n, s in split.shards.items()})
    follower.observe(index)
    drain(status)
    assert table.serving is None and follower.pending_revision == 1


def test_a_gateway_that_ignores_format_version_refuses_the_network_form(net_rig):
    """What a gateway from before #45 does: it ignores ``formatVersion`` and ``excluded`` and
    reads ``shards`` as its consumer's — the network shards' names are not, so it refuses the
    index before any GET and keeps serving what it has (here: nothing)."""
    table, kube, status, follower = net_rig
    split, _, index = publish([cand(i) for i in range(6)], {1})
    kube.shards.update(split.shards)
    old_view = {k: v for k, v in index["spec"].items() if k not in ("formatVersion", "excluded")}
    follower.observe({"metadata": {"name": "c1"}, "spec": old_view})
    drain(status)
    assert table.serving is None and kube.gets == []
    assert "is not a shard of consumer 'c1'" in kube.patches[-1][0]["message"]
