"""The operator's Prometheus metrics, served on ``/metrics`` next to ``/healthz``.

| metric | type | labels | what |
| --- | --- | --- | --- |
| ``agn_operator_reconcile_duration_seconds`` | histogram | | one consumer's reconcile |
| ``agn_operator_reconcile_errors_total`` | counter | | reconciles that failed (retried after a second) |
| ``agn_operator_queue_depth`` | gauge | | consumers waiting for a reconcile (dirty or scheduled) |
| ``agn_operator_leader`` | gauge | | 1 while this process holds the lease |
| ``agn_operator_write_bytes_total`` | counter | ``kind`` | bytes of the bodies written: ``index``, ``shard``, ``status``, ``event``, ``other`` |
| ``agn_overlay_publication_bytes`` | histogram | | bytes one consumer's publication wrote (index and shards together) |
| ``agn_overlay_revision`` | gauge | ``consumer`` | the revision of the consumer's RoutingOverlay |
| ``agn_overlay_candidates`` | gauge | ``consumer``, ``admission_state`` | candidates per admission state |
| ``agn_probe_duration_seconds`` | histogram | | one provider's probe (``/healthz`` + ``/metrics``) |
| ``agn_probe_failures_total`` | counter | ``provider``, ``check`` | failed ``health`` checks and ``metrics`` scrapes |
| ``agn_provider_reading_age_seconds`` | gauge | ``provider`` | age of the provider's last load reading |
| ``agn_probe_backlog`` | gauge | | probes due that found no free slot (waiting) |
| ``agn_probe_lag_seconds`` | gauge | | how long the longest-waiting due probe has waited (0: none waits) |
| ``agn_probe_in_flight`` | gauge | | probes running now |
| ``agn_probe_concurrency`` | gauge | | probe slots (``--probe-concurrency``) |
| ``agn_probe_start_delay_seconds`` | histogram | | how late each probe started against its schedule |
| ``agn_drain_holds_expired`` | gauge | | drain holds whose ``expiresAt`` has passed on the API server's clock (still holding) |

The gauges about objects are read from the informer caches when scraped, so they are never
stale and nothing has to be deleted when a consumer or provider goes; a provider without a
reading has no ``agn_provider_reading_age_seconds`` sample at all (absent, never 0). Each
process has its own :class:`~prometheus_client.CollectorRegistry` (not the global one), so
several operators in one test process do not clash.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from agn.model import ADMITTED, EXISTING_ONLY
from agn.objects import name_of, parse_time
from agn.operator.pruning import prune

ADMISSION_STATES = (ADMITTED, EXISTING_ONLY)
# Probes of a loopback or in-cluster endpoint take milliseconds; the timeout is about a second.
PROBE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# The scheduler looks every 50 ms, so a probe on time starts up to that late.
START_DELAY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# A drain's publication is an index and a shard (a few KiB); a fleet's first one every shard of
# every candidate (MiBs at 10,000 providers).
PUBLICATION_BUCKETS = tuple(float(1024 * 4**k) for k in range(9))  # 1 KiB .. 64 MiB
BODY_KINDS = ("index", "shard", "status", "event", "other")


def overlay_samples(overlays: Iterable[Mapping[str, Any]]) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """(revision per consumer, candidates per (consumer, admission state)) from RoutingOverlays.

    A sharded overlay's index carries its counts per state (``admission``), so no shard is read;
    an inline overlay's candidates are counted.

    Every admission state gets a sample per consumer (0 when it has none: that is a count)."""
    revisions: dict[str, int] = {}
    counts: dict[tuple[str, str], int] = {}
    for overlay in overlays:
        spec = overlay.get("spec") or {}
        consumer = str(spec.get("consumer") or name_of(overlay))
        if "revision" in spec:
            revisions[consumer] = int(spec["revision"])
        for state in ADMISSION_STATES:
            counts[(consumer, state)] = 0
        admission = spec.get("admission")
        if isinstance(admission, Mapping):  # a sharded index counts its candidates per state
            for state, n in admission.items():
                counts[(consumer, str(state))] = int(n)
            continue
        for cand in spec.get("candidates") or ():  # an inline overlay (earlier operators)
            key = (consumer, str(cand.get("admission_state")))
            counts[key] = counts.get(key, 0) + 1
    return revisions, counts


def reading_ages(providers: Iterable[Mapping[str, Any]], *, now: float) -> dict[str, float]:
    """Seconds since each provider's last successful metrics scrape; providers without one are absent."""
    out = {}
    for p in providers:
        probe = (p.get("status") or {}).get("probe") or {}
        seen = parse_time(probe.get("metricsObservedAt"))
        if seen is not None:
            out[name_of(p)] = max(0.0, now - seen)
    return out


class _StateCollector:
    """Gauges computed at scrape time from what the operator holds."""

    def __init__(
        self,
        *,
        queue_depth: Callable[[], int],
        leader: Callable[[], bool],
        overlays: Callable[[], list],
        providers: Callable[[], list],
        clock: Callable[[], float],
    ) -> None:
        self._queue_depth = queue_depth
        self._leader = leader
        self._overlays = overlays
        self._providers = providers
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "agn_operator_queue_depth", "Consumers waiting for a reconcile.", value=self._queue_depth()
        )
        yield GaugeMetricFamily(
            "agn_operator_leader", "1 while this operator holds the lease and writes.", value=int(self._leader())
        )
        revisions, counts = overlay_samples(self._overlays())
        revision = GaugeMetricFamily(
            "agn_overlay_revision", "Revision of the consumer's RoutingOverlay.", labels=["consumer"]
        )
        for consumer, value in sorted(revisions.items()):
            revision.add_metric([consumer], value)
        yield revision
        candidates = GaugeMetricFamily(
            "agn_overlay_candidates",
            "Candidates in the consumer's RoutingOverlay by admission state.",
            labels=["consumer", "admission_state"],
        )
        for (consumer, state), value in sorted(counts.items()):
            candidates.add_metric([consumer, state], value)
        yield candidates
        age = GaugeMetricFamily(
            "agn_provider_reading_age_seconds",
            "Seconds since the provider's last successful metrics scrape (absent: never scraped).",
            labels=["provider"],
        )
        for provider, seconds in sorted(reading_ages(self._providers(), now=self._clock()).items()):
            age.add_metric([provider], seconds)
        yield age


