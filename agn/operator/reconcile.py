"""The overlay plan for one consumer: what to publish, whether to write it, when to look again.

Pure: views and the previous overlay in, a plan out; the caller supplies ``now``. The
semantics themselves live in :mod:`agn.model` — this module only applies them and must
not restate them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from agn.model import (
    ConsumerView,
    NetworkView,
    Overlay,
    ProviderView,
    compute_candidates,
    next_overlay,
)


@dataclasses.dataclass(frozen=True)
class OverlayPlan:
    """``overlay`` is what the consumer's overlay should be; ``write`` says whether the API needs it.

    ``recheck_at`` (unix seconds) is when a candidate's metrics go stale, so the controller
    can reconcile again at that moment instead of waiting for the next resync.
    """

    overlay: Overlay
    write: bool
    recheck_at: float | None


def stale_at(providers: Iterable[ProviderView], overlay: Overlay, network: NetworkView) -> float | None:
    """The earliest moment a candidate in ``overlay`` stops having fresh metrics."""
    in_overlay = {c.provider for c in overlay.candidates}
    times = [
        p.metrics_observed_at + network.metrics_max_age_seconds
        for p in providers
        if p.name in in_overlay and p.metrics_observed_at is not None
    ]
    return min(times, default=None)


def plan_overlay(
    consumer: ConsumerView,
    network: NetworkView,
    providers: Iterable[ProviderView],
    *,
    previous: Overlay | None,
    now: float,
) -> OverlayPlan:
    """Compute the consumer's overlay; write only when it differs from ``previous`` (or none exists).

    ``next_overlay`` keeps the revision when the digest is unchanged, so an unchanged
    effective admission yields an identical overlay and no write.
    """
    providers = list(providers)
    candidates = compute_candidates(providers, network, consumer, now=now)
    overlay = next_overlay(previous, candidates, network=network.name, consumer=consumer.name)
    return OverlayPlan(
        overlay=overlay, write=previous is None or overlay != previous, recheck_at=stale_at(providers, overlay, network)
    )
