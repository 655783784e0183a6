"""The drain locks of one run: the Leases of :mod:`xtask.drain.core.lock` taken, renewed and
released through :class:`agn.kube.Kube`. Decides nothing the core decides: it reads the Lease,
asks :func:`~xtask.drain.core.lock.step`, and writes.

:class:`DrainLocks` takes the locks of every network a run touches in sorted order (a run that
cannot have them all by the deadline gives back those it took), renews them on one daemon thread
every TTL/3 while held, calls ``on_lost`` once when a renewal fails so the lock may be lost (the
run then stops writing and restores, as on a signal), and releases them (a delete on the
resourceVersion last written) when the writes are done. Every request is bounded by a timeout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from agn.kube import LEASES, Conflict, Kube, KubeError, NotFound
from agn.objects import Obj
from agn.operator.lease import LeaseRecord, record_of
from xtask.drain.core.lock import (
    LockStep,
    Seen,
    lease_body,
    lock_name,
    next_look,
    renew_every,
    renew_spec,
    see,
    step,
    still_held,
    take_spec,
    timeout_message,
)
from xtask.drain.core.progress import Progress
from xtask.record import Record

REQUEST_TIMEOUT = 3.0  # seconds per Lease request (below a third of the default TTL)
RETRY_SECONDS = 1.0  # a failed renewal is retried this soon
WAIT_NOTICE_SECONDS = 5.0  # a waiting run says so again this often


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Acquired(Record):
    """One lock taken: when (the ``acquireTime`` written), after how long, and from whom."""

    network: str
    lease: str
    acquired_at: str
    waited_seconds: float
    previous_holder: str | None  # the holder of the Lease taken over (None: created, or released)
    previous_renew_time: str | None  # that holder's last renewTime, as the Lease recorded it

    def to_dict(self) -> dict[str, Any]:
        return {
            "network": self.network,
            "lease": self.lease,
            "acquiredAt": self.acquired_at,
            "waitedSeconds": round(self.waited_seconds, 3),
            "previousHolder": self.previous_holder,
            "previousRenewTime": self.previous_renew_time,
        }


class _Lock:
    """One network's lock: the last Lease seen, and ours once taken."""

    def __init__(self, kube: Kube, namespace: str, network: str, *, identity: str, ttl: int) -> None:
        self.kube, self.namespace, self.network = kube, namespace, network
        self.name = lock_name(network)
        self.identity, self.ttl = identity, ttl
        self.seen: Seen | None = None
        self.ours: LeaseRecord | None = None
        self.uid = ""  # of the Lease we took: one re-created under the same name is not ours
        self.renewed_at = 0.0

    def look(self, now: float) -> LockStep:
        try:
            lease: Obj | None = self.kube.get(LEASES, self.namespace, self.name, timeout=REQUEST_TIMEOUT)
        except NotFound:
            lease = None
        self.seen = see(self.seen, record_of(lease) if lease is not None else None, now)
        return step(self.seen, me=self.identity, now=now)

    def take(self, how: LockStep, *, started: float, wall: float) -> bool:
        """Create or replace the Lease (on the resourceVersion seen); False: another run won."""
        previous = self.seen.record if self.seen is not None else None
        spec = take_spec(previous, me=self.identity, ttl=self.ttl, wall=wall)
        try:
            if how is LockStep.CREATE:
                written = self.kube.create(LEASES, self.namespace, lease_body(self.name, spec), timeout=REQUEST_TIMEOUT)
            else:
                assert previous is not None
                body = lease_body(self.name, spec, previous.resource_version)
                written = self.kube.replace(LEASES, self.namespace, self.name, body, timeout=REQUEST_TIMEOUT)
                if written is None:  # 201: it was deleted since we looked, and this update created it
                    written = self.kube.get(LEASES, self.namespace, self.name, timeout=REQUEST_TIMEOUT)
        except (Conflict, NotFound):
            return False
        self.ours, self.renewed_at = record_of(written), started
        self.uid = str(written.get("metadata", {}).get("uid") or "")
        return True

    def renew(self, *, started: float, wall: float) -> None:
        """Renew on the resourceVersion we wrote; raises Conflict/NotFound when it is not ours any more."""
        assert self.ours is not None
        spec = renew_spec(self.ours, me=self.identity, ttl=self.ttl, wall=wall)
        body = lease_body(self.name, spec, self.ours.resource_version)
        written = self.kube.replace(LEASES, self.namespace, self.name, body, timeout=REQUEST_TIMEOUT)
        if written is None or str(written.get("metadata", {}).get("uid") or "") != self.uid:
            # An update may create a Lease (the client reads that 201 as no body): ours was
            # deleted, so another run may have held the lock in between. Not ours to go on with;
            # the one this renewal created is released with the run's locks.
            with contextlib.suppress(KubeError):
                self.ours = record_of(self.kube.get(LEASES, self.namespace, self.name, timeout=REQUEST_TIMEOUT))
            raise NotFound(f"the drain lock {self.name} was deleted while this run held it", status=404)
        self.ours, self.renewed_at = record_of(written), started

    def release(self) -> str | None:
        """Delete the Lease if it is still ours as we wrote it; a problem as text (None: released)."""
        ours, self.ours = self.ours, None
        if ours is None:
            return None
        try:
            self.kube.delete(
                LEASES, self.namespace, self.name, resource_version=ours.resource_version, timeout=REQUEST_TIMEOUT
            )
        except (Conflict, NotFound):
            return None  # taken over or gone: nothing of ours is left
        except KubeError as exc:
            return f"could not release the drain lock {self.name} (it expires after {self.ttl}s): {exc}"
        return None


