"""Leader election over a ``coordination.k8s.io/v1`` Lease: only the leader writes.

Two operators can run at once (a Deployment's rolling update starts the new pod before the
old one stops); both keep their caches warm, only the holder of the Lease writes provider
status and overlays.

The rules (pure functions below, clocks passed in):

- A lease is **free** when nobody holds it (``holderIdentity`` empty), and **expired** when
  its record has not changed for ``leaseDurationSeconds`` *as measured by the observer's own
  monotonic clock* from the moment it first saw that record — the holder's wall-clock
  ``renewTime`` is never compared with ours, so clock skew between machines does not matter.
- A candidate takes a free or expired lease, and the holder renews it, with an update made
  conditional on the resourceVersion it read: a 409 means someone else won.
- The holder counts as leader only until ``renew_deadline`` (two thirds of the duration)
  after the start of its last successful renew. A holder that cannot renew therefore stops
  writing a third of the duration *before* any other process may consider the lease expired.
- On a clean stop the holder releases the lease (empty holder), so a successor takes it at
  its next poll instead of waiting for expiry.

:class:`LeaderElector` runs the loop on a thread over :class:`agn.kube.Kube`.
"""
from __future__ import annotations

import dataclasses
import enum
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from agn.kube import LEASES, Conflict, Kube, KubeError, NotFound
from agn.logs import JsonLog
from agn.objects import rfc3339

Obj = Mapping[str, Any]
DEFAULT_LEASE_NAME = "agn-operator"


# -- timings -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LeaseTimings:
    """``duration`` (whole seconds, as the Lease stores it), how often the leader renews, how often
    a follower looks (and a failed renew is retried)."""

    duration: int = 15
    renew_interval: float = 5.0
    retry_period: float = 1.0

    @property
    def renew_deadline(self) -> float:
        """How long after its last successful renew the holder still counts as leader."""
        return self.duration * 2.0 / 3.0

    @property
    def request_timeout(self) -> float:
        """Bound on one lease request, so a dead connection cannot stall the loop past the deadline."""
        return max(1.0, self.renew_deadline / 3.0)

    def problems(self) -> list[str]:
        out = []
        if self.duration < 1:
            out.append("lease duration must be at least 1 second")
        if not 0 < self.renew_interval < self.renew_deadline:
            out.append(f"renew interval must be > 0 and < two thirds of the lease duration ({self.renew_deadline:g}s)")
        if not 0 < self.retry_period <= self.renew_interval:
            out.append("retry period must be > 0 and <= the renew interval")
        return out


# -- the pure part -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    holder: str  # "" when free
    duration: int
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0
    resource_version: str | None = None

    @property
    def key(self) -> tuple:
        """What identifies one version of the record (a renew changes ``renew_time``)."""
        return (self.holder, self.duration, self.acquire_time, self.renew_time, self.transitions)


def record_of(lease: Obj) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity") or "", duration=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"), renew_time=spec.get("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=(lease.get("metadata") or {}).get("resourceVersion"),
    )


@dataclasses.dataclass(frozen=True)
class Observation:
    """A lease record and when (our monotonic clock) we first saw it in this form."""

    record: LeaseRecord
    since: float


def observe(previous: Observation | None, record: LeaseRecord | None, now: float) -> Observation | None:
    """The observation after reading ``record`` at ``now``: an unchanged record keeps its ``since``."""
    if record is None:
        return None
    if previous is not None and previous.record.key == record.key:
        return dataclasses.replace(previous, record=record)  # a newer resourceVersion, same content
    return Observation(record, now)


def expired(observation: Observation, now: float) -> bool:
    """Free, or unchanged for its whole duration on our clock."""
    record = observation.record
    return not record.holder or now >= observation.since + record.duration


class Step(enum.Enum):
    CREATE = "create"  # no lease yet
    ACQUIRE = "acquire"  # free or expired: take it
    RENEW = "renew"  # ours: renew it
    WAIT = "wait"  # someone else holds it


