"""The idle waiter of ``provider-drain --wait-idle``: watch-driven, with a deadline.

It runs after the drain has converged. One list+watch follower (:func:`agn.watching.follow`)
on InferenceProviders feeds every event of a selected provider to an
:class:`~xtask.drain.core.idle.IdleTracker` as it arrives — not a coalesced cache, so a busy
reading between two idle ones is never skipped. The first list counts as the first look; a
re-list after a broken watch counts as a gap (the count starts again). The wait blocks on
events and re-judges about once a second, because a reading can expire while nothing is
written. No fixed sleeps; the decision rules are in :mod:`xtask.drain.core.idle`.

Freshness comes from the probes heartbeat (the operator does not rewrite a status whose
meaning is unchanged): each round reads the ``agn-probes`` Lease; when its renewal T moved, one
consistent list of the selected providers follows, and a provider whose listed
``resourceVersion`` is the one the watch last delivered is vouched for at T (its status did not
change across the heartbeat read, so the operator's probes since T all saw what it says). A
provider that changed meanwhile is vouched for by a later renewal. Idle readings from before the
wait started (the drain serving everywhere) do not count: sessions could still land after them.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time

from agn.kube import PROVIDERS, Kube, KubeError
from agn.objects import Obj, name_of
from agn.operator.heartbeat import read_heartbeat
from agn.watching import FollowOptions, start_follower
from xtask.drain.core.idle import IdleTracker, ProviderIdle, Reading, all_idle, classify
from xtask.drain.core.progress import Progress
from xtask.drain.core.progress_phases import IdleChanged, IdleTick
from xtask.drain.core.states import IdleWaitState
from xtask.drain.edges.waiter import by_name

RECHECK_SECONDS = 1.0


@dataclasses.dataclass
class IdleResult:
    state: IdleWaitState
    providers: list[ProviderIdle]
    seconds: float


class IdleWaiter:
    def __init__(self, kube: Kube, namespace: str, *, providers: list[str], max_age: float, progress: Progress) -> None:
        self.kube = kube
        self.namespace = namespace
        self.providers = providers
        self.max_age = max_age
        self.progress = progress
        self._wanted = set(providers)
        self._tracker = IdleTracker(providers)
        self._objects: dict[str, Obj | None] = dict.fromkeys(providers)
        self._lock = threading.Lock()
        self._wake: queue.Queue[str] = queue.Queue()
        self._synced = threading.Event()
        self._lists = 0
        self._stop_watch = threading.Event()
        self._since: float | None = None  # when the wait started (the drain serving everywhere)
        self._heartbeat: float | None = None  # the last heartbeat renewal read
        self._vouched: dict[str, tuple[str, float]] = {}  # provider -> (resourceVersion, heartbeat time)

    def _classify(self, name: str, now: float) -> Reading:
        """Judge ``name``'s current object (under the lock), vouched for when the heartbeat did."""
        obj = self._objects[name]
        vouch = self._vouched.get(name)
        rv = (obj or {}).get("metadata", {}).get("resourceVersion")
        at = vouch[1] if vouch is not None and obj is not None and vouch[0] == rv else None
        return classify(name, obj, max_age=self.max_age, now=now, vouched_at=at, since=self._since)

    def _vouch(self) -> None:
        """Read the heartbeat; when it moved, vouch for each provider whose status stayed the one
        the watch delivered across that read (a consistent list after it)."""
        try:
            beat = read_heartbeat(self.kube, self.namespace)
            if beat is None or (self._heartbeat is not None and beat <= self._heartbeat):
                return
            items, _ = self.kube.list(PROVIDERS, self.namespace, field_selector=by_name(self.providers))
        except KubeError:
            return  # no vouching this round: readings age, as when the heartbeat stops
        self._heartbeat = beat
        listed = {name_of(o): o["metadata"].get("resourceVersion") for o in items}
        with self._lock:
            for name in self.providers:
                obj = self._objects[name]
                rv = (obj or {}).get("metadata", {}).get("resourceVersion")
                if obj is not None and rv is not None and listed.get(name) == rv:
                    self._vouched[name] = (rv, beat)

    # -- follower callbacks (the watch thread) --------------------------------------------------
    def _snapshot(self, items: list[Obj]) -> None:
        now = time.time()
        by_name = {name_of(o): o for o in items}
        with self._lock:
            self._lists += 1
            for name in self.providers:
                self._objects[name] = by_name.get(name)
                self._tracker.observe(self._classify(name, now), after_gap=self._lists > 1)
        self._synced.set()
        self._wake.put("list")

    def _event(self, kind: str, obj: Obj) -> None:
        name = name_of(obj)
        if name not in self._wanted:
            return
        with self._lock:
            self._objects[name] = None if kind == "DELETED" else obj
            self._tracker.observe(self._classify(name, time.time()))
        self._wake.put(name)

    def _judge(self) -> list[ProviderIdle]:
        """Re-judge every provider's current reading now (it may have expired) and return the verdicts."""
        now = time.time()
        with self._lock:
            for name in self.providers:
                self._tracker.observe(self._classify(name, now))
            return self._tracker.verdicts()

    # -- the wait -----------------------------------------------------------------------------
    def wait(self, *, timeout: float, stop: threading.Event) -> IdleResult:
        start = time.monotonic()
        deadline = start + timeout
        self._since = time.time()
        start_follower(
            self.kube,
            PROVIDERS,
            self.namespace,
            name="watch-idle",
            on_snapshot=self._snapshot,
            on_event=self._event,
            stop=self._stop_watch,
            # one provider among thousands: listed and watched by name
            options=FollowOptions(field_selector=by_name(self.providers)),
        )
        shown: dict[str, tuple] = {}

        def result(state: IdleWaitState) -> IdleResult:
            verdicts = self._judge() if self._synced.is_set() else self._tracker.verdicts()
            if state is IdleWaitState.TIMEOUT and all_idle(verdicts):  # a reading that landed at the deadline counts
                state = IdleWaitState.IDLE
            return IdleResult(state, verdicts, time.monotonic() - start)

        try:
            while True:
                if stop.is_set():
                    return result(IdleWaitState.INTERRUPTED)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return result(IdleWaitState.TIMEOUT)
                try:
                    self._wake.get(timeout=min(remaining, RECHECK_SECONDS))
                    while True:  # a burst of events was tracked one by one; judge once
                        self._wake.get_nowait()
                except queue.Empty:
                    pass
                if not self._synced.is_set():
                    continue
                self._vouch()
                verdicts = self._judge()
                for v in verdicts:
                    key = (v.state, v.reading.observed_at, v.idle_readings, v.detail)
                    if shown.get(v.reading.provider) != key:
                        shown[v.reading.provider] = key
                        self.progress(IdleChanged(v.to_dict()))
                self.progress(IdleTick(tuple(v.to_dict() for v in verdicts)))
                if all_idle(verdicts):
                    return IdleResult(IdleWaitState.IDLE, verdicts, time.monotonic() - start)
        finally:
            self._stop_watch.set()
