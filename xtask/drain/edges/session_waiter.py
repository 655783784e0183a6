"""The sessions waiter of ``provider-drain --wait-sessions QUIET``: watch-driven, with a deadline.

It runs after the drain has converged. One list+watch follower (:func:`agn.watching.follow`) on
the named InferenceConsumers keeps each one's latest object; the wait wakes on every event and at
least every :data:`RECHECK_SECONDS` (a last turn grows old while nothing is written: the gateways
write ``status.sessions`` only when it changes) and judges every (consumer, drained provider) pair
with :func:`xtask.drain.core.sessions.judge` on the API server's clock (this host's clock plus the
offset the run read from the server's ``Date``). No fixed sleeps.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time

from agn.kube import CONSUMERS, Kube
from agn.objects import Obj, name_of
from agn.watching import FollowOptions, start_follower
from xtask.drain.core.progress import Progress, Said
from xtask.drain.core.sessions import SessionVerdict, all_quiet, judge
from xtask.drain.core.states import IdleWaitState
from xtask.drain.edges.waiter import by_name

RECHECK_SECONDS = 0.5


@dataclasses.dataclass
class SessionsResult:
    state: IdleWaitState  # idle: every pair quiet; timeout; interrupted
    verdicts: list[SessionVerdict]
    seconds: float


class SessionsWaiter:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        *,
        consumers: list[str],
        providers: list[str],
        quiet: float,
        server_offset: float,
        progress: Progress,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.consumers = consumers
        self.providers = providers
        self.quiet = quiet
        self.server_offset = server_offset
        self.progress = progress
        self._objects: dict[str, Obj | None] = dict.fromkeys(consumers)
        self._lock = threading.Lock()
        self._wake: queue.Queue[str] = queue.Queue()
        self._synced = threading.Event()
        self._stop_watch = threading.Event()

    def _snapshot(self, items: list[Obj]) -> None:
        found = {name_of(o): o for o in items}
        with self._lock:
            for name in self.consumers:
                self._objects[name] = found.get(name)
        self._synced.set()
        self._wake.put("list")

    def _event(self, kind: str, obj: Obj) -> None:
        name = name_of(obj)
        if name in self._objects:
            with self._lock:
                self._objects[name] = None if kind == "DELETED" else obj
            self._wake.put(name)

    def judge(self) -> list[SessionVerdict]:
        now = time.time() + self.server_offset
        with self._lock:
            objects = dict(self._objects)
        return [v for c in self.consumers for v in judge(c, objects[c], self.providers, quiet=self.quiet, now=now)]

    def wait(self, *, timeout: float, stop: threading.Event) -> SessionsResult:
        start = time.monotonic()
        deadline = start + timeout
        start_follower(
            self.kube,
            CONSUMERS,
            self.namespace,
            name="watch-sessions",
            on_snapshot=self._snapshot,
            on_event=self._event,
            stop=self._stop_watch,
            options=FollowOptions(field_selector=by_name(self.consumers)),
        )
        shown: dict[tuple[str, str], str] = {}
        try:
            while True:
                if stop.is_set():
                    return SessionsResult(IdleWaitState.INTERRUPTED, self.judge(), time.monotonic() - start)
                remaining = deadline - time.monotonic()
                verdicts = self.judge() if self._synced.is_set() else []
                for v in verdicts:
                    if shown.get((v.consumer, v.provider)) != v.state:
                        shown[(v.consumer, v.provider)] = v.state
                        self.progress(Said(f"sessions: {v.provider} on {v.consumer}: {v.state} ({v.why})"))
                if all_quiet(verdicts):
                    return SessionsResult(IdleWaitState.IDLE, verdicts, time.monotonic() - start)
                if remaining <= 0:
                    return SessionsResult(IdleWaitState.TIMEOUT, verdicts, time.monotonic() - start)
                try:
                    self._wake.get(timeout=min(remaining, RECHECK_SECONDS))
                    while True:
                        self._wake.get_nowait()
                except queue.Empty:
                    pass
        finally:
            self._stop_watch.set()
