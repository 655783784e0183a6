"""The convergence predicate for a drain with targets (docs/provider-drain.md, step 9). Pure.

An :class:`Observation` is one consistent look at the selected providers, the named
consumers and their overlays. A sharded overlay whose shards are not all in hand at the
index's digest (:class:`agn.shards.Incomplete`) is observed as such: the consumer is
waiting, never judged on a mix of two revisions. :func:`evaluate` says whether it shows the request serving
everywhere; :class:`Agreement` implements "two consecutive agreeing observations".
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence

from agn.model import ADMITTED, EXISTING_ONLY, ConsumerView, Exclusion, NetworkView, Overlay, ProviderView, exclusion
from agn.shards import Incomplete
from xtask.record import Record


class Convergence(str, enum.Enum):
    """What one observation says of the change: served everywhere, or not yet."""

    CONVERGED = "converged"
    NOT_ELIGIBLE = "not-eligible"  # undrain stored and served, but a hard failure keeps a provider out
    WAITING = "waiting"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Observation(Record):
    providers: Mapping[str, ProviderView | None]  # selected providers; None = deleted
    network: NetworkView
    consumers: Mapping[str, ConsumerView]
    revisions: Mapping[str, tuple[int | None, int | None]]  # consumer -> (accepted, serving)
    overlays: Mapping[str, Overlay | Incomplete | None]  # None = no overlay; Incomplete = shards pending
    now: float


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class ProviderCheck(Record):
    """One provider as one consumer's overlay shows it, against what the change asks for."""

    consumer: str
    provider: str
    state: str  # its admission state in the overlay: admitted | existing_only | absent
    ok: bool
    detail: str = ""  # e.g. "excluded: unavailable"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Verdict(Record):
    state: Convergence
    lagging: tuple[str, ...]  # who is behind, in words
    not_eligible: tuple[str, ...]
    providers: tuple[ProviderCheck, ...]
    signature: tuple  # what must be equal across two observations

    @property
    def terminal(self) -> bool:
        return self.state is not Convergence.WAITING


def incomplete_reason(exc: Incomplete) -> str:
    """An overlay whose index names shards not yet in hand at its digest, in words."""
    parts = []
    if exc.missing:
        parts.append(f"missing {', '.join(exc.missing)}")
    if exc.mismatched:
        parts.append(f"not yet at the index's digest: {', '.join(exc.mismatched)}")
    return f"overlay revision {exc.revision} not complete (shards {'; '.join(parts)})"


def serving_lag(
    consumer: str, overlay: Overlay | Incomplete | None, accepted: int | None, serving: int | None
) -> str | None:
    """Why ``consumer`` is not serving ``overlay`` (the operator's latest), or None when it is.

    The one definition of "a gateway serves its overlay", shared by the drain's waiter and
    ``env up``'s readiness. An overlay still being assembled is not served by anyone yet.
    """
    if overlay is None:
        return f"consumer {consumer}: no overlay published yet"
    if isinstance(overlay, Incomplete):
        return f"consumer {consumer}: {incomplete_reason(overlay)}"
    if (accepted or 0) < overlay.revision or (serving or 0) < overlay.revision:
        return f"consumer {consumer}: overlay revision {overlay.revision}, accepted {accepted}, serving {serving}"
    return None


def evaluate(obs: Observation, *, drain: bool) -> Verdict:
    lagging: list[str] = []
    not_eligible: list[str] = []
    states: list[ProviderCheck] = []
    want = EXISTING_ONLY if drain else ADMITTED
    for name, p in sorted(obs.providers.items()):
        if p is None:
            lagging.append(f"provider {name} no longer exists")
        elif p.drain != drain:
            lagging.append(f"provider {name}: spec.trafficPolicy.drain is {str(p.drain).lower()}")
    signature: list = []
    for consumer_name in sorted(obs.consumers):
        consumer = obs.consumers[consumer_name]
        overlay = obs.overlays.get(consumer_name)
        accepted, serving = obs.revisions.get(consumer_name, (None, None))
        lag = serving_lag(consumer_name, overlay, accepted, serving)
        if lag:
            lagging.append(lag)
        if overlay is None or isinstance(overlay, Incomplete):
            signature.append((consumer_name, None))
            continue
        for name, p in sorted(obs.providers.items()):
            cand = overlay.candidate_for(name)
            state = cand.admission_state if cand else "absent"
            if state == want:
                states.append(ProviderCheck(consumer_name, name, state, True))
                continue
            if cand is None and p is not None:
                why = exclusion(p, obs.network, consumer, now=obs.now)
                if why is not None:
                    detail = f"excluded: {why.value}"
                    if drain:
                        # Drained and excluded is fine: no new session can land on it either way.
                        states.append(ProviderCheck(consumer_name, name, state, True, detail))
                    else:
                        states.append(ProviderCheck(consumer_name, name, state, False, detail))
                        not_eligible.append(
                            f"{name} for {consumer_name}: stored, not eligible until healthy ({why.value})"
                            if why in (Exclusion.UNAVAILABLE, Exclusion.STALE)
                            else f"{name} for {consumer_name}: stored, not eligible ({why.value})"
                        )
                    continue
            states.append(ProviderCheck(consumer_name, name, state, False))
            lagging.append(
                f"consumer {consumer_name}: {name} is {state} in overlay revision {overlay.revision}, want {want}"
            )
        signature.append((consumer_name, overlay.revision, overlay.digest, accepted, serving))
    signature.append(tuple(sorted((n, p.drain if p else None) for n, p in obs.providers.items())))
    if lagging:
        state = Convergence.WAITING
    elif not_eligible:
        state = Convergence.NOT_ELIGIBLE
    else:
        state = Convergence.CONVERGED
    return Verdict(state, tuple(lagging), tuple(not_eligible), tuple(states), tuple(signature))


class Agreement:
    """Completion needs two consecutive observations with the same terminal verdict and signature."""

    def __init__(self) -> None:
        self.previous: Verdict | None = None
        self.count = 0

    def add(self, verdict: Verdict) -> bool:
        """Record an observation; True when it and the one before agree on a terminal state."""
        self.count += 1
        agreed = (
            verdict.terminal
            and self.previous is not None
            and self.previous.state == verdict.state
            and self.previous.signature == verdict.signature
        )
        self.previous = verdict
        return agreed


def targets_problems(
    *,
    network: NetworkView | None,
    network_name: str,
    consumers: Mapping[str, ConsumerView | None],
    providers: Sequence[ProviderView],
) -> list[str]:
    """Why the targets cannot be used (checked before any write)."""
    from agn.model import selects

    problems = []
    if network is None:
        problems.append(f"network {network_name!r} not found")
        return problems
    for name, consumer in sorted(consumers.items()):
        if consumer is None:
            problems.append(f"consumer {name!r} not found")
        elif consumer.network != network_name:
            problems.append(f"consumer {name!r} belongs to network {consumer.network!r}, not {network_name!r}")
    for p in providers:
        if not selects(network, p.labels):
            problems.append(f"provider {p.name!r} is not selected by network {network_name!r}")
    return problems
