"""The gateway's routing table: the overlay being served plus session affinities.

HTTP handler threads call :meth:`RoutingTable.route`; the follower calls
:meth:`RoutingTable.swap`. Both take one lock, so a request sees either the old overlay or
the new one, never a mix. The decision is :func:`agn.gateway.routing.choose`'s, made from
lookups built once per swap (:class:`Routes`: the candidate of each provider, the new-session
chain overall and per selection group — the best admitted candidate, preceded by any better one
in a slow-start window) so that a request costs O(1) and not a
walk over every candidate — at 5,000 candidates that walk was most of a request's CPU. The
unit tests hold the two equal on generated overlays. It must not do I/O (no API calls, no
upstream requests).

Affinities are kept in a :class:`~agn.gateway.sessions.SessionBook`: bounded (least recently
used sessions are forgotten first; a session idle past the ttl is forgotten) so a long-running
gateway does not grow without limit, and counted per provider for ``status.sessions``. An
affinity to a provider that left the overlay is kept until the session's next request re-homes
it, so the re-homing is visible in the decision. A session whose provider's candidate carries a
session deadline that has passed (on :attr:`RoutingTable.clock`) is re-homed at its next turn
too (:func:`agn.gateway.routing.choose`, rule 1).
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from agn.gateway.routing import AFFINITY, NEW_SESSION, NO_ADMITTED_CANDIDATE, REHOMED, Decision, pick
from agn.gateway.sessions import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TTL, SessionBook, report_of
from agn.model import ADMITTED, Candidate, Overlay

_PROVIDER = attrgetter("provider")


def _rank_id(c: Candidate) -> tuple[int, str]:
    return (c.rank, c.id)


def _chain(anchor: Candidate | None, windows: list[Candidate]) -> tuple[Candidate, ...]:
    """:func:`agn.gateway.routing.new_session_chain` from the best admitted candidate without a
    window (``anchor``) and the admitted candidates with one (``windows``; few, usually none)."""
    before = sorted((c for c in windows if anchor is None or _rank_id(c) < _rank_id(anchor)), key=_rank_id)
    return (*before, anchor) if anchor is not None else tuple(before)


@dataclasses.dataclass(frozen=True)
class Routes:
    """What :func:`agn.gateway.routing.choose` looks up, precomputed for one overlay's candidates."""

    by_provider: dict[str, Candidate]  # the first candidate of each provider, as choose finds it
    chain: tuple[Candidate, ...]  # the new-session chain (routing.new_session_chain); () if none
    chain_in_group: dict[str, tuple[Candidate, ...]]  # the same, per selection group

    @classmethod
    def of(cls, candidates: Sequence[Candidate]) -> Routes:
        backwards = candidates[::-1]  # so that the first candidate of a provider wins, as in choose
        by_provider = dict(zip(map(_PROVIDER, backwards), backwards, strict=True))
        best: Candidate | None = None
        best_in_group: dict[str, Candidate] = {}
        windows: dict[str, list[Candidate]] = {}
        for c in candidates:
            if c.admission_state != ADMITTED:
                continue
            if c.slow_start is not None:
                windows.setdefault(c.selection_group, []).append(c)
                continue
            current = best_in_group.get(c.selection_group)
            if current is None or (c.rank, c.id) < (current.rank, current.id):
                best_in_group[c.selection_group] = c
            if best is None or (c.rank, c.id) < (best.rank, best.id):
                best = c
        groups = set(best_in_group) | set(windows)
        chains = {g: _chain(best_in_group.get(g), windows.get(g, [])) for g in groups}
        return cls(by_provider, _chain(best, [c for w in windows.values() for c in w]), chains)

    def choose(
        self, previous: str | None, *, selection_group: str | None = None, now: float = 0.0, draw: float = 0.0
    ) -> Decision:
        """:func:`agn.gateway.routing.choose` for a session whose affinity is ``previous``."""
        if previous is not None:
            current = self.by_provider.get(previous)
            if current is not None and (selection_group is None or current.selection_group == selection_group):
                if current.session_deadline is None or now < current.session_deadline:
                    return Decision(current, AFFINITY, previous)
                # Past its provider's session deadline: chosen as a new session of its group; it
                # stays where it is only when the group has no admitted candidate.
                chain = self.chain_in_group.get(current.selection_group, ())
                moved = pick(chain, now=now, draw=draw)
                return Decision(current, AFFINITY, previous) if moved is None else Decision(moved, REHOMED, previous)
        chain = self.chain if selection_group is None else self.chain_in_group.get(selection_group, ())
        picked = chain[0] if len(chain) == 1 and chain[0].slow_start is None else pick(chain, now=now, draw=draw)
        if picked is None:
            return Decision(None, NO_ADMITTED_CANDIDATE, previous)
        return Decision(picked, REHOMED if previous is not None else NEW_SESSION, previous)


