"""The shard cache a drain's guards and waiter read through (:class:`agn.overlays.ShardCache`):
a shard named by several consumers' indexes at two digests while the operator publishes a
change (the indexes move one after another) is read once per digest, not once per look."""

from __future__ import annotations

from agn.kube import SHARDS, NotFound
from agn.overlays import KEEP_DIGESTS, ShardCache


def shard(digest: str) -> dict:
    return {"metadata": {"name": "net-netshard-00"}, "spec": {"digest": digest, "candidates": []}}


def index(digest: str) -> dict:
    return {"revision": 1, "digest": "whole", "shards": [{"name": "net-netshard-00", "digest": digest}]}


class Store:
    """One shard object (as the API server keeps it: only its latest content); counts the GETs."""

    def __init__(self, digest: str) -> None:
        self.obj: dict | None = shard(digest)
        self.gets = 0

    def get(self, res, namespace: str, name: str) -> dict:
        assert res == SHARDS and namespace == "ns"
        self.gets += 1
        if self.obj is None or name != self.obj["metadata"]["name"]:
            raise NotFound(f"{name} not found")
        return self.obj


def test_two_indexes_at_two_digests_of_one_shard_cost_one_read_each():
    store = Store("d0")
    cache = ShardCache(store, "ns")  # type: ignore[arg-type]  # only get() is used
    old, new = index("d0"), index("d1")
    assert cache.specs(old, ["net-netshard-00"])["net-netshard-00"]["digest"] == "d0"
    store.obj = shard("d1")  # the operator writes the shard, then the indexes one by one
    for _ in range(5):  # every look while one consumer's index is new and the other's old
        assert cache.specs(new, ["net-netshard-00"])["net-netshard-00"]["digest"] == "d1"
        assert cache.specs(old, ["net-netshard-00"])["net-netshard-00"]["digest"] == "d0"
    assert store.gets == 2 and cache.gets == 2


def test_a_digest_not_held_is_read_and_the_oldest_is_let_go():
    store = Store("d0")
    cache = ShardCache(store, "ns")  # type: ignore[arg-type]
    for n in range(KEEP_DIGESTS + 1):
        store.obj = shard(f"d{n}")
        cache.prefetch([(index(f"d{n}"), ["net-netshard-00"])])
    assert store.gets == KEEP_DIGESTS + 1
    cache.prefetch([(index("d0"), ["net-netshard-00"])])  # let go: read again (and it is d2 now)
    assert store.gets == KEEP_DIGESTS + 2
    assert cache.specs(index("d0"), ["net-netshard-00"])["net-netshard-00"]["digest"] == f"d{KEEP_DIGESTS}"


def test_a_shard_gone_is_not_held():
    store = Store("d0")
    cache = ShardCache(store, "ns")  # type: ignore[arg-type]
    cache.prefetch([(index("d0"), ["net-netshard-00"])])
    store.obj = None
    cache.prefetch([(index("d1"), ["net-netshard-00"])])
    assert cache.specs(index("d0"), ["net-netshard-00"]) == {"net-netshard-00": None}
