"""Probing providers and keeping their status: the prober, the only writer of InferenceProvider status.

One thread runs an event loop: each scheduler pass starts the due probes as tasks; *when* each
provider is due, how many probes run at once and what the backlog is are decided by
:mod:`.schedule` (a stable per-provider phase plus jitter, ``--probe-concurrency`` slots, never
two probes at once for one provider, the longest-waiting due probe first). The interval is the
operator's ``--probe-interval`` unless a network selecting the provider asks for a smaller
``spec.probeIntervalSeconds``. Probes that are due but find no free slot are the backlog; it
is reported on ``/metrics`` (``agn_probe_backlog``, ``agn_probe_lag_seconds``) and ``/healthz``
(``probes``) instead of silently ageing load readings. One probe is two GETs over a shared
keep-alive client (:mod:`.probe_http`). Every tunable is read from the operator's
:class:`.settings.Settings` when it is used: a new probe setting is a field there, nothing more.

The result is taken by :mod:`.probe_recorder` (the per-provider memory, a failed provider's
re-check, the status it means: :mod:`.provider_status`) and written (:mod:`.probe_writes`, in a
small thread pool while its probe's slot stays taken) only when its meaning changed (a drained provider's too: a new load reading that says the same is no news); the probes heartbeat
(:mod:`.heartbeat`), renewed while every status is current, vouches for the unchanged ones
(docs/operator.md, "Status writes at fleet size").

Only the leader probes and writes (see :mod:`.lease`): while this process does not lead, the
scheduler keeps nothing due, and every write goes through :class:`.writes.LeaderWrites`,
which refuses it. What the prober remembers per provider (its schedule, first round and the
recorder's memory) is dropped when the provider is deleted, and all of it when a new leadership term begins (another leader may have written
in between; the informer's cache is the truth then).

This module must never write provider spec, and never decides overlay membership.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import aiohttp

from agn.credentials import Tokens, no_secrets
from agn.logs import JsonLog
from agn.objects import Obj, network_view
from agn.operator.credentials import probe_provider
from agn.operator.heartbeat import HEARTBEAT_SECONDS
from agn.operator.informer import Store
from agn.operator.lease import Leadership
from agn.operator.metrics import OperatorMetrics
from agn.operator.probe_http import probe_session
from agn.operator.probe_recorder import ProbeRecorder
from agn.operator.probe_writes import ProbeWrites
from agn.operator.schedule import Backlog, ProbeSchedule, RateWindow, probe_interval, probe_load
from agn.operator.settings import Settings
from agn.operator.writes import LeaderWrites

SCHEDULER_TICK = 0.05

# Status writes block on the API server, so they run on threads, at most this many at once. In
# a burst of creates the first probes' writes and the creates share the one API server about
# evenly by requests in flight: with 16, 10,000 created by 16 client threads left ~1,000 first
# probes unwritten at the last create (7.6 s); with 32 none, and the creates took as long
# (docs/operator.md, "Transport").
STATUS_WRITERS = 32


@dataclasses.dataclass(frozen=True)
class ProbeStores:
    """What the prober reads from the API: the informer stores of the providers it probes (its
    own status writes are stored there at once) and of the networks, which may ask for shorter
    intervals, and the tokens of the providers' credentials (:mod:`agn.credentials`)."""

    providers: Store
    networks: Store
    tokens: Tokens = dataclasses.field(default_factory=lambda: Tokens(no_secrets))


