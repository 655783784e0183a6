"""One publication's bytes (:meth:`LeaderWrites.tally`): its network shards and its index count
into one tally (a nested tally joins the open one); a tally not joined counts its own writes."""

from __future__ import annotations

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


def test_a_publications_network_shards_and_its_index_count_into_one_tally():
    writes = _writes()
    shards = [_body(f"net-netshard-{i:02d}", 100 * i) for i in range(8)]
    index = {"spec": {"revision": 2}}
    with writes.tally() as tally:  # the reconcile's: the network shards are written first
        for body in shards:
            writes.create(SHARDS, "ns", body)
        with writes.tally(join=True) as joined:  # the index's own block counts into the same tally
            writes.merge_patch(OVERLAYS, "ns", "c1", index)
        assert joined is tally
    assert tally.writes == 9
    assert tally.bytes == sum(body_bytes(b) for b in shards) + body_bytes(index)
    with writes.tally(join=True) as alone:  # no tally open: a tally of its own
        writes.merge_patch(OVERLAYS, "ns", "c1", index)
    assert (alone.writes, alone.bytes) == (1, body_bytes(index))


def test_a_tally_not_joined_counts_only_its_own_writes():
    writes = _writes()
    with writes.tally() as outer:
        writes.create(SHARDS, "ns", _body("a", 10))
        with writes.tally() as inner:
            writes.create(SHARDS, "ns", _body("b", 20))
        writes.create(SHARDS, "ns", _body("c", 30))
    assert (inner.writes, outer.writes) == (1, 2)
    assert inner.bytes == body_bytes(_body("b", 20))
