"""The operator's only path to API writes: refused unless this process leads, and counted.

The controller and the prober read through :class:`agn.kube.Kube` directly but write
through :class:`LeaderWrites`, so "a follower writes nothing" holds in one place: every
write asks :meth:`Leadership.is_leader` right before the request. The per-kind counters
are reported on ``/healthz``, which is how tests (and people) see who writes.

Every body written is counted too, in the bytes the client sends (its JSON encoding), per kind
of body (:func:`body_kind`: ``index``, ``shard``, ``status``, ``event``, ``other``); a caller that
wants the bytes of one publication wraps its writes in :meth:`LeaderWrites.tally` (per thread, so
consumers published concurrently each get their own; a nested ``tally(join=True)`` counts into
the open one: a publication's network shards and its index are one publication's bytes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator

from agn.kube import Kube, Resource
from agn.logs import JsonLog
from agn.objects import Obj
from agn.operator.lease import Leadership

# The kind of body a write sends, by resource: what ``agn_operator_write_bytes_total`` is labelled by.
BODY_KINDS = {"routingoverlays": "index", "routingoverlayshards": "shard", "events": "event"}


def body_kind(plural: str) -> str:
    """``routingoverlays`` -> ``index``, ``routingoverlayshards`` -> ``shard``, any ``*/status``
    -> ``status``, ``events`` -> ``event``, anything else -> ``other``."""
    if plural.endswith("/status"):
        return "status"
    return BODY_KINDS.get(plural, "other")


def body_bytes(body: Obj) -> int:
    """The size of ``body`` as the Kubernetes client sends it (``json.dumps`` of the plain dict)."""
    return len(json.dumps(body).encode())


@dataclasses.dataclass
class Tally:
    """The bytes and the writes one thread sent within :meth:`LeaderWrites.tally`."""

    bytes: int = 0
    writes: int = 0


class NotLeader(Exception):
    """A write was refused because this process does not hold the lease (not an API error)."""


class LeaderWrites:
    def __init__(
        self,
        kube: Kube,
        leadership: Leadership,
        *,
        log: JsonLog | None = None,
        on_body: Callable[[str, int], None] | None = None,
    ) -> None:
        """``on_body(kind, size)`` is told of every body sent (the operator's byte counters)."""
        self._kube = kube
        self._leadership = leadership
        self._log = log
        self._on_body = on_body
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._bytes: Counter[str] = Counter()
        self._local = threading.local()

    def _admit(self, what: str, name: str, body: Obj | None = None) -> None:
        if not self._leadership.is_leader():
            raise NotLeader(f"not the leader; {what} {name} not written")
        size = 0 if body is None else body_bytes(body)
        kind = body_kind(what.partition(":")[0])
        with self._lock:
            self._counts[what] += 1
            self._bytes[kind] += size
            tally: Tally | None = getattr(self._local, "tally", None)
            if tally is not None:
                tally.bytes += size
                tally.writes += 1
        if size and self._on_body is not None:
            self._on_body(kind, size)
        if self._log is not None:
            self._log.debug("api write", write=what, name=name, bytes=size)

    @contextlib.contextmanager
    def tally(self, *, join: bool = False) -> Iterator[Tally]:
        """Count the bytes and writes this thread sends until the block ends (one publication);
        with ``join``, into the tally this thread has open already, if any."""
        outer = getattr(self._local, "tally", None)
        if join and outer is not None:
            yield outer
            return
        self._local.tally = tally = Tally()
        try:
            yield tally
        finally:
            self._local.tally = outer

    def open_tally(self) -> Tally | None:
        """The tally this thread has open (None: none), for :meth:`counting_into` on another thread."""
        return getattr(self._local, "tally", None)

    @contextlib.contextmanager
    def counting_into(self, tally: Tally | None) -> Iterator[None]:
        """Count this thread's writes into ``tally`` (another thread's open one) until the block
        ends: the writes a publication hands to helper threads are still its bytes."""
        outer = getattr(self._local, "tally", None)
        self._local.tally = tally
        try:
            yield
        finally:
            self._local.tally = outer

    def create(self, res: Resource, namespace: str, body: Obj) -> Obj:
        self._admit(f"{res.plural}:create", body["metadata"]["name"], body)
        return self._kube.create(res, namespace, body)

    def replace(self, res: Resource, namespace: str, name: str, body: Obj) -> Obj:
        self._admit(f"{res.plural}:update", name, body)
        return self._kube.replace(res, namespace, name, body)

    def read(self, res: Resource, namespace: str, name: str) -> Obj:
        """A GET (not a write: not counted, allowed to a follower too)."""
        return self._kube.get(res, namespace, name)

    def merge_patch(self, res: Resource, namespace: str, name: str, patch: Obj) -> Obj:
        self._admit(f"{res.plural}:patch", name, patch)
        return self._kube.merge_patch(res, namespace, name, patch)

    def merge_patch_status(self, res: Resource, namespace: str, name: str, patch: Obj) -> Obj:
        self._admit(f"{res.plural}/status:patch", name, patch)
        return self._kube.merge_patch_status(res, namespace, name, patch)

    def delete(
        self, res: Resource, namespace: str, name: str, *, uid: str | None = None, resource_version: str | None = None
    ) -> None:
        """Delete only that ``uid`` (and ``resource_version``, when given): else 409 :class:`Conflict`."""
        self._admit(f"{res.plural}:delete", name)
        self._kube.delete(res, namespace, name, uid=uid, resource_version=resource_version)

    def create_event(self, namespace: str, body: Obj, *, timeout: float | None = None) -> None:
        self._admit("events:create", body["metadata"]["name"], body)
        self._kube.create_event(namespace, body, timeout=timeout)

    def counts(self) -> dict[str, int]:
        """Writes attempted per ``plural[/status]:verb`` since start (sent to the API, whatever the outcome)."""
        with self._lock:
            return dict(sorted(self._counts.items()))

    def bytes_written(self) -> dict[str, int]:
        """Body bytes sent per kind (:func:`body_kind`) since start, whatever the outcome."""
        with self._lock:
            return dict(sorted(self._bytes.items()))
