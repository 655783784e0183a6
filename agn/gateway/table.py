"""The gateway's routing table: the overlay being served plus session affinities.

HTTP handler threads call :meth:`RoutingTable.route`; the follower calls
:meth:`RoutingTable.swap`. Both take one lock, so a request sees either the old overlay or
the new one, never a mix. The decision is :func:`agn.gateway.routing.choose`'s, made from
lookups built once per swap (:class:`Routes`: the candidate of each provider, the best
admitted candidate overall and per selection group) so that a request costs O(1) and not a
walk over every candidate — at 5,000 candidates that walk was most of a request's CPU. The
unit tests hold the two equal on generated overlays. It must not do I/O (no API calls, no
upstream requests).

Affinities are bounded (least recently used sessions are forgotten first) so a long-running
gateway does not grow without limit. An affinity to a provider that left the overlay is kept
until the session's next request re-homes it, so the re-homing is visible in the decision.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from agn.gateway.routing import AFFINITY, NEW_SESSION, NO_ADMITTED_CANDIDATE, REHOMED, Decision
from agn.model import ADMITTED, Candidate, Overlay

DEFAULT_MAX_SESSIONS = 100_000
_PROVIDER = attrgetter("provider")


@dataclasses.dataclass(frozen=True)
class Routes:
    """What :func:`agn.gateway.routing.choose` looks up, precomputed for one overlay's candidates."""

    by_provider: dict[str, Candidate]  # the first candidate of each provider, as choose finds it
    best: Candidate | None  # the best admitted candidate (lowest rank, then id; the first on a tie)
    best_in_group: dict[str, Candidate]  # the same, per selection group

    @classmethod
    def of(cls, candidates: Sequence[Candidate]) -> Routes:
        backwards = candidates[::-1]  # so that the first candidate of a provider wins, as in choose
        by_provider = dict(zip(map(_PROVIDER, backwards), backwards, strict=True))
        best: Candidate | None = None
        best_in_group: dict[str, Candidate] = {}
        for c in candidates:
            if c.admission_state != ADMITTED:
                continue
            current = best_in_group.get(c.selection_group)
            if current is None or (c.rank, c.id) < (current.rank, current.id):
                best_in_group[c.selection_group] = c
            if best is None or (c.rank, c.id) < (best.rank, best.id):
                best = c
        return cls(by_provider, best, best_in_group)

    def choose(self, previous: str | None, *, selection_group: str | None = None) -> Decision:
        """:func:`agn.gateway.routing.choose` for a session whose affinity is ``previous``."""
        if previous is not None:
            current = self.by_provider.get(previous)
            if current is not None and (selection_group is None or current.selection_group == selection_group):
                return Decision(current, AFFINITY, previous)
        picked = self.best if selection_group is None else self.best_in_group.get(selection_group)
        if picked is None:
            return Decision(None, NO_ADMITTED_CANDIDATE, previous)
        return Decision(picked, REHOMED if previous is not None else NEW_SESSION, previous)


_NO_ROUTES = Routes({}, None, {})


class RoutingTable:
    def __init__(self, *, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self._lock = threading.Lock()
        self._overlay: Overlay | None = None
        self._routes = _NO_ROUTES
        self._affinities: OrderedDict[str, str] = OrderedDict()
        self._max_sessions = max_sessions

    @property
    def serving(self) -> Overlay | None:
        with self._lock:
            return self._overlay

    def swap(self, overlay: Overlay) -> Overlay | None:
        """Serve ``overlay`` from now on; returns the one it replaced."""
        routes = Routes.of(overlay.candidates)  # outside the lock: requests are not held up
        with self._lock:
            previous, self._overlay, self._routes = self._overlay, overlay, routes
            return previous

    def route(self, session: str | None, *, selection_group: str | None = None) -> Decision:
        """Decide for one request and record the session's (new) affinity."""
        return self.route_by(session, selection_group=selection_group)[0]

    def route_by(self, session: str | None, *, selection_group: str | None = None) -> tuple[Decision, int | None]:
        """:meth:`route`, plus the revision of the overlay the decision was made from (None: none
        served), read under the same lock, so it is the revision the candidate came from even when
        a swap lands just after."""
        with self._lock:
            revision = self._overlay.revision if self._overlay is not None else None
            previous = self._affinities.get(session) if session else None
            decision = self._routes.choose(previous, selection_group=selection_group)
            if session and decision.candidate is not None:
                self._affinities[session] = decision.candidate.provider
                self._affinities.move_to_end(session)
                while len(self._affinities) > self._max_sessions:
                    self._affinities.popitem(last=False)
            return decision, revision

    def snapshot(self) -> dict[str, Any]:
        """What ``GET /routes`` shows."""
        with self._lock:
            overlay = self._overlay
            affinities = dict(self._affinities)
        return {
            "servingRevision": overlay.revision if overlay else None,
            "digest": overlay.digest if overlay else None,
            "network": overlay.network if overlay else None,
            "candidates": [c.to_dict() for c in overlay.candidates] if overlay else [],
            "affinities": affinities,
        }
