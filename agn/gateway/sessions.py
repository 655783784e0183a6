"""The gateway's sticky sessions, counted per provider, and their report in the consumer's status.

:class:`SessionBook` is the table's record of every session it routes (docs/overlays.md,
"Sessions"): the provider each session is bound to and the time of its last turn, on the API
server's clock as the gateway estimates it (:class:`agn.serverclock.ServerClock`). From it come,
per provider, the sessions bound to it now, the time of its last turn (any request routed to it,
with a session or without) and how many sessions were *rehomed* away from it (moved by a session
deadline, or because it left the overlay). It is not thread-safe: the routing table calls it
under its own lock, and it does no I/O.

Bounds: a session idle longer than ``ttl`` seconds is forgotten (its provider's count drops;
its next turn is a new session); at most ``max_sessions`` are kept, the least recently used one
forgotten first when a new one would pass the cap (counted in ``evicted``); per-provider entries
exist only for providers with a session or a turn, and one that left the overlay is forgotten
once it has no session and its last turn is older than ``ttl``.

:func:`report_loop` publishes :meth:`SessionBook.report` as ``status.sessions`` of the consumer
(through the status writer, so nothing else is written): at most once per ``interval`` seconds
and only when what it says changed (a session count, a last turn, a rehomed count, the serving
revision; times in milliseconds, rounded up). A busy gateway therefore writes at most once a second, and only while a
provider that is not admitted (drained, or out of the overlay) has sessions or recent turns;
admitted providers are not listed. The report lists at most :data:`MAX_REPORTED` providers (most
sessions first, then the latest turn); ``omitted`` counts the rest.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator
from typing import Any

from agn.model import rfc3339

DEFAULT_MAX_SESSIONS = 100_000
DEFAULT_SESSION_TTL = 600.0  # seconds a session may stay idle before it is forgotten
DEFAULT_REPORT_INTERVAL = 1.0  # seconds between two looks at the book for status.sessions
MAX_REPORTED = 100  # providers listed in status.sessions (the rest are counted in ``omitted``)


def rfc3339_ms(at: float) -> str:
    """Unix seconds as RFC 3339 UTC text with milliseconds, rounded up (never earlier than ``at``)."""
    ms = math.ceil(at * 1000)
    return f"{rfc3339(ms // 1000)[:-1]}.{ms % 1000:03d}Z"


@dataclasses.dataclass(slots=True)
class _Sticky:
    provider: str
    last: float  # the session's last turn (server clock)


@dataclasses.dataclass(frozen=True)
class ProviderSessions:
    """One provider's line of the report."""

    provider: str
    sessions: int
    last_turn: float | None
    rehomed: int

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"provider": self.provider, "sessions": self.sessions, "rehomed": self.rehomed}
        if self.last_turn is not None:
            out["lastTurn"] = rfc3339_ms(self.last_turn)
        return out


