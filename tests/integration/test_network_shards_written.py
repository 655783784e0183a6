"""A publication writes a network's changed shards a few at once, on the real API server: every
write has ended before the write returns (the index that names them comes after all of them),
the publication's tally counts the bytes its helper threads sent, and a shard changed behind
the cache's back fails the write as a whole (the caller plans again) with every shard read
again, none of the writes still in flight.
"""

from __future__ import annotations

import io
import threading

import pytest
from test_operator import make_network

from agn.kube import NETWORKS, SHARDS
from agn.logs import JsonLog
from agn.model import NetworkView, ProviderView, candidate_id
from agn.operator.burst import SHARD_WRITERS
from agn.operator.informer import Store
from agn.operator.lease import AlwaysLeader
from agn.operator.network_storage import NetworkShards, network_split
from agn.operator.verdicts import Verdicts
from agn.operator.writes import LeaderWrites

pytestmark = pytest.mark.integration

SHARDS_OF_NET = 16
NOW = 1_000_000.0


class Overlapping(LeaderWrites):
    """The real writes, recording how many were in flight at once. The first two meet at a
    barrier before they are sent: written one after another, the first waits alone and the
    barrier breaks (the test fails instead of passing by luck)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.meet = threading.Barrier(2, timeout=20)
        self.calls = 0
        self.in_flight = 0
        self.most = 0
        self.guard = threading.Lock()

    def _sent(self, send):
        with self.guard:
            self.calls += 1
            first_two = self.calls <= 2
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            if first_two:
                self.meet.wait()
            return send()
        finally:
            with self.guard:
                self.in_flight -= 1

    def create(self, res, namespace, body):
        return self._sent(lambda: super(Overlapping, self).create(res, namespace, body))

    def merge_patch(self, res, namespace, name, patch):
        return self._sent(lambda: super(Overlapping, self).merge_patch(res, namespace, name, patch))


def split_of(providers: int, *, drained: frozenset[int] = frozenset()):
    """A network split of ``providers`` healthy providers over 16 shards (pure: the operator's planner)."""
    net = NetworkView("net", match_labels={"agn.dev/net": "net"}, metrics_max_age_seconds=600)
    views = tuple(
        ProviderView(
            name=f"p{i:03d}",
            endpoint=f"http://127.0.0.1:9/pool/p{i}/",
            candidate_id=candidate_id(f"uid-{i}"),
            selection_group="g",
            rank=0,
            labels={"agn.dev/net": "net"},
            drain=i in drained,
            healthy=True,
            metrics_observed_at=NOW,
        )
        for i in range(providers)
    )
    return network_split(None, "net", Verdicts().evaluate(net, views, now=NOW), SHARDS_OF_NET)[1]


def writer(kube, ns) -> tuple[NetworkShards, Overlapping, Store]:
    writes = Overlapping(kube, AlwaysLeader("test"), log=JsonLog(component="test", stream=io.StringIO()))
    store = Store()
    return NetworkShards(kube, writes, ns, shards=store, identity="test"), writes, store


def stored_digests(kube, ns) -> dict[str, str]:
    return {o["metadata"]["name"]: o["spec"]["digest"] for o in kube.list(SHARDS, ns)[0]}


def test_a_publication_writes_its_shards_a_few_at_once_and_counts_their_bytes(kube, namespace):
    make_network(kube, namespace, "net")
    network = kube.get(NETWORKS, namespace, "net")
    shards, writes, store = writer(kube, namespace)
    split = split_of(200)
    names = shards.work(split, network)
    assert len(names) == SHARDS_OF_NET

    with writes.tally() as tally:
        assert shards.write(split, names, network, at_once=SHARD_WRITERS)
    assert writes.in_flight == 0
    assert 2 <= writes.most <= SHARD_WRITERS
    assert tally.writes == SHARDS_OF_NET and tally.bytes > 0
    want = {name: spec["digest"] for name, spec in split.shards.items()}
    assert stored_digests(kube, namespace) == want
    assert {name: store.peek(name)["spec"]["digest"] for name in want} == want
    assert shards.work(split, network) == []  # the cache holds every write


def test_a_shard_changed_behind_the_cache_fails_the_write_with_nothing_left_in_flight(kube, namespace):
    make_network(kube, namespace, "net")
    network = kube.get(NETWORKS, namespace, "net")
    shards, writes, store = writer(kube, namespace)
    first = split_of(200)
    assert shards.write(first, shards.work(first, network), network, at_once=SHARD_WRITERS)
    behind = sorted(first.shards)[5]
    kube.merge_patch(SHARDS, namespace, behind, {"metadata": {"annotations": {"someone": "else"}}})

    writes.meet = threading.Barrier(2, timeout=20)
    writes.calls = 0
    second = split_of(200, drained=frozenset(range(0, 200, 3)))
    names = shards.work(second, network)
    assert behind in names

    assert shards.write(second, names, network, at_once=SHARD_WRITERS) is False
    assert writes.in_flight == 0
    # Every shard was read again: the cache holds what the API server has, the one changed
    # behind it included, so the caller's next plan starts from there.
    stored = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in kube.list(SHARDS, namespace)[0]}
    assert {name: store.peek(name)["metadata"]["resourceVersion"] for name in names} == {n: stored[n] for n in names}
    assert kube.get(SHARDS, namespace, behind)["spec"]["digest"] == first.shards[behind]["digest"]
