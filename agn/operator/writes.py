"""The operator's only path to API writes: refused unless this process leads, and counted.

The controller and the prober read through :class:`agn.kube.Kube` directly but write
through :class:`LeaderWrites`, so "a follower writes nothing" holds in one place: every
write asks :meth:`Leadership.is_leader` right before the request. The per-kind counters
are reported on ``/healthz``, which is how tests (and people) see who writes.
"""

from __future__ import annotations

import threading
from collections import Counter

from agn.kube import Kube, Resource
from agn.logs import JsonLog
from agn.objects import Obj
from agn.operator.lease import Leadership


class NotLeader(Exception):
    """A write was refused because this process does not hold the lease (not an API error)."""


class LeaderWrites:
    def __init__(self, kube: Kube, leadership: Leadership, *, log: JsonLog | None = None) -> None:
        self._kube = kube
        self._leadership = leadership
        self._log = log
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def _admit(self, what: str, name: str) -> None:
        if not self._leadership.is_leader():
            raise NotLeader(f"not the leader; {what} {name} not written")
        with self._lock:
            self._counts[what] += 1
        if self._log is not None:
            self._log.debug("api write", write=what, name=name)

    def create(self, res: Resource, namespace: str, body: Obj) -> Obj:
        self._admit(f"{res.plural}:create", body["metadata"]["name"])
        return self._kube.create(res, namespace, body)

    def replace(self, res: Resource, namespace: str, name: str, body: Obj) -> Obj:
        self._admit(f"{res.plural}:update", name)
        return self._kube.replace(res, namespace, name, body)

    def read(self, res: Resource, namespace: str, name: str) -> Obj:
        """A GET (not a write: not counted, allowed to a follower too)."""
        return self._kube.get(res, namespace, name)

    def merge_patch(self, res: Resource, namespace: str, name: str, patch: Obj) -> Obj:
        self._admit(f"{res.plural}:patch", name)
        return self._kube.merge_patch(res, namespace, name, patch)

    def merge_patch_status(self, res: Resource, namespace: str, name: str, patch: Obj) -> Obj:
        self._admit(f"{res.plural}/status:patch", name)
        return self._kube.merge_patch_status(res, namespace, name, patch)

    def delete(self, res: Resource, namespace: str, name: str, *, uid: str | None = None) -> None:
        self._admit(f"{res.plural}:delete", name)
        self._kube.delete(res, namespace, name, uid=uid)

    def create_event(self, namespace: str, body: Obj, *, timeout: float | None = None) -> None:
        self._admit("events:create", body["metadata"]["name"])
        self._kube.create_event(namespace, body, timeout=timeout)

    def counts(self) -> dict[str, int]:
        """Writes attempted per ``plural[/status]:verb`` since start (sent to the API, whatever the outcome)."""
        with self._lock:
            return dict(sorted(self._counts.items()))
