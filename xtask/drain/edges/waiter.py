"""The convergence waiter: watch-driven, with a deadline, two agreeing observations.

List+watch followers (:func:`agn.watching.follow`: providers, consumers, overlay indexes and,
once a verdict finds a provider absent from an overlay, the probes heartbeat) keep a cache and
wake the waiter on every event about an object the wait is about.
The predicate asks only where the selected providers stand, so of a sharded overlay only the
shards that hold their candidates are read (:func:`agn.overlays.read_partial`: by name, and
again only when the index gives a shard a new digest) — one shard per consumer for a single
drain, however large the fleet. While such a shard is missing or not yet at the index's digest
the consumer counts as not converged (and the reason names the shard), so the waiter never
judges a mix of two revisions. When the cached view satisfies the predicate, a confirming observation
follows, every kind in it as of the write or later (from a watch that has shown an event at or
after the write's resourceVersion, else a fresh LIST: :meth:`ConvergenceWaiter._fresh`);
completion needs the two to agree (docs/provider-drain.md, step 9). Watches
start from the lists the run has already read when it hands them over (``start(seen=...)``:
no second LIST of the same objects), and watches that end are resumed from the last resourceVersion; ``410 Gone`` triggers a re-list; other
errors back off and retry. No fixed sleeps: the waiter blocks on events, re-checking about
once a second because metrics staleness depends on the clock.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from agn.kube import CONSUMERS, LEASES, NETWORKS, OVERLAYS, PROVIDERS, Kube, KubeError, Resource
from agn.model import Overlay
from agn.objects import Obj, consumer_revisions, consumer_view, name_of, network_view, provider_view, version_of
from agn.operator.heartbeat import HEARTBEAT_LEASE, heartbeat_time
from agn.overlays import ShardCache, read_partial
from agn.shards import Incomplete, is_sharded, shards_holding
from agn.watching import FollowOptions, WatchHealth, start_follower
from xtask.drain.core.converge import Agreement, Convergence, Observation, Verdict, evaluate
from xtask.drain.core.progress import ApiServerNotice, Observed, Progress
from xtask.drain.core.states import Outcome, WaitState
from xtask.drain.edges.targets import Listed  # a list a run has already read, to start a watch from

# The probes heartbeat (a Lease, agn.operator.heartbeat) vouches for the providers' unchanged
# statuses: the expected overlay judges their freshness as of it, as the operator does.
_KINDS = (PROVIDERS, CONSUMERS, OVERLAYS, LEASES)
SHARD_READS_AT_ONCE = 8
# When every watch of the wait has been failing this long, the run says so (a progress event
# naming the server's last error); when they have failed for UNREACHABLE_BOUND, the wait ends
# as "unreachable" instead of waiting out --timeout against an API server that is gone (an
# `env down`, a crashed control plane). A restart of the API server on the same address heals
# well within the bound and the wait goes on.
UNREACHABLE_NOTICE = 5.0
UNREACHABLE_BOUND = 30.0


class _Cache:
    """The objects of one kind that the wait is about (``wanted``: names, or a test of a name),
    kept from list+watch.

    Events about any other object of the kind — in a fleet, almost all of them: every other
    provider's status — are dropped without waking the waiter,
    so a wait among thousands of providers re-evaluates only when something it watches changed.
    """

    def __init__(self, wake: queue.Queue[str], label: str, wanted: Iterable[str] | Callable[[str], bool]) -> None:
        self.items: dict[str, Obj] = {}
        # How far this kind's stream has come (the highest resourceVersion it delivered, of any
        # object, wanted or not; None until one is a number): the view in ``items`` is the
        # server's as of at least this version, since a watch delivers its events in order.
        self.version: int | None = None
        self.wants: Callable[[str], bool] = wanted if callable(wanted) else frozenset(wanted).__contains__
        self.lock = threading.Lock()
        self.wake = wake
        self.label = label
        self.synced = threading.Event()

    def snapshot(self, items: list[Obj]) -> None:
        with self.lock:
            self.items = {name: o for o in items if self.wants(name := name_of(o))}
            # A list is read at a version at least its newest item's: a lower bound is enough.
            self.version = max((v for o in items if (v := version_of(o)) is not None), default=self.version)
        self.synced.set()
        self.wake.put(self.label)

    def event(self, kind: str, obj: Obj) -> None:
        name = name_of(obj)
        if not self.wants(name):
            with self.lock:
                self._advance(obj)
            return
        with self.lock:
            if kind == "DELETED":
                self.items.pop(name, None)
            else:
                self.items[name] = obj
            self._advance(obj)
        self.wake.put(self.label)

    def _advance(self, obj: Obj) -> None:
        version = version_of(obj)
        if version is not None and (self.version is None or version > self.version):
            self.version = version

    def seen_since(self, version: int) -> bool:
        """Whether this stream has delivered an event at or after ``version`` (its view is then
        at least that recent)."""
        with self.lock:
            return self.version is not None and self.version >= version

    def get(self, name: str) -> Obj | None:
        with self.lock:
            return self.items.get(name)

    def copy(self) -> dict[str, Obj]:
        with self.lock:
            return dict(self.items)


@dataclasses.dataclass
class WaitResult:
    state: WaitState
    verdict: Verdict | None
    observations: int
    seconds: float
    error: str = ""  # unreachable: the last error of the watches


def by_name(names: Iterable[str]) -> str | None:
    """``metadata.name=X`` when exactly one name is wanted, else None (list them all)."""
    wanted = set(names)
    return f"metadata.name={next(iter(wanted))}" if len(wanted) == 1 else None


class ConvergenceWaiter:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        *,
        providers: list[str],
        network: str,
        consumers: list[str],
        drain: bool,
        progress: Progress,
        network_obj: Obj | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.providers = providers
        self.network = network
        self.consumers = consumers
        self.drain = drain
        self.progress = progress
        self._network_obj = network_obj  # as read before the writes; else read when the wait starts
        self._wake: queue.Queue[str] = queue.Queue()
        self._stop_watches = threading.Event()
        # A consumer's RoutingOverlay (the index) has the consumer's name.
        wanted: dict[Resource, Iterable[str] | Callable[[str], bool]] = {
            PROVIDERS: providers,
            CONSUMERS: consumers,
            OVERLAYS: consumers,
            LEASES: [HEARTBEAT_LEASE],
        }
        self._caches = {r.plural: _Cache(self._wake, r.plural, wanted[r]) for r in _KINDS}
        self._health = {r.plural: WatchHealth(r.plural) for r in _KINDS}
        # One wanted object of a kind is listed and watched by name: a single drain among 5,000
        # providers reads one provider, not the fleet.
        self._field_selectors = {
            PROVIDERS.plural: by_name(providers),
            CONSUMERS.plural: by_name(consumers),
            OVERLAYS.plural: by_name(consumers),
            LEASES.plural: by_name([HEARTBEAT_LEASE]),
        }
        # The shards holding the selected providers, kept by digest (read in the waiting thread).
        self.shards = ShardCache(kube, namespace)
        # overlay name -> (index resourceVersion and the digests of the shards read, parsed)
        self._parsed: dict[str, tuple[tuple, Overlay]] = {}
        self._started = False
        self._following: set[str] = set()  # the kinds whose follower has started
        self._heartbeat_from: Listed | None = None  # the run's read of the heartbeat, not followed yet
        self.fresh_reads = 0  # LISTs of the confirming observations (kinds no watch had proved)

    def start(self, seen: Mapping[Resource, Listed] | None = None, *, shards: ShardCache | None = None) -> None:
        """Start the list+watch followers. A run calls this before its writes, so the caches are
        synced by the time the change lands and the first observation costs no extra round trip.

        ``seen``: what the run has already read of the kinds the wait follows (providers,
        consumers, overlay indexes, the heartbeat Lease), each as a list's items and
        resourceVersion (a GET as ``([obj], its resourceVersion)``); those kinds start their
        watch from there instead of listing again (:class:`agn.watching.FollowOptions`), except
        the heartbeat: the run's read of it is held, and its watch starts from there only once a
        verdict judges a provider on its freshness (none does while every selected provider is
        in every overlay: a single drain's usual wait follows three kinds, not four).
        ``shards``: the cache the run read the overlays' shards through: the wait reads only the
        shards it does not hold at the digest an index gives them (one reader at a time owns a
        :class:`~agn.overlays.ShardCache`: the run hands it over here)."""
        if self._started:
            return
        self._started = True
        if shards is not None:
            self.shards = shards
        for res in _KINDS:
            listed = (seen or {}).get(res)
            if res is LEASES and listed is not None:
                # The heartbeat judges only a provider absent from an overlay: held as the run
                # read it, and followed from there once a verdict finds one (:meth:`_need_heartbeat`).
                self._caches[res.plural].snapshot(listed[0])
                self._heartbeat_from = listed
                continue
            self._follow(res, listed)

    def _follow(self, res: Resource, listed: Listed | None) -> None:
        """Start following ``res`` (its watch from ``listed`` when given, else list+watch)."""
        cache = self._caches[res.plural]

        def wake(exc: Exception, delay: float, label: str = res.plural) -> None:
            self._wake.put(label)  # a failing watch is news: the wait re-checks, naming it

        self._following.add(res.plural)
        start_follower(
            self.kube,
            res,
            self.namespace,
            name=f"watch-{res.plural}",
            on_snapshot=cache.snapshot,
            on_event=cache.event,
            stop=self._stop_watches,
            options=FollowOptions(
                field_selector=self._field_selectors[res.plural],
                on_error=wake,
                health=self._health[res.plural],
                listed=listed,
            ),
        )

    def _need_heartbeat(self, verdict: Verdict) -> None:
        """Follow the heartbeat from the run's read of it once ``verdict`` judged a provider on
        its freshness (found one absent from an overlay); until then no verdict used it."""
        if self._heartbeat_from is not None and any(c.state == "absent" for c in verdict.providers):
            listed, self._heartbeat_from = self._heartbeat_from, None
            self._follow(LEASES, listed)

    def _observe(self, lookup: Callable[[Resource, str], Obj | None], network_obj: Obj) -> Observation:
        provs = {}
        heartbeat = heartbeat_time(lookup(LEASES, HEARTBEAT_LEASE))
        for name in self.providers:
            obj = lookup(PROVIDERS, name)
            provs[name] = provider_view(obj, heartbeat) if obj else None
        ids = sorted({p.candidate_id for p in provs.values() if p is not None})
        # Every consumer's shard that is not in hand yet is read at once, not one after another.
        indexes = [o["spec"] for name in self.consumers if (o := lookup(OVERLAYS, name)) and o.get("spec")]
        self.shards.prefetch(
            [(i, shards_holding(i, ids)) for i in indexes if is_sharded(i)], parallel=SHARD_READS_AT_ONCE
        )
        consumers, revisions, overlays = {}, {}, {}
        for name in self.consumers:
            c = lookup(CONSUMERS, name)
            consumers[name] = (
                consumer_view(c)
                if c
                else consumer_view({"metadata": {"name": name}, "spec": {"network": self.network}})
            )
            revisions[name] = consumer_revisions(c) if c else (None, None)
            o = lookup(OVERLAYS, name)
            overlays[name] = self._overlay(o, ids) if o and o.get("spec") else None
        return Observation(provs, network_view(network_obj), consumers, revisions, overlays, time.time())

    def _overlay(self, obj: Obj, candidate_ids: list[str]) -> Overlay | Incomplete:
        """The consumer's overlay from its index ``obj``: an inline one whole; a sharded one with
        the candidates of the shards that hold ``candidate_ids`` (the selected providers'), or
        :class:`Incomplete` while one of those is missing or at another digest.

        Parsed once per index resourceVersion and digests of the shards read (most wake-ups do
        not change them)."""
        index = obj["spec"]
        wanted = shards_holding(index, candidate_ids) if is_sharded(index) else []
        listed = {str(e.get("name", "")): e.get("digest") for e in index.get("shards") or ()}
        name, version = name_of(obj), str(obj.get("metadata", {}).get("resourceVersion") or "")
        key = (version, tuple((n, listed.get(n)) for n in wanted))
        known = self._parsed.get(name)
        if known is not None and version and known[0] == key:
            return known[1]
        try:
            spec = read_partial(self.shards, index, candidate_ids)
        except Incomplete as exc:
            return exc
        overlay = Overlay.from_spec(spec)
        self._parsed[name] = (key, overlay)
        return overlay

    def know_network(self, network_obj: Obj | None) -> None:
        """The network as the run read it after the waiter started (under the drain locks)."""
        if network_obj is not None:
            self._network_obj = network_obj

    def _cached(self, res: Resource, name: str) -> Obj | None:
        return self._caches[res.plural].get(name)

    def _fresh(
        self, written: int | None = None, judged: Verdict | None = None
    ) -> Callable[[Resource, str], Obj | None]:
        """A lookup for the confirming observation, every kind of it read at or after the
        write. ``written``: the newest resourceVersion this run's writes returned. A kind whose
        watch has delivered an event at or after it is taken from its cache (its view is then at
        least as recent as the write: what a fresh read would prove, proved already); every
        other kind is read again, one LIST each (by name when one object of it is wanted, as the
        watches do). The heartbeat is read again only when ``judged`` (the cached
        verdict being confirmed) judged a provider on its freshness, i.e. found one absent from
        an overlay; a provider an overlay lists is judged on the overlay alone. Without
        ``written`` every kind is read again. The shards are read through :attr:`shards`
        against these indexes: a shard held at the digest an index gives it is that shard (its
        digest is its content's), any other is read again."""
        freshness = judged is None or any(c.state == "absent" for c in judged.providers)
        stale = [
            r
            for r in _KINDS
            if written is None or (not self._caches[r.plural].seen_since(written) and (r is not LEASES or freshness))
        ]
        snapshot = {r.plural: self._caches[r.plural].copy() for r in _KINDS if r not in stale}
        for res in stale:
            snapshot[res.plural] = {name_of(o): o for o in self._list(res)}
        self.fresh_reads += len(stale)
        return lambda res, name: snapshot.get(res.plural, {}).get(name)

    def _list(self, res: Resource) -> list[Obj]:
        return self.kube.list(res, self.namespace, field_selector=self._field_selectors[res.plural])[0]

    def close(self) -> None:
        self._stop_watches.set()

    def unreachable_for(self) -> tuple[float, str]:
        """How long every watch has been failing (0 while any works), and the last error."""
        health = [h for kind, h in self._health.items() if kind in self._following]
        if not health or any(h.failing_since is None for h in health):
            return 0.0, ""
        worst = min(health, key=WatchHealth.failing_for)
        return worst.failing_for(), worst.last_error

    def wait(self, *, timeout: float, stop: threading.Event, written: Iterable[Outcome] = ()) -> WaitResult:
        """Wait until two consecutive observations agree the change is served (or the timeout,
        ``stop``, an unreachable API server). ``written``: this run's writes; the confirming
        observation re-reads only the kinds no watch has shown at or after the newest of them."""
        start = time.monotonic()
        since = max((o.resource_version for o in written if o.resource_version is not None), default=None)
        deadline = start + timeout
        agreement = Agreement()
        network_obj = self._network_obj or self.kube.get(NETWORKS, self.namespace, self.network)
        self.start()
        verdict: Verdict | None = None
        last_lagging: tuple[str, ...] = ()
        noticed = False
        try:
            while True:
                if stop.is_set():
                    return WaitResult(WaitState.INTERRUPTED, verdict, agreement.count, time.monotonic() - start)
                down, error = self.unreachable_for()
                if down >= UNREACHABLE_BOUND:
                    return WaitResult(WaitState.UNREACHABLE, verdict, agreement.count, time.monotonic() - start, error)
                if (down >= UNREACHABLE_NOTICE) != noticed:
                    noticed = not noticed
                    self.progress(ApiServerNotice(reachable=not noticed, seconds=round(down, 1), error=error))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return WaitResult(WaitState.TIMEOUT, verdict, agreement.count, time.monotonic() - start, error)
                try:
                    self._wake.get(timeout=min(remaining, 1.0))
                    while True:  # coalesce a burst of events into one observation
                        self._wake.get_nowait()
                except queue.Empty:
                    pass
                if not all(c.synced.is_set() for c in self._caches.values()):
                    continue
                verdict = evaluate(self._observe(self._cached, network_obj), drain=self.drain)
                self._need_heartbeat(verdict)
                agreed = agreement.add(verdict)
                if verdict.terminal and not agreed:
                    # The cached view says done: confirm with a second, fresh observation.
                    try:
                        verdict = evaluate(self._observe(self._fresh(since, verdict), network_obj), drain=self.drain)
                    except KubeError:
                        continue
                    self._need_heartbeat(verdict)
                    agreed = agreement.add(verdict)
                if verdict.lagging != last_lagging:
                    last_lagging = verdict.lagging
                    self.progress(Observed(verdict.state.value, tuple(verdict.lagging)))
                if agreed:
                    state = WaitState.CONVERGED if verdict.state is Convergence.CONVERGED else WaitState.NOT_ELIGIBLE
                    return WaitResult(state, verdict, agreement.count, time.monotonic() - start)
        finally:
            self.close()