def decide(observation: Observation | None, *, me: str, now: float) -> Step:
    if observation is None:
        return Step.CREATE
    if observation.record.holder == me:
        return Step.RENEW
    return Step.ACQUIRE if expired(observation, now) else Step.WAIT


def leading(*, renewed_at: float | None, now: float, renew_deadline: float) -> bool:
    """Whether a holder whose last successful renew started at ``renewed_at`` may still write."""
    return renewed_at is not None and now < renewed_at + renew_deadline


def lease_spec(previous: LeaseRecord | None, step: Step, *, me: str, duration: int, wall: float) -> dict[str, Any]:
    """The Lease spec to write for ``step`` (CREATE, ACQUIRE or RENEW)."""
    now = rfc3339(wall)
    transitions = previous.transitions if previous is not None else 0
    if step is Step.RENEW and previous is not None:
        acquired = previous.acquire_time or now
    else:
        acquired = now
        if previous is not None and previous.holder != me:
            transitions += 1
    return {"holderIdentity": me, "leaseDurationSeconds": duration, "acquireTime": acquired, "renewTime": now,
            "leaseTransitions": transitions}


def released_spec(previous: LeaseRecord, *, wall: float) -> dict[str, Any]:
    """The spec that gives the lease up: no holder, so the next candidate takes it at once."""
    return {"holderIdentity": None, "leaseDurationSeconds": 1, "acquireTime": previous.acquire_time,
            "renewTime": rfc3339(wall), "leaseTransitions": previous.transitions}


def new_identity() -> str:
    """Unique per process: the host (the pod's name in a pod), the pid and a random part."""
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


# -- leadership as the rest of the operator sees it ---------------------------------------------
class Leadership(Protocol):
    identity: str

    def is_leader(self) -> bool: ...

    def term(self) -> int:
        """Increases each time leadership is gained (0 before the first time)."""
        ...

    def status(self) -> dict[str, Any]: ...


class AlwaysLeader:
    """``--no-leader-elect``: one operator that always writes."""

    def __init__(self, identity: str) -> None:
        self.identity = identity

    def is_leader(self) -> bool:
        return True

    def term(self) -> int:
        return 1

    def status(self) -> dict[str, Any]:
        return {"leader": True, "identity": self.identity, "holder": self.identity, "election": False}


