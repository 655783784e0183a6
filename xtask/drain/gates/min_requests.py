"""The minimum-traffic wave gate (``--min-requests N``): over the soak, the named consumers'
gateways together answered at least N completion requests (routed or failed; a client's bad
request does not count). It is the evidence the error ratio rests on: a ratio of 0 over three
requests says little, and this gate says how many are enough. Off unless the flag is given.

Reads the same counters as :mod:`xtask.drain.gates.error_ratio`, over the same window.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from xtask.drain.gates.base import Gate, GateReading, GateSetup
from xtask.drain.gates.error_ratio import SCRAPE_TIMEOUT, Counts, SoakCounters, gateway_metrics_urls, parse_overrides
from xtask.drain.gates.flags import MIN_REQUESTS_FLAGS

NAME = "min-requests"

FLAGS = MIN_REQUESTS_FLAGS


class MinRequestsGate:
    """At least ``minimum`` completion requests through the named consumers' gateways over a soak."""

    name = NAME

    def __init__(
        self,
        urls: Mapping[str, str],
        *,
        minimum: int,
        timeout: float = SCRAPE_TIMEOUT,
        read: Callable[[str], Counts] | None = None,
    ) -> None:
        self.counters = SoakCounters(urls, timeout=timeout, read=read)
        self.minimum = minimum

    def begin(self) -> None:
        self.counters.begin()

    def read(self, window_seconds: float) -> GateReading:
        threshold = f">= {self.minimum}"
        deltas, problems = self.counters.end()
        if problems:
            return GateReading(self.name, False, None, threshold, "; ".join(problems))
        per_consumer = {consumer: sum(delta.values()) for consumer, delta in deltas.items()}
        total = sum(per_consumer.values())
        detail = f"over {window_seconds:.1f}s: " + "; ".join(f"{c}: {n:g}" for c, n in per_consumer.items())
        return GateReading(self.name, total >= self.minimum, total, threshold, detail)


def check(options: Mapping[str, Any], *, consumers: tuple[str, ...], soak: float | None) -> None:
    """``--min-requests`` is a positive count (click's IntRange); nothing else to check."""


def make(setup: GateSetup) -> tuple[Gate | None, list[str]]:
    minimum = setup.options.get("min_requests")
    if minimum is None:
        return None, []
    # The same gateways as the error ratio, which has already checked that each answers.
    overrides = parse_overrides(setup.options.get("consumer_gateway_metrics") or ())
    urls, problems = gateway_metrics_urls(setup.consumers, overrides)
    if problems:
        return None, problems
    return MinRequestsGate(urls, minimum=minimum), []