_NO_ROUTES = Routes({}, (), {})


class RoutingTable:
    def __init__(
        self,
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        session_ttl: float = DEFAULT_SESSION_TTL,
        clock: Callable[[], float] = time.time,
        draw: Callable[[], float] = random.random,
    ) -> None:
        # clock: the API server's time as this gateway estimates it (slow-start windows are on it);
        # draw: uniform in [0, 1), for a new session's choice along a chain with a window.
        self.clock = clock
        self._draw = draw
        self._lock = threading.Lock()
        self._overlay: Overlay | None = None
        self._routes = _NO_ROUTES
        self.sessions = SessionBook(max_sessions=max_sessions, ttl=session_ttl)
        self._since: float | None = None  # when the first session report was made (server clock)

    @property
    def serving(self) -> Overlay | None:
        with self._lock:
            return self._overlay

    def swap(self, overlay: Overlay) -> Overlay | None:
        """Serve ``overlay`` from now on; returns the one it replaced."""
        routes = Routes.of(overlay.candidates)  # outside the lock: requests are not held up
        with self._lock:
            previous, self._overlay, self._routes = self._overlay, overlay, routes
            self.sessions.keep_providers(routes.by_provider, now=self.clock())
            return previous

    def route(self, session: str | None, *, selection_group: str | None = None) -> Decision:
        """Decide for one request and record the session's (new) affinity."""
        return self.route_by(session, selection_group=selection_group)[0]

    def route_by(self, session: str | None, *, selection_group: str | None = None) -> tuple[Decision, int | None]:
        """:meth:`route`, plus the revision of the overlay the decision was made from (None: none
        served), read under the same lock, so it is the revision the candidate came from even when
        a swap lands just after."""
        with self._lock:
            now = self.clock()
            revision = self._overlay.revision if self._overlay is not None else None
            previous = self.sessions.provider_of(session, now=now) if session else None
            decision = self._routes.choose(previous, selection_group=selection_group, now=now, draw=self._draw())
            if decision.candidate is not None:
                rehomed = previous if decision.reason == REHOMED else None
                self.sessions.turn(session or None, decision.candidate.provider, now=now, rehomed_from=rehomed)
            return decision, revision

    def session_report(self, *, interval: float) -> dict[str, Any] | None:
        """``status.sessions`` now (:func:`agn.gateway.sessions.report_of`): the providers not
        admitted in the served overlay; None until an overlay is served."""
        with self._lock:
            overlay = self._overlay
            if overlay is None:
                return None
            now = self.clock()
            self._since = now if self._since is None else self._since
            self.sessions.expire(now=now)
            admitted = [c.provider for c in overlay.candidates if c.admission_state == ADMITTED]
            lines = self.sessions.lines(skip=admitted)
            book = self.sessions
        return report_of(lines, revision=overlay.revision, since=self._since, interval=interval, ttl=book.ttl)

    def snapshot(self) -> dict[str, Any]:
        """What ``GET /routes`` shows."""
        with self._lock:
            overlay = self._overlay
            affinities = self.sessions.affinities()
        return {
            "servingRevision": overlay.revision if overlay else None,
            "digest": overlay.digest if overlay else None,
            "network": overlay.network if overlay else None,
            "candidates": [c.to_dict() for c in overlay.candidates] if overlay else [],
            "affinities": affinities,
        }
