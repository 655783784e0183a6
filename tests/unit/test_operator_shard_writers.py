"""A publication's changed shards written several at once (``--shard-writers``,
agn/operator/storage.py): they are in flight together, the index is written only once every
one of them is, and a shard that conflicts stops the publication before its index."""

from __future__ import annotations

import io
import threading

from test_operator_shard_writes import CONSUMER, cand, store_all

from agn.kube import OVERLAYS, SHARDS, Conflict, NotFound
from agn.logs import JsonLog
from agn.model import next_overlay
from agn.operator.informer import Store
from agn.operator.storage import OverlayStorage, shard_work
from agn.shards import split


class Writes:
    """Stands in for LeaderWrites: shard patches wait until ``together`` of them are in flight
    (a sequential writer would wait forever: the test's timeout fails it), then answer."""

    def __init__(self, together: int, conflict: str | None = None):
        self.together, self.conflict = together, conflict
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.all_in = threading.Event()
        self.log: list[tuple[str, str]] = []

    def merge_patch(self, res, namespace, name, patch):
        if res is SHARDS:
            with self.lock:
                self.in_flight += 1
                self.most = max(self.most, self.in_flight)
                if self.in_flight >= self.together:
                    self.all_in.set()
            assert self.all_in.wait(10), f"only {self.most} shard writes were ever in flight at once"
            with self.lock:
                self.in_flight -= 1
        with self.lock:
            self.log.append((res.plural, name))
        if name == self.conflict:
            raise Conflict("test", status=409)
        return {**patch, "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "2"}}


class Kube:
    def get(self, res, namespace, name):
        raise NotFound("test", status=404)


def storage(writes: Writes, writers: int) -> OverlayStorage:
    store = OverlayStorage(
        Kube(),
        writes,
        "ns",
        consumers=Store(),
        overlays=Store(),
        shards=Store(),
        identity="op",
        log=JsonLog(component="test", stream=io.StringIO()),
    )
    store.start_writers(writers)
    return store


def planned():
    """Every one of 4 shards changed (a provider added to each) and the index with them."""
    first = next_overlay(None, [cand(i) for i in range(40)], network="net", consumer="c1")
    index, shards = store_all(split(first, 4))
    for obj in (index, *shards.values()):
        obj["metadata"]["resourceVersion"] = "1"
    second = split(next_overlay(first, [cand(i) for i in range(80)], network="net", consumer="c1"), 4)
    work = shard_work(index, shards, second, CONSUMER)
    assert work is not None and len(work.shards) == 4 and work.index
    return second, work, index, shards


def test_the_changed_shards_are_in_flight_together_and_the_index_comes_after_all_of_them():
    sharded, work, index, shards = planned()
    writes = Writes(together=4)
    store = storage(writes, writers=4)
    try:
        assert store.write(sharded, work, consumer=CONSUMER, current=index, stored=shards)
    finally:
        store.close()
    assert writes.most == 4
    assert [plural for plural, _ in writes.log] == ["routingoverlayshards"] * 4 + [OVERLAYS.plural]


def test_a_conflicting_shard_stops_the_publication_before_its_index():
    sharded, work, index, shards = planned()
    writes = Writes(together=4, conflict=work.shards[1])
    store = storage(writes, writers=4)
    try:
        assert not store.write(sharded, work, consumer=CONSUMER, current=index, stored=shards)
    finally:
        store.close()
    assert OVERLAYS.plural not in [plural for plural, _ in writes.log]
    assert len(writes.log) == 4  # every shard write ended before the failure was reported
