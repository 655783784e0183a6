"""The providers' snapshot a batch is judged on: one object per network while young, taken
again once old for the next network; a batch's consumers ordered network by network."""

from __future__ import annotations

from agn.operator.snapshot import Snapshot, by_network


def _snapshot(now: list[float]) -> tuple[Snapshot, list[tuple]]:
    takes: list[tuple] = []

    def take() -> tuple:
        takes.append((f"view-{len(takes)}",))
        return takes[-1]

    return Snapshot(take, max_age=1.0, clock=lambda: now[0]), takes


def test_a_network_keeps_its_snapshot_and_the_next_network_takes_a_new_one_once_old():
    now = [100.0]
    snap, takes = _snapshot(now)
    assert takes == []  # nothing is read before a consumer asks
    first = snap.get("net-a")
    now[0] += 0.9
    assert snap.get("net-b") is first  # young: shared across networks, the verdict is reused
    now[0] += 0.1
    second = snap.get("net-c")
    assert second is not first and second == ("view-1",)  # another network: at most 1 s old
    now[0] += 5.0
    # The same network's consumers keep one snapshot however long its publication took: its
    # shards are written once, and each index then names them (no network-mate left behind).
    assert snap.get("net-c") is second
    third = snap.get("net-a")
    assert third == ("view-2",) and len(takes) == 3


def test_a_batch_is_reconciled_network_by_network():
    network = {"c1": "net-b", "c2": "net-a", "c3": "net-b", "c4": "net-a", "gone": ""}
    assert by_network(set(network), network.__getitem__) == ["gone", "c2", "c4", "c1", "c3"]
