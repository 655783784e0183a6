"""The coalescing work queue of consumer names that need a reconcile.

Events mark keys dirty; a batch becomes ready once no new key has been added for
``window`` seconds (quiet period), or at the latest ``max_window`` seconds after the first
dirty key of the batch. A burst of 200 provider patches therefore yields a handful of
batches, not 200.

A batch that begins less than ``max_window`` after the one before was handed out is part of
a burst (a wave of a drain: a hundred patches over two to four seconds on a busy machine,
with its own publications slowing them down); such a batch stays open up to
``burst_window`` instead. A first key that comes later begins a batch with the bound
``max_window`` again. A burst of up to ``max_window + burst_window`` seconds (5 s by the
operator's defaults) is so published in two batches (three if a pause longer than the quiet
period splits it twice), not one per ``max_window``; the first of its changes still waits at
most ``max_window``, and a lone change only the quiet period.

Keys can also be scheduled for later (``add_after``): the reconcile asks for one when a
candidate's metrics are about to go stale, and on errors (backoff).

This module knows nothing about Kubernetes or overlays and does no I/O; the clock is
injectable so the coalescing rules are unit-tested without sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable


class CoalescingQueue:
    """A set of dirty keys handed out in coalesced batches. Thread-safe; one consumer."""

    def __init__(
        self,
        *,
        window: float = 0.1,
        max_window: float | None = None,
        burst_window: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window < 0:
            raise ValueError("window must be >= 0")
        self.window = window
        self.max_window = max(window, max_window if max_window is not None else 5 * window)
        self.burst_window = max(self.max_window, burst_window if burst_window is not None else self.max_window)
        self._bound = self.max_window  # the open batch's bound: burst_window within a burst
        self._taken_at: float | None = None
        self._clock = clock
        self._cond = threading.Condition()
        self._dirty: set[str] = set()
        self._first_at: float | None = None
        self._last_at: float | None = None
        self._delayed: dict[str, float] = {}
        self._closed = False

    # -- producers ---------------------------------------------------------------------
    def add(self, *keys: str) -> None:
        """Mark keys dirty now."""
        self.add_all(keys)

    def add_all(self, keys: Iterable[str]) -> None:
        keys = [k for k in keys if k]
        if not keys:
            return
        with self._cond:
            now = self._clock()
            self._mark(keys, now)
            self._cond.notify_all()

    def add_after(self, key: str, delay: float) -> None:
        """Mark ``key`` dirty ``delay`` seconds from now; an earlier pending schedule wins."""
        with self._cond:
            due = self._clock() + max(0.0, delay)
            if key not in self._delayed or due < self._delayed[key]:
                self._delayed[key] = due
            self._cond.notify_all()

    def discard_delayed(self, key: str) -> None:
        """Drop ``key``'s pending ``add_after`` schedule (its object is gone). Dirty marks stay:
        a mark made since is about a new object of the same name and must be reconciled."""
        with self._cond:
            self._delayed.pop(key, None)

    def clear(self) -> None:
        """Drop every pending key, dirty or scheduled (a follower's worker: the next leadership
        term reconciles everything anyway, and nothing may pile up meanwhile)."""
        with self._cond:
            self._dirty.clear()
            self._delayed.clear()
            self._first_at = self._last_at = self._taken_at = None
            self._bound = self.max_window

    def close(self) -> None:
        """Wake the consumer for good; ``wait_batch`` returns None from now on."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- the consumer --------------------------------------------------------------------
    def take_ready(self) -> set[str]:
        """The ready batch at the current time (empty when nothing is ready yet). Non-blocking."""
        with self._cond:
            return self._take_ready_locked(self._clock())

    def ready_in(self) -> float | None:
        """Seconds until a batch could be ready (0 if now), or None when nothing is pending."""
        with self._cond:
            return self._ready_in_locked(self._clock())

    def wait_batch(self, *, timeout: float | None = None) -> set[str] | None:
        """Block until a batch is ready (returned), ``timeout`` passes (empty set) or the queue closes (None)."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._closed:
                    return None
                now = self._clock()
                batch = self._take_ready_locked(now)
                if batch:
                    return batch
                waits = [
                    w
                    for w in (self._ready_in_locked(now), None if deadline is None else deadline - now)
                    if w is not None
                ]
                if deadline is not None and now >= deadline:
                    return set()
                # Bounded waits keep a stalled notify (or a clock that jumps) from hanging the worker.
                self._cond.wait(min([*waits, 1.0]))

    def pending(self) -> set[str]:
        with self._cond:
            return set(self._dirty) | set(self._delayed)

    # -- internals -----------------------------------------------------------------------
    def _mark(self, keys: Iterable[str], now: float) -> None:
        # Every mark, even of a key already dirty, extends the quiet period: the burst goes on.
        self._dirty.update(keys)
        if self._first_at is None:
            self._first_at = now
            burst = self._taken_at is not None and now - self._taken_at < self.max_window
            self._bound = self.burst_window if burst else self.max_window
        self._last_at = now

    def _promote_due(self, now: float) -> None:
        due = [k for k, at in self._delayed.items() if at <= now]
        for key in due:
            del self._delayed[key]
        if due:
            self._mark(due, now)

    def _batch_ready_at(self) -> float | None:
        if not self._dirty or self._first_at is None or self._last_at is None:
            return None
        return min(self._last_at + self.window, self._first_at + self._bound)

    def _take_ready_locked(self, now: float) -> set[str]:
        self._promote_due(now)
        ready_at = self._batch_ready_at()
        if ready_at is None or now < ready_at:
            return set()
        batch, self._dirty = self._dirty, set()
        self._first_at = self._last_at = None
        self._taken_at = now
        return batch

    def _ready_in_locked(self, now: float) -> float | None:
        candidates = []
        ready_at = self._batch_ready_at()
        if ready_at is not None:
            candidates.append(ready_at)
        if self._delayed:
            # A delayed key becomes dirty at its due time and then waits out the quiet period.
            candidates.append(min(self._delayed.values()))
        if not candidates:
            return None
        return max(0.0, min(candidates) - now)
