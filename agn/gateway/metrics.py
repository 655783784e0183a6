"""The gateway's Prometheus metrics, served on ``/metrics`` of its serving port.

| metric | type | labels | what |
| --- | --- | --- | --- |
| ``agn_gateway_requests_total`` | counter | ``outcome``, ``admission_state`` | completion requests by how they ended and the chosen candidate's admission state |
| ``agn_gateway_sticky_hits_total`` | counter | | requests that stayed on their session's provider |
| ``agn_gateway_accepted_revision`` | gauge | | the newest valid overlay revision accepted |
| ``agn_gateway_serving_revision`` | gauge | | the overlay revision being routed with |
| ``agn_gateway_pending_revision`` | gauge | | the revision of an overlay index still waiting for its shards (absent when none is) |
| ``agn_gateway_shard_gets_total`` | counter | | RoutingOverlayShard GETs: a drain that changes one shard costs one |
| ``agn_gateway_sticky_sessions`` | gauge | ``provider`` | sticky sessions bound to a provider that is not admitted (as in ``status.sessions``) |
| ``agn_gateway_rehomed_sessions_total`` | counter | ``provider`` | sessions moved away from that provider (its session deadline passed, or it left the overlay) |

``outcome`` is ``routed`` (200), ``no_route`` (503: no admitted candidate), ``upstream_error``
(502) or ``bad_request`` (400/413); ``admission_state`` is ``admitted``, ``existing_only``
(a sticky session on a drained provider), or ``none`` when no candidate was chosen. The
revision gauges are read when scraped and are absent until there is a revision. The session
series are those of the last ``status.sessions`` report (:mod:`agn.gateway.sessions`: at most
100 providers, the ones not admitted). One
:class:`~prometheus_client.CollectorRegistry` per gateway, not the global one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agn.gateway.outcomes import BAD_REQUEST, NO_CANDIDATE, NO_ROUTE, ROUTED, UPSTREAM_ERROR

__all__ = ["BAD_REQUEST", "NO_CANDIDATE", "NO_ROUTE", "ROUTED", "UPSTREAM_ERROR", "GatewayMetrics"]


def _none() -> None:
    return None


def _zero() -> int:
    return 0


class _Revisions:
    """Values the follower owns, read when scraped (no copies to keep in step)."""

    def __init__(
        self,
        accepted: Callable[[], int | None],
        serving: Callable[[], int | None],
        pending: Callable[[], int | None],
        shard_gets: Callable[[], int],
    ) -> None:
        self._accepted = accepted
        self._serving = serving
        self._pending = pending
        self._shard_gets = shard_gets

    def collect(self) -> Iterator[Metric]:
        for name, doc, read in (
            ("agn_gateway_accepted_revision", "Newest valid overlay revision accepted.", self._accepted),
            ("agn_gateway_serving_revision", "Overlay revision being routed with.", self._serving),
            ("agn_gateway_pending_revision", "Overlay index revision waiting for its shards.", self._pending),
        ):
            family = GaugeMetricFamily(name, doc)
            value = read()
            if value is not None:
                family.add_metric([], value)
            yield family
        yield CounterMetricFamily("agn_gateway_shard_gets", "RoutingOverlayShard GETs made.", value=self._shard_gets())


class _Sessions:
    """The last ``status.sessions`` report, as gauges and counters per provider."""

    def __init__(self, report: Callable[[], dict[str, Any] | None]) -> None:
        self._report = report

    def collect(self) -> Iterator[Metric]:
        sessions = GaugeMetricFamily(
            "agn_gateway_sticky_sessions",
            "Sticky sessions bound to a provider that is not admitted.",
            labels=["provider"],
        )
        rehomed = CounterMetricFamily(
            "agn_gateway_rehomed_sessions", "Sessions moved away from a provider.", labels=["provider"]
        )
        for line in (self._report() or {}).get("providers", ()):
            sessions.add_metric([line["provider"]], line["sessions"])
            rehomed.add_metric([line["provider"]], line["rehomed"])
        yield sessions
        yield rehomed


class GatewayMetrics:
    def __init__(
        self,
        *,
        accepted: Callable[[], int | None],
        serving: Callable[[], int | None],
        pending: Callable[[], int | None] = _none,
        shard_gets: Callable[[], int] = _zero,
        sessions: Callable[[], dict[str, Any] | None] = _none,
    ) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "agn_gateway_requests",
            "Completion requests by outcome and the chosen candidate's admission state.",
            ["outcome", "admission_state"],
            registry=self.registry,
        )
        self._sticky = Counter(
            "agn_gateway_sticky_hits", "Requests that stayed on their session's provider.", registry=self.registry
        )
        self.registry.register(_Revisions(accepted, serving, pending, shard_gets))
        self.registry.register(_Sessions(sessions))

    def request(self, outcome: str, admission_state: str | None = None, *, sticky: bool = False) -> None:
        self._requests.labels(outcome, admission_state or NO_CANDIDATE).inc()
        if sticky:
            self._sticky.inc()
