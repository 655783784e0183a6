"""The drain lock of a network: a ``coordination.k8s.io/v1`` Lease that orders every drain's
check-and-write on the network's providers, so two runs cannot together exceed its budget.

The protocol, as client-go's leader election judges a Lease (the records and the spec come from
:mod:`agn.operator.lease`):

- The Lease is ``agn-drain-<network>`` (:func:`lock_name`) in the providers' namespace; its
  ``holderIdentity`` names the run (:func:`run_identity`: user@host, pid, operation id) and
  ``leaseDurationSeconds`` is the TTL.
- A run takes the lock by creating the Lease (409: another run created it first) or, when the
  Lease is free (no holder) or expired, by replacing it on the resourceVersion it read (409:
  another run won the race). Either way it looks again.
- **Expired** is judged on *this* process's monotonic clock: the Lease has shown the same
  resourceVersion for its whole ``leaseDurationSeconds`` since this process first saw it
  (:func:`see`, :func:`step`). The holder's ``renewTime`` is never compared with our clock, so
  clock skew between machines does not matter; a holder that is alive renews (a new
  resourceVersion) every TTL/3 (:data:`RENEW_FRACTION`).
- The holder counts the lock as held only until two thirds of the TTL after the start of its
  last successful renewal (:func:`still_held`); past that it stops writing (restoring, as on an
  interruption), a third of the TTL before any other process may judge the lock expired.
- Released by deleting the Lease on its resourceVersion (a precondition), so the next run takes
  it at once; a run killed with SIGKILL leaves it to expire.

Pure: records and clocks in, decisions out; :mod:`xtask.drain.edges.lock` does the requests.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from typing import Any

from agn.objects import Obj
from agn.operator.lease import LeaseRecord, Step, lease_spec
from xtask.record import Record

LOCK_PREFIX = "agn-drain-"
DEFAULT_TTL = 15  # seconds: leaseDurationSeconds
RENEW_FRACTION = 1 / 3  # the holder renews every TTL/3
HELD_FRACTION = 2 / 3  # ... and holds the lock until 2/3 of the TTL after its last renewal began
POLL_SECONDS = 1.0  # a waiting run looks at the Lease this often
_NAME_LIMIT = 253


def lock_name(network: str) -> str:
    """The Lease of ``network``'s drain lock: ``agn-drain-<network>``; a name too long for an
    object name keeps its start and ends in a hash of the whole network name."""
    name = LOCK_PREFIX + network
    if len(name) <= _NAME_LIMIT:
        return name
    digest = hashlib.sha256(network.encode()).hexdigest()[:8]
    return f"{name[: _NAME_LIMIT - 9].rstrip('-.')}-{digest}"


def run_identity(*, actor: str, pid: int, operation: str) -> str:
    """The ``holderIdentity`` of a run: who, where, which process and which operation."""
    return f"{actor} pid {pid} operation {operation}"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Seen(Record):
    """A Lease as this process saw it, and since when (monotonic) its resourceVersion is unchanged."""

    record: LeaseRecord
    since: float


def see(previous: Seen | None, record: LeaseRecord | None, now: float) -> Seen | None:
    """The observation after reading ``record`` (None: no Lease) at ``now``."""
    if record is None:
        return None
    if previous is not None and previous.record.resource_version == record.resource_version:
        return previous
    return Seen(record, now)


class LockStep(enum.StrEnum):
    CREATE = "create"  # no Lease: create it
    TAKE = "take"  # free, expired or ours: replace it on its resourceVersion
    WAIT = "wait"  # another run holds it


def step(seen: Seen | None, *, me: str, now: float) -> LockStep:
    if seen is None:
        return LockStep.CREATE
    record = seen.record
    if not record.holder or record.holder == me or expired(seen, now):
        return LockStep.TAKE
    return LockStep.WAIT


def expired(seen: Seen, now: float) -> bool:
    """Unchanged on our clock for its whole duration (a duration below 1 s counts as 1 s)."""
    return now >= seen.since + max(seen.record.duration, 1)


def next_look(seen: Seen | None, now: float) -> float:
    """Seconds until a waiting run looks again: the poll, or right when the Lease would expire."""
    if seen is None:
        return 0.0
    return max(0.0, min(POLL_SECONDS, seen.since + max(seen.record.duration, 1) - now))


def take_spec(previous: LeaseRecord | None, *, me: str, ttl: int, wall: float) -> dict[str, Any]:
    """The Lease spec that takes the lock (a new ``acquireTime``; one more transition over a holder)."""
    return lease_spec(previous, Step.CREATE if previous is None else Step.ACQUIRE, me=me, duration=ttl, wall=wall)


def renew_spec(previous: LeaseRecord, *, me: str, ttl: int, wall: float) -> dict[str, Any]:
    return lease_spec(previous, Step.RENEW, me=me, duration=ttl, wall=wall)


def lease_body(name: str, spec: dict[str, Any], resource_version: str | None = None) -> Obj:
    metadata: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "agn-xtask"}}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}


def still_held(*, renewed_at: float, now: float, ttl: int) -> bool:
    """Whether a holder whose last successful renewal began at ``renewed_at`` may still write."""
    return now < renewed_at + ttl * HELD_FRACTION


def renew_every(ttl: int) -> float:
    return ttl * RENEW_FRACTION


def timeout_message(network: str, holder: str, waited: float, timeout: float) -> str:
    return (
        f"the drain lock of network {network} (Lease {lock_name(network)}) is held by {holder or 'nobody known'}; "
        f"waited {waited:.0f}s of --lock-timeout {timeout:g}s"
    )
