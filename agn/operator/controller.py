"""The operator's controller: wires caches, the work queue, the prober and the overlay writer.

Provider and network changes mark every consumer dirty; consumer, overlay and shard changes
mark that consumer. One worker thread takes coalesced batches and reconciles each consumer
level-triggered from the caches, writing its overlay only when what is stored differs.

**Storage** (:mod:`agn.shards`): a consumer's overlay is an index (the RoutingOverlay named
after it: revision, digest, counts, one digest per shard) plus RoutingOverlayShards, so no
object grows past etcd's request limit with the fleet. A publication writes the shards whose
digest changed first, then the index, then deletes shards the index no longer names — a
reader that follows the index always finds its shards. Whether to write is decided on the
index spec and the shards' digests, never on whole overlays (a sharded index has no
candidates); a drain of one provider rewrites one shard and the index. An inline index (an
earlier operator's whole overlay) is converted in place, its ``candidates`` removed, at the
same revision.
A periodic resync re-runs every consumer (and every overlay), because metrics freshness
depends on time and deletions can be missed while a watch is re-listed.

Lifecycle:

- **Leadership** (:mod:`.lease`): every process keeps its caches warm; only the leader's
  worker reconciles and only its prober probes, and every write goes through
  :class:`.writes.LeaderWrites`, which refuses it unless this process leads at that moment.
  Each time leadership is gained, a term begins: the prober's and the published-overlay
  memories are dropped, the worker waits (bounded) for one probe round, then reconciles
  every consumer.
- **Ownership** (:mod:`.ownership`): each overlay is controlled by its consumer (an
  ownerReference), so a garbage collector removes it with the consumer. Where none runs, the
  worker deletes overlays (index and shards) whose consumer is gone, or that belong to an
  earlier consumer of the same name — after confirming with a live read, and only that incarnation (uid
  precondition).
- **Forgetting**: per-consumer memory is dropped when the consumer is gone (on its reconcile,
  and on every resync against the cache), so nothing keyed by a deleted name stays.
- **Events and metrics** (:mod:`.events`, :mod:`.metrics`): an ``OverlayPublished`` Event on
  the consumer for each publication that changed admission, a ``ProviderExcluded`` /
  ``ProviderEligible`` Event on a provider when a hard failure starts / ends (transitions
  only); reconcile duration and errors are observed here, the rest is read at scrape time.

This is the only writer of RoutingOverlays and RoutingOverlayShards. It never writes provider spec or any status
(provider status belongs to :mod:`.prober`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from typing import Any

from agn import GROUP, VERSION
from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS, SHARDS, Conflict, Kube, KubeError, NotFound, Resource
from agn.logs import JsonLog
from agn.model import Candidate, ConsumerView, Overlay, ProviderView, next_revision
from agn.objects import consumer_view, name_of, network_view, provider_view
from agn.operator.elector import LeaderElector
from agn.operator.events import EventSink, HardFailures, note_for, observed
from agn.operator.informer import Informer, Obj
from agn.operator.lease import AlwaysLeader, Leadership, new_identity
from agn.operator.metrics import OperatorMetrics
from agn.operator.ownership import Verdict, desired_owner_references, owner_references_current, verdict
from agn.operator.prober import Prober
from agn.operator.pruning import prune
from agn.operator.reconcile import OverlayDiff, Plan, advance, change_log, diff_candidates
from agn.operator.verdicts import NetworkVerdict, Verdicts
from agn.operator.workqueue import CoalescingQueue
from agn.operator.writes import LeaderWrites, NotLeader
from agn.shards import (
    DEFAULT_SHARD_COUNT,
    MAX_SHARD_COUNT,
    Incomplete,
    Sharded,
    assemble,
    changed_shards,
    check_shard_count,
    consumer_of_shard,
    is_sharded,
    shard_names,
    surplus_shards,
)

ERROR_RETRY_SECONDS = 1.0
RECHECK_SLACK_SECONDS = 0.05
# How often a follower looks whether it leads now, and the longest a leader's worker waits
# between two looks at its leadership.
LEADERSHIP_POLL_SECONDS = 0.2
MAX_RECONCILE_WORKERS = 32
# Which operator process (its lease identity) wrote the overlay last.
PUBLISHED_BY = f"{GROUP}/published-by"


@dataclasses.dataclass(frozen=True)
class Settings:
    probe_interval: float = 1.0
    probe_timeout: float = 1.0
    probe_failure_threshold: int = 3
    # At most this many probes at once; more due ones wait (and are reported as backlog).
    probe_concurrency: int = 16
    # Random extra delay per probe, as a fraction of its interval, on top of its stable phase.
    probe_jitter: float = 0.1
    resync: float = 5.0
    coalesce_window: float = 0.1
    # During a long burst (a gateway-wide drain of hundreds of providers) no quiet period comes;
    # this caps how long a change waits, trading a few revisions for bounded latency.
    max_batch_wait: float = 1.0
    # Each consumer's overlay is stored as an index plus up to this many shards (agn.shards), so
    # no object grows with the fleet past etcd's request limit and a drain rewrites one shard.
    overlay_shards: int = DEFAULT_SHARD_COUNT
    # Consumers of one batch reconciled at once. Planning is cheap (sized by the change); what a
    # consumer waits for is its writes' round trips, which more workers overlap. On an API server
    # short of CPU (2 cores, measured) overlapping big shard writes only makes them compete, so
    # the default is one at a time; a larger control plane may gain from a few.
    reconcile_workers: int = 1

    def __post_init__(self) -> None:
        check_shard_count(self.overlay_shards)
        if not 1 <= self.reconcile_workers <= MAX_RECONCILE_WORKERS:
            raise ValueError(f"reconcile workers must be between 1 and {MAX_RECONCILE_WORKERS}")


@dataclasses.dataclass(frozen=True)
class ShardWork:
    """The writes one publication needs: shards to create or patch, whether the index is
    written, and stored shards the new index no longer names (deleted last)."""

    shards: list[str]
    index: bool
    surplus: list[str]


@dataclasses.dataclass(frozen=True)
class Planned:
    """A consumer's plan (:class:`agn.operator.reconcile.Plan`) and the overlay and storage it gave
    for the last revision asked of it."""

    plan: Plan
    overlay: Overlay
    sharded: Sharded


@dataclasses.dataclass(frozen=True)
class Change:
    """What a publication changed, diffed once for the log line and the Event."""

    previous_revision: int | None  # None: a first revision (or the previous one is not known)
    diff: OverlayDiff
    shards_compared: int | None  # the shards diffed; None: whole overlays were


def object_body(
    res: Resource, name: str, spec: dict[str, Any], *, owner_references: list[dict[str, Any]], published_by: str
) -> dict[str, Any]:
    """A new index or shard: owned by the consumer (so a garbage collector removes it with it)."""
    metadata: dict[str, Any] = {
        "name": name,
        "ownerReferences": owner_references,
        "annotations": {PUBLISHED_BY: published_by},
    }
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": res.kind, "metadata": metadata, "spec": spec}


def shard_digests(new: Sharded, stored: dict[str, Obj]) -> dict[str, str]:
    """The digests of the stored shards that hold what ``new`` would put there but the candidates.

    A stored shard of another network, consumer, position or shard count is left out, so
    :func:`agn.shards.changed_shards` rewrites it even if its candidates' digest matches."""
    out: dict[str, str] = {}
    for name, obj in stored.items():
        spec, want = obj.get("spec") or {}, new.shards.get(name)
        if want is None:
            continue
        if all(spec.get(k) == want[k] for k in ("network", "consumer", "shard", "shardCount")):
            out[name] = str(spec.get("digest", ""))
    return out


