"""The operator's controller: its lifecycle, leadership terms and the batches of its worker.

Every process keeps its caches warm (:mod:`.caches`); a change marks consumers dirty on the
work queue. Only the leader (:mod:`.lease`) reconciles and probes, and every write goes
through :class:`.writes.LeaderWrites`, which refuses it unless this process leads at that
moment. Each time leadership is gained a term begins with a fresh :class:`.memory.TermMemory`:
the worker waits (bounded) for one probe round, then reconciles every consumer, and again on
each periodic resync (metrics freshness depends on time, and deletions can be missed while a
watch is re-listed). One worker thread takes coalesced batches, network by network on one
snapshot of the providers (:mod:`.snapshot`), and hands each consumer to
:class:`.consumers.ConsumerReconciler`, which reconciles it level-triggered from the caches.

With :mod:`.consumers`, :mod:`.storage` and :mod:`.network_storage`, this is the only writer of
RoutingOverlays and RoutingOverlayShards. It never writes provider spec or any status (provider
status belongs to :mod:`.prober`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from typing import Any

from agn.credentials import Tokens
from agn.kube import Kube
from agn.logs import JsonLog
from agn.model import ProviderView
from agn.objects import network_view, provider_view
from agn.operator.caches import Caches
from agn.operator.consumers import ConsumerReconciler, ReconcileParts
from agn.operator.elector import LeaderElector
from agn.operator.events import EventSink
from agn.operator.hold_expiry import HoldExpiry
from agn.operator.judged import JudgedViews, hold_seconds
from agn.operator.lease import AlwaysLeader, Leadership, new_identity
from agn.operator.memory import TermMemory
from agn.operator.metrics import OperatorMetrics
from agn.operator.network_storage import NetworkShards
from agn.operator.prober import Prober, ProbeStores
from agn.operator.settings import Settings
from agn.operator.snapshot import Snapshot, by_network
from agn.operator.storage import OverlayStorage, OverlayStores
from agn.operator.workqueue import CoalescingQueue
from agn.operator.writes import LeaderWrites

# How often a follower looks whether it leads now, and the longest a leader's worker waits
# between two looks at its leadership.
LEADERSHIP_POLL_SECONDS = 0.2


class Operator:
    """One operator for one namespace. ``run`` blocks until ``stop`` is set.

    With an ``elector`` it writes only while holding the lease; without one it always does.
    """

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        *,
        settings: Settings,
        log: JsonLog,
        stop: threading.Event,
        elector: LeaderElector | None = None,
        metrics: OperatorMetrics | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.settings = settings
        self.log = log
        self.stop = stop
        self.elector = elector
        self.leadership: Leadership = elector if elector is not None else AlwaysLeader(new_identity())
        self.metrics = metrics or OperatorMetrics()
        self.writes = LeaderWrites(kube, self.leadership, log=log, on_body=self.metrics.wrote)
        self.queue = CoalescingQueue(
            window=settings.coalesce_window,
            max_window=settings.max_batch_wait,
            burst_window=settings.burst_batch_wait,
        )
        self.caches = caches = Caches(kube, namespace, self.queue, log=log, stop=stop)
        self.storage, self.network_shards = self._overlay_storage(caches)
        self.events = EventSink(self.writes, instance=self.leadership.identity, log=log, stop=stop)
        tokens = Tokens(lambda name: kube.secret_data(namespace, name))  # providers' credentials (Secrets)
        self.prober = Prober(
            self.writes,
            namespace,
            settings=settings,
            leadership=self.leadership,
            stores=ProbeStores(caches.providers.store, caches.networks.store, tokens),
            log=log,
            stop=stop,
            metrics=self.metrics,
        )
        self.hold_expiry = self._hold_expiry()
        self._watch_metrics()
        self._views = JudgedViews()
        parts = ReconcileParts(
            caches, self.storage, self.network_shards, self.writes, self.events, self.metrics, self.queue, settings, log
        )
        self.consumers = ConsumerReconciler(parts, self.provider_views)
        workers = settings.reconcile_workers
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="reconcile") if workers > 1 else None
        )
        self._worker = threading.Thread(target=self._work, name="reconcile", daemon=True)

    def _overlay_storage(self, caches: Caches) -> tuple[OverlayStorage, NetworkShards]:
        """The writers of the consumers' indexes (and earlier per-consumer shards) and of the
        networks' shards; the only writers of RoutingOverlays and RoutingOverlayShards."""
        identity = self.leadership.identity
        stores = OverlayStores(caches.consumers.store, caches.overlays.store, caches.shards.store)
        storage = OverlayStorage(self.kube, self.writes, self.namespace, stores=stores, identity=identity, log=self.log)
        return storage, NetworkShards(
            self.kube, self.writes, self.namespace, shards=caches.shards.store, identity=identity
        )

    def _hold_expiry(self) -> HoldExpiry:
        """Reports expired drain holds (:mod:`.hold_expiry`) from the providers' cache."""
        return HoldExpiry(
            self.kube,
            self.writes,
            providers=self.caches.providers.store.peek_all,
            instance=self.leadership.identity,
            log=self.log,
            stop=self.stop,
        )

    def _watch_metrics(self) -> None:
        """Let ``/metrics`` read the queue, leadership, overlays, providers and probe load at scrape time."""
        caches = self.caches
        self.metrics.watch_state(
            queue_depth=lambda: len(self.queue.pending()),
            leader=self.leadership.is_leader,
            overlays=caches.overlays.store.peek_all,  # read at scrape time: no copies of a fleet
            providers=caches.providers.store.peek_all,
        )
        self.metrics.watch_probes(lambda: self.prober.load(time.monotonic()))
        self.metrics.watch_holds(self.hold_expiry.expired_count)

    # -- lifecycle -----------------------------------------------------------------------
    def healthy(self) -> tuple[bool, str]:
        """Every cache synced and the reconcile worker alive (a healthy follower is healthy too)."""
        unsynced = self.caches.unsynced()
        if unsynced:
            return False, f"caches not synced: {', '.join(unsynced)}"
        if not self._worker.is_alive():
            return False, "reconcile worker not running"
        dead = self.caches.failing()
        if dead:
            return False, f"watches keep failing: {', '.join(dead)}"
        return True, "ok"

    def health(self) -> tuple[bool, dict[str, Any]]:
        """For ``/healthz``: :meth:`healthy`, leadership and the writes this process made."""
        ok, detail = self.healthy()
        return ok, {
            "ok": ok,
            "detail": detail,
            "status": detail,
            "server": self.kube.host,
            "watches": self.caches.watches(),
            **self.leadership.status(),
            "writes": self.writes.counts(),
            "probes": self.prober.load(time.monotonic()),
        }

    def run(self) -> None:
        # Every setting, then what this process actually uses where a setting may leave it open.
        settings = dataclasses.asdict(self.settings)
        self.log.info(
            "operator starting", **{**settings, "namespace": self.namespace, "identity": self.leadership.identity}
        )
        self.caches.start()
        if not self.caches.wait_synced():
            return
        self.log.info("caches synced", **self.caches.counts())
        # Only a process whose caches are synced competes for the lease.
        if self.elector is not None:
            self.elector.start()
        self.prober.start()
        self.events.start()
        self.hold_expiry.start()
        self._worker.start()
        try:
            while not self.stop.wait(0.2):
                pass
        finally:
            self.log.info("operator stopping")
            self.queue.close()
            self._worker.join(5.0)
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
            self.prober.stop(timeout=self.settings.probe_timeout * 2 + 1.0)
            self.events.join(1.0)
            self.hold_expiry.join(1.0)
            if self.elector is not None:
                # After the writers stopped: a successor takes over at once instead of after expiry.
                self.elector.join(self.elector.timings.request_timeout + 1.0)
                self.elector.release()
            self.caches.join(0.1)  # watches end on their own; the threads are daemons
            self.log.info("operator stopped")

    def _work(self) -> None:
        """Follow while not leading; lead a term each time leadership is gained.

        A follower's caches stay warm (the informers run), but its queue is emptied on every
        look: the next term starts with a full pass, and names of consumers deleted meanwhile
        must not pile up.
        """
        led = 0
        while not self.stop.is_set():
            term = self.leadership.term()
            if self.leadership.is_leader() and term != led:
                led = term
                self._lead(term)
            else:
                self.queue.clear()
                self.stop.wait(LEADERSHIP_POLL_SECONDS)

    def _leading(self, term: int) -> bool:
        return not self.stop.is_set() and self.leadership.is_leader() and self.leadership.term() == term

    def _lead(self, term: int) -> None:
        """Reconcile until leadership (this term) ends or the operator stops."""
        self.log.info("leading: reconciling", term=term, identity=self.leadership.identity)
        self.prober.begin_term(term)
        try:
            self._lead_term(term)
        finally:
            self.consumers.new_term()  # what a term remembers per consumer belongs to it

    def _lead_term(self, term: int) -> None:
        # Statuses in the cache may have gone stale while no operator led; let the first probe
        # round refresh them (bounded) so a new term does not publish a transiently emptier overlay.
        give_up = time.monotonic() + self.settings.probe_timeout * 2 + 1.0
        while not self.prober.first_round.wait(0.1):
            if not self._leading(term):
                return
            if time.monotonic() >= give_up:
                self.log.warning("first probe round not finished; reconciling anyway")
                break
        # Every status is current now: vouch for them before judging freshness by them.
        self.prober.beat()
        next_resync = time.monotonic()  # the first pass reconciles every consumer
        first = True
        while self._leading(term):
            now = time.monotonic()
            if now >= next_resync:
                self.consumers.forget_deleted()
                self.network_shards.sweep(self.caches, self.log)  # networks gone or left by every consumer
                self.queue.add_all(self.caches.names())
                next_resync = now + self.settings.resync
            timeout = max(0.0, min(next_resync - time.monotonic(), LEADERSHIP_POLL_SECONDS))
            batch = self.queue.wait_batch(timeout=timeout)
            if batch is None:
                return
            if not batch:
                continue
            # The consumers of a batch are judged on one snapshot of the providers, network by
            # network: taken again, once older than --max-batch-wait, only for the next network
            # (:class:`Snapshot`), so a network's shards are written once per batch.
            providers = Snapshot(self.provider_views, max_age=self.settings.max_batch_wait)
            names = by_network(batch, self._network_name)
            if self._pool is not None and len(names) > 1:
                # Each consumer's overlay is its own objects; the network's verdict, which they
                # share, is evaluated under a lock (the first evaluates, the rest reuse it).
                for done in [self._pool.submit(self._reconcile_leading, term, n, providers) for n in names]:
                    done.result()
                if not self._leading(term):
                    return
            else:
                for name in names:
                    if not self._leading(term):
                        return  # the rest of the batch waits for the next term's full pass
                    self.consumers.reconcile_safely(name, providers.get(self._network_name(name)))
            if first:
                first = False
                self.log.info("initial reconcile done", consumers=sorted(batch), term=term)
        if not self.stop.is_set():
            self.log.info("not leading any more: reconcile paused", term=term)

    # -- reconcile -----------------------------------------------------------------------
    def provider_views(self) -> tuple[ProviderView, ...]:
        """Every provider's view as of this process's last probes heartbeat, judged as every
        reader judges them; the same objects while that cannot change a verdict, so the
        verdicts' cache holds (:mod:`.judged`)."""
        hold = hold_seconds(network_view(n) for n in self.caches.networks.store.peek_all())
        views = self.caches.providers.store.derived(provider_view)
        return self._views.views(views, heartbeat=self.prober.heartbeat_at, hold=hold, now=time.time())

    def _network_name(self, name: str) -> str:
        """The network consumer ``name`` names in the cache ("" for one gone)."""
        obj = self.caches.consumers.store.peek(name)
        return str(((obj or {}).get("spec") or {}).get("network") or "")

    def _reconcile_leading(self, term: int, name: str, providers: Snapshot) -> None:
        if self._leading(term):  # else it waits for the next term's full pass
            self.consumers.reconcile_safely(name, providers.get(self._network_name(name)))

    # -- one consumer (agn.operator.consumers) --------------------------------------------
    @property
    def memory(self) -> TermMemory:
        """This term's memory (:class:`.consumers.ConsumerReconciler`)."""
        return self.consumers.memory

    def reconcile(self, name: str, *, providers: tuple[ProviderView, ...] | None = None) -> None:
        """Bring consumer ``name``'s overlay up to date (:meth:`.consumers.ConsumerReconciler.reconcile`)."""
        self.consumers.reconcile(name, providers=providers)

    def remembered(self) -> set[str]:
        """Consumer names the controller holds any memory for (tests: nothing of a deleted one stays)."""
        return self.consumers.remembered()
