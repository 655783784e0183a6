"""The pure routing decision: overlay candidates + session affinities + a request -> a candidate.

Policy (docs/overlays.md):

1. A request whose session already has affinity to a provider that is still in the overlay
   stays on it, whatever its admission state (``admitted`` or ``existing_only``) — draining
   a provider never breaks a running session. When the request names a selection group
   (``x-selection-group``), the affinity is honoured only if the provider is in that group.
2. Every other request (no session, a new session, or a session whose provider left the
   overlay, which is then *re-homed*) goes to an ``admitted`` candidate only: the lowest
   ``rank`` wins, ties broken by candidate ``id`` so the choice is deterministic. A named
   selection group restricts the choice to that group.
3. No eligible admitted candidate -> no route (the server answers 503).
4. *Slow start.* A candidate carrying a slow-start window (:class:`agn.model.SlowStart`) takes
   only the fraction :func:`agn.model.ramp` of the new sessions it would get without one (its
   *full share*): rule 2's candidates are tried in order, each in a window taking a new session
   with probability ``ramp(window, now)``, the others passing it on to the next one; the first
   without a window takes every session that reaches it (:func:`pick`). So a returning
   best-ranked provider's share rises from 5% to 100% over its window and the rest goes where
   it went before. When every eligible candidate is in a window, what none took goes to the
   first (a session is never refused for a window). Sticky sessions (rule 1) keep their provider.

This module does no I/O, reads no clock and mutates nothing: the caller passes ``now`` (its
estimate of the API server's time) and ``draw`` (uniform in [0, 1)), and records the new
affinity from the returned :class:`Decision`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence

from agn.model import ADMITTED, Candidate, ramp

AFFINITY = "affinity"  # stayed on the provider the session already used
NEW_SESSION = "new_session"  # first request of a session, or a request without a session
REHOMED = "rehomed"  # the session's provider left the overlay (or the requested group), or its deadline passed
NO_ADMITTED_CANDIDATE = "no_admitted_candidate"


@dataclasses.dataclass(frozen=True)
class Decision:
    """Where one request goes. ``candidate`` is None exactly when ``reason`` is NO_ADMITTED_CANDIDATE."""

    candidate: Candidate | None
    reason: str
    previous_provider: str | None = None  # the provider the session had affinity to, if any

    @property
    def routed(self) -> bool:
        return self.candidate is not None


def best_admitted(candidates: Iterable[Candidate], *, selection_group: str | None = None) -> Candidate | None:
    """The admitted candidate a new session gets: lowest rank, then lowest id; None if there is none."""
    eligible = [
        c
        for c in candidates
        if c.admission_state == ADMITTED and (selection_group is None or c.selection_group == selection_group)
    ]
    return min(eligible, key=lambda c: (c.rank, c.id), default=None)


def new_session_chain(candidates: Iterable[Candidate], *, selection_group: str | None = None) -> tuple[Candidate, ...]:
    """The admitted candidates a new session may go to, in rule 2's order (rank, then id), up to
    and including the first without a slow-start window (no later one can get a session)."""
    eligible = sorted(
        (
            c
            for c in candidates
            if c.admission_state == ADMITTED and (selection_group is None or c.selection_group == selection_group)
        ),
        key=lambda c: (c.rank, c.id),
    )
    for i, c in enumerate(eligible):
        if c.slow_start is None:
            return tuple(eligible[: i + 1])
    return tuple(eligible)


def pick(chain: Sequence[Candidate], *, now: float, draw: float) -> Candidate | None:
    """Rule 4 along ``chain`` (:func:`new_session_chain`) with one uniform ``draw``: each
    candidate takes it when the draw falls below its ramp; otherwise the draw, rescaled to what
    is left, goes on (so each step is an independent trial). None only for an empty chain."""
    u = draw
    for c in chain:
        r = ramp(c.slow_start, now)
        if u < r:
            return c
        u = (u - r) / (1.0 - r)
    return chain[0] if chain else None


def choose(
    candidates: Iterable[Candidate],
    affinities: Mapping[str, str],
    session: str | None,
    *,
    selection_group: str | None = None,
    now: float = math.inf,
    draw: float = 0.0,
) -> Decision:
    """Route one request. ``affinities`` maps session id -> provider name; ``now`` and ``draw``
    are rule 4's (the defaults: every window over)."""
    candidates = tuple(candidates)
    previous = affinities.get(session) if session else None
    if previous is not None:
        current = next((c for c in candidates if c.provider == previous), None)
        if current is not None and (selection_group is None or current.selection_group == selection_group):
            if current.session_deadline is None or now < current.session_deadline:
                return Decision(current, AFFINITY, previous)
            chain = new_session_chain(candidates, selection_group=current.selection_group)
            moved = pick(chain, now=now, draw=draw)
            return Decision(current, AFFINITY, previous) if moved is None else Decision(moved, REHOMED, previous)
    picked = pick(new_session_chain(candidates, selection_group=selection_group), now=now, draw=draw)
    if picked is None:
        return Decision(None, NO_ADMITTED_CANDIDATE, previous)
    return Decision(picked, REHOMED if previous is not None else NEW_SESSION, previous)