def index_patch(current: dict[str, Any] | None, index: dict[str, Any]) -> dict[str, Any]:
    """A merge patch taking the stored index spec to ``index``: every field it no longer has is
    set to null (a legacy inline overlay's ``candidates`` goes, for one)."""
    patch: dict[str, Any] = dict(index)
    for key in current or {}:
        if key not in index:
            patch[key] = None
    return patch


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
        self.writes = LeaderWrites(kube, self.leadership, log=log)
        self.queue = CoalescingQueue(window=settings.coalesce_window, max_window=settings.max_batch_wait)
        self.providers = self._informer(PROVIDERS, self._on_all_consumers)
        self.networks = self._informer(NETWORKS, self._on_all_consumers)
        self.consumers = self._informer(CONSUMERS, self._on_named)
        self.overlays = self._informer(OVERLAYS, self._on_named)
        self.shards = self._informer(SHARDS, self._on_shard)
        self.metrics = metrics or OperatorMetrics()
        self.metrics.watch_state(
            queue_depth=lambda: len(self.queue.pending()),
            leader=self.leadership.is_leader,
            overlays=self.overlays.store.peek_all,  # read at scrape time: no copies of a fleet
            providers=self.providers.store.peek_all,
        )
        self.events = EventSink(self.writes, instance=self.leadership.identity, log=log, stop=stop)
        # Per (network, provider): the hard failure last reported, so only transitions become Events.
        self.hard_failures = HardFailures()
        self.prober = Prober(
            self.writes,
            namespace,
            leadership=self.leadership,
            providers=self.providers.store,
            networks=self.networks.store,
            interval=settings.probe_interval,
            timeout=settings.probe_timeout,
            failure_threshold=settings.probe_failure_threshold,
            concurrency=settings.probe_concurrency,
            jitter=settings.probe_jitter,
            log=log,
            stop=stop,
            metrics=self.metrics,
        )
        self.metrics.watch_probes(lambda: self.prober.load(time.monotonic()))
        # Per consumer, forgotten when the consumer is gone. The last overlay published (with the
        # consumer's uid): revision continuity if an overlay is deleted under us.
        self._published: dict[str, tuple[str, Overlay]] = {}
        # The missing network last warned about, so the warning is logged once.
        self._missing_network: dict[str, str] = {}
        # Work proportional to change (agn.operator.verdicts): per network, each provider's
        # selection and hard failure kept across batches; per consumer, the last plan with what it
        # was planned from; per network, the verdict version whose hard failures were reported.
        self.verdicts = Verdicts()
        self._plans: dict[str, Planned] = {}
        self._verdict_lock = threading.Lock()  # the verdicts and the hard-failure memory are shared
        workers = settings.reconcile_workers
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="reconcile") if workers > 1 else None
        )
        self._reported: dict[str, int] = {}
        self._worker = threading.Thread(target=self._work, name="reconcile", daemon=True)

    def _informer(self, resource, on_change) -> Informer:
        return Informer(self.kube, resource, self.namespace, on_change=on_change, log=self.log, stop=self.stop)

    def _all(self) -> list[Informer]:
        return [self.providers, self.networks, self.consumers, self.overlays, self.shards]

    def _names(self) -> list[str]:
        """Every name that may need a reconcile: each consumer, each overlay and the consumer of
        each shard (either may be an orphan)."""
        shard_owners = {consumer_of_shard(n) for n in self.shards.store.names()}
        return sorted(
            set(self.consumers.store.names()) | set(self.overlays.store.names()) | {n for n in shard_owners if n}
        )

    # -- events ------------------------------------------------------------------------
    def _on_all_consumers(self, kind: str, obj: Obj | None) -> None:
        self.queue.add_all(self.consumers.store.names())

    def _on_named(self, kind: str, obj: Obj | None) -> None:
        if obj is None:
            self.queue.add_all(self._names())
        else:
            self.queue.add(obj["metadata"]["name"])

    def _on_shard(self, kind: str, obj: Obj | None) -> None:
        if obj is None:
            self.queue.add_all(self._names())
            return
        consumer = consumer_of_shard(obj["metadata"]["name"])
        if consumer is not None:
            self.queue.add(consumer)

    # -- lifecycle -----------------------------------------------------------------------
    def healthy(self) -> tuple[bool, str]:
        """Every cache synced and the reconcile worker alive (a healthy follower is healthy too)."""
        unsynced = [i.resource.plural for i in self._all() if not i.synced.is_set()]
        if unsynced:
            return False, f"caches not synced: {', '.join(unsynced)}"
        if not self._worker.is_alive():
            return False, "reconcile worker not running"
        dead = [i.health.name for i in self._all() if not i.health.live()]
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
            "watches": {i.health.name: i.health.to_dict() for i in self._all()},
            **self.leadership.status(),
            "writes": self.writes.counts(),
            "probes": self.prober.load(time.monotonic()),
        }

    def run(self) -> None:
        self.log.info(
            "operator starting",
            namespace=self.namespace,
            identity=self.leadership.identity,
            **dataclasses.asdict(self.settings),
        )
        for informer in self._all():
            informer.start()
        for informer in self._all():
            while not informer.synced.wait(0.2):
                if self.stop.is_set():
                    return
        self.log.info(
            "caches synced",
            providers=len(self.providers.store.names()),
            networks=len(self.networks.store.names()),
            consumers=len(self.consumers.store.names()),
            overlays=len(self.overlays.store.names()),
            shards=len(self.shards.store.names()),
        )
        # Only a process whose caches are synced competes for the lease.
        if self.elector is not None:
            self.elector.start()
        self.prober.start()
        self.events.start()
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
            if self.elector is not None:
                # After the writers stopped: a successor takes over at once instead of after expiry.
                self.elector.join(self.elector.timings.request_timeout + 1.0)
                self.elector.release()
            for informer in self._all():
                informer.join(0.1)  # watches end on their own; the threads are daemons
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
            self._published.clear()
            self._missing_network.clear()
            self.hard_failures.clear()
            self._plans.clear()
            self._reported.clear()
            self.verdicts = Verdicts()

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
        next_resync = time.monotonic()  # the first pass reconciles every consumer
        first = True
        while self._leading(term):
            now = time.monotonic()
            if now >= next_resync:
                self._forget_deleted()
                self.queue.add_all(self._names())
                next_resync = now + self.settings.resync
            timeout = max(0.0, min(next_resync - time.monotonic(), LEADERSHIP_POLL_SECONDS))
            batch = self.queue.wait_batch(timeout=timeout)
            if batch is None:
                return
            if not batch:
                continue
            # One snapshot of the providers per batch: every consumer in it is judged on the same
            # data. Views are converted once per provider version, not per batch.
            providers = tuple(self.providers.store.derived(provider_view))
            names = sorted(batch)
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
                    self._reconcile_safely(name, providers)
            if first:
                first = False
                self.log.info("initial reconcile done", consumers=sorted(batch), term=term)
        if not self.stop.is_set():
            self.log.info("not leading any more: reconcile paused", term=term)

    # -- forgetting ------------------------------------------------------------------------
    def _forget(self, name: str) -> None:
        """Drop everything remembered about consumer ``name`` (it is gone)."""
        self._published.pop(name, None)
        self._missing_network.pop(name, None)
        self._plans.pop(name, None)
        self.queue.discard_delayed(name)

    def _forget_deleted(self) -> None:
        """Drop per-consumer memory of every consumer the cache no longer has (a missed DELETED)."""
        live: set[str] = set(self.consumers.store.names())
        self.hard_failures.forget(set(self.providers.store.names()))
        networks = set(self.networks.store.names())
        self.verdicts.forget(networks)
        prune(self._reported, networks)
        gone = sorted(
            set(prune(self._published, live)) | set(prune(self._missing_network, live)) | set(prune(self._plans, live))
        )
        if gone:
            self.log.debug("forgot deleted consumers", consumers=gone)

    def remembered(self) -> set[str]:
        """Consumer names the controller holds any memory for (tests: nothing of a deleted one stays)."""
        return set(self._published) | set(self._missing_network) | set(self._plans)

    # -- reconcile -----------------------------------------------------------------------
    def _reconcile_leading(self, term: int, name: str, providers: tuple[ProviderView, ...]) -> None:
        if self._leading(term):  # else it waits for the next term's full pass
            self._reconcile_safely(name, providers)

    def _reconcile_safely(self, name: str, providers: tuple[ProviderView, ...]) -> None:
        started = time.perf_counter()
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
            providers = tuple(self.providers.store.derived(provider_view))
        consumer_obj = self.consumers.store.get(name)
        current = self.overlays.store.peek(name)  # read only: stored objects are never changed in place
        stored = self._stored_shards(name)
        if consumer_obj is None:
            self._forget(name)
            if current is not None or stored:
                self._remove_overlay(name, current, stored)
            return
        stale_index = current is not None and verdict(current, consumer_obj) is Verdict.STALE
        stale = {n: s for n, s in stored.items() if verdict(s, consumer_obj) is Verdict.STALE}
        if stale_index or stale:
            if not self._remove_overlay(name, current if stale_index else None, stale):
                return
            if stale_index:
                current = None  # a new consumer of an old name starts a new overlay history
            stored = self._stored_shards(name)
        consumer = consumer_view(consumer_obj)
        network_obj = self.networks.store.get(consumer.network)
        if network_obj is None:
            if self._missing_network.get(name) != consumer.network:
                self._missing_network[name] = consumer.network
                self.log.warning(
                    "consumer's network not found; overlay left unchanged", consumer=name, network=consumer.network
                )
            return
        if self._missing_network.pop(name, None) is not None:
            self.log.info("consumer's network found", consumer=name, network=consumer.network)

        uid = consumer_obj["metadata"].get("uid", "")
        published = self._published.get(name)
        remembered = published[1] if published is not None and published[0] == uid else None
        # Only the index's network, revision and digest decide the next revision; a sharded
        # index carries no candidates, so this Overlay has none (and is never compared whole).
        previous = Overlay.from_spec(current["spec"]) if current is not None else remembered
        now = time.time()
        network = network_view(network_obj)
        with self._verdict_lock:
            judged = self.verdicts.evaluate(network, providers, now=now)
            self._report_hard_failures(judged)
        planned = self._plan(consumer, judged, previous)
        overlay, sharded = planned.overlay, planned.sharded
        if judged.recheck_at is not None and judged.recheck_at > now:
            # A reading goes stale then: look again at that moment, not at the next resync.
            self.queue.add_after(name, judged.recheck_at - now + RECHECK_SLACK_SECONDS)
        work = self._shard_work(current, stored, sharded, consumer_obj)
        if work is None:
            return
        admission_changed = previous is None or (previous.network, previous.revision, previous.digest) != (
            overlay.network,
            overlay.revision,
            overlay.digest,
        )
        change = self._change(planned, current, stored, remembered) if admission_changed else None
        self._publish(overlay, sharded, work, consumer=consumer_obj, current=current, stored=stored, change=change)

    def _plan(self, consumer: ConsumerView, judged: NetworkVerdict, previous: Overlay | None) -> Planned:
        """The consumer's overlay and its storage, sized by the change (:mod:`.reconcile`).

        The plan is moved only when the network's verdict version changed, by the providers that
        changed since (or made afresh for a changed consumer or shard count, or a version too
        old); a batch woken by probes that only refreshed readings costs no planning. The
        revision is asked of the stored ``previous`` last, so the plan this operator has just
        published (``previous`` is then its own overlay) is taken as it is, not planned again."""
        known = self._plans.get(consumer.name)
        plan = advance(known.plan if known is not None else None, consumer, judged, self.settings.overlay_shards)
        if (
            known is not None
            and known.plan is plan
            and next_revision(previous, plan.digest, network=plan.network) == known.overlay.revision
        ):
            return known
        overlay = plan.overlay(previous)
        planned = Planned(plan, overlay, plan.sharded(overlay))
        self._plans[consumer.name] = planned
        return planned

    def _stored_shards(self, consumer: str) -> dict[str, Obj]:
        """The consumer's shards in the cache, by name (every name a shard count allows); read
        only, like every object the store hands out without copying."""
        out = {}
        for shard in shard_names(consumer, MAX_SHARD_COUNT):
            obj = self.shards.store.peek(shard)
            if obj is not None:
                out[shard] = obj
        return out

    def _shard_work(
        self, current: Obj | None, stored: dict[str, Obj], sharded: Sharded, consumer: Obj
    ) -> ShardWork | None:
        """What must be written to store ``sharded``, or None when the API already holds it.

        Compared are the index spec (network, revision, digest, counts and each shard's digest),
        each shard's digest and position, and every object's owner references (adoption)."""
        writes = set(changed_shards(sharded, shard_digests(sharded, stored)))
        writes |= {n for n in sharded.shards if n in stored and not owner_references_current(stored[n], consumer)}
        surplus = surplus_shards(sharded, stored)
        index = (
            current is None
            or (current.get("spec") or {}) != sharded.index
            or not owner_references_current(current, consumer)
        )
        if not (writes or surplus or index):
            return None
        return ShardWork(shards=sorted(writes), index=index, surplus=surplus)

    def _change(
        self, planned: Planned, current: Obj | None, stored: dict[str, Obj], remembered: Overlay | None
    ) -> Change:
        """What publishing ``planned`` changes, diffed once (for the log line and the Event).

        Only the shards whose digest differs between the stored index and the new one are
        compared: the stored ones (at the digests the stored index gives them) against the
        plan's. Shards at equal digests hold equal candidates. When the stored index is inline,
        of another shard count, or one of those shards is not in hand at its digest, the whole
        previous overlay is compared instead (:meth:`_previous_candidates`)."""
        plan, overlay = planned.plan, planned.overlay
        spec = (current or {}).get("spec") or {}
        if current is not None and is_sharded(spec) and spec.get("shardCount") == plan.shard_count:
            old = {str(e.get("name", "")): e.get("digest") for e in spec.get("shards") or ()}
            new = {e["name"]: e["digest"] for e in planned.sharded.index["shards"]}
            differing = sorted(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))
            before: dict[str, Any] = {}  # candidate id -> the stored candidate
            in_hand = True
            for name in differing:
                if name not in old:
                    continue
                shard = (stored.get(name) or {}).get("spec") or {}
                if shard.get("digest") != old[name] or shard.get("consumer") != spec.get("consumer"):
                    in_hand = False  # not at the stored index's digest: compare whole overlays
                    break
                before.update((str(c.get("id", "")), c) for c in shard.get("candidates") or ())
            if in_hand:
                after = {  # candidate id -> (the planned candidate, its spec form)
                    c.id: (c, d)
                    for n in differing
                    if n in new
                    for c, d in zip(
                        plan.members[planned.sharded.shards[n]["shard"]],
                        planned.sharded.shards[n]["candidates"],
                        strict=True,
                    )
                }
                # Only candidates whose stored form is not the new one's are parsed and compared.
                gone = [Candidate.from_dict(d) for i, d in before.items() if i not in after or d != after[i][1]]
                came = [c for i, (c, d) in after.items() if i not in before or before[i] != d]
                revision = Overlay.from_spec(spec).revision
                return Change(revision, diff_candidates(gone, came), len(differing))
        previous = self._previous_candidates(current, stored, remembered)
        diff = diff_candidates(previous.candidates if previous else (), overlay.candidates)
        return Change(previous.revision if previous else None, diff, None)

    def _previous_candidates(
        self, current: Obj | None, stored: dict[str, Obj], remembered: Overlay | None
    ) -> Overlay | None:
        """The overlay the consumer had, candidates included, for the change log and the Event:
        the stored index assembled with the cached shards, else what this term published last
        (if it is that revision), else None."""
        if current is not None:
            spec = current.get("spec") or {}
            try:
                return Overlay.from_spec(assemble(spec, {n: o.get("spec") for n, o in stored.items()}))
            except Incomplete:
                pass
            if remembered is not None and (remembered.revision, remembered.digest) == (
                spec.get("revision"),
                spec.get("digest"),
            ):
                return remembered
            return None
        return remembered

    def _report_hard_failures(self, judged: NetworkVerdict) -> None:
        """An Event for each provider of the network whose hard failure began, changed or ended.

        Consumers of the same network share one memory, so each transition is reported once;
        a verdict version already reported has no transitions left to find."""
        network = judged.network
        if self._reported.get(network.name) == judged.version:
            return
        self._reported[network.name] = judged.version
        for view, failure in judged.selected:
            if not observed(view):
                continue  # not probed yet: not failing, just not looked at yet
            obj = self.providers.store.peek(view.name)
            if obj is None:
                continue
            change = self.hard_failures.observe(network.name, view.name, obj["metadata"].get("uid", ""), failure)
            if change is not None:
                self.events.hard_failure(change, obj, max_age=network.metrics_max_age_seconds)

    def _publish(
        self,
        overlay: Overlay,
        sharded: Sharded,
        work: ShardWork,
        *,
        consumer: Obj,
        current: Obj | None,
        stored: dict[str, Obj],
        change: Change | None,
    ) -> None:
        """Write the changed shards, then the index, then delete the shards it no longer names;
        log (and record an Event for) ``change`` — None when admission did not change.

        In this order a reader that follows the index finds every shard it names already at
        the index's digest; surplus shards go only once no index names them."""
        name = overlay.consumer
        owners = desired_owner_references(current, consumer)
        identity = self.leadership.identity
        try:
            for shard in work.shards:
                spec = sharded.shards[shard]
                old = stored.get(shard)
                if old is None:
                    body = object_body(SHARDS, shard, spec, owner_references=owners, published_by=identity)
                    written = self.writes.create(SHARDS, self.namespace, body)
                else:
                    written = self.writes.merge_patch(
                        SHARDS, self.namespace, shard, self._patch(old, owners, identity, spec)
                    )
                self.shards.store.upsert(written)
            if work.index:
                if current is None:
                    body = object_body(OVERLAYS, name, sharded.index, owner_references=owners, published_by=identity)
                    written = self.writes.create(OVERLAYS, self.namespace, body)
                else:
                    spec = index_patch(current.get("spec"), sharded.index)
                    written = self.writes.merge_patch(
                        OVERLAYS, self.namespace, name, self._patch(current, owners, identity, spec)
                    )
                self.overlays.store.upsert(written)
            for shard in work.surplus:
                try:
                    self.writes.delete(SHARDS, self.namespace, shard, uid=stored[shard]["metadata"].get("uid"))
                except NotFound:
                    pass  # gone already
                self.shards.store.remove(shard)
        except (Conflict, NotFound) as exc:
            # Our cache was behind (or an object was deleted): refresh it and plan again.
            self._refresh_overlay(name, [*sharded.shards, *stored])
            self.log.info("overlay changed under us; re-planning", consumer=name, reason=type(exc).__name__)
            self.queue.add(name)
            return
        self._published[name] = (consumer["metadata"].get("uid", ""), overlay)
        if change is None:
            self.log.info(
                "overlay stored again",
                consumer=name,
                revision=overlay.revision,
                shards_written=len(work.shards),
                index_written=work.index,
                shards_deleted=len(work.surplus),
            )
            return
        states = sharded.index["admission"]
        self.log.info(
            "overlay published",
            consumer=name,
            network=overlay.network,
            revision=overlay.revision,
            previous_revision=change.previous_revision,
            digest=overlay.digest,
            shards_written=len(work.shards),
            shards_deleted=len(work.surplus),
            shards_compared=change.shards_compared,
            changes=change_log(change.diff, states),
        )
        note = note_for(
            change.diff,
            network=overlay.network,
            revision=overlay.revision,
            states=states,
            previous_revision=change.previous_revision,
        )
        self.events.overlay_published(consumer, note)

    @staticmethod
    def _patch(old: Obj, owners: list[dict[str, Any]], identity: str, spec: dict[str, Any]) -> dict[str, Any]:
        """A merge patch conditional on ``old``'s resourceVersion (409 if someone wrote since)."""
        return {
            "metadata": {
                "resourceVersion": old["metadata"]["resourceVersion"],
                "ownerReferences": owners,
                "annotations": {PUBLISHED_BY: identity},
            },
            "spec": spec,
        }

    def _remove_overlay(self, name: str, overlay: Obj | None, shards: dict[str, Obj]) -> bool:
        """Delete an overlay (index and shards) whose consumer is gone, or of an earlier consumer
        of the same name.

        The cache can lag behind the API (a new leader's consumer cache, say), so the consumer
        is read live first; each delete is conditional on the object's uid, so only the
        incarnation judged here is removed. The index goes first, so no reader follows an index
        to shards that are gone. Returns True when all of them are gone.
        """
        try:
            live: Obj | None = self.kube.get(CONSUMERS, self.namespace, name)
        except NotFound:
            live = None
        if live is not None:
            self.consumers.store.upsert(live)
        doomed: list[tuple[Resource, Obj]] = [(OVERLAYS, overlay)] if overlay is not None else []
        doomed += [(SHARDS, shards[n]) for n in sorted(shards)]
        kept = [name_of(o) for _, o in doomed if verdict(o, live) not in (Verdict.ORPHAN, Verdict.STALE)]
        if kept:
            self.log.info("overlay's consumer exists after all; keeping the overlay", consumer=name, kept=kept)
            self.queue.add(name)
            return False
        for res, obj in doomed:
            obj_name = name_of(obj)
            try:
                self.writes.delete(res, self.namespace, obj_name, uid=obj["metadata"].get("uid"))
            except NotFound:
                pass  # gone already (a garbage collector, or an earlier attempt)
            except Conflict:
                self._refresh_overlay(name, list(shards))  # replaced meanwhile: judge the new one
                self.queue.add(name)
                return False
            (self.overlays if res is OVERLAYS else self.shards).store.remove(obj_name)
        judged = verdict(overlay if overlay is not None else doomed[0][1], live)
        self.log.info(
            "overlay deleted",
            consumer=name,
            reason=judged.value,
            revision=((overlay or {}).get("spec") or {}).get("revision"),
            shards=len(shards),
        )
        return True

    def _refresh_overlay(self, name: str, shards: list[str]) -> None:
        """Read the consumer's index and the named shards again (the cache was behind)."""
        for res, obj_name in [(OVERLAYS, name), *((SHARDS, s) for s in sorted(set(shards)))]:
            store = (self.overlays if res is OVERLAYS else self.shards).store
            try:
                store.upsert(self.kube.get(res, self.namespace, obj_name))
            except NotFound:
                store.remove(obj_name)
