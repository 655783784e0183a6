"""Per network: which providers it selects and each one's hard failure, kept across batches.

At fleet size most of what a reconcile batch sees has not changed: 5,000 providers, of which
a handful got a new status since the last batch (a probe's reading), and one was drained. The
overlay of every consumer of a network depends on the providers only through this network-wide
verdict (selected? failing how?) plus the consumer's own exclusions, so the verdict is kept:

- a provider's verdict is recomputed only when its view is a new object (the informer store's
  :meth:`~agn.operator.informer.Store.derived` hands out the same view object until the provider
  changes), when the network changed, or when time passed the moment the verdict was good until
  (:func:`agn.model.verdict_until`: a fresh reading goes stale);
- :attr:`NetworkVerdict.version` changes only when something a candidate is made of changed —
  membership, a hard failure, or a candidate field — so a consumer can reuse its last plan
  (candidates, digest) when the version it was planned from is still current. A probe that
  only refreshes a reading's time changes the view but not the version.

Pure apart from its memory; the caller supplies ``now``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Sequence

from agn.model import (
    Candidate,
    ConsumerView,
    Exclusion,
    NetworkView,
    ProviderView,
    candidate_for,
    hard_failure,
    selects,
    verdict_until,
)

_versions = itertools.count(1)


@dataclasses.dataclass(frozen=True)
class NetworkVerdict:
    network: NetworkView
    # The providers the network selects, in input order, each with its hard failure (None: usable).
    selected: tuple[tuple[ProviderView, Exclusion | None], ...]
    version: int  # changes exactly when a candidate-relevant outcome changed
    recheck_at: float | None  # the earliest moment a usable provider's reading goes stale
    recomputed: int  # providers evaluated afresh in this call (the rest came from memory)


@dataclasses.dataclass(frozen=True)
class _Entry:
    view: ProviderView
    selected: bool
    failure: Exclusion | None
    until: float


def _outcome(e: _Entry) -> tuple:
    """What a candidate (and a hard-failure Event) is made of: all but the reading's time."""
    v = e.view
    probed = v.healthy is not None  # a first probe that finds a provider down is news for Events
    return (e.selected, e.failure, probed, v.candidate_id, v.endpoint, v.selection_group, v.rank, v.drain)


def candidates_of(verdict: NetworkVerdict, consumer: ConsumerView) -> tuple[Candidate, ...]:
    """The consumer's candidates under ``verdict`` (the consumer's own exclusions applied), sorted
    as :func:`agn.model.compute_candidates` sorts them."""
    out = [c for p, failure in verdict.selected if (c := candidate_for(p, failure, consumer)) is not None]
    return tuple(sorted(out, key=lambda c: (c.id, c.provider)))


class Verdicts:
    def __init__(self) -> None:
        # network name -> (the network view evaluated against, provider name -> entry, version)
        self._memo: dict[str, tuple[NetworkView, dict[str, _Entry], int]] = {}
        # network name -> (the provider snapshot last evaluated, held so its identity stays its own; the verdict)
        self._last: dict[str, tuple[Sequence[ProviderView], NetworkVerdict]] = {}

    def evaluate(self, network: NetworkView, providers: Sequence[ProviderView], *, now: float) -> NetworkVerdict:
        """The network's verdict on ``providers`` at ``now``. Consumers of one network in one batch
        pass the same snapshot (the same tuple: immutable, so the same object is the same
        providers): the second and later get the first's verdict at no cost, unless a reading
        expired in between."""
        last = self._last.get(network.name)
        if (
            last is not None
            and isinstance(providers, tuple)
            and last[0] is providers
            and last[1].network == network
            and (last[1].recheck_at is None or now < last[1].recheck_at)
        ):
            return dataclasses.replace(last[1], recomputed=0)
        verdict = self._evaluate(network, providers, now=now)
        self._last[network.name] = (providers, verdict)
        return verdict

    def _evaluate(self, network: NetworkView, providers: Sequence[ProviderView], *, now: float) -> NetworkVerdict:
        known_network, memo, version = self._memo.get(network.name, (None, {}, 0))
        same_network = known_network == network
        if not same_network:
            memo = {}
        entries: dict[str, _Entry] = {}
        changed = not same_network or len(memo) != len(providers)
        recomputed = 0
        for p in providers:
            known = memo.get(p.name)
            if known is not None and known.view is p and now < known.until:
                entries[p.name] = known
                continue
            recomputed += 1
            chosen = selects(network, p.labels)
            entry = _Entry(
                p,
                chosen,
                hard_failure(p, network, now=now) if chosen else None,
                verdict_until(p, network, now=now) if chosen else math.inf,
            )
            entries[p.name] = entry
            if known is None or _outcome(known) != _outcome(entry):
                changed = True
        if changed or not version:
            version = next(_versions)
        self._memo[network.name] = (network, entries, version)
        selected = tuple((e.view, e.failure) for e in entries.values() if e.selected)
        untils = [e.until for e in entries.values() if e.selected and e.until != math.inf]
        return NetworkVerdict(network, selected, version, min(untils, default=None), recomputed)

    def forget(self, networks: Iterable[str]) -> None:
        """Keep memory only for ``networks`` (the ones that still exist)."""
        keep = set(networks)
        for name in [n for n in self._memo if n not in keep]:
            del self._memo[name]
        for name in [n for n in self._last if n not in keep]:
            del self._last[name]