class Prober:
    """Schedules probes and writes provider status while leading.

    The controller calls ``start``/``stop``, and ``begin_term`` each time this process becomes
    the leader; ``first_round`` is then set once every provider has been probed in that term.
    """

    def __init__(
        self,
        writes: LeaderWrites,
        namespace: str,
        *,
        settings: Settings,
        leadership: Leadership,
        stores: ProbeStores,
        log: JsonLog,
        stop: threading.Event,
        metrics: OperatorMetrics | None = None,
    ) -> None:
        self.tokens = stores.tokens
        # Every tunable is read from here when it is used (the --probe-* flags, --status-refresh),
        # so a new probe setting is a field of Settings and nothing in between.
        self.settings = settings
        self.leadership = leadership
        self.providers = stores.providers
        self.networks = stores.networks
        self.metrics = metrics or OperatorMetrics()
        self._log = log
        self._stop = stop
        # Probes run as tasks on one event loop (the "prober" thread), as many at once as the
        # schedule has slots, so a due probe waits in the schedule (where it is counted as
        # backlog). A status write blocks on the API server, so it runs in this pool (a write
        # holds its probe's slot, never the loop).
        concurrency = settings.probe_concurrency
        self._pool = ThreadPoolExecutor(max_workers=min(concurrency, STATUS_WRITERS), thread_name_prefix="probe-write")
        self._tasks: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None  # the probes' client, while the loop runs
        self._slot_freed: asyncio.Event | None = None  # set when a probe ends, to start the next at once
        self._lock = threading.Lock()
        self.schedule = ProbeSchedule(concurrency=concurrency, jitter=settings.probe_jitter)
        self._finished = RateWindow()  # probes finished per second, for /healthz
        # Set once every provider known at the start of a term has been probed (and its status
        # written if needed), so the first reconcile of a term does not act on statuses that went
        # stale while no operator led.
        self.first_round = threading.Event()
        self._first_round_left: set[str] | None = None
        self._term = 0  # the leadership term this prober works for; 0: none yet
        # Membership versions of the provider store (Store.version) the per-provider state was
        # last brought in line with: ``_seen_version`` for the memory, metric series and first
        # round, ``_schedule_version`` for the schedule (None: the schedule was cleared since).
        # A tick walks the fleet only when the store's version moved past them.
        self._seen_version: int | None = None
        self._schedule_version: int | None = None
        self.membership_syncs = 0  # ticks that followed a membership change (tests, benchmarks)
        # Status writes and the probes heartbeat (agn.operator.heartbeat), renewed under
        # _beat_lock, never while a status write has failed: it would vouch for that status.
        self._writes = ProbeWrites(writes, namespace, providers=self.providers, log=log)
        # What each probe's outcome does to its provider's memory and status.
        self.recorder = ProbeRecorder(
            self._writes, settings=settings, providers=self.providers, networks=self.networks, metrics=self.metrics
        )
        self._beat_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="prober", daemon=True)
        self._beater = threading.Thread(target=self._beat_loop, name="probes-heartbeat", daemon=True)

    @property
    def heartbeat_at(self) -> float | None:
        """The unix time of this process's last successful heartbeat renewal (None: none yet)."""
        return self._writes.heartbeat_at

    def start(self) -> None:
        self._thread.start()
        if not self.settings.status_refresh:
            self._beater.start()

    def _beat_loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self.beat()
            except Exception as exc:  # noqa: BLE001 - the heartbeat must outlive one failure
                self._log.error("probes heartbeat failed unexpectedly", error=repr(exc))

    def vouching(self, now: float) -> str | None:
        """Why this process may not renew the heartbeat now (``now``: monotonic), or None."""
        if not self.leadership.is_leader() or self.leadership.term() != self._term:
            return "not leading"
        if not self.first_round.is_set():
            return "first probe round of this term not finished"
        unwritten = self._writes.unwritten()
        if unwritten:
            return f"{unwritten} provider status write(s) failed"
        return None

    def beat(self) -> bool:
        """Renew the probes heartbeat if this process may vouch for every status now; its time
        is the recorder's watermark (:meth:`.probe_recorder.ProbeRecorder.watermark`), not the clock."""
        if self.settings.status_refresh:
            return False
        with self._beat_lock:
            why = self.vouching(time.monotonic())
            if why is not None:
                self._log.debug("probes heartbeat not renewed", reason=why)
                return False
            now = self.recorder.watermark(time.time())
            if self.heartbeat_at is not None and now <= self.heartbeat_at:
                return False  # nothing newer to vouch for (the least recent probe has not moved)
            return self._writes.heartbeat(self.leadership.identity, now)

    def begin_term(self, term: int) -> None:
        """Probe for leadership term ``term``: forget the last term's memory, start a new first round."""
        with self._lock:
            self._term = term
            self.recorder.clear()
            self.schedule.clear()
            self._schedule_version = None
            self.first_round.clear()
            self._first_round_left = set(self.providers.membership()[1])
            self._note_first_round_locked(())

    def _note_first_round_locked(self, done: Iterable[str]) -> None:
        if self._first_round_left is None:
            return
        self._first_round_left.difference_update(done)
        if not self._first_round_left:
            self._first_round_left = None
            self.first_round.set()

    def stop(self, *, timeout: float) -> None:
        self._thread.join(timeout)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _run(self) -> None:
        asyncio.run(self._schedule())

    async def _schedule(self) -> None:
        """Start the due probes as tasks every ``SCHEDULER_TICK`` and as soon as a probe ends
        (its slot is free: waiting for the next tick would cap the prober at ``concurrency``
        probes per tick); at stop, let the running ones end."""
        self._session = session = probe_session(concurrency=self.schedule.concurrency)
        self._slot_freed = freed = asyncio.Event()
        try:
            while not self._stop.is_set():
                freed.clear()
                for name in self.tick(time.monotonic()):
                    task = asyncio.create_task(self._probe_one(name), name=f"probe {name}")
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                try:
                    await asyncio.wait_for(freed.wait(), SCHEDULER_TICK)
                except TimeoutError:
                    pass
            if self._tasks:  # each ends within its timeouts (and a status write)
                await asyncio.wait(set(self._tasks))
        finally:
            await session.close()

    def tick(self, now: float) -> list[str]:
        """Forget deleted providers; mark and return the providers due for a probe at ``now``.

        Nothing is due unless this process leads in the term the prober was started for.

        Runs 20 times a second, so it costs O(1) plus O(k log N) for ``k`` started probes while
        the set of providers stays the same (status writes do not change it): following that
        set (schedule sync, forgetting the memory, metric series and first-round entries of
        deleted providers) walks the fleet only when the store's membership version moved.
        """
        leader, term = self.leadership.is_leader(), self.leadership.term()
        with self._lock:
            active = leader and term == self._term
            version = self.providers.version()
            if version != self._seen_version or (active and version != self._schedule_version):
                version, names = self.providers.membership()
                if version != self._seen_version:
                    self._seen_version = version
                    self.membership_syncs += 1
                    self.recorder.keep_only(names)
                    self.metrics.forget_providers(names)
                    self._note_first_round_locked(set(self._first_round_left or ()) - names)
                if active and version != self._schedule_version:
                    self.schedule.sync(names, now=now)
                    self._schedule_version = version
            if not active:
                self.schedule.clear()  # a follower keeps nothing due, so it reports no backlog (O(1) once empty)
                self._schedule_version = None
                return []
            networks: list | None = None

            def interval_of(name: str) -> float:
                nonlocal networks
                if networks is None:
                    networks = [network_view(n) for n in self.networks.peek_all()]
                obj = self.providers.peek(name)  # read only
                labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
                return probe_interval(labels, networks, default=self.settings.probe_interval)

            started = self.schedule.take(now=now, interval_of=interval_of)
        for probe in started:
            self.metrics.probe_started(late=probe.late)
        return [probe.name for probe in started]

    def backlog(self) -> Backlog:
        """What the schedule looked like after its last tick (for ``/metrics`` and ``/healthz``)."""
        with self._lock:
            return self.schedule.backlog()

    def load(self, now: float) -> dict[str, object]:
        """The probe load for ``/healthz`` (``now``: monotonic seconds; :func:`.schedule.probe_load`)."""
        with self._lock:
            backlog, in_flight = self.schedule.backlog(), self.schedule.in_flight_count()
            finished = self._finished.rate(now)
        networks = [network_view(n) for n in self.networks.peek_all()]
        default = self.settings.probe_interval
        intervals = [
            probe_interval((p.get("metadata") or {}).get("labels") or {}, networks, default=default)
            for p in self.providers.peek_all()
        ]
        return probe_load(
            backlog,
            in_flight=in_flight,
            finished=finished,
            intervals=intervals,
            concurrency=self.schedule.concurrency,
            interval=default,
            now=now,
        )

    def remembered(self) -> set[str]:
        """Provider names the prober holds any state for (tests: nothing of a deleted provider stays)."""
        with self._lock:
            return self.schedule.known() | self.recorder.known() | set(self._first_round_left or ())

    async def _probe_one(self, name: str) -> None:
        try:
            obj = self.providers.peek(name)  # read only: a copy per probe cost more than the probe's HTTP
            if obj is not None and not self._stop.is_set() and self.leadership.is_leader():
                assert self._session is not None, "probes run on the prober's event loop"
                await self._probe_and_record(self._session, obj)
        except Exception as exc:  # noqa: BLE001 - one provider's failure must not stop the others
            self._log.error("probe failed unexpectedly", provider=name, error=repr(exc))
        finally:
            with self._lock:
                again_in, now = self.recorder.again_in(name), time.monotonic()
                self.schedule.done(name, again_at=None if again_in is None else now + again_in)
                self._finished.add(now)
                self._note_first_round_locked((name,))
                if name not in self.providers:
                    # Deleted while its probe ran, perhaps after the tick that forgot it: a tick
                    # only looks again when the membership changes, so forget what the probe
                    # left behind now. A deletion after this check moves the version, and the
                    # next tick forgets it.
                    self.recorder.forget(name)
                    self.metrics.forget_provider(name)
            if self._slot_freed is not None:
                self._slot_freed.set()

    async def _probe_and_record(self, session: aiohttp.ClientSession, obj: Obj) -> None:
        spec = obj.get("spec") or {}
        endpoint = str(spec.get("endpoint", ""))
        started = time.perf_counter()
        timeout = self.settings.probe_timeout
        outcome = await probe_provider(session, spec, tokens=self.tokens, timeout=timeout, now=time.time())
        write = self.recorder.record(obj, endpoint, outcome, seconds=time.perf_counter() - started)
        if write is not None:
            await asyncio.get_running_loop().run_in_executor(self._pool, write)
