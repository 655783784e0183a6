"""The leader-election loop: one daemon thread that reads the Lease and takes, renews or waits.

The rules are :mod:`agn.operator.lease` (pure); this module only does the API calls (each
bounded by a request timeout, so a dead connection cannot hold the loop past the renew
deadline) and keeps the state the operator asks about: ``is_leader`` (time-based, so writes
stop at the deadline even if this thread is stuck), ``term`` and ``status``. A clean stop
calls ``release``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from agn.kube import LEASES, Conflict, Kube, KubeError, NotFound
from agn.logs import JsonLog
from agn.objects import Obj
from agn.operator.lease import (
    DEFAULT_LEASE_NAME,
    LeaseTimings,
    Observation,
    Step,
    decide,
    leading,
    lease_spec,
    observe,
    record_of,
    released_spec,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Clocks:
    """The elector's two clocks (tests pass fakes): ``monotonic`` times renewals and the renew
    deadline; ``wall`` is what the Lease records (``acquireTime``, ``renewTime``)."""

    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time


class LeaderElector:
    """Runs the lease loop on a daemon thread (``start``); ``release`` on a clean stop."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        *,
        name: str = DEFAULT_LEASE_NAME,
        identity: str,
        timings: LeaseTimings,
        log: JsonLog,
        stop: threading.Event,
        clocks: Clocks = Clocks(),
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings
        self._log = log
        self._stop = stop
        self._clock = clocks.monotonic
        self._wall = clocks.wall
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
            return not self._released and leading(
                renewed_at=self._renewed_at, now=self._clock(), renew_deadline=self.timings.renew_deadline
            )

    def term(self) -> int:
        with self._lock:
            return self._term

    def status(self) -> dict[str, Any]:
        with self._lock:
            holder = self._observed.record.holder if self._observed is not None else None
        return {
            "leader": self.is_leader(),
            "identity": self.identity,
            "holder": holder or None,
            "election": True,
            "lease": f"{self.namespace}/{self.name}",
            "term": self.term(),
        }

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
            written = self._write(step, spec, record.resource_version if record else None)
        except Conflict:
            self._log.debug("lease changed under us", lease=self.name, step=step.value)
            self._note_leadership()
            return 0.0 if step is Step.RENEW else retry  # a renew that lost a race re-reads at once
        except KubeError as exc:
            self._log.warning("lease write failed", lease=self.name, step=step.value, error=str(exc), status=exc.status)
            self._note_leadership()
            return retry
        return self._wrote(written, started)

    @staticmethod
    def _body(spec: dict[str, Any], metadata: dict[str, Any]) -> Obj:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    def _write(self, step: Step, spec: dict[str, Any], resource_version: str | None) -> Obj:
        """Create the Lease, or replace it on condition that it is still at ``resource_version``."""
        if step is Step.CREATE:
            return self.kube.create(
                LEASES, self.namespace, self._body(spec, {"name": self.name}), timeout=self._timeout
            )
        body = self._body(spec, {"name": self.name, "resourceVersion": resource_version})
        return self.kube.replace(LEASES, self.namespace, self.name, body, timeout=self._timeout)

    def _wrote(self, written: Obj, started: float) -> float:
        """Take the Lease as written by a request begun at ``started`` (monotonic): lead from then
        on, in a new term unless leading went on without a gap. The seconds until the next round."""
        with self._lock:
            self._observed = observe(None, record_of(written), started)
            if self._released:
                return self.timings.renew_interval
            # A new term unless we led without a gap up to now: the controller restarts its work
            # (and forgets the last term's memory) on every term, even after a brief lapse.
            new_term = not leading(
                renewed_at=self._renewed_at, now=self._clock(), renew_deadline=self.timings.renew_deadline
            )
            self._renewed_at = started
            if new_term:
                self._term += 1
            term = self._term
        if new_term:
            self._log.info(
                "became leader",
                lease=self.name,
                identity=self.identity,
                term=term,
                transitions=record_of(written).transitions,
            )
        self._note_leadership()
        return self.timings.renew_interval

    def _note_leadership(self) -> None:
        """Log when leading ends (the deadline passed, another holder, or a release)."""
        now_leading = self.is_leader()
        with self._lock:
            was, self._was_leading = self._was_leading, now_leading
            holder = self._observed.record.holder if self._observed is not None else None
        if was and not now_leading:
            self._log.warning(
                "lost leadership; writes stop", lease=self.name, identity=self.identity, holder=holder or None
            )

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
            self.kube.replace(
                LEASES,
                self.namespace,
                self.name,
                self._body(
                    released_spec(record, wall=self._wall()),
                    {"name": self.name, "resourceVersion": record.resource_version},
                ),
                timeout=self._timeout,
            )
            self._log.info("lease released", lease=self.name, identity=self.identity)
        except KubeError as exc:
            self._log.warning(
                "could not release the lease; a successor waits for it to expire",
                lease=self.name,
                error=str(exc),
                status=exc.status,
            )
