"""List+watch caches of one AGN resource in one namespace, each kept by its own thread.

An :class:`Informer` runs the shared list+watch loop (:func:`agn.watching.follow`: resume
after a watch ends, re-list on ``Gone`` (410), bounded backoff on any other error) into a
:class:`Store`. Every change is reported to a callback; reconciles are
level-triggered, so the callback only needs to know *that* something changed.

This module reads only; it must not write to the API or decide anything about overlays.
"""

from __future__ import annotations

import builtins
import copy
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from agn.kube import Gone, Kube, KubeError, Resource
from agn.logs import JsonLog
from agn.objects import Obj
from agn.watching import FollowOptions, WatchHealth, capped_backoff, start_follower

T = TypeVar("T")
OnChange = Callable[[str, Obj | None], None]  # (event type, object or None for a re-list)

INITIAL_BACKOFF = 0.2
MAX_BACKOFF = 5.0


def _interned(value: Any) -> Any:
    """``value`` with every mapping key interned, rebuilt (dicts and lists are new; nothing given is changed)."""
    if isinstance(value, dict):
        return {sys.intern(k) if type(k) is str else k: _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v) for v in value]
    return value


def trimmed(obj: Obj) -> Obj:
    """``obj`` as the store keeps it: without ``metadata.managedFields``, every key interned.
    A new object; ``obj`` itself is not changed.

    Nothing in the operator reads the field managers' records, and they are often as big as the
    rest of an object (a provider's spec and status fields, each listed per manager); client-go's
    informers drop them the same way (a transform before the store). Each watch event is decoded
    on its own, so without interning every cached provider holds its own copy of every key
    string. Together they were about half of what the caches held (tracemalloc, 2,000 providers;
    docs/benchmarks.md)."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        obj = {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
    out: Obj = _interned(obj)
    return out


def _rv(obj: Obj) -> int | None:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion", ""))
    except ValueError:
        return None


class Store:
    """Objects by name, without their ``managedFields`` (:func:`trimmed`). Thread-safe.
    :meth:`get` and :meth:`list` hand out deep copies, so callers
    cannot corrupt the cache; the hot paths at fleet size use :meth:`peek` and :meth:`derived`,
    which do not copy (a stored object is never changed in place: an update replaces it).

    :meth:`version` counts changes of the *set of names* (an object added or removed, a re-list
    that holds other names), not updates of a stored object: a 50 ms loop that follows which
    objects exist (the prober's scheduler, over 5,000 providers) compares one integer per pass
    and walks the names only when they changed, while status writes keep updating objects."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, Obj] = {}
        self._version = 0  # bumped whenever the set of stored names changes
        # Per derivation: name -> (the stored object it was computed from, the result).
        self._derived: dict[Callable[[Obj], Any], dict[str, tuple[Obj, Any]]] = {}

    def replace(self, items: list[Obj]) -> None:
        """Hold exactly ``items`` (trimmed). ``items`` is emptied as it is read: a re-list's
        decoded objects are let go one by one as their trimmed copies are made, so the list (which
        the watch loop keeps until its next re-list) never holds a second copy of the fleet."""
        items.reverse()
        fresh: dict[str, Obj] = {}
        while items:
            obj = trimmed(items.pop())
            fresh[obj["metadata"]["name"]] = obj
        with self._lock:
            if fresh.keys() != self._items.keys():
                self._version += 1
            self._items = fresh

    def upsert(self, obj: Obj) -> None:
        """Store ``obj`` unless the cache already holds a newer version of it.

        The controller also stores its own writes' responses, which can overtake the watch
        event of an earlier write; resourceVersions (integers in practice) keep the newest.
        """
        name = obj["metadata"]["name"]
        obj = trimmed(obj)
        with self._lock:
            old = self._items.get(name)
            new_rv, old_rv = _rv(obj), _rv(old) if old else None
            if old is not None and new_rv is not None and old_rv is not None and new_rv < old_rv:
                return
            if old is None:
                self._version += 1
            self._items[name] = obj

    def remove(self, name: str) -> None:
        with self._lock:
            if self._items.pop(name, None) is not None:
                self._version += 1

    def get(self, name: str) -> Obj | None:
        with self._lock:
            obj = self._items.get(name)
            return copy.deepcopy(obj) if obj is not None else None

    def list(self) -> builtins.list[Obj]:
        with self._lock:
            return [copy.deepcopy(o) for o in self._items.values()]

    def peek(self, name: str) -> Obj | None:
        """The stored object itself, not a copy: read it, never change it."""
        with self._lock:
            return self._items.get(name)

    def peek_all(self) -> builtins.list[Obj]:
        """Every stored object itself, not copies: read them, never change them."""
        with self._lock:
            return builtins.list(self._items.values())

    def derived(self, fn: Callable[[Obj], T]) -> builtins.list[T]:
        """``fn(obj)`` for every stored object, computed once per stored version of each object.

        ``fn`` must only read its argument and return an immutable value (a frozen view): a
        batch of reconciles over 5,000 providers then converts only the providers that changed
        since the last batch, instead of deep-copying and converting all of them."""
        with self._lock:
            items = builtins.list(self._items.items())
            memo = self._derived.get(fn, {})
        fresh: dict[str, tuple[Obj, Any]] = {}
        out: builtins.list[T] = []
        for name, obj in items:
            known = memo.get(name)
            value = known[1] if known is not None and known[0] is obj else fn(obj)
            fresh[name] = (obj, value)
            out.append(value)
        with self._lock:
            self._derived[fn] = fresh  # names no longer stored are dropped with the old memo
        return out

    def names(self) -> builtins.list[str]:
        with self._lock:
            return sorted(self._items)

    def version(self) -> int:
        """The membership version: changes exactly when a name is added or removed (O(1))."""
        with self._lock:
            return self._version

    def membership(self) -> tuple[int, frozenset[str]]:
        """The stored names and the :meth:`version` they belong to, read together."""
        with self._lock:
            return self._version, frozenset(self._items)

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._items


class Informer:
    """Keeps a :class:`Store` of one resource in sync by list+watch, on a daemon thread."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        namespace: str,
        *,
        on_change: OnChange,
        log: JsonLog,
        stop: threading.Event,
        watch_timeout: int = 30,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.store = Store()
        self.synced = threading.Event()
        self.health = WatchHealth(resource.plural)
        self._on_change = on_change
        self._log = log
        self._stop = stop
        self._watch_timeout = watch_timeout
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = start_follower(
            self.kube,
            self.resource,
            self.namespace,
            name=f"informer-{self.resource.plural}",
            on_snapshot=self._snapshot,
            on_event=self._event,
            stop=self._stop,
            options=FollowOptions(
                watch_timeout=self._watch_timeout,
                backoff=capped_backoff(INITIAL_BACKOFF, MAX_BACKOFF),
                on_error=self._log_error,
                health=self.health,
            ),
        )

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _log_error(self, exc: Exception, delay: float) -> None:
        if isinstance(exc, Gone):
            self._log.info("watch expired; re-listing", resource=self.resource.plural)
        elif isinstance(exc, KubeError):
            self._log.warning(
                "list/watch failed; re-listing after backoff",
                resource=self.resource.plural,
                error=str(exc),
                status=exc.status,
                backoff=delay,
            )
        else:
            self._log.error(
                "informer error; re-listing after backoff",
                resource=self.resource.plural,
                error=repr(exc),
                backoff=delay,
            )

    def _snapshot(self, items: list[Obj]) -> None:
        count = len(items)
        self.store.replace(items)  # empties items (Store.replace)
        first = not self.synced.is_set()
        self.synced.set()
        self._log.debug("listed", resource=self.resource.plural, count=count)
        if not first or count:
            self._on_change("RELIST", None)

    def _event(self, kind: str, obj: Obj) -> None:
        if kind == "DELETED":
            self.store.remove(obj["metadata"]["name"])
        else:
            self.store.upsert(obj)
        self._on_change(kind, obj)
