"""The gateway's routing table: the overlay being served plus session affinities.

HTTP handler threads call :meth:`RoutingTable.route`; the follower calls
:meth:`RoutingTable.swap`. Both take one lock, so a request sees either the old overlay or
the new one, never a mix. The decision itself is :func:`agn.gateway.routing.choose`; this
module only holds state. It must not do I/O (no API calls, no upstream requests).

Affinities are bounded (least recently used sessions are forgotten first) so a long-running
gateway does not grow without limit. An affinity to a provider that left the overlay is kept
until the session's next request re-homes it, so the re-homing is visible in the decision.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from agn.gateway.routing import Decision, choose
from agn.model import Overlay

DEFAULT_MAX_SESSIONS = 100_000


class RoutingTable:
    def __init__(self, *, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self._lock = threading.Lock()
        self._overlay: Overlay | None = None
        self._affinities: OrderedDict[str, str] = OrderedDict()
        self._max_sessions = max_sessions

    @property
    def serving(self) -> Overlay | None:
        with self._lock:
            return self._overlay

    def swap(self, overlay: Overlay) -> Overlay | None:
        """Serve ``overlay`` from now on; returns the one it replaced."""
        with self._lock:
            previous, self._overlay = self._overlay, overlay
            return previous

    def route(self, session: str | None, *, selection_group: str | None = None) -> Decision:
        """Decide for one request and record the session's (new) affinity."""
        with self._lock:
            candidates = self._overlay.candidates if self._overlay is not None else ()
            decision = choose(candidates, self._affinities, session, selection_group=selection_group)
            if session and decision.candidate is not None:
                self._affinities[session] = decision.candidate.provider
                self._affinities.move_to_end(session)
                while len(self._affinities) > self._max_sessions:
                    self._affinities.popitem(last=False)
            return decision

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
