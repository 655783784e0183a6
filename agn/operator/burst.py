"""A window for additions: while a burst of creates is still being probed, a consumer's
publication that would only add candidates is held (bounded), and published at once when the
burst is over.

Measured at 5,000 providers x 10 consumers (docs/overlays.md, "Publishing in proportion to a
burst"): through the whole burst of creates the reconcile thread writes back to back, each
network publication rewriting every shard (new providers hash into all of them), and after the
last create the overlays wait for the publication then in flight and one more. Holding what is
only additions while providers of the network still await their first probe cuts the number of
publications, and when the last of them is probed the one publication that follows starts at
once instead of behind another.

Held (:func:`hold_for` returns the seconds left) only when all of these are true:

- the consumer's last publication in this term is known (:class:`Published`), judged on this
  network (same view) and this consumer spec (same uid and generation);
- every provider whose base candidate changed since then is new to the overlay: it had no
  candidate and has one now (a first admission). A drain, an undrain, a removal, a provider that
  fails, any other candidate field that changes is published at once, however many additions
  come with it;
- some provider the network selects still awaits its first probe (:func:`awaiting_first_probe`;
  one with an invalid endpoint is never probed and does not count): the burst is not over. The
  last first probe is the signal to publish;
- the consumer's stored index is not behind the network's stored shards (another consumer of
  the network published them: its index must follow at once, :mod:`.network_storage`);
- the hold began less than ``bound`` seconds ago.

Pure: the caller passes what it read and ``now``; nothing here writes or reads a cache.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agn.model import Candidate, Exclusion, NetworkView
from agn.operator.verdicts import NetworkVerdict, changed_since

# The longest a publication of additions is held, in --burst-batch-wait units: a burst of
# creates is published at least once per this many batches' bounds.
HOLD_BATCHES = 3


@dataclasses.dataclass(frozen=True)
class Published:
    """What a consumer's last publication was judged on, and since when a change is held."""

    consumer: tuple[str, int]  # the consumer's uid and metadata.generation
    network: NetworkView
    version: int  # the network verdict's version
    by_provider: Mapping[str, Candidate]  # the verdict's base candidates (never changed in place)
    held_since: float | None = None


# How many network shards a publication writes at once when no burst is being probed
# (:meth:`Burst.shard_writers`). After a burst every shard changes (new providers hash to all of
# them): at 10,000 providers the one publication after the last first probe wrote 16 shards of
# ~110 KB one after another in 2.2 s. The API server decodes, validates and stores each on its
# own, so a few at once keep both cores busy (docs/overlays.md, "Publishing in proportion to a burst").
SHARD_WRITERS = 4


def published(consumer: Mapping[str, Any], judged: NetworkVerdict) -> Published:
    """A publication of ``consumer`` judged on ``judged``."""
    return Published(consumer_key(consumer), judged.network, judged.version, judged.by_provider)


def consumer_key(consumer: Mapping[str, Any]) -> tuple[str, int]:
    meta = consumer.get("metadata") or {}
    return str(meta.get("uid", "")), int(meta.get("generation") or 0)


def additions_only(last: Published, judged: NetworkVerdict) -> bool:
    """Whether every base candidate that changed since ``last`` is one that was not there (and
    at least one changed)."""
    if judged.network != last.network:
        return False
    changed = changed_since(judged, last.version)
    if changed is None:  # the history does not reach back: compare every candidate
        if any(judged.by_provider.get(name) != c for name, c in last.by_provider.items()):
            return False
        return len(judged.by_provider) > len(last.by_provider)
    return bool(changed) and all(n not in last.by_provider and n in judged.by_provider for n in changed)


def awaiting_first_probe(judged: NetworkVerdict) -> int:
    """How many providers the network selects have never been probed (but for those with an
    invalid endpoint: the prober never probes them, so they would hold every burst to its bound)."""
    return sum(1 for view, failure in judged.selected if view.healthy is None and failure is not Exclusion.INVALID)


def index_behind(index: Mapping[str, Any] | None, stored: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether the stored network-form ``index`` names a shard at another digest than the stored
    shard's (or names one not stored): True for no index at all."""
    if index is None:
        return True
    for entry in (index.get("spec") or {}).get("shards") or ():
        shard = stored.get(str(entry.get("name", "")))
        if shard is None or (shard.get("spec") or {}).get("digest") != entry.get("digest"):
            return True
    return False


class Burst:
    """The network-wide half of :func:`hold_for`, once per verdict rather than per consumer.

    In a burst every batch asks again for every consumer of the network (each first probe marks
    them dirty), and both questions are O(providers) or O(additions): asked ten times per batch
    at 5,000 x 10 they took the reconcile thread's CPU from the prober's event loop. A verdict's
    version is unique across networks (:mod:`.verdicts`), so the answers are kept by version;
    the providers awaiting a first probe by the verdict's ``selected`` tuple (a first probe that
    finds a provider down changes the views, not the version)."""

    def __init__(self, keep: int = 64) -> None:
        self._keep = keep
        self._additions: dict[tuple[int, int], bool] = {}
        self._awaiting: tuple[object, int] | None = None

    def additions_only(self, last: Published, judged: NetworkVerdict) -> bool:
        if judged.network != last.network:
            return False
        key = (last.version, judged.version)
        if key not in self._additions:
            if len(self._additions) >= self._keep:
                self._additions.clear()
            self._additions[key] = additions_only(last, judged)
        return self._additions[key]

    def awaiting_first_probe(self, judged: NetworkVerdict) -> int:
        if self._awaiting is None or self._awaiting[0] is not judged.selected:
            self._awaiting = (judged.selected, awaiting_first_probe(judged))  # the tuple is kept: its id stays its own
        return self._awaiting[1]

    def shard_writers(self, judged: NetworkVerdict) -> int:
        """How many of a publication's network shards are written at once: one after another
        while a burst is being probed (they share the API server with the creates and the first
        probes' status writes, and faster publications there only made more of them), up to
        :data:`SHARD_WRITERS` once no provider awaits its first probe (the publication after a
        burst, a gateway-wide drain: nothing competes, and it is what the change waits for)."""
        return 1 if self.awaiting_first_probe(judged) else SHARD_WRITERS


def hold_for(
    last: Published | None,
    judged: NetworkVerdict,
    consumer: Mapping[str, Any],
    *,
    behind: bool,
    now: float,
    bound: float,
    burst: Burst | None = None,
) -> float | None:
    """Seconds to hold the consumer's publication of ``judged`` (None: publish now)."""
    if last is None or behind or last.consumer != consumer_key(consumer):
        return None
    held = now if last.held_since is None else last.held_since
    if now - held >= bound:
        return None
    burst = burst or Burst()
    if not burst.additions_only(last, judged) or not burst.awaiting_first_probe(judged):
        return None
    return bound - (now - held)
