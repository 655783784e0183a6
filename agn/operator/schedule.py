"""When each provider is probed: per-provider phase, jitter, bounded concurrency, backlog.

Pure: no threads, no clock, no I/O — the prober passes ``now`` (monotonic seconds) and the
interval of each provider, and runs the probes this module hands out.

Why it looks like this (a fleet of thousands of providers on a small machine):

- **Phase.** Every provider has a stable phase in ``[0, 1)`` from a hash of its name, and its
  probes land on its own grid ``phase * interval + k * interval``. Providers created together
  (5,000 at once) therefore spread over the interval instead of all probing in the same tick,
  and keep that spread across operator restarts. An optional random ``jitter`` (a fraction of
  the interval) is added on top, so two operators (or two grids that happen to align) drift apart.
- **First probe at once.** A provider the schedule has not seen yet is due immediately: it
  cannot be admitted before its first probe, so spreading the first round would only delay
  admission. The bounded pool still limits how many run at a time.
- **Bounded concurrency, no drops.** At most ``concurrency`` probes run at once and never two
  for one provider. A due probe that finds no free slot waits — it is never dropped — and the
  longest-waiting one starts first, so a saturated pool still probes every provider (no
  starvation). Waiting probes are the *backlog*, reported by :meth:`ProbeSchedule.backlog`
  instead of silently ageing load readings.
- **Quick re-checks.** A failed probe of a provider still counted available is followed by the
  next one after the fast interval (:func:`fast_recheck`), not at its next grid slot, until it
  passes or the failure threshold makes the provider unavailable; then the grid resumes.
- **Down re-checks.** A provider that is unavailable because its health probes failed is
  probed again after the down interval (:func:`down_recheck`), not at its next grid slot, so
  one that answers again is re-admitted within about that interval; the re-checks of all down
  providers are held to a share of the slots, so a large outage cannot flood the prober.
- **No catch-up storm.** A probe that started late is followed by the next grid slot at least
  half an interval later; missed slots are skipped, not replayed.
- **Cost proportional to the probes, not the fleet.** The scheduler looks every 50 ms; a pass
  that starts ``k`` probes costs O(k log N) for N providers, and a pass with nothing due costs
  O(1), because due times live in heaps (see :class:`ProbeSchedule`) instead of being scanned
  and sorted each pass. Only :meth:`ProbeSchedule.sync` (called when the set of providers
  changed) walks the fleet.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import math
import random
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from agn.model import NetworkView, selects


def phase(name: str) -> float:
    """The provider's stable phase in ``[0, 1)``: the same for a name in every process and run."""
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "big") / float(1 << 64)


def next_slot(name: str, *, interval: float, now: float) -> float:
    """The first slot of ``name``'s grid at least half an interval after ``now``."""
    offset = phase(name) * interval
    k = math.ceil((now + interval / 2.0 - offset) / interval)
    return offset + k * interval


def fast_recheck(interval: float, *, fast: float) -> float:
    """How soon a provider is probed again after a failed probe that did not yet make it
    unavailable (fewer than the failure threshold in a row): ``fast``, never later than its
    interval. HAProxy's ``fastinter``: a provider that stopped answering is excluded after
    ``threshold - 1`` quick re-checks instead of ``threshold - 1`` whole intervals, while a
    healthy fleet is probed no more often than before."""
    return min(interval, fast)


# Down re-checks may hold at most this share of the probe slots, counting each as lasting its
# whole timeout (the worst case: a provider that hangs), so providers that are down never
# starve the probes of those that serve (see :func:`down_recheck`).
DOWN_SLOT_SHARE = 0.25


def down_recheck(interval: float, *, down: float, providers_down: int, concurrency: int, timeout: float) -> float:
    """How soon a provider that is unavailable (health failed) is probed again: ``down``
    (HAProxy's ``downinter``, Envoy's ``unhealthy_interval``), so one that answers again is
    re-admitted within about ``down`` instead of up to a whole interval.

    The re-checks of all ``providers_down`` providers share at most :data:`DOWN_SLOT_SHARE` of
    the ``concurrency`` slots even if every one of them runs to its ``timeout``; beyond that the
    re-check interval stretches with the number of providers down (a large outage does not
    flood the prober), and it is never later than the provider's own ``interval``."""
    fits = providers_down * timeout / (DOWN_SLOT_SHARE * concurrency)
    return min(interval, max(down, fits))


SUSPECT = "suspect"
DOWN = "down"


def recheck_after_failure(healthy: bool | None, *, was_healthy: bool, failures: int, threshold: int) -> str | None:
    """Which re-check a probe's outcome asks for: :data:`SUSPECT` (failed, but not yet
    ``threshold`` times in a row since it was healthy: :func:`fast_recheck`, so a provider that
    stopped answering is out within ``threshold - 1`` fast intervals of its first failed probe),
    :data:`DOWN` (failed and counted unavailable, or never healthy: :func:`down_recheck`, so one
    that answers again is re-admitted within about the down interval), or None (its interval)."""
    if healthy is not False:
        return None
    return SUSPECT if was_healthy and failures < threshold else DOWN


