"""One publication's bytes (:meth:`LeaderWrites.tally`): its network shards, written on helper
threads, and its index count into one tally; a nested tally can join the open one."""

from __future__ import annotations

import threading
from typing import Any, cast

from agn.kube import OVERLAYS, SHARDS, Kube
from agn.operator.lease import AlwaysLeader
from agn.operator.writes import LeaderWrites, body_bytes


class _Kube:
    """Answers every write with its body (what the operator's writes need of the client)."""

    def create(self, res: Any, namespace: str, body: dict) -> dict:
        return body

    def merge_patch(self, res: Any, namespace: str, name: str, patch: dict) -> dict:
        return patch


def _writes() -> LeaderWrites:
    return LeaderWrites(cast(Kube, _Kube()), AlwaysLeader("op-1"))


def _body(name: str, size: int) -> dict:
    return {"metadata": {"name": name}, "spec": {"candidates": "x" * size}}


def test_shards_written_on_helper_threads_count_into_the_publications_tally():
    writes = _writes()
    shards = [_body(f"net-netshard-{i:02d}", 100 * i) for i in range(8)]
    index = {"spec": {"revision": 2}}
    with writes.tally() as tally:
        open_tally = writes.open_tally()

        def write(body: dict) -> None:
            with writes.counting_into(open_tally):
                writes.create(SHARDS, "ns", body)

        helpers = [threading.Thread(target=write, args=(b,)) for b in shards]
        for t in helpers:
            t.start()
        for t in helpers:
            t.join()
        with writes.tally(join=True) as joined:  # the index's own block counts into the same tally
            writes.merge_patch(OVERLAYS, "ns", "c1", index)
        assert joined is tally
    assert tally.writes == 9
    assert tally.bytes == sum(body_bytes(b) for b in shards) + body_bytes(index)
    assert writes.open_tally() is None  # nothing counts after the block


def test_a_tally_not_joined_counts_only_its_own_writes():
    writes = _writes()
    with writes.tally() as outer:
        writes.create(SHARDS, "ns", _body("a", 10))
        with writes.tally() as inner:
            writes.create(SHARDS, "ns", _body("b", 20))
        writes.create(SHARDS, "ns", _body("c", 30))
    assert (inner.writes, outer.writes) == (1, 2)
    assert inner.bytes == body_bytes(_body("b", 20))
