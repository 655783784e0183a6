"""The coalescing work queue, driven by a fake clock (no sleeps)."""

from __future__ import annotations

import threading

from agn.operator.workqueue import CoalescingQueue


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make(window: float = 0.1, max_window: float = 0.5) -> tuple[CoalescingQueue, FakeClock]:
    clock = FakeClock()
    return CoalescingQueue(window=window, max_window=max_window, clock=clock), clock


def test_batch_waits_for_the_quiet_period():
    q, clock = make()
    q.add("a")
    assert q.take_ready() == set()
    clock.advance(0.05)
    q.add("b")
    clock.advance(0.09)
    assert q.take_ready() == set()  # "b" extended the quiet period
    clock.advance(0.02)
    assert q.take_ready() == {"a", "b"}
    assert q.take_ready() == set()


def test_burst_is_capped_by_max_window():
    """200 events, one every 10 ms, give a handful of batches, not 200."""
    q, clock = make()
    batches = []
    for _i in range(200):
        q.add("c1", "c2")
        clock.advance(0.01)
        batch = q.take_ready()
        if batch:
            batches.append(batch)
    clock.advance(1)
    last = q.take_ready()
    if last:
        batches.append(last)
    assert 2 <= len(batches) <= 6  # 2 s of events, at most 0.5 s per batch
    assert all(b == {"c1", "c2"} for b in batches)


def test_ready_in_reports_time_to_next_batch():
    q, clock = make()
    assert q.ready_in() is None
    q.add("a")
    assert abs(q.ready_in() - 0.1) < 1e-9
    clock.advance(0.4)
    q.add("a")
    assert abs(q.ready_in() - 0.1) < 1e-9  # first event at 0, cap at 0.5, quiet until 0.5
    clock.advance(0.05)
    q.add("a")
    assert abs(q.ready_in() - 0.05) < 1e-9  # capped by max_window


def test_add_after_schedules_and_earliest_wins():
    q, clock = make()
    q.add_after("a", 5)
    q.add_after("a", 2)
    q.add_after("a", 9)
    assert abs(q.ready_in() - 2) < 1e-9
    clock.advance(1.9)
    assert q.take_ready() == set()
    clock.advance(0.2)
    assert q.take_ready() == set()  # now dirty, waiting out its quiet period
    clock.advance(0.1)
    assert q.take_ready() == {"a"}
    assert q.pending() == set()


def test_empty_keys_are_ignored():
    q, _ = make()
    q.add("")
    q.add_all([])
    assert q.pending() == set()


def test_wait_batch_returns_none_once_closed_and_empty_on_timeout():
    q = CoalescingQueue(window=0.0)
    assert q.wait_batch(timeout=0.0) == set()
    q.add("x")
    assert q.wait_batch(timeout=1.0) == {"x"}
    done = threading.Event()
    result = []

    def consumer():
        result.append(q.wait_batch())
        done.set()

    t = threading.Thread(target=consumer)
    t.start()
    q.close()
    assert done.wait(5)
    assert result == [None]
    t.join()


def drive_burst(q: CoalescingQueue, clock: FakeClock, *, seconds: float, every: float = 0.01) -> list[float]:
    """A key every ``every`` s from 0 until ``seconds``, then quiet; when the batches were handed out
    (to the tick: whole ticks, so float sums do not blur the bounds)."""
    taken = []
    start, ticks = clock.now, round(seconds / every)
    for tick in range(1, ticks + 1000):
        if tick <= ticks:
            q.add("c1")
        clock.now = start + tick * every
        if q.take_ready():
            taken.append(round(tick * every, 2))
            if tick > ticks:
                break
    return taken


def test_a_batch_begun_within_max_window_of_the_last_stays_open_up_to_the_burst_window():
    """A wave of a drain: 4.5 s of patches is 2 batches (cut at 1 s, then closed by quiet),
    where a fixed 1 s bound gives 5; a long burst is cut every 4 s after the first."""
    clock = FakeClock()
    q = CoalescingQueue(window=0.1, max_window=1.0, burst_window=4.0, clock=clock)
    assert drive_burst(q, clock, seconds=4.5) == [1.0, 4.59]
    clock.advance(5)
    fixed = CoalescingQueue(window=0.1, max_window=1.0, clock=clock)  # no burst window
    assert drive_burst(fixed, clock, seconds=4.5) == [1.0, 2.0, 3.0, 4.0, 4.59]
    clock.advance(5)
    assert drive_burst(q, clock, seconds=16) == [1.0, 5.0, 9.0, 13.0, 16.09]


def test_a_pause_shorter_than_max_window_does_not_end_the_burst():
    """The first batch of a wave closed by a pause after its first patch (the API server busy
    with a publication): the rest of the wave is still one batch, not one per second."""
    clock = FakeClock()
    q = CoalescingQueue(window=0.1, max_window=1.0, burst_window=4.0, clock=clock)
    assert drive_burst(q, clock, seconds=0.01) == [0.1]  # one key, closed by quiet
    clock.advance(0.3)
    assert drive_burst(q, clock, seconds=3.0) == [3.09]  # within 1 s of it: open up to 4 s


def test_a_pause_of_max_window_ends_the_burst():
    clock = FakeClock()
    q = CoalescingQueue(window=0.1, max_window=1.0, burst_window=4.0, clock=clock)
    assert drive_burst(q, clock, seconds=2.5) == [1.0, 2.59]
    clock.advance(1.0)
    assert drive_burst(q, clock, seconds=1.5) == [1.0, 1.59]  # a new burst starts at 1 s again
    # A lone change within a burst still waits only the quiet period.
    assert drive_burst(q, clock, seconds=0.01) == [0.1]


def test_clear_ends_a_burst():
    clock = FakeClock()
    q = CoalescingQueue(window=0.1, max_window=1.0, burst_window=4.0, clock=clock)
    drive_burst(q, clock, seconds=1.02)
    q.add("c1")
    q.clear()
    assert drive_burst(q, clock, seconds=1.5) == [1.0, 1.59]