class LeaderElector:
    """Runs the lease loop on a daemon thread (``start``); ``release`` on a clean stop."""

    def __init__(
        self, kube: Kube, namespace: str, *, name: str = DEFAULT_LEASE_NAME, identity: str, timings: LeaseTimings,
        log: JsonLog, stop: threading.Event, clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings
        self._log = log
        self._stop = stop
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._observed: Observation | None = None
        self._renewed_at: float | None = None
        self._was_leading = False
        self._term = 0
        self._released = False
        self._timeout = timings.request_timeout
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    # -- what the operator asks ------------------------------------------------------------
    def is_leader(self) -> bool:
        with self._lock:
            return not self._released and leading(renewed_at=self._renewed_at, now=self._clock(),
                                                  renew_deadline=self.timings.renew_deadline)

    def term(self) -> int:
        with self._lock:
            return self._term

    def status(self) -> dict[str, Any]:
        with self._lock:
            holder = self._observed.record.holder if self._observed is not None else None
        return {"leader": self.is_leader(), "identity": self.identity, "holder": holder or None, "election": True,
                "lease": f"{self.namespace}/{self.name}", "term": self.term()}

    # -- the loop --------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            try:
                delay = self.step()
            except Exception as exc:  # noqa: BLE001 - the election thread must not die
                self._log.error("leader election step failed unexpectedly", error=repr(exc))
                delay = self.timings.retry_period

    def step(self) -> float:
        """One round: read the lease, then take, renew or wait. Returns the seconds until the next round."""
        retry = self.timings.retry_period
        with self._lock:
            if self._released:
                return retry  # given up for good: never take the lease again
        try:
            lease: Obj | None = self.kube.get(LEASES, self.namespace, self.name, timeout=self._timeout)
        except NotFound:
            lease = None
        except KubeError as exc:
            self._log.warning("cannot read the lease", lease=self.name, error=str(exc), status=exc.status)
            self._note_leadership()
            return retry
        now = self._clock()
        record = record_of(lease) if lease is not None else None
        with self._lock:
            self._observed = observe(self._observed, record, now)
            observation = self._observed
            if record is not None and record.holder != self.identity:
                self._renewed_at = None  # someone else holds it: we are not leading, whatever we thought
        step = decide(observation, me=self.identity, now=now)
        if step is Step.WAIT:
            self._note_leadership()
            # Look again at the retry period, or right when the lease would expire.
            return max(0.0, min(retry, observation.since + observation.record.duration - now)) if observation else retry
        spec = lease_spec(record, step, me=self.identity, duration=self.timings.duration, wall=self._wall())
        started = self._clock()  # before the request: the holder's deadline counts from here
        try:
            if step is Step.CREATE:
                written = self.kube.create(LEASES, self.namespace, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": self.name},
                    "spec": spec}, timeout=self._timeout)
            else:
                written = self.kube.replace(LEASES, self.namespace, self.name, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "resourceVersion": record.resource_version if record else None},
                    "spec": spec}, timeout=self._timeout)
        except Conflict:
            self._log.debug("lease changed under us", lease=self.name, step=step.value)
            self._note_leadership()
            return 0.0 if step is Step.RENEW else retry  # a renew that lost a race re-reads at once
        except KubeError as exc:
            self._log.warning("lease write failed", lease=self.name, step=step.value, error=str(exc),
                              status=exc.status)
            self._note_leadership()
            return retry
        with self._lock:
            self._observed = observe(None, record_of(written), started)
            if self._released:
                return self.timings.renew_interval
            # A new term unless we led without a gap up to now: the controller restarts its work
            # (and forgets the last term's memory) on every term, even after a brief lapse.
            new_term = not leading(renewed_at=self._renewed_at, now=self._clock(),
                                   renew_deadline=self.timings.renew_deadline)
            self._renewed_at = started
            if new_term:
                self._term += 1
            term = self._term
        if new_term:
            self._log.info("became leader", lease=self.name, identity=self.identity, term=term,
                           transitions=record_of(written).transitions)
        self._note_leadership()
        return self.timings.renew_interval

    def _note_leadership(self) -> None:
        """Log when leading ends (the deadline passed, another holder, or a release)."""
        now_leading = self.is_leader()
        with self._lock:
            was, self._was_leading = self._was_leading, now_leading
            holder = self._observed.record.holder if self._observed is not None else None
        if was and not now_leading:
            self._log.warning("lost leadership; writes stop", lease=self.name, identity=self.identity,
                              holder=holder or None)

    def release(self) -> None:
        """Stop leading now and give the lease up if we hold it (a clean stop). Never raises."""
        with self._lock:
            was = leading(renewed_at=self._renewed_at, now=self._clock(), renew_deadline=self.timings.renew_deadline)
            self._released = True
            self._renewed_at = None
        if not was:
            return
        try:
            lease = self.kube.get(LEASES, self.namespace, self.name, timeout=self._timeout)
            record = record_of(lease)
            if record.holder != self.identity:
                return
            self.kube.replace(LEASES, self.namespace, self.name, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "resourceVersion": record.resource_version},
                "spec": released_spec(record, wall=self._wall())}, timeout=self._timeout)
            self._log.info("lease released", lease=self.name, identity=self.identity)
        except KubeError as exc:
            self._log.warning("could not release the lease; a successor waits for it to expire", lease=self.name,
                              error=str(exc), status=exc.status)
