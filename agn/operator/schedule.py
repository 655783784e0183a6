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
- **No catch-up storm.** A probe that started late is followed by the next grid slot at least
  half an interval later; missed slots are skipped, not replayed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from collections.abc import Callable, Collection, Mapping, Sequence

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


def probe_interval(labels: Mapping[str, str], networks: Sequence[NetworkView], *, default: float) -> float:
    """The probe interval of a provider with ``labels``.

    Each network that selects the provider asks for its ``spec.probeIntervalSeconds`` or,
    without one, for the global ``default`` (``--probe-interval``); the smallest request wins,
    so no network gets readings older than it asked for. A provider no network selects is
    probed at ``default``.
    """
    wanted = [n.probe_interval_seconds or default for n in networks if selects(n, labels)]
    return min(wanted, default=default)


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


@dataclasses.dataclass(frozen=True)
class Started:
    """A probe handed out: which provider, and how late it starts against its schedule."""

    name: str
    late: float


class ProbeSchedule:
    """Due times and running probes of every provider; not thread-safe (the prober locks)."""

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
        self._backlog = Backlog(waiting=0, in_flight=0, oldest_due=None)

    def sync(self, names: Collection[str], *, now: float) -> list[str]:
        """Follow the set of providers: new ones are due at ``now``; returns the names dropped.

        A dropped provider still in flight stays counted until :meth:`done` (its slot is busy).
        """
        gone = [n for n in self._due if n not in names]
        for name in gone:
            del self._due[name]
        for name in names:
            if name not in self._due:
                self._due[name] = now
        return gone

    def take(self, *, now: float, interval_of: Callable[[str], float]) -> list[Started]:
        """Start as many due probes as there are free slots, longest-waiting first.

        Each started provider gets its next due time from its grid (``interval_of(name)``) plus
        jitter; what stays due is the backlog.
        """
        due = sorted((at, name) for name, at in self._due.items() if at <= now and name not in self._in_flight)
        free = max(0, self.concurrency - len(self._in_flight))
        started: list[Started] = []
        for at, name in due[:free]:
            interval = interval_of(name)
            extra = self._rng.uniform(0.0, self.jitter * interval) if self.jitter else 0.0
            self._due[name] = next_slot(name, interval=interval, now=now) + extra
            self._in_flight.add(name)
            started.append(Started(name=name, late=max(0.0, now - at)))
        left = due[free:]
        self._backlog = Backlog(
            waiting=len(left), in_flight=len(self._in_flight), oldest_due=left[0][0] if left else None
        )
        return started

    def done(self, name: str) -> None:
        """The probe of ``name`` finished (or was abandoned): its slot is free again."""
        self._in_flight.discard(name)

    def clear(self) -> None:
        """Forget every due time (a new leadership term probes everything at once again)."""
        self._due.clear()
        self._backlog = Backlog(waiting=0, in_flight=len(self._in_flight), oldest_due=None)

    def backlog(self) -> Backlog:
        return self._backlog

    def due_at(self, name: str) -> float | None:
        return self._due.get(name)

    def in_flight(self) -> set[str]:
        return set(self._in_flight)

    def known(self) -> set[str]:
        return set(self._due) | self._in_flight