def probe_interval(labels: Mapping[str, str], networks: Sequence[NetworkView], *, default: float) -> float:
    """The probe interval of a provider with ``labels``.

    Each network that selects the provider asks for its ``spec.probeIntervalSeconds`` or,
    without one, for the global ``default`` (``--probe-interval``); the smallest request wins,
    so no network gets readings older than it asked for. A provider no network selects is
    probed at ``default``.
    """
    wanted = [n.probe_interval_seconds or default for n in networks if selects(n, labels)]
    return min(wanted, default=default)


class RateWindow:
    """How many events per second over the last ``window`` seconds (whole-second buckets; the
    probes the prober finished). Before ``window`` seconds have passed since the first event,
    the rate is over the time since then, so a fresh prober is not read as slow."""

    def __init__(self, window: int = 10) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self._buckets: dict[int, int] = {}
        self._first: float | None = None

    def add(self, now: float, count: int = 1) -> None:
        second = math.floor(now)
        self._buckets[second] = self._buckets.get(second, 0) + count
        if self._first is None:
            self._first = now
        if len(self._buckets) > 2 * self.window:
            for old in [b for b in self._buckets if b <= second - self.window]:
                del self._buckets[old]

    def rate(self, now: float) -> float | None:
        """Events per second, or None before the first event."""
        if self._first is None:
            return None
        since = math.floor(now) - self.window + 1  # the buckets from this second on cover [since, now)
        events = sum(n for b, n in self._buckets.items() if b >= since)
        span = max(min(now - since, now - self._first), 1.0)
        return events / span


def asked_rate(intervals: Iterable[float]) -> float:
    """Probes per second the networks ask for: each provider once per its interval."""
    return sum(1.0 / i for i in intervals if i > 0)


@dataclasses.dataclass(frozen=True)
class Backlog:
    """The state of the schedule after its last :meth:`ProbeSchedule.take`.

    ``waiting``: probes due that found no free slot; ``oldest_due``: the due time of the
    longest-waiting one (None when none waits); ``in_flight``: probes running.
    """

    waiting: int
    in_flight: int
    oldest_due: float | None

    def lag(self, now: float) -> float:
        """How late the longest-waiting probe is at ``now`` (0 when nothing waits)."""
        return 0.0 if self.oldest_due is None else max(0.0, now - self.oldest_due)


def probe_load(
    backlog: Backlog,
    *,
    in_flight: int,
    finished: float | None,
    intervals: Sequence[float],
    concurrency: int,
    interval: float,
    now: float,
) -> dict[str, object]:
    """The probe load ``/healthz`` reports (``now``: monotonic seconds; ``intervals``: each
    provider's probe interval; ``finished``: probes finished per second over the last 10 s).

    ``behind`` is true while a due probe has waited longer than ``interval`` (``--probe-interval``):
    load readings are then ageing because of the operator, not because of the providers. Then
    ``fitsIntervalSeconds`` names the one interval at which every provider's probes would fit
    the rate probes finished at (``finishedPerSecond``), against what the networks ask for
    (``askedPerSecond``).
    """
    lag = backlog.lag(now)
    behind = lag > interval
    fits = round(len(intervals) / finished, 1) if behind and finished else None
    return {
        "concurrency": concurrency,
        "inFlight": in_flight,
        "backlog": backlog.waiting,
        "lagSeconds": round(lag, 3),
        "behind": behind,
        "askedPerSecond": round(asked_rate(intervals), 1),
        "finishedPerSecond": None if finished is None else round(finished, 1),
        "fitsIntervalSeconds": fits,
    }


@dataclasses.dataclass(frozen=True)
class Started:
    """A probe handed out: which provider, and how late it starts against its schedule."""

    name: str
    late: float


