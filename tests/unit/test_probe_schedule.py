"""The probe schedule (pure): phase spread, jitter, per-network intervals, bounded concurrency,
no double probe, backlog, and no starvation under a saturated pool."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agn.model import NetworkView
from agn.operator.schedule import (
    DOWN,
    SUSPECT,
    Backlog,
    ProbeSchedule,
    RateWindow,
    asked_rate,
    down_recheck,
    fast_recheck,
    next_slot,
    phase,
    probe_interval,
    probe_load,
    recheck_after_failure,
)


def names(n: int) -> list[str]:
    return [f"provider-{i}" for i in range(n)]


def test_phase_is_stable_and_spreads_a_fleet_over_the_interval():
    assert phase("provider-1") == phase("provider-1")
    phases = [phase(n) for n in names(5000)]
    assert all(0.0 <= p < 1.0 for p in phases)
    # 5,000 providers created together: every tenth of the interval holds about a tenth of them.
    buckets = [0] * 10
    for p in phases:
        buckets[int(p * 10)] += 1
    assert min(buckets) > 400 and max(buckets) < 600


def test_a_fleet_created_at_once_probes_spread_after_the_first_round():
    sched = ProbeSchedule(concurrency=10_000)
    fleet = names(5000)
    sched.sync(fleet, now=0.0)
    first = sched.take(now=0.0, interval_of=lambda n: 1.0)
    assert len(first) == 5000  # new providers are due at once (admission waits for them)
    for p in first:
        sched.done(p.name)
    # From then on each probe lands on its own phase: no 50 ms tick starts more than ~10%.
    per_tick = [len(sched.take(now=0.5 + k * 0.05, interval_of=lambda n: 1.0)) for k in range(21)]
    assert sum(per_tick) == 5000
    assert max(per_tick) < 400


@given(
    name=st.text(min_size=1, max_size=20),
    interval=st.floats(min_value=0.1, max_value=600.0),
    now=st.floats(min_value=0.0, max_value=1e6),
)
def test_next_slot_is_on_the_grid_and_between_half_and_one_and_a_half_intervals_ahead(name, interval, now):
    at = next_slot(name, interval=interval, now=now)
    assert now + interval / 2 - 1e-6 <= at < now + 1.5 * interval + 1e-6
    k = (at - phase(name) * interval) / interval
    assert abs(k - round(k)) < 1e-6


@given(st.floats(min_value=0.0, max_value=1.0), st.integers(min_value=0, max_value=2**32))
def test_jitter_stays_within_its_fraction_of_the_interval(jitter, seed):
    sched = ProbeSchedule(concurrency=4, jitter=jitter, rng=random.Random(seed))
    sched.sync(["p"], now=10.0)
    sched.take(now=10.0, interval_of=lambda n: 2.0)
    slot = next_slot("p", interval=2.0, now=10.0)
    assert slot <= sched.due_at("p") <= slot + jitter * 2.0


def test_per_network_interval_smallest_request_wins():
    fast = NetworkView(name="fast", match_labels={"tier": "a"}, probe_interval_seconds=0.5)
    slow = NetworkView(name="slow", match_labels={"tier": "a"}, probe_interval_seconds=30.0)
    plain = NetworkView(name="plain", match_labels={"zone": "z"})
    assert probe_interval({"tier": "a"}, [slow], default=2.0) == 30.0  # a network may ask for less often
    assert probe_interval({"tier": "a"}, [slow, fast], default=2.0) == 0.5
    assert probe_interval({"tier": "a", "zone": "z"}, [slow, plain], default=2.0) == 2.0  # plain asks the default
    assert probe_interval({"other": "x"}, [slow, fast, plain], default=2.0) == 2.0  # selected by none


def test_a_saturated_pool_waits_and_reports_the_backlog():
    sched = ProbeSchedule(concurrency=2)
    sched.sync(["a", "b", "c", "d"], now=5.0)
    started = sched.take(now=5.0, interval_of=lambda n: 1.0)
    assert [p.name for p in started] == ["a", "b"]
    backlog = sched.backlog()
    assert (backlog.waiting, backlog.in_flight, backlog.oldest_due) == (2, 2, 5.0)
    assert backlog.lag(7.5) == 2.5
    assert sched.take(now=7.5, interval_of=lambda n: 1.0) == []  # no free slot: nothing dropped, nothing started
    assert sched.backlog().waiting == 2
    sched.done("a")
    late = sched.take(now=7.5, interval_of=lambda n: 1.0)
    assert [(p.name, p.late) for p in late] == [("c", 2.5)]  # the longest-waiting first, not "a" again
    # d still waits since 5.0; a is due again (its next slot passed while it ran) and waits behind it.
    assert (sched.backlog().waiting, sched.backlog().oldest_due) == (2, 5.0)


def test_a_provider_is_never_probed_twice_at_once():
    sched = ProbeSchedule(concurrency=8)
    sched.sync(["a"], now=0.0)
    assert [p.name for p in sched.take(now=0.0, interval_of=lambda n: 0.1)] == ["a"]
    # Long past its next due time, but its probe still runs: it is not started again.
    assert sched.take(now=50.0, interval_of=lambda n: 0.1) == []
    sched.done("a")
    assert [p.name for p in sched.take(now=50.0, interval_of=lambda n: 0.1)] == ["a"]


def test_a_quick_recheck_comes_at_the_fast_interval_then_the_grid_resumes():
    sched = ProbeSchedule(concurrency=8)
    sched.sync(["a"], now=0.0)
    every = lambda n: 5.0  # noqa: E731
    assert [p.name for p in sched.take(now=0.0, interval_of=every)] == ["a"]
    grid = sched.due_at("a")
    assert grid is not None and grid >= 2.5  # its next slot, half an interval or more ahead
    sched.done("a", again_at=0.2 + fast_recheck(5.0, fast=1.0))  # it failed at 0.2
    assert sched.due_at("a") == 1.2
    assert sched.take(now=1.1, interval_of=every) == []
    assert [p.name for p in sched.take(now=1.2, interval_of=every)] == ["a"]
    later = sched.due_at("a")
    assert later is not None and later >= 1.2 + 2.5  # back on its grid
    sched.done("a")  # it passed: no quick recheck
    assert sched.due_at("a") == later
    # A recheck is never later than the grid: a slot sooner than again_at wins.
    assert [p.name for p in sched.take(now=later, interval_of=every)] == ["a"]
    grid = sched.due_at("a")
    sched.done("a", again_at=grid + 10)
    assert sched.due_at("a") == grid


def test_fast_recheck_is_never_later_than_the_interval():
    assert fast_recheck(5.0, fast=1.0) == 1.0
    assert fast_recheck(0.5, fast=1.0) == 0.5


def test_down_rechecks_come_at_the_down_interval_while_they_fit_a_quarter_of_the_slots():
    # 64 slots, 1 s timeout: a quarter is 16 slots, so 16 providers down (each re-check held
    # for its whole timeout in the worst case) fit at 1 s.
    assert down_recheck(5.0, down=1.0, providers_down=1, concurrency=64, timeout=1.0) == 1.0
    assert down_recheck(5.0, down=1.0, providers_down=16, concurrency=64, timeout=1.0) == 1.0
    # Beyond that the re-checks stretch with the number down: together they still hold 16 slots.
    assert down_recheck(5.0, down=1.0, providers_down=32, concurrency=64, timeout=1.0) == 2.0
    assert down_recheck(60.0, down=1.0, providers_down=48, concurrency=64, timeout=2.0) == 6.0
    # A large outage: never later than the provider's own interval (its grid, as without re-checks).
    assert down_recheck(5.0, down=1.0, providers_down=5000, concurrency=64, timeout=1.0) == 5.0
    # Never sooner than asked, and never later than the interval even when that is short.
    assert down_recheck(0.5, down=1.0, providers_down=1, concurrency=64, timeout=1.0) == 0.5


def test_deleted_providers_are_dropped_and_a_cleared_schedule_probes_everything_again():
    sched = ProbeSchedule(concurrency=8)
    sched.sync(["a", "b"], now=0.0)
    sched.take(now=0.0, interval_of=lambda n: 1.0)
    assert sched.sync(["a"], now=0.1) == ["b"]
    assert sched.known() == {"a", "b"}  # b's probe is still running
    sched.done("b")
    sched.done("a")
    assert sched.known() == {"a"}
    sched.clear()
    sched.sync(["a"], now=0.2)
    assert [p.name for p in sched.take(now=0.2, interval_of=lambda n: 1.0)] == ["a"]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="concurrency"):
        ProbeSchedule(concurrency=0)
    with pytest.raises(ValueError, match="jitter"):
        ProbeSchedule(concurrency=1, jitter=1.5)


@settings(max_examples=60, deadline=None)
@given(
    fleet=st.integers(min_value=1, max_value=60),
    concurrency=st.integers(min_value=1, max_value=8),
    durations=st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=30),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_saturated_pool_never_double_probes_never_exceeds_its_bound_and_starves_no_one(
    fleet, concurrency, durations, seed
):
    """Simulated in 0.05 s ticks with probe durations far beyond what the pool can keep up with."""
    rng = random.Random(seed)
    sched = ProbeSchedule(concurrency=concurrency, jitter=0.1, rng=rng)
    providers = names(fleet)
    running: dict[str, int] = {}  # name -> tick it finishes
    last_start: dict[str, int] = {}
    longest_gap = 0
    ticks = 4000
    sched.sync(providers, now=0.0)
    for tick in range(ticks):
        now = tick * 0.05
        for name, ends in list(running.items()):
            if ends <= tick:
                del running[name]
                sched.done(name)
        for probe in sched.take(now=now, interval_of=lambda n: 0.2):
            assert probe.name not in running  # never two at once for one provider
            running[probe.name] = tick + durations[rng.randrange(len(durations))]
            if probe.name in last_start:
                longest_gap = max(longest_gap, tick - last_start[probe.name])
            last_start[probe.name] = tick
        assert len(running) <= concurrency
        backlog = sched.backlog()
        assert backlog.in_flight == len(running)
        assert backlog.waiting == sum(1 for n in providers if n not in running and (sched.due_at(n) or 0.0) <= now)
    assert set(last_start) == set(providers)  # everyone got probed
    # Oldest-due-first: a waiting probe starts before any probe that became due after it, so no
    # provider waits longer than a full pass of the fleet through the pool (plus its own interval).
    max_duration = max(durations)
    bound = (fleet // concurrency + 2) * (max_duration + 1) + 7
    assert longest_gap <= bound


class ScanSchedule:
    """The schedule as it was before the heaps: every pass scans and sorts all due providers.

    Kept here as the reference the heap-based :class:`ProbeSchedule` must match exactly."""

    def __init__(self, *, concurrency: int, jitter: float, rng: random.Random) -> None:
        self.concurrency, self.jitter, self._rng = concurrency, jitter, rng
        self._due: dict[str, float] = {}
        self._in_flight: set[str] = set()
        self._backlog = (0, 0, None)

    def sync(self, names, *, now):
        gone = [n for n in self._due if n not in names]
        for name in gone:
            del self._due[name]
        for name in names:
            self._due.setdefault(name, now)
        return gone

    def take(self, *, now, interval_of):
        due = sorted((at, n) for n, at in self._due.items() if at <= now and n not in self._in_flight)
        free = max(0, self.concurrency - len(self._in_flight))
        started = []
        for at, name in due[:free]:
            interval = interval_of(name)
            extra = self._rng.uniform(0.0, self.jitter * interval) if self.jitter else 0.0
            self._due[name] = next_slot(name, interval=interval, now=now) + extra
            self._in_flight.add(name)
            started.append((name, max(0.0, now - at)))
        left = due[free:]
        self._backlog = (len(left), len(self._in_flight), left[0][0] if left else None)
        return started

    def done(self, name):
        self._in_flight.discard(name)

    def clear(self):
        self._due.clear()
        self._backlog = (0, len(self._in_flight), None)


POOL = names(7)
# Between two passes, up to three of: a probe that ends (so the pool saturates and due probes
# wait), a provider joining or leaving, one deleted and created again, the whole set changing,
# and now and then a clear.
KINDS = ["done"] * 3 + ["add"] * 4 + ["remove"] * 2 + ["flap"] * 2 + ["sync", "clear"]
change = st.tuples(st.sampled_from(KINDS), st.sets(st.sampled_from(POOL)), st.integers(min_value=0, max_value=50))
step = st.tuples(st.lists(change, max_size=3), st.sampled_from([0.0, 0.0, 0.05, 0.1, 0.35, 1.0, 3.0, -0.4]))


@settings(max_examples=400, deadline=None)
@given(
    concurrency=st.integers(min_value=1, max_value=3),
    jitter=st.sampled_from([0.0, 0.0, 0.3, 1.0]),
    intervals=st.lists(st.sampled_from([0.05, 0.1, 0.2, 0.5, 1.0, 2.0]), min_size=len(POOL), max_size=len(POOL)),
    steps=st.lists(step, min_size=5, max_size=80),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_heap_schedule_starts_the_same_probes_in_the_same_order_with_the_same_backlog_as_a_full_scan(
    concurrency, jitter, intervals, steps, seed
):
    """Random fleets joining and leaving, probes ending in any order, clears, ties in due time
    (many providers added in one pass), jitter, per-provider intervals, and a clock that
    occasionally steps back: every pass starts exactly what scanning and sorting would."""
    heap = ProbeSchedule(concurrency=concurrency, jitter=jitter, rng=random.Random(seed))
    scan = ScanSchedule(concurrency=concurrency, jitter=jitter, rng=random.Random(seed))
    interval = dict(zip(POOL, intervals, strict=True))
    now = 0.0
    live: set[str] = set()
    for changes, dt in steps:
        for kind, subset, pick in changes:
            if kind == "flap":  # deleted and created again between two passes: due at once again
                gone = sorted(live)[pick % len(live)] if live else POOL[pick % len(POOL)]
                assert sorted(heap.sync(live - {gone}, now=now)) == sorted(scan.sync(live - {gone}, now=now))
                assert heap.sync(live, now=now) == scan.sync(live, now=now) == []
            elif kind in ("add", "remove", "sync"):
                if kind == "sync":
                    live = set(subset)
                elif kind == "add":
                    live.add(POOL[pick % len(POOL)])
                else:
                    live.discard(sorted(live or POOL)[pick % len(live or POOL)])
                assert sorted(heap.sync(live, now=now)) == sorted(scan.sync(live, now=now))
            elif kind == "done":
                running = sorted(scan._in_flight)
                name = running[pick % len(running)] if running else POOL[pick % len(POOL)]  # or one not running
                heap.done(name)
                scan.done(name)
            elif kind == "clear":
                heap.clear()
                scan.clear()
        now += dt
        got = heap.take(now=now, interval_of=interval.__getitem__)
        assert [(p.name, p.late) for p in got] == scan.take(now=now, interval_of=interval.__getitem__)
        backlog = heap.backlog()
        assert (backlog.waiting, backlog.in_flight, backlog.oldest_due) == scan._backlog
        assert {n: heap.due_at(n) for n in POOL} == {n: scan._due.get(n) for n in POOL}
        assert heap.in_flight() == scan._in_flight and heap.in_flight_count() == len(scan._in_flight)
    # Whatever the history, a final pass long after agrees too (every stale heap entry met).
    now += 1000.0
    got = heap.take(now=now, interval_of=interval.__getitem__)
    assert [(p.name, p.late) for p in got] == scan.take(now=now, interval_of=interval.__getitem__)
    assert (heap.backlog().waiting, heap.backlog().in_flight, heap.backlog().oldest_due) == scan._backlog


def test_the_rate_window_counts_the_last_seconds_and_a_fresh_start_is_not_read_as_slow():
    window = RateWindow(window=10)
    assert window.rate(100.0) is None  # nothing finished yet: unknown, not 0
    for tick in range(50):  # 100 per second for half a second
        window.add(100.0 + tick * 0.01, 2)
    assert window.rate(100.5) == 100.0  # over the one second since the first, at least
    for second in range(101, 131):
        window.add(second + 0.5, 300)
    assert window.rate(130.9) == pytest.approx(300.0 * 10 / 9.9)  # the buckets 121..130 over [121, 130.9)
    assert window.rate(200.0) == 0.0  # nothing in the last 10 s


def test_asked_rate_is_each_provider_once_per_its_interval():
    assert asked_rate([5.0] * 5000) == pytest.approx(1000.0)
    assert asked_rate([1.0, 0.5, 0.0]) == 3.0  # a zero interval is not a probe rate


# -- the re-check a failed probe asks for, and the load /healthz reports ----------------------------
@pytest.mark.parametrize(
    ("healthy", "was_healthy", "failures", "expected"),
    [
        (True, True, 0, None),  # answered: its interval
        (None, True, 0, None),  # not probed for health: its interval
        (False, True, 1, SUSPECT),  # first failure of a healthy provider: a fast re-check
        (False, True, 2, SUSPECT),
        (False, True, 3, DOWN),  # the threshold reached: unavailable, a down re-check
        (False, False, 1, DOWN),  # never healthy: a down re-check at once
    ],
)
def test_a_failed_probe_asks_for_a_fast_or_a_down_recheck(healthy, was_healthy, failures, expected):
    assert recheck_after_failure(healthy, was_healthy=was_healthy, failures=failures, threshold=3) == expected


def test_the_probe_load_says_behind_and_the_interval_that_would_fit():
    on_time = probe_load(
        Backlog(waiting=0, in_flight=2, oldest_due=None),
        in_flight=2,
        finished=40.0,
        intervals=[10.0] * 100,
        concurrency=8,
        interval=10.0,
        now=100.0,
    )
    assert on_time["behind"] is False and on_time["fitsIntervalSeconds"] is None
    assert on_time["askedPerSecond"] == 10.0 and on_time["finishedPerSecond"] == 40.0
    late = probe_load(
        Backlog(waiting=30, in_flight=8, oldest_due=80.0),
        in_flight=8,
        finished=4.0,
        intervals=[10.0] * 100,
        concurrency=8,
        interval=10.0,
        now=100.0,
    )
    assert late["behind"] is True and late["lagSeconds"] == 20.0
    assert late["fitsIntervalSeconds"] == 25.0 and late["backlog"] == 30