class DrainLocks:
    """The drain locks of one run (one per network, taken in sorted order)."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        *,
        identity: str,
        ttl: int,
        progress: Progress,
        on_lost: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube, self.namespace, self.identity, self.ttl = kube, namespace, identity, ttl
        self._progress, self._on_lost, self._clock = progress, on_lost, clock
        self._held: list[_Lock] = []
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.lost: str | None = None  # why a held lock may be lost

    @property
    def held(self) -> list[str]:
        return [lock.network for lock in self._held]

    def acquire(self, networks: Sequence[str], *, timeout: float, stop: threading.Event) -> list[Acquired] | str:
        """Take every network's lock (sorted) within ``timeout`` seconds; the locks taken, or why
        not (the holder named; "" when ``stop`` was set). Starts the renewer."""
        deadline = self._clock() + timeout
        taken: list[Acquired] = []
        for network in sorted(set(networks)):
            got = self._take_one(network, deadline=deadline, timeout=timeout, stop=stop)
            if isinstance(got, str):
                self.release()
                return got
            taken.append(got)
        self.lost = None
        self._start_renewer()
        return taken

    def _take_one(self, network: str, *, deadline: float, timeout: float, stop: threading.Event) -> Acquired | str:
        lock = _Lock(self.kube, self.namespace, network, identity=self.identity, ttl=self.ttl)
        began = self._clock()
        told: tuple[str, float] | None = None
        first = True
        while True:
            now = self._clock()
            # The usual case first: no Lease (a run deletes its own), so create it without a look;
            # a 409 means one is there, and the loop looks at it as it always does.
            how = LockStep.CREATE if first else lock.look(now)
            first = False
            if how is not LockStep.WAIT:
                previous = lock.seen.record if lock.seen is not None else None
                if lock.take(how, started=now, wall=time.time()):
                    assert lock.ours is not None
                    with self._mutex:
                        self._held.append(lock)
                    holder = previous.holder if previous is not None and previous.holder else None
                    return Acquired(
                        network,
                        lock.name,
                        lock.ours.acquire_time or "",
                        now - began,
                        holder,
                        previous.renew_time if previous is not None and holder else None,
                    )
                continue  # lost the race: look again at once
            assert lock.seen is not None
            holder = lock.seen.record.holder
            if now >= deadline:
                return timeout_message(network, holder, now - began, timeout)
            if told is None or told[0] != holder or now - told[1] >= WAIT_NOTICE_SECONDS:
                from xtask.drain.core.progress_phases import LockWaiting  # only a run kept waiting says it

                self._progress(LockWaiting(network, lock.name, holder, round(now - began, 1), timeout))
                told = (holder, now)
            if stop.wait(min(next_look(lock.seen, now), max(0.0, deadline - now))):
                return ""

    # -- renewing ----------------------------------------------------------------------------------
    def _start_renewer(self) -> None:
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew_loop, name="drain-lock", daemon=True)
        self._renewer.start()

    def _renew_loop(self) -> None:
        delay = renew_every(self.ttl)
        while not self._stop.wait(delay):
            delay = renew_every(self.ttl)
            with self._mutex:
                locks = list(self._held)
            for lock in locks:
                started = self._clock()
                try:
                    lock.renew(started=started, wall=time.time())
                except (Conflict, NotFound):
                    return self._lose(f"the drain lock {lock.name} was taken over or removed")
                except KubeError as exc:
                    if not still_held(renewed_at=lock.renewed_at, now=self._clock(), ttl=self.ttl):
                        return self._lose(f"the drain lock {lock.name} could not be renewed in time: {exc}")
                    delay = RETRY_SECONDS
                except Exception as exc:  # a renewer that dies quietly would leave the run writing unlocked
                    return self._lose(f"the drain lock {lock.name} could not be renewed: {exc!r}")
        return None

    def _lose(self, why: str) -> None:
        self.lost = why
        self._on_lost(why)

    def release(self) -> list[str]:
        """Stop renewing and delete every lock still ours (in reverse order); the problems, if any."""
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join(timeout=REQUEST_TIMEOUT + 1)
        self._renewer = None
        with self._mutex:
            locks, self._held = list(reversed(self._held)), []
        return [p for p in (lock.release() for lock in locks) if p]


def look_at_locks(kube: Kube, namespace: str, networks: Sequence[str]) -> list[dict[str, Any]]:
    """What a dry run or ``--plan-out`` reports of the drain locks a real run would take: each
    network's Lease as it is now (one read each, nothing taken). A Lease left by a run that
    released it has no holder; whether a held one has expired is judged by a waiting run's own
    clock, so this only says who holds it, since when and for how long."""
    seen = []
    for network in sorted(networks):
        name = lock_name(network)
        try:
            record: LeaseRecord | None = record_of(kube.get(LEASES, namespace, name, timeout=REQUEST_TIMEOUT))
        except NotFound:
            record = None
        seen.append(
            {
                "network": network,
                "lease": name,
                "holder": (record.holder or None) if record else None,
                "renewTime": record.renew_time if record else None,
                "leaseDurationSeconds": record.duration if record else None,
            }
        )
    return seen
