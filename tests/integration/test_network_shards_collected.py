"""A network's shards are collected by the operator, on the real API server (the local control
plane runs no garbage collector, so the shards' ownerReferences to their InferenceNetwork do
nothing there): once no consumer of the network remains, or the network is gone, and no index
names them; a network with a consumer left keeps its shards untouched; each delete is
conditional on the shard's uid and resourceVersion, so a shard re-created or rewritten since it
was cached stays; and the consumers are read live first, so a consumer the cache does not have
yet keeps its network's shards.
"""

from __future__ import annotations

import io
import threading

import pytest
from test_network_shards_operator import PROBES
from test_operator import make_consumer, make_network, states
from test_probe_fleet import create_pool

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, SHARDS
from agn.logs import JsonLog
from agn.operator.caches import Caches
from agn.operator.lease import AlwaysLeader
from agn.operator.network_storage import NetworkShards
from agn.operator.workqueue import CoalescingQueue
from agn.operator.writes import LeaderWrites
from agnprocs import wait_for

pytestmark = pytest.mark.integration


def network_shards(kube, ns, network: str) -> dict[str, str]:
    """``network``'s shards in the API: resourceVersion by name."""
    items = kube.list(SHARDS, ns)[0]
    return {
        o["metadata"]["name"]: o["metadata"]["resourceVersion"]
        for o in items
        if o["metadata"]["name"].startswith(f"{network}-netshard-")
    }


def index_rvs(kube, ns) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in kube.list(OVERLAYS, ns)[0]}


def two_networks(kube, ns, agn, consumers: dict[str, str]) -> None:
    """Networks ``net`` and ``other``, ten providers each (one fake process), ``consumers`` (name:
    network), an operator, and every consumer's overlay admitting its network's providers."""
    base = agn.provider("pool")
    pools = {"net": [f"n{i}" for i in range(10)], "other": [f"o{i}" for i in range(10)]}
    for network, names in pools.items():
        make_network(kube, ns, network, metricsMaxAgeSeconds=600)
        create_pool(kube, ns, base, names, network=network)
    for name, network in consumers.items():
        make_consumer(kube, ns, name, network=network)
    agn.operator(*PROBES)
    for name, network in consumers.items():
        want = dict.fromkeys(pools[network], "admitted")
        wait_for(lambda n=name, w=want: states(kube, ns, n) == w, timeout=120, interval=0.5, what=f"{name} admitted")
    assert network_shards(kube, ns, "net") and network_shards(kube, ns, "other")


def test_a_networks_shards_go_with_its_last_consumer_and_stay_while_one_remains(kube, namespace, agn):
    two_networks(kube, namespace, agn, {"a": "net", "b": "net", "c": "other"})
    kept = network_shards(kube, namespace, "net")

    kube.delete(CONSUMERS, namespace, "a")
    wait_for(lambda: "a" not in index_rvs(kube, namespace), timeout=30, what="a's index deleted")
    kube.delete(CONSUMERS, namespace, "c")  # other's only consumer
    wait_for(lambda: not network_shards(kube, namespace, "other"), timeout=30, what="other's shards deleted")
    # The look that collected other's shards found b still a consumer of net: its shards untouched.
    assert network_shards(kube, namespace, "net") == kept
    assert states(kube, namespace, "b") == dict.fromkeys([f"n{i}" for i in range(10)], "admitted")

    kube.delete(CONSUMERS, namespace, "b")
    wait_for(lambda: not network_shards(kube, namespace, "net"), timeout=30, what="net's shards deleted")
    assert kube.list(OVERLAYS, namespace)[0] == []
    log = agn.log("operator")
    assert "network shards deleted" in log and "Traceback" not in log


def test_a_network_deleted_while_the_operator_was_down_loses_its_shards_when_it_starts(kube, namespace, agn):
    two_networks(kube, namespace, agn, {"a": "net", "c": "other"})
    kept = network_shards(kube, namespace, "net")
    agn.stop("operator")
    kube.delete(CONSUMERS, namespace, "c")
    kube.delete(NETWORKS, namespace, "other")
    assert network_shards(kube, namespace, "other")  # nothing else removes them here

    agn.operator(*PROBES, name="operator-2")
    wait_for(
        lambda: not network_shards(kube, namespace, "other") and "c" not in index_rvs(kube, namespace),
        timeout=30,
        what="other's shards and c's index deleted",
    )
    assert network_shards(kube, namespace, "net") == kept


def collector(kube, ns) -> tuple[NetworkShards, Caches, io.StringIO]:
    """The operator's network-shard writer on empty caches (no informer runs: a test fills them)."""
    stream = io.StringIO()
    log = JsonLog(component="test", stream=stream)
    caches = Caches(kube, ns, CoalescingQueue(), log=log, stop=threading.Event())
    writes = LeaderWrites(kube, AlwaysLeader("test"), log=log)
    return NetworkShards(kube, writes, ns, shards=caches.shards.store, identity="test"), caches, stream


def shard_body(name: str, network: str, digest: str = "d") -> dict:
    spec = {"formatVersion": 2, "network": network, "shard": 0, "shardCount": 1, "digest": digest, "candidates": []}
    return {"apiVersion": "agn.dev/v1alpha1", "kind": "RoutingOverlayShard", "metadata": {"name": name}, "spec": spec}


def test_a_shard_recreated_or_rewritten_since_it_was_cached_is_not_deleted(kube, namespace):
    shards, caches, _ = collector(kube, namespace)
    recreated, rewritten = "gone-netshard-00", "gone-netshard-01"
    for name in (recreated, rewritten):
        caches.shards.store.upsert(kube.create(SHARDS, namespace, shard_body(name, "gone")))
    kube.delete(SHARDS, namespace, recreated)
    uid = kube.create(SHARDS, namespace, shard_body(recreated, "gone"))["metadata"]["uid"]
    kube.merge_patch(SHARDS, namespace, rewritten, {"spec": {"digest": "e"}})

    assert shards.sweep(caches, JsonLog(component="test", stream=io.StringIO())) == {}
    assert kube.get(SHARDS, namespace, recreated)["metadata"]["uid"] == uid
    assert kube.get(SHARDS, namespace, rewritten)["spec"]["digest"] == "e"
    # Both were read again on the conflict: the next look judges (and deletes) what is there now.
    assert caches.shards.store.peek(recreated)["metadata"]["uid"] == uid
    assert shards.sweep(caches, JsonLog(component="test", stream=io.StringIO())) == {"gone": [recreated, rewritten]}
    assert network_shards(kube, namespace, "gone") == {}


def test_a_consumer_the_cache_does_not_have_yet_keeps_its_networks_shards(kube, namespace):
    shards, caches, stream = collector(kube, namespace)
    make_network(kube, namespace, "net")
    caches.networks.store.upsert(kube.get(NETWORKS, namespace, "net"))
    caches.shards.store.upsert(kube.create(SHARDS, namespace, shard_body("net-netshard-00", "net")))
    make_consumer(kube, namespace, "new")  # in the API, not in the consumers cache: it lags

    assert shards.sweep(caches, JsonLog(component="test", stream=stream)) == {}
    assert list(network_shards(kube, namespace, "net")) == ["net-netshard-00"]
    kube.delete(CONSUMERS, namespace, "new")
    assert shards.sweep(caches, JsonLog(component="test", stream=stream)) == {"net": ["net-netshard-00"]}
    assert network_shards(kube, namespace, "net") == {}
    assert '"network shards deleted"' in stream.getvalue()
