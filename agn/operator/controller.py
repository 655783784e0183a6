"""The operator's controller: wires caches, the work queue, the prober and the overlay writer.

Provider and network changes mark every consumer dirty; consumer and overlay changes mark
that consumer. One worker thread takes coalesced batches and reconciles each consumer
level-triggered from the caches, writing its RoutingOverlay only when the overlay changed.
A periodic resync re-runs every consumer, because metrics freshness depends on time.

This is the only writer of RoutingOverlays. It never writes provider spec or any status
(provider status belongs to :mod:`.prober`).
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from agn import GROUP, VERSION
from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS, Conflict, Kube, KubeError, NotFound
from agn.model import Overlay, ProviderView
from agn.objects import consumer_view, network_view, provider_view
from agn.operator.informer import Informer, Obj
from agn.logs import JsonLog
from agn.operator.prober import Prober
from agn.operator.reconcile import plan_overlay
from agn.operator.workqueue import CoalescingQueue

ERROR_RETRY_SECONDS = 1.0
RECHECK_SLACK_SECONDS = 0.05


@dataclasses.dataclass(frozen=True)
class Settings:
    probe_interval: float = 1.0
    probe_timeout: float = 1.0
    resync: float = 5.0
    coalesce_window: float = 0.1
    # During a long burst (a gateway-wide drain of hundreds of providers) no quiet period comes;
    # this caps how long a change waits, trading a few revisions for bounded latency.
    max_batch_wait: float = 1.0


def overlay_body(overlay: Overlay) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": OVERLAYS.kind,
        "metadata": {"name": overlay.consumer}, "spec": overlay.to_spec(),
    }


class Operator:
    """One operator for one namespace. ``run`` blocks until ``stop`` is set."""

    def __init__(self, kube: Kube, namespace: str, *, settings: Settings, log: JsonLog, stop: threading.Event) -> None:
        self.kube = kube
        self.namespace = namespace
        self.settings = settings
        self.log = log
        self.stop = stop
        self.queue = CoalescingQueue(window=settings.coalesce_window, max_window=settings.max_batch_wait)
        self.providers = self._informer(PROVIDERS, self._on_all_consumers)
        self.networks = self._informer(NETWORKS, self._on_all_consumers)
        self.consumers = self._informer(CONSUMERS, self._on_named)
        self.overlays = self._informer(OVERLAYS, self._on_named)
        self.prober = Prober(
            kube, namespace, providers=self.providers.store, networks=self.networks.store,
            interval=settings.probe_interval, timeout=settings.probe_timeout, log=log, stop=stop,
        )
        # The last overlay published per consumer: revision continuity if an overlay is deleted under us.
        self._published: dict[str, Overlay] = {}
        self._missing_network: dict[str, str] = {}
        self._worker = threading.Thread(target=self._work, name="reconcile", daemon=True)

    def _informer(self, resource, on_change) -> Informer:
        return Informer(self.kube, resource, self.namespace, on_change=on_change, log=self.log, stop=self.stop)

    def _all(self) -> list[Informer]:
        return [self.providers, self.networks, self.consumers, self.overlays]

    # -- events ------------------------------------------------------------------------
    def _on_all_consumers(self, kind: str, obj: Obj | None) -> None:
        self.queue.add_all(self.consumers.store.names())

    def _on_named(self, kind: str, obj: Obj | None) -> None:
        if obj is None:
            self.queue.add_all(self.consumers.store.names())
        else:
            self.queue.add(obj["metadata"]["name"])

    # -- lifecycle -----------------------------------------------------------------------
    def healthy(self) -> tuple[bool, str]:
        """For ``/healthz``: every cache synced and the reconcile worker alive."""
        unsynced = [i.resource.plural for i in self._all() if not i.synced.is_set()]
        if unsynced:
            return False, f"caches not synced: {', '.join(unsynced)}"
        if not self._worker.is_alive():
            return False, "reconcile worker not running"
        return True, "ok"

    def run(self) -> None:
        self.log.info("operator starting", namespace=self.namespace, **dataclasses.asdict(self.settings))
        for informer in self._all():
            informer.start()
        for informer in self._all():
            while not informer.synced.wait(0.2):
                if self.stop.is_set():
                    return
        self.log.info("caches synced", providers=len(self.providers.store.names()),
                      networks=len(self.networks.store.names()), consumers=len(self.consumers.store.names()),
                      overlays=len(self.overlays.store.names()))
        self.prober.start()
        self._worker.start()
        try:
            while not self.stop.wait(0.2):
                pass
        finally:
            self.log.info("operator stopping")
            self.queue.close()
            self._worker.join(5.0)
            self.prober.stop(timeout=self.settings.probe_timeout * 2 + 1.0)
            for informer in self._all():
                informer.join(0.1)  # watches end on their own; the threads are daemons
            self.log.info("operator stopped")

    def _work(self) -> None:
        # Statuses in the cache may have gone stale while no operator ran; let the first probe
        # round refresh them (bounded) so a restart does not publish a transiently emptier overlay.
        give_up = time.monotonic() + self.settings.probe_timeout * 2 + 1.0
        while not self.prober.first_round.wait(0.1):
            if self.stop.is_set():
                return
            if time.monotonic() >= give_up:
                self.log.warning("first probe round not finished; reconciling anyway")
                break
        next_resync = time.monotonic()  # the first pass reconciles every consumer
        first = True
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_resync:
                self.queue.add_all(self.consumers.store.names())
                next_resync = now + self.settings.resync
            batch = self.queue.wait_batch(timeout=max(0.0, next_resync - time.monotonic()))
            if batch is None:
                return
            # One snapshot of the providers per batch: every consumer in it is judged on the same data.
            providers = [provider_view(p) for p in self.providers.store.list()]
            for name in sorted(batch):
                if self.stop.is_set():
                    return
                self._reconcile_safely(name, providers)
            if first and batch:
                first = False
                self.log.info("initial reconcile done", consumers=sorted(batch))

    # -- reconcile -----------------------------------------------------------------------
    def _reconcile_safely(self, name: str, providers: list[ProviderView]) -> None:
        try:
            self.reconcile(name, providers=providers)
        except KubeError as exc:
            self.log.warning("overlay write failed; retrying", consumer=name, error=str(exc), status=exc.status)
            self.queue.add_after(name, ERROR_RETRY_SECONDS)
        except Exception as exc:  # noqa: BLE001 - the worker must survive one consumer's failure
            self.log.error("reconcile failed unexpectedly; retrying", consumer=name, error=repr(exc))
            self.queue.add_after(name, ERROR_RETRY_SECONDS)

    def reconcile(self, name: str, *, providers: list[ProviderView] | None = None) -> None:
        """Bring consumer ``name``'s overlay up to date with the caches (or the given provider snapshot)."""
        if providers is None:
            providers = [provider_view(p) for p in self.providers.store.list()]
        consumer_obj = self.consumers.store.get(name)
        if consumer_obj is None:
            self.log.debug("consumer not found; its overlay (if any) is left as is", consumer=name)
            return
        consumer = consumer_view(consumer_obj)
        network_obj = self.networks.store.get(consumer.network)
        if network_obj is None:
            if self._missing_network.get(name) != consumer.network:
                self._missing_network[name] = consumer.network
                self.log.warning("consumer's network not found; overlay left unchanged", consumer=name,
                                 network=consumer.network)
            return
        if self._missing_network.pop(name, None) is not None:
            self.log.info("consumer's network found", consumer=name, network=consumer.network)

        current = self.overlays.store.get(name)
        previous = Overlay.from_spec(current["spec"]) if current is not None else self._published.get(name)
        now = time.time()
        plan = plan_overlay(consumer, network_view(network_obj), providers, previous=previous, now=now)
        if plan.recheck_at is not None and plan.recheck_at > now:
            self.queue.add_after(name, plan.recheck_at - now + RECHECK_SLACK_SECONDS)
        if not plan.write:
            return
        self._publish(plan.overlay, current=current, previous=previous)

    def _publish(self, overlay: Overlay, *, current: Obj | None, previous: Overlay | None) -> None:
        name = overlay.consumer
        try:
            if current is None:
                written = self.kube.create(OVERLAYS, self.namespace, overlay_body(overlay))
            else:
                patch = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                         "spec": overlay.to_spec()}
                written = self.kube.merge_patch(OVERLAYS, self.namespace, name, patch)
        except (Conflict, NotFound) as exc:
            # Our cache was behind (or the overlay was deleted): refresh it and plan again.
            self._refresh_overlay(name)
            self.log.info("overlay changed under us; re-planning", consumer=name, reason=type(exc).__name__)
            self.queue.add(name)
            return
        self.overlays.store.upsert(written)
        self._published[name] = overlay
        self.log.info(
            "overlay published", consumer=name, network=overlay.network, revision=overlay.revision,
            previous_revision=previous.revision if previous else None, digest=overlay.digest,
            candidates={c.provider: c.admission_state for c in overlay.candidates},
        )

    def _refresh_overlay(self, name: str) -> None:
        try:
            self.overlays.store.upsert(self.kube.get(OVERLAYS, self.namespace, name))
        except NotFound:
            self.overlays.store.remove(name)
