"""The wave gates: what decides, after each wave of a drain in waves has soaked, whether the
next may start (:class:`~xtask.drain.gates.base.Gate`). One module per gate.
"""

from __future__ import annotations

from collections.abc import Mapping

from xtask.drain.core.request import DrainRequest
from xtask.drain.gates.base import Gate
from xtask.drain.gates.error_ratio import ErrorRatioGate, ScrapeError, gateway_metrics_urls, parse_overrides, scrape
from xtask.drain.gates.promql import PrometheusUnavailable, PromQLGate


def wave_gates(req: DrainRequest, consumers: Mapping[str, Mapping | None]) -> tuple[list[Gate], list[str]]:
    """The gates each wave soaks under, and the problems that refuse the run before any write
    (a gateway whose ``/metrics`` is unknown or does not answer). No gates with ``--soak 0``."""
    if req.soak_seconds <= 0:
        return [], []
    overrides = parse_overrides(req.gateway_metrics)  # checked by DrainRequest already
    urls, problems = gateway_metrics_urls({c: consumers.get(c) for c in req.consumers}, overrides)
    for consumer, url in urls.items():
        try:
            scrape(url)
        except ScrapeError as exc:
            problems.append(f"consumer {consumer}: its gateway's metrics {url} {exc}")
    if problems:
        return [], [p + " (name it with --gateway-metrics CONSUMER=URL)" for p in problems]
    gates: list[Gate] = [ErrorRatioGate(urls, max_ratio=req.error_ratio_limit)]
    if req.gate_promql is not None and req.prometheus is not None:
        promql = PromQLGate(req.prometheus, req.gate_promql)
        try:
            promql.validate()  # a bad expression is a usage error (PromQLError), before any write
        except PrometheusUnavailable as exc:
            return [], [f"--prometheus {req.prometheus}: {exc}"]
        gates.append(promql)
    return gates, []
