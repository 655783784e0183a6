"""The overlay plan for one consumer: what to publish, whether to write it, when to look again;
and what changed between two overlays, for the log.

Pure: views and the previous overlay in, a plan out; the caller supplies ``now``. The
semantics themselves live in :mod:`agn.model` — this module only applies them and must
not restate them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from agn.model import (
    Candidate,
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


# Per section of an overlay change, at most this many providers are named in the log line; the
# counts are always exact. A fleet's first publication adds thousands of candidates, and one log
# line must not carry them all.
CHANGE_LOG_LIMIT = 50
_COMPARED = ("admission_state", "endpoint", "selection_group", "rank")


def _capped(items: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"count": len(items)}
    if items:
        out["providers"] = items[:CHANGE_LOG_LIMIT]
    if len(items) > CHANGE_LOG_LIMIT:
        out["more"] = len(items) - CHANGE_LOG_LIMIT
    return out


def overlay_changes(previous: Overlay | None, overlay: Overlay) -> dict[str, Any]:
    """What changed from ``previous`` to ``overlay``, sized by the change, not by the overlay.

    Candidates are matched by id (stable across renames of nothing else). ``added`` and
    ``removed`` name providers with their admission state; ``changed`` names each provider with
    the fields that differ as ``[old, new]``; ``states`` counts the new overlay's candidates per
    admission state. Each list names at most :data:`CHANGE_LOG_LIMIT` providers (sorted), with
    ``more`` saying how many were left out.
    """
    before: dict[str, Candidate] = {c.id: c for c in (previous.candidates if previous else ())}
    after: dict[str, Candidate] = {c.id: c for c in overlay.candidates}
    added = sorted((c.provider, c.admission_state) for i, c in after.items() if i not in before)
    removed = sorted((c.provider, c.admission_state) for i, c in before.items() if i not in after)
    changed = []
    for i in sorted(set(before) & set(after), key=lambda i: after[i].provider):
        old, new = before[i], after[i]
        diff = {f: [getattr(old, f), getattr(new, f)] for f in _COMPARED if getattr(old, f) != getattr(new, f)}
        if diff:
            changed.append({new.provider: diff})
    states: dict[str, int] = {}
    for c in overlay.candidates:
        states[c.admission_state] = states.get(c.admission_state, 0) + 1
    return {
        "added": _capped([{p: st} for p, st in added]),
        "removed": _capped([{p: st} for p, st in removed]),
        "changed": _capped(changed),
        "states": dict(sorted(states.items())),
    }
