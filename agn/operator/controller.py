"""The operator's controller: its lifecycle, and the orchestration of one consumer's reconcile.

Every process keeps its caches warm (:mod:`.caches`); a change marks consumers dirty on the
work queue. Only the leader (:mod:`.lease`) reconciles and probes, and every write goes
through :class:`.writes.LeaderWrites`, which refuses it unless this process leads at that
moment. Each time leadership is gained a term begins with a fresh :class:`.memory.TermMemory`:
the worker waits (bounded) for one probe round, then reconciles every consumer, and again on
each periodic resync (metrics freshness depends on time, and deletions can be missed while a
watch is re-listed). One worker thread takes coalesced batches and reconciles each consumer
level-triggered from the caches:

- an overlay whose consumer is gone, or of an earlier consumer of the same name, is deleted
  (:meth:`.storage.OverlayStorage.remove`; a garbage collector does it too where one runs,
  since each overlay is owned by its consumer, :mod:`.ownership`);
- the network's verdict (:mod:`.verdicts`) gives the consumer's plan (:mod:`.reconcile`);
- the overlay is written only when what is stored differs (:mod:`.storage`), and a
  publication that changed admission is logged and recorded as an ``OverlayPublished``
  Event, from one diff (:mod:`.diffing`); hard-failure transitions become ``ProviderExcluded``
  / ``ProviderEligible`` Events (:mod:`.events`).

With :mod:`.storage`, this is the only writer of RoutingOverlays and RoutingOverlayShards. It
never writes provider spec or any status (provider status belongs to :mod:`.prober`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from typing import Any

from agn.credentials import Tokens
from agn.kube import Kube, KubeError
from agn.logs import JsonLog
from agn.model import ConsumerView, Overlay, ProviderView
from agn.netshards import NetworkSplit, index_over
from agn.objects import Obj, consumer_view, network_view, provider_view
from agn.operator.caches import Caches
from agn.operator.diffing import PublicationDiff, note_for, publication_change, published_fields, stored_fields
from agn.operator.elector import LeaderElector
from agn.operator.events import EventSink
from agn.operator.hold_expiry import HoldExpiry
from agn.operator.judged import JudgedViews, hold_seconds
from agn.operator.lease import AlwaysLeader, Leadership, new_identity
from agn.operator.memory import TermMemory
from agn.operator.metrics import OperatorMetrics
from agn.operator.network_storage import NetworkShards, indexes_behind
from agn.operator.ownership import Verdict, verdict
from agn.operator.prober import Prober, ProbeStores
from agn.operator.reconcile import Planned, replan
from agn.operator.settings import Settings
from agn.operator.snapshot import Snapshot, by_network
from agn.operator.storage import OverlayStorage, ShardWork, shard_work
from agn.operator.verdicts import NetworkVerdict
from agn.operator.workqueue import CoalescingQueue
from agn.operator.writes import LeaderWrites, NotLeader
from agn.shards import Sharded

ERROR_RETRY_SECONDS = 1.0
RECHECK_SLACK_SECONDS = 0.05
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
        self.memory = TermMemory()
        self._views = JudgedViews()
        self._reconcile_started = threading.local()  # when the running reconcile began, per worker
        self._verdict_lock = threading.Lock()  # the verdicts and the hard-failure memory are shared
        workers = settings.reconcile_workers
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="reconcile") if workers > 1 else None
        )
        self._worker = threading.Thread(target=self._work, name="reconcile", daemon=True)

    def _overlay_storage(self, caches: Caches) -> tuple[OverlayStorage, NetworkShards]:
        """The writers of the consumers' indexes (and earlier per-consumer shards) and of the
        networks' shards; the only writers of RoutingOverlays and RoutingOverlayShards."""
        identity = self.leadership.identity
        stores = {"consumers": caches.consumers.store, "overlays": caches.overlays.store}
        storage = OverlayStorage(
            self.kube,
            self.writes,
            self.namespace,
            **stores,
            shards=caches.shards.store,
            identity=identity,
            log=self.log,
        )
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
            # What a term remembers per consumer belongs to it: another leader may publish (and
            # consumers may come and go) before this process leads again; the caches are the truth.
            self.memory = TermMemory()

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
                self._forget_deleted()
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
                    self._reconcile_safely(name, providers.get(self._network_name(name)))
            if first:
                first = False
                self.log.info("initial reconcile done", consumers=sorted(batch), term=term)
        if not self.stop.is_set():
            self.log.info("not leading any more: reconcile paused", term=term)

    # -- forgetting ------------------------------------------------------------------------
    def _forget(self, name: str) -> None:
        """Drop everything remembered about consumer ``name`` (it is gone)."""
        self.memory.forget(name)
        self.queue.discard_delayed(name)

    def _forget_deleted(self) -> None:
        """Drop memory of everything the caches no longer have (a missed DELETED)."""
        gone = self.memory.forget_deleted(
            consumers=set(self.caches.consumers.store.names()),
            providers=set(self.caches.providers.store.names()),
            networks=set(self.caches.networks.store.names()),
        )
        if gone:
            self.log.debug("forgot deleted consumers", consumers=gone)

    def remembered(self) -> set[str]:
        """Consumer names the controller holds any memory for (tests: nothing of a deleted one stays)."""
        return self.memory.consumers()

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
            self._reconcile_safely(name, providers.get(self._network_name(name)))

    def _reconcile_safely(self, name: str, providers: tuple[ProviderView, ...]) -> None:
        started = self._reconcile_started.at = time.perf_counter()
        try:
            self.reconcile(name, providers=providers)
        except NotLeader:
            self.log.debug("not leading; write skipped", consumer=name)
        except KubeError as exc:
            self.metrics.reconcile_errors.inc()
            self.log.warning("overlay write failed; retrying", consumer=name, error=str(exc), status=exc.status)
            self.queue.add_after(name, ERROR_RETRY_SECONDS)
        except Exception as exc:  # noqa: BLE001 - the worker must survive one consumer's failure
            self.metrics.reconcile_errors.inc()
            self.log.error("reconcile failed unexpectedly; retrying", consumer=name, error=repr(exc))
            self.queue.add_after(name, ERROR_RETRY_SECONDS)
        finally:
            self.metrics.reconcile_duration.observe(time.perf_counter() - started)

    def reconcile(self, name: str, *, providers: tuple[ProviderView, ...] | None = None) -> None:
        """Bring consumer ``name``'s overlay up to date with the caches (or the given provider snapshot)."""
        if providers is None:
            providers = self.provider_views()
        consumer_obj = self.caches.consumers.store.get(name)
        current = self.caches.overlays.store.peek(name)  # read only: stored objects are never changed in place
        stored = self.storage.stored_shards(name)
        if consumer_obj is None:
            self._forget(name)
            if (current is not None or stored) and not self.storage.remove(name, current, stored):
                self.queue.add(name)
            else:
                self.network_shards.sweep(self.caches, self.log)  # it may have been its network's last consumer
            return
        kept = self._without_stale(name, consumer_obj, current, stored)
        if kept is None:
            return
        current, stored = kept
        consumer = consumer_view(consumer_obj)
        network_obj = self._network_of(consumer)
        if network_obj is None:
            return
        uid = consumer_obj["metadata"].get("uid", "")
        remembered = self.memory.published_overlay(name, uid)
        # Only the index's network, revision and digest decide the next revision; a sharded
        # index carries no candidates, so this Overlay has none (and is never compared whole).
        previous = Overlay.from_spec(current["spec"]) if current is not None else remembered
        now = time.time()
        network = network_view(network_obj)
        with self._verdict_lock:
            judged = self.memory.verdicts.evaluate(network, providers, now=now)
            for transition, obj in self.memory.hard_failures.transitions(judged, self.caches.providers.store.peek):
                self.events.hard_failure(transition, obj, max_age=judged.network.metrics_max_age_seconds)
        planned = self._plan(consumer, judged, previous)
        if judged.recheck_at is not None and judged.recheck_at > now:
            # A reading goes stale then: look again at that moment, not at the next resync.
            self.queue.add_after(name, judged.recheck_at - now + RECHECK_SLACK_SECONDS)
        plans = self.memory.network_plans
        split, net_writes = self.network_shards.prepare(plans, network_obj, judged, self.settings.overlay_shards)
        sharded = Sharded(index_over(planned.sharded.index, split, consumer.excluded_providers), {})
        work = shard_work(current, stored, sharded, consumer_obj)
        if work is not None or net_writes:
            overlay = planned.overlay
            revision = (overlay.network, overlay.revision, overlay.digest)
            admission_changed = previous is None or (previous.network, previous.revision, previous.digest) != revision
            # The diff reads the network shards the stored index names: before they are rewritten.
            seen = {**stored, **self.network_shards.stored(split.network)}
            diffed = (planned, sharded.index, split, (current, seen), self.network_shards.spec_at, remembered)
            change = publication_change(*diffed) if admission_changed else None
            # One tally: the publication's bytes are the network shards it wrote and the index.
            with self.writes.tally():
                if net_writes and not self.network_shards.write(split, net_writes, network_obj):
                    self.queue.add(name)
                    return
                if work is not None:
                    planned = dataclasses.replace(planned, sharded=sharded)
                    work = dataclasses.replace(work, network=tuple(net_writes))
                    self._publish(planned, work, consumer=consumer_obj, current=current, stored=stored, change=change)
        self._follow_network(split, name)

    def _follow_network(self, split: NetworkSplit, name: str) -> None:
        """After a publication on ``split``: the network's other consumers whose index is behind
        a shared shard are reconciled promptly; shards no index names any more are deleted."""
        indexes = {n: o for n in self.caches.consumers.store.names() if (o := self.caches.overlays.store.peek(n))}
        self.queue.add_all([n for n in indexes_behind(split, indexes) if n != name])
        if deleted := self.network_shards.collect(split, indexes.values()):
            self.log.info("network shards deleted", network=split.network, shards=deleted)
        self.network_shards.sweep(self.caches, self.log)  # a consumer that moved may have left a network

    def _without_stale(
        self, name: str, consumer: Obj, current: Obj | None, stored: dict[str, Obj]
    ) -> tuple[Obj | None, dict[str, Obj]] | None:
        """The consumer's index and shards once those of an earlier consumer of the same name
        (another uid) are deleted; None when they could not all be (judged again later)."""
        stale_index = current is not None and verdict(current, consumer) is Verdict.STALE
        stale = {n: s for n, s in stored.items() if verdict(s, consumer) is Verdict.STALE}
        if not (stale_index or stale):
            return current, stored
        if not self.storage.remove(name, current if stale_index else None, stale):
            self.queue.add(name)
            return None
        # A new consumer of an old name starts a new overlay history.
        return (None if stale_index else current), self.storage.stored_shards(name)

    def _network_of(self, consumer: ConsumerView) -> Obj | None:
        """The consumer's network from the cache; a missing one is warned about once."""
        name = consumer.name
        network_obj = self.caches.networks.store.get(consumer.network)
        if network_obj is None:
            if self.memory.missing_network.get(name) != consumer.network:
                self.memory.missing_network[name] = consumer.network
                self.log.warning(
                    "consumer's network not found; overlay left unchanged", consumer=name, network=consumer.network
                )
            return None
        if self.memory.missing_network.pop(name, None) is not None:
            self.log.info("consumer's network found", consumer=name, network=consumer.network)
        return network_obj

    def _plan(self, consumer: ConsumerView, judged: NetworkVerdict, previous: Overlay | None) -> Planned:
        """The consumer's overlay and its storage, sized by the change (:func:`.reconcile.replan`)."""
        plans = self.memory.plans
        plans[consumer.name] = replan(
            plans.get(consumer.name), consumer, judged, previous, self.settings.overlay_shards
        )
        return plans[consumer.name]

    def _publish(
        self,
        planned: Planned,
        work: ShardWork,
        *,
        consumer: Obj,
        current: Obj | None,
        stored: dict[str, Obj],
        change: PublicationDiff | None,
    ) -> None:
        """Store ``planned`` (:meth:`.storage.OverlayStorage.write`), then log (and record an
        Event for) ``change`` — None when admission did not change."""
        overlay, sharded = planned.overlay, planned.sharded
        name = overlay.consumer
        with self.writes.tally(join=True) as tally:  # counting the network shards written before
            stored_ok = self.storage.write(sharded, work, consumer=consumer, current=current, stored=stored)
        if tally.bytes:
            self.metrics.publication_bytes.observe(tally.bytes)
        # Seconds since this reconcile began (0 outside a worker's reconcile): the log tells the
        # queue's wait from the reconcile's own time (scripts/bench/drainstages.py).
        seconds = round(time.perf_counter() - getattr(self._reconcile_started, "at", time.perf_counter()), 4)
        if not stored_ok:
            self.queue.add(name)
            return
        self.memory.published[name] = (consumer["metadata"].get("uid", ""), overlay)
        if change is None:
            self.log.info("overlay stored again", **stored_fields(overlay, work), bytes_written=tally.bytes)
            return
        states = sharded.index["admission"]
        fields = published_fields(overlay, work, change, states)
        self.log.info("overlay published", **fields, bytes_written=tally.bytes, reconcile_seconds=seconds)
        note = note_for(
            change.diff,
            network=overlay.network,
            revision=overlay.revision,
            states=states,
            previous_revision=change.previous_revision,
        )
        self.events.overlay_published(consumer, note)
