"""Per network: which providers it selects and each one's hard failure, kept across batches.

At fleet size most of what a reconcile batch sees has not changed: 5,000 providers, of which
a handful got a new status since the last batch (a probe's reading), and one was drained. The
overlay of every consumer of a network depends on the providers only through this network-wide
verdict (selected? failing how?) plus the consumer's own exclusions, so the verdict is kept:

- a provider's verdict is recomputed only when its view is a new object (the informer store's
  :meth:`~agn.operator.informer.Store.derived` hands out the same view object until the provider
  changes), when the network changed, or when time passed the moment the verdict was good until
  (:func:`agn.model.verdict_until`: a fresh reading goes stale, a slow-start window ends);
- :attr:`NetworkVerdict.version` changes only when something a candidate is made of changed —
  membership, a hard failure, or a candidate field — so a consumer can reuse its last plan
  (candidates, digest) when the version it was planned from is still current. A probe that
  only refreshes a reading's time changes the view but not the version.

What the consumers' plans are made of is kept with the verdict, so that planning is sized by
the change too (:mod:`agn.operator.reconcile`):

- each provider's *base candidate* — its candidate for a consumer that excludes nothing — is
  made once per entry, and a provider whose candidate did not change keeps the same
  :class:`~agn.model.Candidate` object (its digest row is computed once);
- the network's base candidates, sorted, are kept once per version
  (:attr:`NetworkVerdict.candidates`; a consumer without exclusions plans from that tuple), and
  brought from one version to the next by moving only the changed ones;
- each version records which providers' base candidate changed since the version before; the
  last :data:`HISTORY` such deltas travel with the verdict, so :func:`changed_since` tells a
  consumer planned at an older version exactly which providers to look at again (or None:
  too old, or the network itself changed — plan afresh).

Pure apart from its memory; the caller supplies ``now``.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence

from agn.model import (
    Candidate,
    ConsumerView,
    Exclusion,
    NetworkView,
    ProviderView,
    candidate_for,
    digest_of_rows,
    hard_failure,
    selects,
    verdict_until,
)

_versions = itertools.count(1)
# How many version-to-version deltas a network keeps: a consumer planned up to this many versions
# ago is brought up to date by its delta; an older plan is made afresh.
HISTORY = 64
# Past this many changed providers, the sorted candidates are sorted afresh rather than moved.
_RESORT_FRACTION = 8
_NO_EXCLUSIONS = ConsumerView("", "")


def _key(c: Candidate) -> tuple[str, str]:
    return (c.id, c.provider)


@dataclasses.dataclass(frozen=True)
class Delta:
    """From version ``since`` to version ``version``: the providers whose base candidate changed
    (appeared, went, or differs in any field)."""

    since: int
    version: int
    providers: frozenset[str]


@dataclasses.dataclass(frozen=True)
class NetworkVerdict:
    network: NetworkView
    # The providers the network selects, in input order, each with its hard failure (None: usable).
    selected: tuple[tuple[ProviderView, Exclusion | None], ...]
    version: int  # changes exactly when a candidate-relevant outcome changed
    recheck_at: float | None  # the earliest moment a usable provider's reading goes stale
    recomputed: int  # providers evaluated afresh in this call (the rest came from memory)
    # Every base candidate (a consumer excluding nothing), sorted by (id, provider); by provider;
    # and their overlay digest (agn.model.overlay_digest), made once per version.
    candidates: tuple[Candidate, ...] = ()
    by_provider: Mapping[str, Candidate] = dataclasses.field(default_factory=dict)
    digest: str = ""
    # The last deltas up to this version, oldest first, each starting where the one before ended.
    history: tuple[Delta, ...] = ()


def changed_since(verdict: NetworkVerdict, version: int) -> frozenset[str] | None:
    """The providers whose base candidate changed from ``version`` to ``verdict.version``, or None
    when that is not known (a version too old, of another network incarnation, or unknown)."""
    if version == verdict.version:
        return frozenset()
    names: set[str] = set()
    for delta in reversed(verdict.history):
        names |= delta.providers
        if delta.since == version:
            return frozenset(names)
    return None


@dataclasses.dataclass(frozen=True)
class _Entry:
    view: ProviderView
    selected: bool
    failure: Exclusion | None
    until: float
    candidate: Candidate | None  # the base candidate: for a consumer that excludes nothing


@dataclasses.dataclass
class _Network:
    """What is kept per network between evaluations."""

    network: NetworkView
    entries: dict[str, _Entry]
    version: int
    ordered: list[Candidate]  # every base candidate, sorted by (id, provider)
    candidates: tuple[Candidate, ...]  # ``ordered`` as of ``version`` (handed out)
    by_provider: dict[str, Candidate]  # as of ``version`` (handed out; replaced, never changed)
    digest: str  # of ``candidates``
    history: collections.deque[Delta]


def _outcome(e: _Entry) -> tuple:
    """What a candidate (and a hard-failure Event) is made of: all but the reading's time."""
    v = e.view
    probed = v.healthy is not None  # a first probe that finds a provider down is news for Events
    window = e.candidate.slow_start if e.candidate is not None else None  # published while it lasts
    deadline = e.candidate.session_deadline if e.candidate is not None else None
    return (
        e.selected,
        e.failure,
        probed,
        v.candidate_id,
        v.endpoint,
        v.selection_group,
        v.rank,
        v.drain,
        window,
        deadline,
    )


