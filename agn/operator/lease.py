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

Pure: no I/O, every clock passed in. :class:`agn.operator.elector.LeaderElector` runs the
loop over :class:`agn.kube.Kube`.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import socket
import uuid
from typing import Any, Protocol

from agn.objects import Obj, rfc3339

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


# -- records and rules -------------------------------------------------------------------------
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
        holder=spec.get("holderIdentity") or "",
        duration=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
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
    return {
        "holderIdentity": me,
        "leaseDurationSeconds": duration,
        "acquireTime": acquired,
        "renewTime": now,
        "leaseTransitions": transitions,
    }


def released_spec(previous: LeaseRecord, *, wall: float) -> dict[str, Any]:
    """The spec that gives the lease up: no holder, so the next candidate takes it at once."""
    return {
        "holderIdentity": None,
        "leaseDurationSeconds": 1,
        "acquireTime": previous.acquire_time,
        "renewTime": rfc3339(wall),
        "leaseTransitions": previous.transitions,
    }


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
