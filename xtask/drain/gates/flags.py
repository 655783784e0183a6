"""The wave gates' flags of ``provider-drain``, declared apart from the gates themselves.

The CLI makes its options from these on every run; the gates (and what they import: a
Prometheus text parser, an HTTP client) load only when a run sets one of these flags or soaks.
Each gate module exposes its own tuple as ``FLAGS``; the registry line of the gate
(:data:`xtask.drain.gates.GATES`) carries the same tuple.
"""

from __future__ import annotations

import click

from xtask.drain.gates.base import GateFlag
from xtask.params import FiniteFloat

DEFAULT_MAX_ERROR_RATIO = 0.01

ERROR_RATIO_FLAGS: tuple[GateFlag, ...] = (
    GateFlag(
        "--max-error-ratio",
        "max_error_ratio",
        metavar="R",
        type=FiniteFloat(min=0, max=1),
        help="Waves: the error-ratio gate holds if at most this share of the completion requests through the "
        f"named consumers' gateways failed (502/503) over the soak (0-1, default: {DEFAULT_MAX_ERROR_RATIO:g}); "
        "no requests at all is not held.",
    ),
    GateFlag(
        "--consumer-gateway-metrics",
        "consumer_gateway_metrics",
        metavar="CONSUMER=URL",
        multiple=True,
        alias="--gateway-metrics",
        help="Waves: the /metrics URL of a named consumer's gateway (repeatable; default: the address the "
        "gateway reports in the consumer's status, plus /metrics).",
    ),
)

MIN_REQUESTS_FLAGS: tuple[GateFlag, ...] = (
    GateFlag(
        "--min-requests",
        "min_requests",
        metavar="N",
        type=click.IntRange(min=1),
        help="Waves: a gate that holds if the named consumers' gateways answered at least N completion requests "
        "(routed or failed) over the soak: the traffic the error ratio is judged on (default: no such gate).",
    ),
)

PROMQL_FLAGS: tuple[GateFlag, ...] = (
    GateFlag(
        "--gate-promql",
        "gate_promql",
        metavar="EXPR",
        help="Waves: a PromQL gate besides the error ratio: over each soak, EXPR must give a non-empty result "
        "whose every sample is true (non-zero) at every step; needs --prometheus. Checked once before any write.",
    ),
    GateFlag(
        "--prometheus",
        "prometheus",
        metavar="URL",
        help="Waves: the Prometheus --gate-promql queries (http(s); `env up` prints the one it starts).",
    ),
)