class ProbeSchedule:
    """Due times and running probes of every provider; not thread-safe (the prober locks).

    How a pass stays O(k log N) while behaving exactly like "sort every due, idle provider by
    (due time, name) and start the first free ones":

    - ``_due`` holds every provider's due time; ``_in_flight`` the running probes.
    - ``_pending`` is a min-heap of ``(due_at, name)`` for providers not yet due as of the last
      pass; ``_ready`` a min-heap of those that are due and wait, with ``_waiting`` (name ->
      due time) as its exact membership, so the backlog's ``waiting`` is ``len(_waiting)``
      without counting anything.
    - Entries are invalidated lazily: one is stale when its provider is gone, in flight, or
      due at another time than the entry says (it was dropped and re-added, or started). A
      stale entry is discarded when it reaches the top of its heap. A provider has a live
      ``_pending`` entry whenever it is known, idle and not waiting: one is pushed when
      :meth:`sync` adds it and when :meth:`done` ends its probe (its next due time was set
      when it started), never while it runs.
    - Each pass moves the entries that became due from ``_pending`` to ``_ready`` (each entry
      moves once per probe interval, so that work is proportional to the probes, not to the
      passes), then pops the longest-waiting ones from ``_ready``.
    - ``now`` comes from a monotonic clock; should a pass ever be earlier than the one before,
      the waiting entries not due at that earlier time go back to ``_pending`` (O(N), never on
      a monotonic clock) so the result is still exact.
    """

    def __init__(self, *, concurrency: int, jitter: float = 0.0, rng: random.Random | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if not 0.0 <= jitter <= 1.0:
            raise ValueError(f"jitter must be within [0, 1], got {jitter}")
        self.concurrency = concurrency
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._due: dict[str, float] = {}
        self._in_flight: set[str] = set()
        self._pending: list[tuple[float, str]] = []
        self._ready: list[tuple[float, str]] = []
        self._waiting: dict[str, float] = {}
        self._seen_now = -math.inf  # ``now`` of the last pass: _ready holds what was due then
        self._backlog = Backlog(waiting=0, in_flight=0, oldest_due=None)

    def sync(self, names: Collection[str], *, now: float) -> list[str]:
        """Follow the set of providers: new ones are due at ``now``; returns the names dropped.

        A dropped provider still in flight stays counted until :meth:`done` (its slot is busy).
        O(N + len(names)): call it when the set of providers changed, not on every pass.
        """
        gone = [n for n in self._due if n not in names]
        for name in gone:
            del self._due[name]
            self._waiting.pop(name, None)
        for name in names:
            if name not in self._due:
                self._due[name] = now
                if name not in self._in_flight:
                    heapq.heappush(self._pending, (now, name))
        self._compact()
        return gone

    def _compact(self) -> None:
        """Drop stale heap entries once they outnumber the live ones (many providers deleted)."""
        if len(self._pending) + len(self._ready) > 2 * len(self._due) + 64:
            self._pending = [(at, n) for at, n in self._pending if self._live_pending(at, n)]
            heapq.heapify(self._pending)
            self._ready = [(at, n) for at, n in self._ready if self._waiting.get(n) == at]
            heapq.heapify(self._ready)

    def _live_pending(self, at: float, name: str) -> bool:
        return self._due.get(name) == at and name not in self._in_flight and name not in self._waiting

    def _rewind(self, now: float) -> None:
        """``now`` went back: what waits but is not due at ``now`` is pending again (O(N), rare)."""
        for name, at in list(self._waiting.items()):
            if at > now:
                del self._waiting[name]
                heapq.heappush(self._pending, (at, name))
        self._ready = [(at, n) for n, at in self._waiting.items()]
        heapq.heapify(self._ready)

    def take(self, *, now: float, interval_of: Callable[[str], float]) -> list[Started]:
        """Start as many due probes as there are free slots, longest-waiting first.

        Ties in due time start in name order. Each started provider gets its next due time from
        its grid (``interval_of(name)``) plus jitter; what stays due is the backlog.
        """
        if now < self._seen_now:
            self._rewind(now)
        self._seen_now = now
        pending, ready, waiting = self._pending, self._ready, self._waiting
        while pending and pending[0][0] <= now:
            at, name = heapq.heappop(pending)
            if self._live_pending(at, name):
                waiting[name] = at
                heapq.heappush(ready, (at, name))
        free = max(0, self.concurrency - len(self._in_flight))
        started: list[Started] = []
        while ready and len(started) < free:
            at, name = heapq.heappop(ready)
            if waiting.get(name) != at:
                continue  # stale: dropped since it became due
            del waiting[name]
            interval = interval_of(name)
            extra = self._rng.uniform(0.0, self.jitter * interval) if self.jitter else 0.0
            self._due[name] = next_slot(name, interval=interval, now=now) + extra
            self._in_flight.add(name)
            started.append(Started(name=name, late=max(0.0, now - at)))
        while ready and waiting.get(ready[0][1]) != ready[0][0]:
            heapq.heappop(ready)
        self._backlog = Backlog(
            waiting=len(waiting), in_flight=len(self._in_flight), oldest_due=ready[0][0] if ready else None
        )
        return started

    def done(self, name: str, *, again_at: float | None = None) -> None:
        """The probe of ``name`` finished (or was abandoned): its slot is free again.

        ``again_at``: probe it again no later than then (a failed probe of a provider still
        counted available: see :func:`fast_recheck`), instead of at its next grid slot if that
        is later. Its grid resumes after that probe.
        """
        if name not in self._in_flight:
            return
        self._in_flight.discard(name)
        at = self._due.get(name)
        if at is not None:  # still known: wait for the due time set when it started
            if again_at is not None and again_at < at:
                at = self._due[name] = again_at
            heapq.heappush(self._pending, (at, name))

    def clear(self) -> None:
        """Forget every due time (a new leadership term probes everything at once again)."""
        self._due.clear()
        self._pending.clear()
        self._ready.clear()
        self._waiting.clear()
        self._backlog = Backlog(waiting=0, in_flight=len(self._in_flight), oldest_due=None)

    def backlog(self) -> Backlog:
        return self._backlog

    def due_at(self, name: str) -> float | None:
        return self._due.get(name)

    def in_flight(self) -> set[str]:
        return set(self._in_flight)

    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def known(self) -> set[str]:
        return set(self._due) | self._in_flight