class SessionBook:
    def __init__(self, *, max_sessions: int = DEFAULT_MAX_SESSIONS, ttl: float = DEFAULT_SESSION_TTL) -> None:
        self.max_sessions = max_sessions
        self.ttl = ttl
        self._sessions: OrderedDict[str, _Sticky] = OrderedDict()  # least recently used first
        self._count: dict[str, int] = {}
        self._last_turn: dict[str, float] = {}
        self._rehomed: dict[str, int] = {}
        self.expired = 0  # sessions forgotten after ttl idle
        self.evicted = 0  # sessions forgotten at the cap

    def __len__(self) -> int:
        return len(self._sessions)

    def provider_of(self, session: str, *, now: float) -> str | None:
        """The provider ``session`` is bound to (None: unknown, or idle past the ttl: then forgotten)."""
        sticky = self._sessions.get(session)
        if sticky is None:
            return None
        if now - sticky.last > self.ttl:
            self._forget(session)
            self.expired += 1
            return None
        return sticky.provider

    def turn(self, session: str | None, provider: str, *, now: float, rehomed_from: str | None = None) -> None:
        """Record a turn routed to ``provider`` (bind ``session`` to it); ``rehomed_from``: the
        provider the session was moved away from."""
        self._last_turn[provider] = now
        if rehomed_from is not None and rehomed_from != provider:
            self._rehomed[rehomed_from] = self._rehomed.get(rehomed_from, 0) + 1
        if session is None:
            return
        sticky = self._sessions.get(session)
        if sticky is None:
            self._sessions[session] = _Sticky(provider, now)
            self._count[provider] = self._count.get(provider, 0) + 1
            while len(self._sessions) > self.max_sessions:
                self._forget(next(iter(self._sessions)))
                self.evicted += 1
            return
        if sticky.provider != provider:
            self._uncount(sticky.provider)
            self._count[provider] = self._count.get(provider, 0) + 1
            sticky.provider = provider
        sticky.last = now
        self._sessions.move_to_end(session)

    def expire(self, *, now: float) -> None:
        """Forget every session idle longer than the ttl (the oldest are first in line)."""
        while self._sessions:
            session, sticky = next(iter(self._sessions.items()))
            if now - sticky.last <= self.ttl:
                return
            self._forget(session)
            self.expired += 1

    def keep_providers(self, providers: Collection[str], *, now: float) -> None:
        """After an overlay swap: forget the entries of providers not in ``providers`` that have no
        session and no turn within the ttl."""
        for name in [p for p in self._last_turn.keys() | self._rehomed.keys() if p not in providers]:
            if self._count.get(name, 0) == 0 and now - self._last_turn.get(name, -math.inf) > self.ttl:
                self._last_turn.pop(name, None)
                self._rehomed.pop(name, None)

    def affinities(self) -> dict[str, str]:
        return {s: sticky.provider for s, sticky in self._sessions.items()}

    def lines(self, *, skip: Collection[str] = ()) -> list[ProviderSessions]:
        """Every provider with a session, a turn or a rehomed session, but those in ``skip``: most
        sessions first, then the latest turn, then by name."""
        names = (self._count.keys() | self._last_turn.keys() | self._rehomed.keys()) - set(skip)
        out = [
            ProviderSessions(p, self._count.get(p, 0), self._last_turn.get(p), self._rehomed.get(p, 0)) for p in names
        ]
        out.sort(key=lambda r: (-r.sessions, -(r.last_turn or 0.0), r.provider))
        return out

    def _forget(self, session: str) -> None:
        sticky = self._sessions.pop(session)
        self._uncount(sticky.provider)

    def _uncount(self, provider: str) -> None:
        left = self._count.get(provider, 0) - 1
        if left > 0:
            self._count[provider] = left
        else:
            self._count.pop(provider, None)


def report_of(
    lines: list[ProviderSessions],
    *,
    revision: int | None,
    since: float,
    interval: float,
    ttl: float,
    limit: int = MAX_REPORTED,
) -> dict[str, Any]:
    """``status.sessions``: the providers that are not admitted in the served overlay (``lines``)."""
    out: dict[str, Any] = {
        "revision": revision,
        "since": rfc3339_ms(since),
        "intervalSeconds": interval,
        "ttlSeconds": ttl,
        "providers": [line.to_dict() for line in lines[:limit]],
    }
    if len(lines) > limit:
        out["omitted"] = len(lines) - limit
    return out


def report_loop(
    report: Callable[[], dict[str, Any] | None],
    submit: Callable[[dict[str, Any]], object],
    *,
    interval: float,
    stop: threading.Event,
) -> Iterator[dict[str, Any]]:
    """Every ``interval`` seconds until ``stop``: submit ``{"sessions": report()}`` when it differs
    from the last one submitted (None: nothing to report yet). Yields each report it submits
    (a generator, so a test can step it; :func:`run_reports` drives it in a thread)."""
    last: dict[str, Any] | None = None
    while not stop.wait(interval):
        now = report()
        if now is not None and now != last:
            submit({"sessions": now})
            last = now
            yield now


def run_reports(
    report: Callable[[], dict[str, Any] | None],
    submit: Callable[[dict[str, Any]], object],
    *,
    interval: float,
    stop: threading.Event,
) -> None:
    """Thread target: :func:`report_loop` until ``stop``."""
    for _ in report_loop(report, submit, interval=interval, stop=stop):
        pass
