"""Expired drain holds: one ``HoldExpired`` Warning Event per expired hold, and a gauge.

A drain hold (:mod:`agn.holds`) may carry ``expiresAt``. An expired hold still holds its
provider drained (only its owner, or a releaser with ``--release-all``, removes it); the
operator only says so, once: a Warning Event ``HoldExpired`` on the provider, naming the hold's
owner, holder and ticket.

Expiry is judged on the API server's clock, as the hold's times were written: every
:data:`CLOCK_REFRESH_SECONDS` the operator asks the server (a ``SelfSubjectReview``; its
``Date`` header) and keeps the offset to its own clock (:class:`agn.serverclock.ServerClock`).

*Once*, also across restarts and leader changes: the Event's name is derived from the
provider's uid, the hold's key and its ``expiresAt`` (:func:`expiry_event_name`), so a second
create of the same fact, by this process or by a restarted or new leader, is answered 409 by
the API server and only remembered. A hold renewed with a new ``expiresAt`` is a new fact.
Only the leader writes (:class:`.writes.LeaderWrites`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from agn.events import WARNING, Regarding, Reporter, event_body, event_name
from agn.holds import expired_holds
from agn.kube import Conflict, Kube, KubeError
from agn.logs import JsonLog
from agn.operator.writes import LeaderWrites, NotLeader
from agn.serverclock import ServerClock

HOLD_EXPIRED = "HoldExpired"
CONTROLLER = "agn.dev/operator"
CHECK_SECONDS = 1.0  # how often the providers' holds are looked at
REQUEST_TIMEOUT = 5.0


def expiry_event_name(provider: str, uid: str, key: str, expires_at: str) -> str:
    """The Event's name: the same for the same expired hold, whoever records it."""
    digest = hashlib.sha256(f"{uid}|{key}|{expires_at}".encode()).hexdigest()[:16]
    return event_name(provider, "hold-expired", digest)


def expiry_note(hold: Mapping[str, Any]) -> str:
    owner = hold["owner"] or "unknown (written before holds had owners)"
    return (
        f"drain hold {hold['key']} expired at {hold['expiresAt']}: owner {owner}, holder {hold['holder']}, "
        f"ticket {hold['ticket'] or '-'}; it still holds the provider drained until its owner removes it "
        "(or a user allowed release-holds runs provider-drain --undrain --release-all)"
    )


class HoldExpiry:
    """Looks at every provider's holds each :data:`CHECK_SECONDS` from its own thread."""

    def __init__(
        self,
        kube: Kube,
        writes: LeaderWrites,
        *,
        providers: Callable[[], list],
        instance: str,
        log: JsonLog,
        stop: threading.Event,
    ) -> None:
        self._writes = writes
        self._providers = providers
        self._instance = instance
        self._log = log
        self._stop = stop
        self.clock = ServerClock(kube)
        self._reported: set[tuple[str, str, str]] = set()  # (uid, key, expiresAt)
        self._thread = threading.Thread(target=self._run, name="hold-expiry", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def expired_count(self) -> int:
        """Expired holds on the providers now (the gauge; 0 until the server's clock was read)."""
        now = self.clock.known_now()
        if now is None:
            return 0
        at = dt.datetime.fromtimestamp(now, dt.UTC)
        return sum(len(expired_holds(p, at)) for p in self._providers())

    def _run(self) -> None:
        while not self._stop.wait(CHECK_SECONDS):
            try:
                self.check()
            except KubeError as exc:
                self._log.warning("hold expiry not checked", error=str(exc))

    def check(self) -> int:
        """One pass: record each expired hold not recorded yet. Returns the Events created."""
        at = dt.datetime.fromtimestamp(self.clock.now(), dt.UTC)
        created = 0
        for provider in self._providers():
            meta = provider.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            for hold in expired_holds(provider, at):
                fact = (uid, hold["key"], hold["expiresAt"])
                if fact not in self._reported and self._record(provider, hold, fact):
                    created += 1
        return created

    def _record(self, provider: Mapping[str, Any], hold: Mapping[str, Any], fact: tuple[str, str, str]) -> bool:
        regarding = dataclasses.replace(Regarding.of(provider), kind="InferenceProvider")
        body = event_body(
            name=expiry_event_name(regarding.name, *fact),
            regarding=regarding,
            reason=HOLD_EXPIRED,
            action="Expire",
            note=expiry_note(hold),
            type_=WARNING,
            reporter=Reporter(CONTROLLER, self._instance),
            at=time.time(),
        )
        try:
            self._writes.create_event(regarding.namespace, body, timeout=REQUEST_TIMEOUT)
        except NotLeader:
            return False  # the leader records it
        except Conflict:
            self._reported.add(fact)  # recorded before (an earlier process or term)
            self._log.info("hold expiry already recorded", provider=regarding.name, key=hold["key"])
            return False
        except KubeError as exc:
            self._log.warning("hold expiry not recorded", provider=regarding.name, key=hold["key"], error=str(exc))
            return False
        self._reported.add(fact)
        self._log.info("hold expired", provider=regarding.name, key=hold["key"], owner=hold["owner"])
        return True
