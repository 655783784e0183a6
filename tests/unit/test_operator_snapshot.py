"""The providers' snapshot a batch is judged on: one object while young, taken again once old."""

from __future__ import annotations

from agn.operator.snapshot import Snapshot


def test_a_batch_shares_one_snapshot_until_it_is_older_than_max_age():
    now = [100.0]
    takes: list[tuple] = []

    def take() -> tuple:
        takes.append((f"view-{len(takes)}",))
        return takes[-1]

    snap = Snapshot(take, max_age=1.0, clock=lambda: now[0])
    assert takes == []  # nothing is read before a consumer asks
    first = snap.get()
    now[0] += 0.9
    assert snap.get() is first  # the same tuple: the network's verdict is reused
    now[0] += 0.1
    second = snap.get()
    assert second is not first and second == ("view-1",)  # what a later consumer publishes is at most 1 s old
    assert len(takes) == 2
