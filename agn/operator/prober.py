"""Probing providers and writing their status: the only writer of InferenceProvider status.

One thread runs an event loop: each scheduler pass starts the due probes as tasks; *when* each provider is due,
how many probes run at once and what the backlog is are decided by :mod:`.schedule` (a
stable per-provider phase plus jitter, ``--probe-concurrency`` slots, never two probes at once
for one provider, the longest-waiting due probe first). The interval is the operator's
``--probe-interval`` unless a network selecting the provider asks for a smaller
``spec.probeIntervalSeconds``. Probes that are due but find no free slot are the backlog; it
is reported on ``/metrics`` (``agn_probe_backlog``, ``agn_probe_lag_seconds``) and ``/healthz``
(``probes``) instead of silently ageing load readings. A probe GETs ``{endpoint}/healthz`` and
``{endpoint}/metrics`` with a timeout, exactly at the endpoint as given: no redirects, no
proxies, and an invalid endpoint is not dialled at all. Its HTTP client (aiohttp) keeps
connections alive: one host:port (a pool of fake providers, or a provider's own) is probed
over a few reused connections (at most ``MAX_CONNECTIONS_PER_HOST``) instead of two new ones
per probe. A status
write blocks on the API server, so it runs in a small thread pool while its probe's slot stays
taken. The result becomes a status (see
:mod:`.provider_status`) that is kept here and written with a merge patch on the status
subresource only when its meaning changed (and, for a drained provider, on each new load
reading); the probes heartbeat (:mod:`.heartbeat`), renewed while every status is current,
vouches for the unchanged ones (docs/operator.md, "Status writes at fleet size").

Only the leader probes and writes (see :mod:`.lease`): while this process does not lead, the
scheduler keeps nothing due, and every write goes through :class:`.writes.LeaderWrites`,
which refuses it. What the prober remembers per provider is dropped when the provider is
deleted, and all of it when a new leadership term begins (another leader may have written
in between; the informer's cache is the truth then).

This module must never write provider spec, and never decides overlay membership.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import aiohttp

from agn.kube import LEASES, PROVIDERS, Conflict, KubeError, NotFound
from agn.logs import JsonLog
from agn.model import endpoint_valid
from agn.objects import Obj, drain_of, network_view, parse_time
from agn.operator.heartbeat import HEARTBEAT_LEASE, HEARTBEAT_SECONDS, heartbeat_body
from agn.operator.informer import Store
from agn.operator.lease import Leadership
from agn.operator.metrics import OperatorMetrics
from agn.operator.prometheus import MetricsParseError, load_reading
from agn.operator.provider_status import (
    ProbeOutcome,
    merge_patch,
    metrics_max_age,
    next_status,
    published,
    refresh_seconds,
    selecting_networks,
    semantic_key,
    should_write,
    tolerated,
)
from agn.operator.pruning import prune
from agn.operator.schedule import (
    Backlog,
    ProbeSchedule,
    RateWindow,
    asked_rate,
    down_recheck,
    fast_recheck,
    probe_interval,
)
from agn.operator.writes import LeaderWrites, NotLeader

MAX_BODY_BYTES = 1 << 20
SCHEDULER_TICK = 0.05


# Connections to one host:port are kept alive and shared by the probes of every provider
# behind it (a fake pool: thousands of providers on one port): at most this many to one
# host:port (and never more than ``--probe-concurrency`` in all; a probe uses one at a time),
# idle ones closed after KEEPALIVE_SECONDS. A probe that finds every connection to its host busy
# waits for one; that wait is the operator's own queue, so no probe timeout runs during it.
MAX_CONNECTIONS_PER_HOST = 64
KEEPALIVE_SECONDS = 15.0
# The socket timeouts (``--probe-timeout``) bound connecting and each wait for the provider's
# bytes; not a resolver that never answers, nor the wait for a connection of our own pool. So
# no request can hold its provider's probe slot for ever (the schedule never starts a second
# probe of a provider while one runs), each GET also ends after this many seconds at most.
REQUEST_DEADLINE_SECONDS = 30.0
# Status writes block on the API server, so they run on threads, at most this many at once
# (more would only queue at the API server: docs/operator.md).
STATUS_WRITERS = 16


def probe_session(*, concurrency: int) -> aiohttp.ClientSession:
    """The HTTP client of the probes (call it inside the event loop that uses it).

    Keep-alive connections (see ``MAX_CONNECTIONS_PER_HOST``); no proxies from the environment
    (``trust_env=False``), no cookies kept between probes. Redirects are refused per request
    (:func:`http_get`)."""
    connector = aiohttp.TCPConnector(
        limit=concurrency,
        limit_per_host=min(concurrency, MAX_CONNECTIONS_PER_HOST),
        keepalive_timeout=KEEPALIVE_SECONDS,
        use_dns_cache=True,
    )
    return aiohttp.ClientSession(connector=connector, trust_env=False, cookie_jar=aiohttp.DummyCookieJar())


async def http_get(session: aiohttp.ClientSession, url: str, *, timeout: float) -> tuple[int, bytes]:
    """(status, body) of a GET; raises ``aiohttp.ClientError``, ``OSError``-family or
    ``ValueError`` errors when there is no HTTP answer.

    ``timeout`` bounds connecting and each wait for the server's bytes (as a socket timeout
    does), not the wait for a free connection of our own pool. A redirect is an answer, not an
    instruction: its status comes back. A kept-alive connection the server closed while idle is
    retried once on a new one, as any HTTP client does for an idempotent request; a second
    failure is the answer. Whatever the socket timeouts do not bound ends at
    ``REQUEST_DEADLINE_SECONDS`` (``TimeoutError``)."""
    limits = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=timeout, sock_read=timeout)
    for attempt in (1, 2):
        try:
            async with (
                asyncio.timeout(max(REQUEST_DEADLINE_SECONDS, 4 * timeout)),
                session.get(url, allow_redirects=False, timeout=limits, compress=None) as resp,
            ):
                if not 200 <= resp.status < 300:
                    return resp.status, b""
                body = bytearray()
                while len(body) < MAX_BODY_BYTES:
                    chunk = await resp.content.read(MAX_BODY_BYTES - len(body))
                    if not chunk:
                        break
                    body += chunk
                return resp.status, bytes(body)
        except aiohttp.ServerDisconnectedError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ClientConnectorError):
        err = exc.os_error
        if isinstance(err, socket.gaierror):
            # A resolver error's errno is an EAI_* code (negative), which os.strerror does not
            # know ("Unknown error -3"); its own text says what failed.
            return err.strerror or str(err)
        return os.strerror(err.errno) if err.errno else (str(err) or type(err).__name__)
    if isinstance(exc, OSError) and exc.errno and not isinstance(exc, aiohttp.ClientError):
        return os.strerror(exc.errno)
    return str(exc) or type(exc).__name__


async def probe_endpoint_async(
    session: aiohttp.ClientSession, endpoint: str, *, timeout: float, now: float
) -> ProbeOutcome:
    """One probe round against ``endpoint`` over ``session``; never raises (but may be cancelled)."""
    if not endpoint_valid(endpoint):
        return ProbeOutcome(
            observed_at=now,
            probed=False,
            health_error="endpoint is invalid; not probed",
            metrics_error="endpoint is invalid; not scraped",
        )
    base = endpoint.rstrip("/")
    try:
        code, _ = await http_get(session, f"{base}/healthz", timeout=timeout)
        healthy, health_error = 200 <= code < 300, (None if 200 <= code < 300 else f"GET /healthz: HTTP {code}")
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        healthy, health_error = False, f"GET /healthz: {_error_text(exc)}"
    try:
        code, body = await http_get(session, f"{base}/metrics", timeout=timeout)
        if not 200 <= code < 300:
            return ProbeOutcome(now, True, healthy, health_error, metrics_error=f"GET /metrics: HTTP {code}")
        reading = load_reading(body.decode("utf-8", errors="replace"))
        return ProbeOutcome(now, True, healthy, health_error, metrics_ok=True, load=reading)
    except MetricsParseError as exc:
        return ProbeOutcome(now, True, healthy, health_error, metrics_error=f"GET /metrics: {exc}")
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return ProbeOutcome(now, True, healthy, health_error, metrics_error=f"GET /metrics: {_error_text(exc)}")


def probe_endpoint(endpoint: str, *, timeout: float, now: float) -> ProbeOutcome:
    """One probe round against ``endpoint`` on a client of its own (one-off callers and tests);
    never raises. The prober itself shares one client between all of its probes."""

    async def once() -> ProbeOutcome:
        async with probe_session(concurrency=1) as session:
            return await probe_endpoint_async(session, endpoint, timeout=timeout, now=now)

    return asyncio.run(once())


@dataclasses.dataclass
class _Memory:
    """What the prober knows about one provider between probes: its last written status, and
    the status after its last probe (``current``: kept here, written only when its meaning
    changed)."""

    uid: str
    status: Obj
    written_at: float | None  # unix seconds of the last write (or its best guess after a restart)
    failures: int = 0  # consecutive failed health probes
    current: Obj | None = None  # None: not probed in this term yet (``status`` is the truth then)
    probed_at: float | None = None  # unix seconds the last probe of this term started
    recheck_in: float | None = None  # seconds: its last probe failed, but not yet enough to exclude it


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
        leadership: Leadership,
        providers: Store,
        networks: Store,
        interval: float,
        timeout: float,
        log: JsonLog,
        stop: threading.Event,
        concurrency: int = 16,
        jitter: float = 0.0,
        failure_threshold: int = 3,
        fast_interval: float = 0.5,
        down_interval: float = 1.0,
        metrics: OperatorMetrics | None = None,
        refresh_writes: bool = False,
    ) -> None:
        self.writes = writes
        # True: the old behaviour (rewrite an unchanged status every min(10 s, maxAge/3)), kept
        # only so a benchmark can compare; the default writes changes and renews the heartbeat.
        self.refresh_writes = refresh_writes
        self.leadership = leadership
        self.namespace = namespace
        self.providers = providers
        self.networks = networks
        self.interval = interval
        self.timeout = timeout
        self.failure_threshold = failure_threshold
        self.fast_interval = fast_interval
        self.down_interval = down_interval
        self.metrics = metrics or OperatorMetrics()
        self._log = log
        self._stop = stop
        # Probes run as tasks on one event loop (the "prober" thread), as many at once as the
        # schedule has slots, so a due probe waits in the schedule (where it is counted as
        # backlog). A status write blocks on the API server, so it runs in this pool (a write
        # holds its probe's slot, never the loop).
        self._pool = ThreadPoolExecutor(max_workers=min(concurrency, STATUS_WRITERS), thread_name_prefix="probe-write")
        self._tasks: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None  # the probes' client, while the loop runs
        self._slot_freed: asyncio.Event | None = None  # set when a probe ends, to start the next at once
        self._lock = threading.Lock()
        self.schedule = ProbeSchedule(concurrency=concurrency, jitter=jitter)
        self._finished = RateWindow()  # probes finished per second, for /healthz
        self._memory: dict[str, _Memory] = {}
        self._down: set[str] = set()  # providers whose last probe found them unavailable (down re-checks)
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
        # The probes heartbeat (agn.operator.heartbeat): the unix time of this process's last
        # successful renewal, the Lease as last written, and the providers whose last status
        # write failed (no renewal while one is unwritten: the heartbeat would vouch for it).
        self.heartbeat_at: float | None = None
        self._lease: Obj | None = None
        self._unwritten: set[str] = set()
        self._beat_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="prober", daemon=True)
        self._beater = threading.Thread(target=self._beat_loop, name="probes-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self.refresh_writes:
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
        with self._lock:
            if self._unwritten:
                return f"{len(self._unwritten)} provider status write(s) failed"
        return None

    def watermark(self, now: float) -> float:
        """The time every provider probed in this term has been probed since (unix seconds):
        the start of the least recent last probe. A prober that falls behind moves it less, so
        what the heartbeat vouches for ages as the probes do, never more."""
        with self._lock:
            times = [m.probed_at for m in self._memory.values() if m.probed_at is not None]
        return min(times, default=now)

    def beat(self) -> bool:
        """Renew the probes heartbeat if this process may vouch for every status now; its time
        is :meth:`watermark`, not the clock."""
        if self.refresh_writes:
            return False
        with self._beat_lock:
            why = self.vouching(time.monotonic())
            if why is not None:
                self._log.debug("probes heartbeat not renewed", reason=why)
                return False
            now = self.watermark(time.time())
            if self.heartbeat_at is not None and now <= self.heartbeat_at:
                return False  # nothing newer to vouch for (the least recent probe has not moved)
            identity = self.leadership.identity
            try:
                for _ in range(2):
                    try:
                        if self._lease is None:
                            try:
                                self._lease = self.writes.read(LEASES, self.namespace, HEARTBEAT_LEASE)
                            except NotFound:
                                self._lease = self.writes.create(LEASES, self.namespace, heartbeat_body(identity, now))
                                break
                        self._lease = self.writes.replace(
                            LEASES, self.namespace, HEARTBEAT_LEASE, heartbeat_body(identity, now, current=self._lease)
                        )
                        break
                    except (Conflict, NotFound):
                        self._lease = None  # someone else wrote it (an earlier leader): read it again
                else:
                    return False
            except NotLeader:
                return False
            except KubeError as exc:
                self._lease = None
                self._log.warning("probes heartbeat write failed", error=str(exc), status=exc.status)
                return False
            self.heartbeat_at = now
            return True

    def begin_term(self, term: int) -> None:
        """Probe for leadership term ``term``: forget the last term's memory, start a new first round."""
        with self._lock:
            self._term = term
            self._memory.clear()
            self._unwritten.clear()
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
                    prune(self._memory, names)
                    self._down &= names
                    self._unwritten &= names
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
                return probe_interval(labels, networks, default=self.interval)

            started = self.schedule.take(now=now, interval_of=interval_of)
        for probe in started:
            self.metrics.probe_started(late=probe.late)
        return [probe.name for probe in started]

    def backlog(self) -> Backlog:
        """What the schedule looked like after its last tick (for ``/metrics`` and ``/healthz``)."""
        with self._lock:
            return self.schedule.backlog()

    def load(self, now: float) -> dict[str, object]:
        """The probe load for ``/healthz`` (``now``: monotonic seconds).

        ``behind`` is true while a due probe has waited longer than ``--probe-interval``: load
        readings are then ageing because of the operator, not because of the providers. Then
        ``fitsIntervalSeconds`` names the one interval at which every provider's probes would fit
        the rate probes finished at over the last 10 s (``finishedPerSecond``), against what the
        networks ask for (``askedPerSecond``).
        """
        with self._lock:
            backlog, in_flight = self.schedule.backlog(), self.schedule.in_flight_count()
            finished = self._finished.rate(now)
        lag = backlog.lag(now)
        behind = lag > self.interval
        providers = self.providers.peek_all()
        networks = [network_view(n) for n in self.networks.peek_all()]
        asked = asked_rate(
            probe_interval((p.get("metadata") or {}).get("labels") or {}, networks, default=self.interval)
            for p in providers
        )
        fits = round(len(providers) / finished, 1) if behind and finished else None
        return {
            "concurrency": self.schedule.concurrency,
            "inFlight": in_flight,
            "backlog": backlog.waiting,
            "lagSeconds": round(lag, 3),
            "behind": behind,
            "askedPerSecond": round(asked, 1),
            "finishedPerSecond": None if finished is None else round(finished, 1),
            "fitsIntervalSeconds": fits,
        }

    def remembered(self) -> set[str]:
        """Provider names the prober holds any state for (tests: nothing of a deleted provider stays)."""
        with self._lock:
            return self.schedule.known() | set(self._memory) | set(self._first_round_left or ())

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
                mem, now = self._memory.get(name), time.monotonic()
                self.schedule.done(
                    name, again_at=None if mem is None or mem.recheck_in is None else now + mem.recheck_in
                )
                self._finished.add(now)
                self._note_first_round_locked((name,))
                if name not in self.providers:
                    # Deleted while its probe ran, perhaps after the tick that forgot it: a tick
                    # only looks again when the membership changes, so forget what the probe
                    # left behind now. A deletion after this check moves the version, and the
                    # next tick forgets it.
                    self._memory.pop(name, None)
                    self._down.discard(name)
                    self.metrics.forget_provider(name)
            if self._slot_freed is not None:
                self._slot_freed.set()

    def _remembered(self, obj: Obj) -> _Memory:
        meta = obj["metadata"]
        with self._lock:
            mem = self._memory.get(meta["name"])
            if mem is None or mem.uid != meta.get("uid"):
                # After a restart the cached status is our predecessor's last write; its probe time
                # is the best guess of when that write happened.
                status = copy.deepcopy(obj.get("status") or {})  # ``obj`` is the store's own
                written = parse_time((status.get("probe") or {}).get("healthObservedAt"))
                mem = _Memory(uid=meta.get("uid", ""), status=status, written_at=written)
                if meta["name"] in self.providers:
                    # Not for a provider deleted meanwhile: ticks forget only on membership changes.
                    self._memory[meta["name"]] = mem
            return mem

    async def _probe_and_record(self, session: aiohttp.ClientSession, obj: Obj) -> None:
        endpoint = str((obj.get("spec") or {}).get("endpoint", ""))
        started = time.perf_counter()
        outcome = await probe_endpoint_async(session, endpoint, timeout=self.timeout, now=time.time())
        write = self._record(obj, endpoint, outcome, seconds=time.perf_counter() - started)
        if write is not None:
            await asyncio.get_running_loop().run_in_executor(self._pool, write)

    def _record(self, obj: Obj, endpoint: str, outcome: ProbeOutcome, *, seconds: float) -> Callable[[], None] | None:
        """Take one probe's outcome into the provider's memory; the status write it calls for
        (to run off the event loop), or None when the status is to stay as written."""
        meta = obj["metadata"]
        name = meta["name"]
        networks = selecting_networks(meta.get("labels") or {}, [network_view(n) for n in self.networks.peek_all()])
        self.metrics.probed(
            name,
            seconds=seconds,
            health_failed=outcome.healthy is not True,
            metrics_failed=not outcome.metrics_ok,
        )
        mem = self._remembered(obj)
        mem.probed_at = outcome.observed_at
        previous = mem.current if mem.current is not None else mem.status
        mem.failures = 0 if outcome.healthy is not False else mem.failures + 1
        was_healthy = (previous.get("probe") or {}).get("healthy") is True
        # Failed, but not yet failure_threshold times in a row: probed again soon, so a provider
        # that stopped answering is out within (threshold - 1) fast intervals of its first failed
        # probe (HAProxy's fastinter), while a healthy fleet is probed no more often than before.
        suspect = outcome.healthy is False and was_healthy and mem.failures < self.failure_threshold
        # Failed and counted unavailable (or never healthy): probed again after the down interval
        # (HAProxy's downinter), so one that answers again is re-admitted within about that,
        # not up to a whole interval later; all down providers' re-checks share a bounded part
        # of the slots (agn.operator.schedule.down_recheck).
        down = outcome.healthy is False and not suspect
        with self._lock:
            if down and name in self.providers:
                self._down.add(name)
            else:
                self._down.discard(name)
            providers_down = len(self._down)
        mem.recheck_in = None
        if suspect or down:
            every = probe_interval(meta.get("labels") or {}, networks, default=self.interval)
            mem.recheck_in = (
                fast_recheck(every, fast=self.fast_interval)
                if suspect
                else down_recheck(
                    every,
                    down=self.down_interval,
                    providers_down=providers_down,
                    concurrency=self.schedule.concurrency,
                    timeout=self.timeout,
                )
            )
        outcome = tolerated(
            outcome,
            failures=mem.failures,
            threshold=self.failure_threshold,
            previously_healthy=was_healthy,
        )
        # Only a drained provider's load is published: it is what `provider-drain --wait-idle`
        # waits on; every other provider's readings stay here (see agn.operator.heartbeat).
        desired = next_status(
            previous,
            outcome,
            uid=meta.get("uid", ""),
            generation=meta.get("generation"),
            endpoint=endpoint,
            networks=networks,
        )
        mem.current = desired
        desired = published(desired, load=self.refresh_writes or drain_of(obj))
        now = time.time()
        if not should_write(
            mem.status,
            desired,
            last_write_at=mem.written_at,
            now=now,
            refresh=refresh_seconds(metrics_max_age(networks)) if self.refresh_writes else None,
        ):
            return None
        return lambda: self._write(name, mem, desired, now)

    def _write(self, name: str, mem: _Memory, desired: Obj, now: float) -> None:
        changed = semantic_key(mem.status) != semantic_key(desired)
        try:
            written = self.writes.merge_patch_status(
                PROVIDERS, self.namespace, name, {"status": merge_patch(mem.status, desired)}
            )
        except NotLeader:
            return  # leadership ended during the probe; the next leader probes again
        except NotFound:
            return  # deleted meanwhile; the informer will drop it
        except KubeError as exc:
            self._log.warning("provider status write failed", provider=name, error=str(exc), status=exc.status)
            with self._lock:
                self._unwritten.add(name)
            return
        with self._lock:
            self._unwritten.discard(name)
        mem.status = dict(written.get("status") or desired)
        mem.written_at = now
        # The watch will deliver this too; storing it now lets a reconcile see it without waiting.
        self.providers.upsert(written)
        if changed:
            probe = desired["probe"]
            self._log.info(
                "provider status changed",
                provider=name,
                healthy=probe.get("healthy"),
                health_error=probe.get("healthError"),
                metrics_error=probe.get("metricsError"),
                load=desired.get("load"),
                conditions={c["type"]: c["status"] for c in desired["conditions"]},
            )
