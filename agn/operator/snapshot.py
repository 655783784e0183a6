"""The providers' snapshot one batch of reconciles is judged on (:class:`Snapshot`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from agn.model import ProviderView


class Snapshot:
    """The providers' views the consumers of one batch are judged on: taken when first asked
    for, and again once older than ``max_age`` seconds.

    One snapshot lets every consumer of a network share one verdict (:mod:`.verdicts` reuses it
    for the same tuple). But a batch of ten consumers at 5,000 providers publishes for seconds
    (each publication is mostly the writes' round trips: cProfile, docs/benchmarks.md); judged on
    the batch's first look, its last consumers were published providers seconds old, and every
    provider created meanwhile cost them one more whole publication in the next batch. Taken
    again after ``max_age``, what a batch publishes is at most that old, and a consumer whose
    next batch finds nothing new writes nothing."""

    def __init__(
        self,
        take: Callable[[], tuple[ProviderView, ...]],
        *,
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._take, self._max_age, self._clock = take, max_age, clock
        self._lock = threading.Lock()
        self._views: tuple[ProviderView, ...] | None = None
        self._at = 0.0

    def get(self) -> tuple[ProviderView, ...]:
        with self._lock:
            now = self._clock()
            if self._views is None or now - self._at >= self._max_age:
                self._views, self._at = self._take(), now
            return self._views
