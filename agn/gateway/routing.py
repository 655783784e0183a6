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

This module does no I/O, reads no clock and mutates nothing: the caller records the new
affinity from the returned :class:`Decision`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from agn.model import ADMITTED, Candidate

AFFINITY = "affinity"  # stayed on the provider the session already used
NEW_SESSION = "new_session"  # first request of a session, or a request without a session
REHOMED = "rehomed"  # the session's provider left the overlay (or the requested group); picked anew
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


def choose(
    candidates: Iterable[Candidate],
    affinities: Mapping[str, str],
    session: str | None,
    *,
    selection_group: str | None = None,
) -> Decision:
    """Route one request. ``affinities`` maps session id -> provider name."""
    candidates = tuple(candidates)
    previous = affinities.get(session) if session else None
    if previous is not None:
        current = next((c for c in candidates if c.provider == previous), None)
        if current is not None and (selection_group is None or current.selection_group == selection_group):
            return Decision(current, AFFINITY, previous)
    picked = best_admitted(candidates, selection_group=selection_group)
    if picked is None:
        return Decision(None, NO_ADMITTED_CANDIDATE, previous)
    return Decision(picked, REHOMED if previous is not None else NEW_SESSION, previous)
