"""The providers' snapshot one batch of reconciles is judged on (:class:`Snapshot`), network by
network (:func:`by_network`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from agn.model import ProviderView


class Snapshot:
    """The providers' views the consumers of one batch are judged on: taken when first asked
    for, and again once older than ``max_age`` seconds when the batch moves on to another network.

    One snapshot lets every consumer of a network share one verdict (:mod:`.verdicts` reuses it
    for the same tuple). But a batch of ten consumers at 5,000 providers publishes for seconds
    (each publication is mostly the writes' round trips: cProfile, docs/benchmarks.md); judged on
    the batch's first look, its last consumers were published providers seconds old, and every
    provider created meanwhile cost them one more whole publication in the next batch. Taken
    again after ``max_age``, what a batch publishes is at most that old, and a consumer whose
    next batch finds nothing new writes nothing.

    But the consumers of one network share its shards: judged on a newer snapshot, each of them
    rewrote every network shard a burst of creates had grown (new providers hash into every
    shard), and left its network-mates' indexes behind, to be published again. So a snapshot is
    taken again only when asked for another ``key`` (the controller passes the network, and
    reconciles a batch's consumers network by network): a network's consumers are published from
    one split, its shards written once, then each index (docs/overlays.md, "Publishing in
    proportion to a burst")."""

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
        self._key: str | None = None

    def get(self, key: str = "") -> tuple[ProviderView, ...]:
        """The views for a consumer of network ``key``: the same object while young or asked for
        the network they were taken for."""
        with self._lock:
            now = self._clock()
            if self._views is None or (key != self._key and now - self._at >= self._max_age):
                self._views, self._at = self._take(), now
            self._key = key
            return self._views


def by_network(names: Iterable[str], network_of: Callable[[str], str]) -> list[str]:
    """A batch's consumers in the order they are reconciled: a network's together (by network,
    then name), so each network asks :meth:`Snapshot.get` for its views once in a row."""
    return sorted(names, key=lambda n: (network_of(n), n))
