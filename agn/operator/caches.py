"""The operator's caches: one informer per resource it reads, and which consumers a change marks.

Provider and network changes mark every consumer dirty; consumer, overlay and shard changes
mark that consumer (a shard's consumer is read from its name). A re-list marks every name that
may need a reconcile, orphans included (:meth:`Caches.names`).

Every process keeps these warm, leader or not. This module only reads (list + watch) and puts
names on the work queue: it never writes to the API and never reconciles.
"""

from __future__ import annotations

import threading
from typing import Any

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS, SHARDS, Kube, Resource
from agn.logs import JsonLog
from agn.netshards import network_of_shard
from agn.objects import Obj
from agn.operator.informer import Informer, OnChange
from agn.operator.workqueue import CoalescingQueue
from agn.shards import consumer_of_shard


class Caches:
    """Informers for providers, networks, consumers, overlays (indexes) and shards in one namespace."""

    def __init__(
        self, kube: Kube, namespace: str, queue: CoalescingQueue, *, log: JsonLog, stop: threading.Event
    ) -> None:
        self._kube, self._namespace, self._queue, self._log, self._stop = kube, namespace, queue, log, stop
        self.providers = self._informer(PROVIDERS, self._on_all_consumers)
        self.networks = self._informer(NETWORKS, self._on_all_consumers)
        self.consumers = self._informer(CONSUMERS, self._on_named)
        self.overlays = self._informer(OVERLAYS, self._on_named)
        self.shards = self._informer(SHARDS, self._on_shard)

    def _informer(self, resource: Resource, on_change: OnChange) -> Informer:
        return Informer(self._kube, resource, self._namespace, on_change=on_change, log=self._log, stop=self._stop)

    def all(self) -> list[Informer]:
        return [self.providers, self.networks, self.consumers, self.overlays, self.shards]

    def names(self) -> list[str]:
        """Every name that may need a reconcile: each consumer, each overlay and the consumer of
        each shard (either may be an orphan)."""
        shard_owners = {consumer_of_shard(n) for n in self.shards.store.names()}
        return sorted(
            set(self.consumers.store.names()) | set(self.overlays.store.names()) | {n for n in shard_owners if n}
        )

    # -- what a change marks ---------------------------------------------------------------------
    def _on_all_consumers(self, kind: str, obj: Obj | None) -> None:
        self._queue.add_all(self.consumers.store.names())

    def _on_named(self, kind: str, obj: Obj | None) -> None:
        if obj is None:
            self._queue.add_all(self.names())
        else:
            self._queue.add(obj["metadata"]["name"])

    def _on_shard(self, kind: str, obj: Obj | None) -> None:
        if obj is None:
            self._queue.add_all(self.names())
            return
        consumer = consumer_of_shard(obj["metadata"]["name"])
        if consumer is not None:
            self._queue.add(consumer)
        elif network_of_shard(obj["metadata"]["name"]) is not None:  # shared: every consumer may name it
            self._queue.add_all(self.consumers.store.names())

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        for informer in self.all():
            informer.start()

    def wait_synced(self) -> bool:
        """Wait until every cache has listed once; False if the operator stopped first."""
        for informer in self.all():
            while not informer.synced.wait(0.2):
                if self._stop.is_set():
                    return False
        return True

    def join(self, timeout: float) -> None:
        for informer in self.all():
            informer.join(timeout)

    def counts(self) -> dict[str, int]:
        """Objects per cache, by resource (for the "caches synced" log line)."""
        return {
            "providers": len(self.providers.store.names()),
            "networks": len(self.networks.store.names()),
            "consumers": len(self.consumers.store.names()),
            "overlays": len(self.overlays.store.names()),
            "shards": len(self.shards.store.names()),
        }

    def unsynced(self) -> list[str]:
        return [i.resource.plural for i in self.all() if not i.synced.is_set()]

    def failing(self) -> list[str]:
        """Watches that keep failing."""
        return [i.health.name for i in self.all() if not i.health.live()]

    def watches(self) -> dict[str, Any]:
        return {i.health.name: i.health.to_dict() for i in self.all()}