class _ProbeCollector:
    """The prober's backlog gauges, read when scraped."""

    def __init__(self, load: Callable[[], Mapping[str, Any]]) -> None:
        self._load = load

    def collect(self) -> Iterator[Metric]:
        load = self._load()
        yield GaugeMetricFamily(
            "agn_probe_backlog", "Provider probes that are due but wait for a free slot.", value=load["backlog"]
        )
        yield GaugeMetricFamily(
            "agn_probe_lag_seconds",
            "How long the longest-waiting due probe has waited (0 when none waits).",
            value=load["lagSeconds"],
        )
        yield GaugeMetricFamily("agn_probe_in_flight", "Provider probes running now.", value=load["inFlight"])
        yield GaugeMetricFamily(
            "agn_probe_concurrency", "Probe slots (--probe-concurrency).", value=load["concurrency"]
        )


class _HoldCollector:
    """The expired drain holds, counted when scraped (:mod:`.hold_expiry`)."""

    def __init__(self, expired: Callable[[], int]) -> None:
        self._expired = expired

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "agn_drain_holds_expired",
            "Drain holds whose expiresAt has passed on the API server's clock (they still hold).",
            value=self._expired(),
        )


class OperatorMetrics:
    """The operator's registry and the metrics its parts update as they work."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._lock = threading.Lock()
        self._probed: set[str] = set()  # providers with per-provider series
        self.reconcile_duration = Histogram(
            "agn_operator_reconcile_duration_seconds", "Time to reconcile one consumer.", registry=self.registry
        )
        self.reconcile_errors = Counter(
            "agn_operator_reconcile_errors", "Reconciles that failed and were retried.", registry=self.registry
        )
        self.probe_duration = Histogram(
            "agn_probe_duration_seconds",
            "Time to probe one provider (/healthz and /metrics).",
            buckets=PROBE_BUCKETS,
            registry=self.registry,
        )
        self.probe_start_delay = Histogram(
            "agn_probe_start_delay_seconds",
            "How late a provider probe started against its schedule (waiting for a free slot).",
            buckets=START_DELAY_BUCKETS,
            registry=self.registry,
        )
        self.probe_failures = Counter(
            "agn_probe_failures",
            "Failed provider probes by check (health: /healthz, metrics: /metrics).",
            ["provider", "check"],
            registry=self.registry,
        )

        self.write_bytes = Counter(
            "agn_operator_write_bytes",
            "Bytes of the bodies the operator wrote (as sent), by kind: index, shard, status, event, other.",
            ["kind"],
            registry=self.registry,
        )
        for kind in BODY_KINDS:
            self.write_bytes.labels(kind)  # a count: 0 until the first body of the kind
        self.publication_bytes = Histogram(
            "agn_overlay_publication_bytes",
            "Bytes one consumer's overlay publication wrote (its index and shards together).",
            buckets=PUBLICATION_BUCKETS,
            registry=self.registry,
        )

    def wrote(self, kind: str, size: int) -> None:
        """One body of ``size`` bytes sent (:class:`.writes.LeaderWrites` calls it)."""
        self.write_bytes.labels(kind).inc(size)

    def watch_probes(self, load: Callable[[], Mapping[str, Any]]) -> None:
        """Serve the prober's backlog gauges (``load`` is :meth:`.prober.Prober.load` at scrape time)."""
        self.registry.register(_ProbeCollector(load))

    def watch_holds(self, expired: Callable[[], int]) -> None:
        """Serve ``agn_drain_holds_expired`` (``expired``: :meth:`.hold_expiry.HoldExpiry.expired_count`)."""
        self.registry.register(_HoldCollector(expired))

    def probe_started(self, *, late: float) -> None:
        self.probe_start_delay.observe(late)

    def watch_state(
        self,
        *,
        queue_depth: Callable[[], int],
        leader: Callable[[], bool],
        overlays: Callable[[], list],
        providers: Callable[[], list],
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Serve the gauges read from the operator's caches at scrape time."""
        self.registry.register(
            _StateCollector(queue_depth=queue_depth, leader=leader, overlays=overlays, providers=providers, clock=clock)
        )

    def probed(self, provider: str, *, seconds: float, health_failed: bool, metrics_failed: bool) -> None:
        self.probe_duration.observe(seconds)
        with self._lock:
            self._probed.add(provider)
        if health_failed:
            self.probe_failures.labels(provider, "health").inc()
        if metrics_failed:
            self.probe_failures.labels(provider, "metrics").inc()

    def forget_providers(self, live: Collection[str]) -> None:
        """Drop the per-provider series of every provider not in ``live`` (deleted).

        O(providers with series): the prober calls it only when the set of providers changed."""
        with self._lock:
            gone = prune(self._probed, live)
        for name in gone:
            self._remove_series(name)

    def forget_provider(self, name: str) -> None:
        """Drop the per-provider series of one deleted provider (a probe that outlived it)."""
        with self._lock:
            if name not in self._probed:
                return
            self._probed.discard(name)
        self._remove_series(name)

    def _remove_series(self, name: str) -> None:
        for check in ("health", "metrics"):
            try:
                self.probe_failures.remove(name, check)
            except KeyError:
                pass  # that check never failed for it