def candidates_of(verdict: NetworkVerdict, consumer: ConsumerView) -> tuple[Candidate, ...]:
    """The consumer's candidates under ``verdict`` (the consumer's own exclusions applied), sorted
    as :func:`agn.model.compute_candidates` sorts them: the network's sorted base candidates,
    less the ones the consumer excludes (:func:`agn.model.candidate_for`'s last rule)."""
    excluded = consumer.excluded_providers
    if not excluded:
        return verdict.candidates
    return tuple(c for c in verdict.candidates if c.provider not in excluded)


class Verdicts:
    def __init__(self) -> None:
        # network name -> what was evaluated last (entries, version, sorted candidates, deltas)
        self._memo: dict[str, _Network] = {}
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
        known_state = self._memo.get(network.name)
        same_network = known_state is not None and known_state.network == network
        memo = known_state.entries if known_state is not None and same_network else {}
        entries: dict[str, _Entry] = {}
        changed = not same_network
        moved: list[str] = []  # providers whose base candidate changed
        recomputed = fresh = 0
        for p in providers:
            known = memo.get(p.name)
            if known is not None and known.view is p and now < known.until:
                entries[p.name] = known
                continue
            recomputed += 1
            fresh += known is None
            chosen = selects(network, p.labels)
            failure = hard_failure(p, network, now=now) if chosen else None
            candidate = candidate_for(p, failure, _NO_EXCLUSIONS, now=now) if chosen else None
            was = known.candidate if known is not None else None
            if candidate is not None and candidate == was:
                candidate = was  # the same object: its digest row is computed already
            entry = _Entry(p, chosen, failure, verdict_until(p, network, now=now) if chosen else math.inf, candidate)
            entries[p.name] = entry
            if known is None or _outcome(known) != _outcome(entry):
                changed = True
            if candidate is not was:
                moved.append(p.name)
        if len(entries) - fresh != len(memo):  # a provider went: look for which (rare)
            changed = True
            moved.extend(name for name, e in memo.items() if name not in entries and e.candidate is not None)
        state = self._advance(network, known_state if same_network else None, entries, moved, changed)
        self._memo[network.name] = state
        selected = tuple((e.view, e.failure) for e in entries.values() if e.selected)
        untils = [e.until for e in entries.values() if e.selected and e.until != math.inf]
        return NetworkVerdict(
            network,
            selected,
            state.version,
            min(untils, default=None),
            recomputed,
            state.candidates,
            state.by_provider,
            state.digest,
            tuple(state.history),
        )

    @staticmethod
    def _advance(
        network: NetworkView, known: _Network | None, entries: dict[str, _Entry], moved: list[str], changed: bool
    ) -> _Network:
        """The network's memory after this evaluation: a new version (with its delta and sorted
        candidates moved by it) when anything changed, else the same version and hand-outs."""
        if known is not None and not changed:
            known.entries = entries
            return known
        version = next(_versions)
        if known is None:
            by_provider = {name: e.candidate for name, e in entries.items() if e.candidate is not None}
        else:
            by_provider = dict(known.by_provider)  # the old one is handed out: copied, then moved
            for name in moved:
                entry = entries.get(name)
                if entry is not None and entry.candidate is not None:
                    by_provider[name] = entry.candidate
                else:
                    by_provider.pop(name, None)
        if known is None or len(moved) * _RESORT_FRACTION > len(by_provider) + _RESORT_FRACTION:
            ordered = sorted(by_provider.values(), key=_key)
        else:
            ordered = known.ordered
            for name in moved:
                old, new = known.by_provider.get(name), by_provider.get(name)
                if old is not None:
                    del ordered[bisect.bisect_left(ordered, _key(old), key=_key)]
                if new is not None:
                    bisect.insort(ordered, new, key=_key)
        # A new network (or a changed one) starts a new history: no delta reaches across it.
        history = known.history if known is not None else collections.deque(maxlen=HISTORY)
        if known is not None:
            history.append(Delta(known.version, version, frozenset(moved)))
        digest = digest_of_rows([c.row for c in ordered])
        return _Network(network, entries, version, ordered, tuple(ordered), by_provider, digest, history)

    def forget(self, networks: Iterable[str]) -> None:
        """Keep memory only for ``networks`` (the ones that still exist)."""
        keep = set(networks)
        for name in [n for n in self._memo if n not in keep]:
            del self._memo[name]
        for name in [n for n in self._last if n not in keep]:
            del self._last[name]
