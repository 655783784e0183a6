"""One consumer's reconcile: what the operator's worker does for each consumer of a batch.

:class:`ConsumerReconciler` brings one consumer's overlay up to date with the caches, level
triggered (when to call it, and whether this process may, is :mod:`.controller`'s part):

- an overlay whose consumer is gone, or of an earlier consumer of the same name, is deleted
  (:meth:`.storage.OverlayStorage.remove`);
- the network's verdict (:mod:`.verdicts`) gives the consumer's plan (:mod:`.reconcile`) and the
  network's shards (:mod:`.network_storage`), written before the consumer's index names them;
- the index is written only when what is stored differs (:mod:`.storage`), and a publication
  that changed admission is logged and recorded as an ``OverlayPublished`` Event, from one diff
  (:mod:`.diffing`); hard-failure transitions become ``ProviderExcluded`` / ``ProviderEligible``
  Events (:mod:`.events`).

What it remembers (:class:`.memory.TermMemory`) belongs to one leadership term: the controller
calls :meth:`ConsumerReconciler.new_term` when a term ends.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from agn.kube import KubeError
from agn.logs import JsonLog
from agn.model import ConsumerView, NetworkView, Overlay, ProviderView
from agn.netshards import NetworkSplit, index_over
from agn.objects import Obj, consumer_view, network_view
from agn.operator.burst import HOLD_BATCHES, Burst, hold_for, index_behind, published
from agn.operator.caches import Caches
from agn.operator.diffing import PublicationDiff, note_for, publication_change, published_fields, stored_fields
from agn.operator.events import EventSink
from agn.operator.memory import TermMemory
from agn.operator.metrics import OperatorMetrics
from agn.operator.network_storage import NetworkShards, indexes_behind
from agn.operator.ownership import Verdict, verdict
from agn.operator.reconcile import Planned, replan
from agn.operator.settings import Settings
from agn.operator.storage import OverlayStorage, ShardWork, shard_work
from agn.operator.verdicts import NetworkVerdict
from agn.operator.workqueue import CoalescingQueue
from agn.operator.writes import LeaderWrites, NotLeader
from agn.shards import Sharded

ERROR_RETRY_SECONDS = 1.0
RECHECK_SLACK_SECONDS = 0.05


@dataclasses.dataclass(frozen=True)
class ReconcileParts:
    """The operator's parts a consumer's reconcile reads and writes through."""

    caches: Caches
    storage: OverlayStorage
    network_shards: NetworkShards
    writes: LeaderWrites
    events: EventSink
    metrics: OperatorMetrics
    queue: CoalescingQueue
    settings: Settings
    log: JsonLog


class ConsumerReconciler:
    """Reconciles one consumer at a time (or several, from a pool of workers: the network's
    verdict, which they share, is evaluated under a lock)."""

    def __init__(self, parts: ReconcileParts, provider_views: Callable[[], tuple[ProviderView, ...]]) -> None:
        self.caches = parts.caches
        self.storage = parts.storage
        self.network_shards = parts.network_shards
        self.writes = parts.writes
        self.events = parts.events
        self.metrics = parts.metrics
        self.queue = parts.queue
        self.settings = parts.settings
        self.log = parts.log
        self.provider_views = provider_views
        self.memory = TermMemory()
        self._started = threading.local()  # when the running reconcile began, per worker
        self._verdict_lock = threading.Lock()  # the verdicts and the hard-failure memory are shared
        self._burst = Burst()  # under the verdict lock: its answers per verdict

    def new_term(self) -> None:
        """Forget this term's memory: another leader may publish (and consumers may come and
        go) before this process leads again; the caches are the truth."""
        self.memory = TermMemory()

    # -- forgetting ----------------------------------------------------------------------
    def forget(self, name: str) -> None:
        """Drop everything remembered about consumer ``name`` (it is gone)."""
        self.memory.forget(name)
        self.queue.discard_delayed(name)

    def forget_deleted(self) -> None:
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

    # -- one consumer's reconcile -------------------------------------------------------
    def reconcile_safely(self, name: str, providers: tuple[ProviderView, ...]) -> None:
        started = self._started.at = time.perf_counter()
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
            self._gone(name, current, stored)
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
        judged = self._judge(name, network_view(network_obj), providers, now)
        held = self._held(name, consumer_obj, judged, current, now)
        if held is not None:
            self.queue.add_after(name, held + RECHECK_SLACK_SECONDS)
            return
        planned = self.plan(consumer, judged, previous)
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
                if net_writes and not self._write_network(split, net_writes, network_obj, judged):
                    self.queue.add(name)
                    return
                if work is not None:
                    planned = dataclasses.replace(planned, sharded=sharded)
                    work = dataclasses.replace(work, network=tuple(net_writes))
                    if not self._publish(
                        planned, work, consumer=consumer_obj, current=current, stored=stored, change=change
                    ):
                        return
        self.memory.judged_on[name] = published(consumer_obj, judged)
        self._follow_network(split, name)

    def _write_network(self, split: NetworkSplit, names: list[str], network: Obj, judged: NetworkVerdict) -> bool:
        with self._verdict_lock:
            at_once = self._burst.shard_writers(judged)
        return self.network_shards.write(split, names, network, at_once=at_once)

    def _gone(self, name: str, current: Obj | None, stored: dict[str, Obj]) -> None:
        """Consumer ``name`` is gone: forget it and delete its index and own shards."""
        self.forget(name)
        if (current is not None or stored) and not self.storage.remove(name, current, stored):
            self.queue.add(name)
        else:
            self.network_shards.sweep(self.caches, self.log)  # it may have been its network's last consumer

    def _judge(
        self, name: str, network: NetworkView, providers: tuple[ProviderView, ...], now: float
    ) -> NetworkVerdict:
        """The network's verdict (shared by its consumers, under the lock) with its hard-failure
        Events; consumer ``name`` is looked at again when a reading goes stale."""
        with self._verdict_lock:
            judged = self.memory.verdicts.evaluate(network, providers, now=now)
            for transition, obj in self.memory.hard_failures.transitions(judged, self.caches.providers.store.peek):
                self.events.hard_failure(transition, obj, max_age=judged.network.metrics_max_age_seconds)
        if judged.recheck_at is not None and judged.recheck_at > now:
            # A reading goes stale then: look again at that moment, not at the next resync.
            self.queue.add_after(name, judged.recheck_at - now + RECHECK_SLACK_SECONDS)
        return judged

    def _held(self, name: str, consumer: Obj, judged: NetworkVerdict, current: Obj | None, now: float) -> float | None:
        """Seconds to hold this consumer's publication of ``judged`` while a burst of creates is
        still being probed (:mod:`.burst`); None: publish now."""
        last = self.memory.judged_on.get(name)
        bound = HOLD_BATCHES * self.settings.burst_batch_wait
        if last is None or bound <= 0:
            return None
        behind = index_behind(current, self.network_shards.stored(judged.network.name))
        with self._verdict_lock:
            held = hold_for(last, judged, consumer, behind=behind, now=now, bound=bound, burst=self._burst)
        if held is not None and last.held_since is None:
            self.memory.judged_on[name] = dataclasses.replace(last, held_since=now)
        if held is not None:
            self.log.debug("publication of additions held", consumer=name, seconds=round(held, 3))
        return held

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

    def plan(self, consumer: ConsumerView, judged: NetworkVerdict, previous: Overlay | None) -> Planned:
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
    ) -> bool:
        """Store ``planned`` (:meth:`.storage.OverlayStorage.write`), then log (and record an
        Event for) ``change`` — None when admission did not change. False: not stored (queued again)."""
        overlay, sharded = planned.overlay, planned.sharded
        name = overlay.consumer
        with self.writes.tally(join=True) as tally:  # counting the network shards written before
            stored_ok = self.storage.write(sharded, work, consumer=consumer, current=current, stored=stored)
        if tally.bytes:
            self.metrics.publication_bytes.observe(tally.bytes)
        # Seconds since this reconcile began (0 outside a worker's reconcile): the log tells the
        # queue's wait from the reconcile's own time (scripts/bench/drainstages.py).
        seconds = round(time.perf_counter() - getattr(self._started, "at", time.perf_counter()), 4)
        if not stored_ok:
            self.queue.add(name)
            return False
        self.memory.published[name] = (consumer["metadata"].get("uid", ""), overlay)
        if change is None:
            self.log.info("overlay stored again", **stored_fields(overlay, work), bytes_written=tally.bytes)
            return True
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
        return True
